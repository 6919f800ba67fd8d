use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "job:<id>", on_busy = "skip")]
async fn job(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
