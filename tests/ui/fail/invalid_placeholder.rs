use lock_runtime::{LockError, distributed_lock};

struct Order {
    id: u64,
}

#[distributed_lock(key = "order:<order.id()>")]
async fn call(order: &Order) -> Result<(), LockError> {
    let _ = order;
    Ok(())
}

#[distributed_lock(key = "order:<order. id>")]
async fn space(order: &Order) -> Result<(), LockError> {
    let _ = order;
    Ok(())
}

fn main() {}
