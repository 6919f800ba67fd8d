use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<id>", wait = "2")]
async fn pay(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "order:<id>", lease = "ten seconds")]
async fn lease(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "order:<id>", lease = "0s")]
async fn zero_lease(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
