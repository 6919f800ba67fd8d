use lock_runtime::{LockError, distributed_lock};

async fn other(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "job:<id>", on_busy = "skip", fallback = other)]
async fn job(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "job:<id>", fallback = other, on_busy = "error")]
async fn strict(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
