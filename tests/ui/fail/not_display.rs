use lock_runtime::{LockError, distributed_lock};

struct Order {
    id: Option<u64>,
}

#[distributed_lock(key = "order:<order.id>")]
async fn pay(order: &Order) -> Result<(), LockError> {
    let _ = order;
    Ok(())
}

fn main() {}
