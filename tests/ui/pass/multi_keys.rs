//! `keys = [...]`: several keys, all or none (a multi lock).

use lock_runtime::{LockError, distributed_lock};

struct Account {
    id: u64,
}

#[distributed_lock(keys = ["account:<from.id>", "account:<to.id>"], wait = "2s")]
async fn transfer(from: &Account, to: &Account, cents: u64) -> Result<u64, LockError> {
    Ok(from.id + to.id + cents)
}

#[distributed_lock(keys = ["stock:<sku>"], kind = "fair")]
async fn single(sku: &str) -> Result<(), LockError> {
    let _ = sku;
    Ok(())
}

#[distributed_lock(keys = ["report", "day:<day>", "shop:<shop>",], on_lost = "cancel")]
async fn fixed_and_templated(day: u32, shop: String) -> Result<(), LockError> {
    let _ = (day, shop);
    Ok(())
}

fn main() {
    let (a, b) = (Account { id: 1 }, Account { id: 2 });
    drop(transfer(&a, &b, 3));
    drop(single("x"));
    drop(fixed_and_templated(1, "s".into()));
}
