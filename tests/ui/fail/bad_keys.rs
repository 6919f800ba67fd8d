use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(keys = [])]
async fn empty(x: u64) -> Result<(), LockError> {
    let _ = x;
    Ok(())
}

#[distributed_lock(keys = ["a:<x>", "b:<z>", "a:<x>"])]
async fn unknown_and_repeated(x: u64, y: u64) -> Result<(), LockError> {
    let _ = (x, y);
    Ok(())
}

#[distributed_lock(keys = "a:<x>")]
async fn not_a_list(x: u64) -> Result<(), LockError> {
    let _ = x;
    Ok(())
}

fn main() {}
