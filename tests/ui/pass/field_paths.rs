//! Field paths: nested fields, tuple indexes, tuple structs, raw identifiers.

use lock_runtime::{LockError, distributed_lock};

struct Customer {
    id: u64,
}

struct Order {
    customer: Customer,
    lines: (String, u32),
    r#type: &'static str,
}

struct Sku(String);

#[distributed_lock(key = "customer:<order.customer.id>:<order.lines.0>:<order.r#type>")]
async fn ship(order: &Order) -> Result<u32, LockError> {
    Ok(order.lines.1)
}

#[distributed_lock(key = "sku:<sku.0>:<pair.1>")]
async fn reserve(sku: Sku, pair: (u8, u16)) -> Result<(), LockError> {
    let _ = (sku, pair);
    Ok(())
}

fn main() {
    let order = Order {
        customer: Customer { id: 1 },
        lines: ("apple".into(), 2),
        r#type: "express",
    };
    drop(ship(&order));
    drop(reserve(Sku("a".into()), (1, 2)));
}
