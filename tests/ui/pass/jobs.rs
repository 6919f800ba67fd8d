//! Run-once jobs and busy paths: `on_busy = "skip"` on `()` and `Option`
//! (aliases too), `fallback` in free functions and methods (`self` first),
//! `hold_at_least`, and `client =` as a field, a function and an `Arc`.

use std::sync::Arc;

use lock_runtime::{LockClient, LockError, distributed_lock};

mod job {
    pub type Result<T> = std::result::Result<T, lock_runtime::LockError>;
}

#[distributed_lock(key = "report:<day>", on_busy = "skip", hold_at_least = "30s")]
async fn nightly(day: u32) -> Result<(), LockError> {
    let _ = day;
    Ok(())
}

#[distributed_lock(key = "report:<day>", wait = "2s", on_busy = "skip")]
async fn maybe(day: u32) -> job::Result<Option<u32>> {
    Ok(Some(day))
}

#[distributed_lock(key = "stock:<id>", on_busy = "error")]
async fn strict(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

async fn cached_price(id: u64, currency: &str) -> Result<String, LockError> {
    Ok(format!("{id} {currency} (cached)"))
}

#[distributed_lock(key = "price:<id>", fallback = cached_price)]
async fn price(id: u64, currency: &str) -> Result<String, LockError> {
    Ok(format!("{id} {currency}"))
}

fn shop_locks() -> &'static LockClient {
    unimplemented!()
}

#[distributed_lock(key = "order:<id>", client = shop_locks())]
async fn pay(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

struct Shop {
    locks: LockClient,
    shared: Arc<LockClient>,
    name: String,
}

impl Shop {
    #[distributed_lock(key = "shop:<self.name>:<id>", client = self.locks, fallback = Self::busy)]
    async fn sell(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }

    async fn busy(&self, id: u64) -> Result<u64, LockError> {
        let _ = &self.name;
        Ok(id + 1)
    }

    #[distributed_lock(key = "shop:<id>", client = self.shared, on_busy = "skip")]
    async fn restock(&mut self, id: u64) -> Result<(), LockError> {
        self.name = id.to_string();
        Ok(())
    }
}

/// Parameters as the fallback receives them: a raw identifier, `self` by
/// value, `&mut self` with the client a field of it.
async fn typed(r#type: String, id: u64) -> Result<String, LockError> {
    Ok(format!("{type} {id}", type = r#type))
}

#[distributed_lock(key = "kind:<r#type>:<id>", fallback = typed)]
async fn kind(r#type: String, id: u64) -> Result<String, LockError> {
    Ok(r#type)
}

struct Worker {
    locks: Arc<LockClient>,
    done: u32,
}

impl Worker {
    #[distributed_lock(key = "work:<id>", client = self.locks, fallback = Self::later)]
    async fn work(&mut self, id: u64) -> Result<u32, LockError> {
        self.done += 1;
        Ok(self.done + id as u32)
    }

    async fn later(&mut self, id: u64) -> Result<u32, LockError> {
        Ok(id as u32)
    }

    #[distributed_lock(key = "finish:<id>", client = self.locks.clone(), fallback = Self::abandon)]
    async fn finish(self, id: u64) -> Result<u32, LockError> {
        Ok(self.done + id as u32)
    }

    async fn abandon(self, id: u64) -> Result<u32, LockError> {
        Ok(id as u32)
    }
}

fn is_send<T: Send>(_: T) {}

fn main() {
    let _ = (nightly(1), maybe(1), strict(1), price(1, "EUR"), pay(1));
    let _ = (Shop::sell, Shop::restock);
    let _ = kind(String::new(), 1);
    let _ = (Worker::work, Worker::finish);
    is_send(nightly(1));
    is_send(kind(String::new(), 1));
}
