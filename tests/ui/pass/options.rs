//! Every option and every value: `wait`, `lease`, each `kind`, `on_lost`.

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "a:<id>", wait = "0s")]
async fn one_attempt(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "b:<id>", wait = "250ms", lease = "1m30s")]
async fn fixed_lease(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "c:<id>", kind = "reentrant", lease = "1ms")]
async fn reentrant(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "d:<id>", kind = "fair", wait = "2s")]
async fn fair(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "e:<id>", kind = "read")]
async fn read(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(kind = "write", key = "e:<id>", on_lost = "cancel", lease = "10s",)]
async fn write(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "f:<id>", on_lost = "cancel", wait = "1h 2m 3s 4ms")]
async fn cancel(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {
    drop(one_attempt(1));
    drop(fixed_lease(1));
    drop(reentrant(1));
    drop(fair(1));
    drop(read(1));
    drop(write(1));
    drop(cancel(1));
}
