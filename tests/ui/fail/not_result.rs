use lock_runtime::distributed_lock;

#[distributed_lock(key = "order:<id>")]
async fn pay(id: u64) -> Option<u64> {
    Some(id)
}

fn main() {}
