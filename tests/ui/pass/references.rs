//! Reference and `mut` parameters: shared and unique references, `&str`,
//! boxes, and a parameter the body mutates.

use lock_runtime::{LockError, distributed_lock};

struct Order {
    id: u64,
}

#[distributed_lock(key = "order:<order.id>:<user_id>")]
async fn pay(order: &Order, user_id: u64) -> Result<u64, LockError> {
    Ok(order.id + user_id)
}

#[distributed_lock(key = "name:<name>")]
async fn greet(name: &str) -> Result<String, LockError> {
    Ok(format!("hello {name}"))
}

#[distributed_lock(key = "log:<tag>")]
async fn append(log: &mut Vec<String>, tag: &&str) -> Result<usize, LockError> {
    log.push(tag.to_string());
    Ok(log.len())
}

#[distributed_lock(key = "count:<n>:<order.id>")]
async fn count_down(mut n: u32, order: Box<Order>) -> Result<u32, LockError> {
    while n > 0 {
        n -= 1;
    }
    Ok(n + order.id as u32)
}

fn main() {
    let order = Order { id: 1 };
    drop(pay(&order, 2));
    drop(greet("ada"));
    let mut log = Vec::new();
    drop(append(&mut log, &"t"));
    drop(count_down(3, Box::new(Order { id: 4 })));
}
