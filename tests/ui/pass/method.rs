//! Methods: `&self`, `&mut self` and `self` receivers, `<self.field>` and
//! `<self>`, an associated function, and an `async fn` in a trait impl.

use std::fmt;

use lock_runtime::{LockError, distributed_lock};

struct Cart {
    id: u64,
    items: Vec<String>,
}

impl fmt::Display for Cart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cart-{}", self.id)
    }
}

impl Cart {
    #[distributed_lock(key = "cart:<self.id>")]
    async fn count(&self) -> Result<usize, LockError> {
        Ok(self.items.len())
    }

    #[distributed_lock(key = "cart:<self.id>:<item>")]
    async fn add(&mut self, item: String) -> Result<(), LockError> {
        self.items.push(item);
        Ok(())
    }

    /// The whole receiver in the key, through its `Display`.
    #[distributed_lock(key = "<self>")]
    async fn into_items(self) -> Result<Vec<String>, LockError> {
        Ok(self.items)
    }

    #[distributed_lock(key = "cart:<id>")]
    async fn load(id: u64) -> Result<Self, LockError> {
        Ok(Cart { id, items: Vec::new() })
    }
}

trait Checkout {
    async fn checkout(&self, user: u64) -> Result<u64, LockError>;
}

impl Checkout for Cart {
    #[distributed_lock(key = "checkout:<user>:<self.id>", wait = "1s")]
    async fn checkout(&self, user: u64) -> Result<u64, LockError> {
        Ok(user + self.id)
    }
}

fn main() {
    let mut cart = Cart { id: 1, items: Vec::new() };
    drop(cart.count());
    drop(cart.add("apple".into()));
    drop(cart.checkout(7));
    drop(cart.into_items());
    drop(Cart::load(2));
}
