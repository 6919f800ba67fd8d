use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:<id>", client = "redis://127.0.0.1")]
async fn job(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
