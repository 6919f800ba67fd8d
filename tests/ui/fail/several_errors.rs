// One build reports every mistake: options, key and signature.
use lock_runtime::distributed_lock;

#[distributed_lock(key = "order:<ordr>", wait = "soon", kind = "fast")]
fn pay(order: u64) -> u64 {
    order
}

fn main() {}
