use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(wait = "2s")]
async fn pay(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock]
async fn bare(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
