use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:<id>", fallback = "other")]
async fn job(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
