use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "a:<x>", keys = ["b:<y>"])]
async fn both(x: u64, y: u64) -> Result<(), LockError> {
    let _ = (x, y);
    Ok(())
}

fn main() {}
