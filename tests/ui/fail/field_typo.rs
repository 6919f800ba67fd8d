use lock_runtime::{LockError, distributed_lock};

struct Order {
    id: u64,
}

#[distributed_lock(key = "order:<order.idd>", wait = "2s")]
async fn pay(order: &Order) -> Result<u64, LockError> {
    Ok(order.id)
}

fn main() {}
