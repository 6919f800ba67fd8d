use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "order:<id>", wait = 2)]
async fn pay(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = order_key)]
async fn ident(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

fn main() {}
