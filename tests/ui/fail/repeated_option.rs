use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<id>", wait = "2s", wait = "5s")]
async fn pay(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
