use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "partner:<id>", permits = 5, kind = "fair")]
async fn call_partner(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
