//! `permits = N`: a semaphore of N permits, with the lock's options.
use lock_runtime::{LockClient, LockError, distributed_lock};

#[distributed_lock(key = "partner:<partner>", permits = 5, wait = "2s")]
async fn call_partner(partner: &str) -> Result<(), LockError> {
    let _ = partner;
    Ok(())
}

#[distributed_lock(
    key = "tenant:<tenant>",
    permits = 2,
    lease = "30s",
    on_lost = "cancel",
    hold_at_least = "1s",
    client = locks
)]
async fn import(locks: &LockClient, tenant: u64) -> Result<(), LockError> {
    let _ = tenant;
    Ok(())
}

#[distributed_lock(key = "shard:<shard>", permits = 8, on_busy = "skip")]
async fn work(shard: u32) -> Result<(), LockError> {
    let _ = shard;
    Ok(())
}

fn main() {}
