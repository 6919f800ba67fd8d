use lock_runtime::{LockError, distributed_lock};

async fn other(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "job:<id>", fallback = other)]
async fn job(id: u64, day: u32) -> Result<(), LockError> {
    let _ = (id, day);
    Ok(())
}

fn main() {}
