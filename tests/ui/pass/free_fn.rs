//! A free function: `?` and `return` in the body, the key from a parameter.

use lock_runtime::{LockError, distributed_lock};

#[derive(Debug)]
enum ShopError {
    Lock(LockError),
    SoldOut,
    Parse(std::num::ParseIntError),
}

impl From<LockError> for ShopError {
    fn from(e: LockError) -> Self {
        ShopError::Lock(e)
    }
}

impl From<std::num::ParseIntError> for ShopError {
    fn from(e: std::num::ParseIntError) -> Self {
        ShopError::Parse(e)
    }
}

#[distributed_lock(key = "stock:<id>", wait = "2s")]
async fn deduct(id: u64, qty: &str) -> Result<u32, ShopError> {
    let qty: u32 = qty.parse()?;
    if qty > 10 {
        return Err(ShopError::SoldOut);
    }
    Ok(10 - qty)
}

/// A key with no placeholder is a fixed name; `LockError` itself as the error.
#[distributed_lock(key = "nightly-report")]
pub async fn report() -> Result<(), LockError> {
    Ok(())
}

fn is_send<F: Send>(_: &F) {}

fn main() {
    // Locked calls can be spawned on a multi-threaded runtime.
    let call = deduct(42, "3");
    is_send(&call);
    drop(call);
    drop(report());
}
