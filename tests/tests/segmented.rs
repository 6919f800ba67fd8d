//! Segmented locks and the segmented inventory on a real redis-server.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use lock_runtime::{
    Config, Inventory, InventoryError, LockClient, LockError, RedisSegmentStore, SegmentKey,
    SegmentStore, StoreError, segmented_lock,
};
use tests::Server;

/// Generous bound on whole scenarios: a deadlock fails the test instead of hanging it.
const NO_DEADLOCK: Duration = Duration::from_secs(60);

fn inventory(client: &LockClient, name: &str, segments: usize) -> Inventory<RedisSegmentStore> {
    Inventory::new(
        client.segmented_lock(name, segments),
        RedisSegmentStore::new(client),
    )
}

/// The segments' counts as another program sees them in Redis.
async fn raw_counts(server: &Server, name: &str, segments: usize) -> Vec<u64> {
    let mut conn = server.raw().await;
    let mut counts = Vec::new();
    for segment in 0..segments {
        let key = RedisSegmentStore::count_key(SegmentKey {
            inventory: name,
            segment,
        });
        let count: Option<u64> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        counts.push(count.unwrap_or(0));
    }
    counts
}

/// The cluster slot of `key` (CRC16/XMODEM of its hash tag, mod 16384).
fn slot(key: &str) -> u16 {
    let tag = match key.find('{') {
        Some(open) => match key[open + 1..].find('}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    let mut crc: u16 = 0;
    for &byte in tag.as_bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[tokio::test]
async fn segment_names_spread_over_distinct_hash_tags() {
    assert_eq!(slot("123456789"), 12739, "the CRC16 of the cluster spec");
    let server = Server::start();
    let client = server.client().await;
    let lock = client.segmented_lock("stock:42", 10);
    let names: Vec<String> = (0..10).map(|i| lock.segment_name(i)).collect();
    assert_eq!(names[3], "{stock:42:seg:3}");
    let slots: BTreeSet<u16> = names.iter().map(|n| slot(n)).collect();
    assert_eq!(slots.len(), 10, "every segment in its own slot: {names:?}");

    // The locks really live at those keys, with their derived keys in the same slot.
    let all = lock.all().acquire().await.unwrap();
    let mut conn = server.raw().await;
    for (segment, guard) in all.segments().iter().enumerate() {
        assert_eq!(guard.segment(), segment);
        assert_eq!(guard.name(), names[segment]);
        let kind: String = redis::cmd("TYPE")
            .arg(&names[segment])
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(kind, "hash");
        let token_key = format!("redisson_lock_token:{}", names[segment]);
        assert_eq!(slot(&token_key), slot(&names[segment]));
    }
    all.release().await.unwrap();
}

#[tokio::test]
async fn any_takes_a_free_segment_then_waits() {
    let server = Server::start();
    let holder = server.client().await;
    let buyer = server.client().await;
    let lock = holder.segmented_lock("sku:any", 4);
    let mut held = Vec::new();
    for segment in [0, 1, 3] {
        held.push(lock.segment(segment).acquire().await.unwrap());
    }
    let theirs = buyer.segmented_lock("sku:any", 4);
    // Whatever segment it starts from, it finds the free one.
    for _ in 0..4 {
        let guard = theirs
            .any()
            .try_acquire()
            .await
            .unwrap()
            .expect("segment 2 is free");
        assert_eq!(guard.segment(), 2);
        guard.release().await.unwrap();
    }

    held.push(lock.segment(2).acquire().await.unwrap());
    assert!(theirs.any().try_acquire().await.unwrap().is_none());
    match theirs
        .any()
        .wait(Duration::from_millis(100))
        .acquire()
        .await
    {
        Err(LockError::Timeout { name, .. }) => assert_eq!(name, "sku:any"),
        other => panic!("expected a timeout, got {other:?}"),
    }

    // Releasing one segment lets a waiter in, on that segment.
    let waiter = tokio::spawn(async move { theirs.any().acquire().await });
    let freed = held.pop().unwrap();
    freed.release().await.unwrap();
    for guard in held {
        guard.release().await.unwrap();
    }
    let got = tests::finish(NO_DEADLOCK, waiter).await;
    assert!(got.segment() < 4);
    got.release().await.unwrap();
}

#[tokio::test]
async fn bad_names_counts_and_segments_are_typed_errors() {
    let server = Server::start();
    let client = server.client().await;
    let lock = client.segmented_lock("sku:bad", 3);
    assert!(matches!(
        lock.segment(3).acquire().await,
        Err(LockError::Config(_))
    ));
    assert!(matches!(
        client.segmented_lock("sku:none", 0).any().acquire().await,
        Err(LockError::Config(_))
    ));
    assert!(matches!(
        client.segmented_lock("sku:{x}", 2).all().acquire().await,
        Err(LockError::BadName { .. })
    ));
    assert!(matches!(
        client.segmented_lock("", 2).any().acquire().await,
        Err(LockError::BadName { .. })
    ));
    assert!(matches!(
        inventory(&client, "sku:none", 0).deduct(1).await,
        Err(InventoryError::Lock(LockError::Config(_)))
    ));
    assert!(matches!(
        inventory(&client, "sku:{x}", 2).restock(5).await,
        Err(InventoryError::Lock(LockError::BadName { .. }))
    ));
}

#[tokio::test]
async fn all_takes_every_segment_or_none() {
    let server = Server::start();
    let a = server.client().await;
    let b = server.client().await;
    let blocker = b
        .segmented_lock("sku:all", 5)
        .segment(3)
        .acquire()
        .await
        .unwrap();
    let lock = a.segmented_lock("sku:all", 5);
    match lock.all().wait(Duration::from_millis(100)).acquire().await {
        Err(LockError::Timeout { name, .. }) => assert_eq!(name, "sku:all"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    // The segments taken before the busy one were given back.
    let other = b.segmented_lock("sku:all", 5);
    tests::eventually("segments 0..3 released", Duration::from_secs(10), || {
        let other = other.clone();
        async move {
            let mut free = true;
            for segment in 0..3 {
                match other.segment(segment).try_acquire().await.unwrap() {
                    Some(guard) => guard.release().await.unwrap(),
                    None => free = false,
                }
            }
            free
        }
    })
    .await;

    // A waiting `all` gets every segment once the blocker leaves.
    let waiting = tokio::spawn(async move { lock.all().acquire().await });
    blocker.release().await.unwrap();
    let all = tests::finish(NO_DEADLOCK, waiting).await;
    let segments: Vec<usize> = all.segments().iter().map(|g| g.segment()).collect();
    assert_eq!(segments, vec![0, 1, 2, 3, 4]);
    assert!((0..5).all(|i| all.token(i).is_some_and(|t| t > 0)));
    assert!(other.any().try_acquire().await.unwrap().is_none());
    all.release().await.unwrap();
}

#[tokio::test]
async fn deduct_merges_when_one_segment_is_short_and_answers_sold_out() {
    let server = Server::start();
    let client = server.client().await;
    let stock = inventory(&client, "sku:merge", 4);
    stock.restock(10).await.unwrap();
    assert_eq!(raw_counts(&server, "sku:merge", 4).await, vec![3, 3, 2, 2]);
    assert_eq!(stock.total().await.unwrap(), 10);

    let small = stock.deduct(2).await.unwrap();
    assert!(!small.merged());
    assert_eq!(small.taken().len(), 1);

    let big = stock.deduct(7).await.unwrap();
    assert!(big.merged(), "no segment holds 7: {big:?}");
    assert_eq!(big.taken().iter().map(|(_, q)| q).sum::<u64>(), 7);
    assert_eq!(stock.total().await.unwrap(), 1);

    match stock.deduct(2).await {
        Err(InventoryError::Insufficient {
            requested,
            available,
        }) => {
            assert_eq!((requested, available), (2, 1));
        }
        other => panic!("expected insufficient, got {other:?}"),
    }
    stock.deduct(1).await.unwrap();
    match stock.deduct(1).await {
        Err(InventoryError::Insufficient {
            requested,
            available,
        }) => {
            assert_eq!((requested, available), (1, 0));
        }
        other => panic!("expected insufficient, got {other:?}"),
    }
    assert_eq!(raw_counts(&server, "sku:merge", 4).await, vec![0, 0, 0, 0]);
}

#[tokio::test]
async fn concurrent_buyers_on_several_clients_sell_exactly_the_stock() {
    const STOCK: u64 = 300;
    const SEGMENTS: usize = 6;
    let server = Server::start();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(server.client().await);
    }
    inventory(&clients[0], "sku:rush", SEGMENTS)
        .restock(STOCK)
        .await
        .unwrap();

    let mut buyers = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for b in 0..12u64 {
            let stock = inventory(client, "sku:rush", SEGMENTS);
            // Mostly small orders, some larger than a segment's share (50):
            // those merge when enough is left (`merging_buyers_do_not_deadlock`
            // makes every sale merge).
            let mut wants = [1, 2, 3, 70, 1, 5][(c + b as usize) % 6];
            buyers.push(tokio::spawn(async move {
                let (mut sold, mut refused) = (0u64, 0u32);
                loop {
                    match stock.deduct(wants).await {
                        Ok(deduction) => {
                            assert_eq!(deduction.quantity(), wants);
                            sold += wants;
                        }
                        Err(InventoryError::Insufficient { available: 0, .. }) => {
                            return (sold, refused + 1);
                        }
                        Err(InventoryError::Insufficient {
                            requested,
                            available,
                        }) => {
                            assert!(available < requested);
                            refused += 1;
                            wants = 1;
                        }
                        Err(e) => panic!("deduct failed: {e}"),
                    }
                }
            }));
        }
    }
    let results = tokio::time::timeout(NO_DEADLOCK, futures_util::future::join_all(buyers))
        .await
        .expect("buyers finish: no deadlock");
    let (mut sold, mut refused) = (0, 0);
    for result in results {
        let (s, r) = result.unwrap();
        sold += s;
        refused += r;
    }
    assert_eq!(sold, STOCK, "exactly the stock is sold");
    assert!(
        refused >= 48,
        "every buyer ends with a typed sold-out answer"
    );
    assert_eq!(
        raw_counts(&server, "sku:rush", SEGMENTS).await,
        vec![0; SEGMENTS]
    );
}

#[tokio::test]
async fn merging_buyers_do_not_deadlock() {
    const SEGMENTS: usize = 8;
    let server = Server::start();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(server.client().await);
    }
    inventory(&clients[0], "sku:merge-rush", SEGMENTS)
        .restock(400)
        .await
        .unwrap();
    let mut buyers = Vec::new();
    for client in &clients {
        for _ in 0..8 {
            // 80 is more than any segment's 50: every sale merges.
            let stock = inventory(client, "sku:merge-rush", SEGMENTS);
            buyers.push(tokio::spawn(async move {
                let mut sold = 0;
                loop {
                    match stock.deduct(80).await {
                        Ok(deduction) => {
                            assert!(deduction.merged());
                            sold += 80;
                        }
                        Err(InventoryError::Insufficient { .. }) => return sold,
                        Err(e) => panic!("deduct failed: {e}"),
                    }
                }
            }));
        }
    }
    let results = tokio::time::timeout(NO_DEADLOCK, futures_util::future::join_all(buyers))
        .await
        .expect("merging buyers finish: no deadlock");
    let sold: u64 = results.into_iter().map(|r| r.unwrap()).sum();
    assert_eq!(sold, 400);
    assert_eq!(
        raw_counts(&server, "sku:merge-rush", SEGMENTS).await,
        vec![0; SEGMENTS]
    );
}

/// A user's own storage: counts in memory, refusing writes with a fencing
/// token older than the segment's last one.
#[derive(Default)]
struct FencedMemory {
    // (inventory, segment) -> (count, last token)
    counts: Mutex<HashMap<(String, usize), (u64, u64)>>,
}

impl SegmentStore for FencedMemory {
    async fn get(&self, at: SegmentKey<'_>, _token: Option<u64>) -> Result<u64, StoreError> {
        let counts = self.counts.lock().unwrap();
        Ok(counts
            .get(&(at.inventory.to_owned(), at.segment))
            .map_or(0, |c| c.0))
    }

    async fn set(&self, at: SegmentKey<'_>, count: u64, token: u64) -> Result<(), StoreError> {
        let mut counts = self.counts.lock().unwrap();
        let entry = counts
            .entry((at.inventory.to_owned(), at.segment))
            .or_default();
        if token < entry.1 {
            return Err(format!("stale token {token} < {}", entry.1).into());
        }
        *entry = (count, token);
        Ok(())
    }
}

#[tokio::test]
async fn a_user_store_gets_the_fencing_tokens() {
    let server = Server::start();
    let client = server.client().await;
    let stock = Inventory::new(client.segmented_lock("sku:own", 3), FencedMemory::default());
    stock.restock(30).await.unwrap();
    let mut buyers = Vec::new();
    let stock = std::sync::Arc::new(stock);
    for _ in 0..10 {
        let stock = stock.clone();
        buyers.push(tokio::spawn(async move {
            stock.deduct(3).await.map(|d| d.quantity())
        }));
    }
    let sold: u64 = futures_util::future::join_all(buyers)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap())
        .sum();
    assert_eq!(sold, 30);
    assert_eq!(stock.total().await.unwrap(), 0);
    let counts = stock.store().counts.lock().unwrap();
    assert_eq!(counts.len(), 3);
    assert!(
        counts
            .values()
            .all(|&(count, token)| count == 0 && token > 0)
    );
}

segmented_lock! {
    /// Declared once; call sites pass a typed SKU.
    static STOCK: (sku: u64) = "decl-stock:<sku>", segments = 3;
}

/// The only test in this binary that uses the global client.
#[tokio::test]
async fn a_declared_lock_uses_the_global_client_and_typed_keys() {
    let server = Server::start();
    lock_runtime::init(Config::new(server.url())).await.unwrap();
    assert_eq!(STOCK.name(7), "decl-stock:7");

    let guard = STOCK.lock(7).acquire().await.unwrap();
    assert!(guard.segment() < 3);
    assert_eq!(
        guard.name(),
        format!("{{decl-stock:7:seg:{}}}", guard.segment())
    );
    let mut conn = server.raw().await;
    let kind: String = redis::cmd("TYPE")
        .arg(guard.name())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kind, "hash");

    // Another client sees the same locks through the declaration.
    let other = server.client().await;
    let theirs = STOCK.on(&other, 7);
    assert!(theirs.all().try_acquire().await.unwrap().is_none());
    assert!(
        theirs
            .segment(guard.segment())
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    guard.release().await.unwrap();
    let given = STOCK.segment(7, 2).acquire().await.unwrap();
    assert_eq!(given.segment(), 2);
    given.release().await.unwrap();
    STOCK
        .lock_all(7)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    let global = lock_runtime::client().await.unwrap();
    let stock = STOCK.inventory(7, RedisSegmentStore::new(global));
    stock.restock(5).await.unwrap();
    assert!(stock.deduct(5).await.unwrap().merged());
    assert!(matches!(
        stock.deduct(1).await,
        Err(InventoryError::Insufficient {
            requested: 1,
            available: 0
        })
    ));
}
