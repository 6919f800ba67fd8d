//! `segmented_lock!`: typed declarations, and every method they give.

use lock_runtime::{
    LockClient, LockError, RedisSegmentStore, SegmentGuard, SegmentedLock, segmented_lock,
};

pub struct Order {
    pub id: u64,
    pub region: &'static str,
}

segmented_lock! {
    /// The stock of one SKU, in 10 segments.
    pub static STOCK: (sku: u64) = "stock:<sku>", segments = 10;

    /// Several parameters, a reference, a field path; a parameter may be
    /// called `segment` or `client` without clashing with the methods' own.
    static SEATS: (order: &Order, segment: u32, client: &str) =
        "seats:<order.region>:<order.id>:<segment>:<client>", segments = 4,;

    /// No parameter: a fixed name.
    pub(crate) static GLOBAL_COUNTER: () = "counter", segments = 1;
}

async fn sell(client: &LockClient) -> Result<(), LockError> {
    let one: SegmentGuard = STOCK.lock(42).wait(std::time::Duration::from_secs(1)).acquire().await?;
    assert!(one.segment() < STOCK_SEGMENTS);
    one.release().await?;
    STOCK.segment(42, 3).acquire().await?.release().await?;
    STOCK.lock_all(42).acquire().await?.release().await?;
    let lock: SegmentedLock = STOCK.on(client, 42);
    lock.any().try_acquire().await?;
    let order = Order { id: 7, region: "eu" };
    SEATS.lock(&order, 2, "web").acquire().await?.release().await?;
    SEATS.segment(&order, 2, "web", 1).acquire().await?.release().await?;
    GLOBAL_COUNTER.lock().acquire().await?.release().await?;
    let _stock = STOCK.inventory(42, RedisSegmentStore::new(client));
    Ok(())
}

const STOCK_SEGMENTS: usize = StockSegmentedLock::SEGMENTS;

fn is_send<F: Send>(_: &F) {}

fn main() {
    assert_eq!(STOCK.name(42), "stock:42");
    assert_eq!(StockSegmentedLock::TEMPLATE, "stock:<sku>");
    assert_eq!(STOCK.get(42).segments(), 10);
    let order = Order { id: 7, region: "eu" };
    assert_eq!(SEATS.name(&order, 2, "web"), "seats:eu:7:2:web");
    assert_eq!(GLOBAL_COUNTER.name(), "counter");
    assert_eq!(GlobalCounterSegmentedLock::SEGMENTS, 1);
    let _ = sell;
    let acquire = STOCK.lock(1).acquire();
    is_send(&acquire);
}
