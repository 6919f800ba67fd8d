use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<order_id>")]
async fn pay(id: u64, user: &str) -> Result<(), LockError> {
    let _ = (id, user);
    Ok(())
}

#[distributed_lock(key = "cart:<self.id>")]
async fn add(item: u64) -> Result<(), LockError> {
    let _ = item;
    Ok(())
}

fn main() {}
