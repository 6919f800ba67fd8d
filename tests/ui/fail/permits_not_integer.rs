use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "partner:<id>", permits = "5")]
async fn call_partner(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "tenant:<id>", permits = 1.5)]
async fn import(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "shard:<id>", permits = 5000000000)]
async fn work(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
