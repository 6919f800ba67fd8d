use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(keys = ["a:<id>", "b:<id>"], hold_at_least = "30s")]
async fn multi(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "a:<id>", kind = "read", hold_at_least = "30s")]
async fn read(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "a:<id>", hold_at_least = "soon")]
async fn bad(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "a:<id>", lease = "10s", hold_at_least = "1m")]
async fn short_lease(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
