//! Semaphores on the ZooKeeper engine against a real server: Curator's
//! `InterProcessSemaphoreV2` layout, and interop with Curator itself (a
//! Java child process) on the same path and bound. The behaviour every
//! engine shares is the engine suite's (`engines/semaphore.rs`).

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockKind};
use tests::eventually;
use tests::zookeeper::{Curator, ZooKeeper, zk_children};

/// A bound on waits that must end, not a speed anyone asserts.
const LONG: Duration = Duration::from_secs(20);

async fn client(zk: &ZooKeeper) -> LockClient {
    LockClient::connect(Config::new(zk.url()))
        .await
        .expect("connect to ZooKeeper")
}

/// The leases of semaphore `name` (children of `/locks/<name>/leases`).
async fn leases(zk: &ZooKeeper, name: &str) -> Vec<String> {
    zk_children(&zk.connect_string(), &format!("/locks/{name}/leases")).await
}

/// The nodes of semaphore `name`'s mutex (children of `/locks/<name>/locks`).
async fn line(zk: &ZooKeeper, name: &str) -> Vec<String> {
    zk_children(&zk.connect_string(), &format!("/locks/{name}/locks")).await
}

/// Waits until semaphore `name` has `n` leases.
async fn until_leases(zk: &ZooKeeper, name: &str, n: usize) {
    eventually(&format!("{n} leases of {name}"), LONG, || async {
        leases(zk, name).await.len() == n
    })
    .await;
}

/// Whether `child` is named as Curator's protected lease:
/// `_c_<uuid>-lease-<ten digits>`.
fn curator_lease_node(child: &str) -> bool {
    let Some((uuid, sequence)) = child
        .strip_prefix("_c_")
        .and_then(|rest| rest.split_once("-lease-"))
    else {
        return false;
    };
    uuid.len() == 36 && sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit())
}

/// Curator's `InterProcessSemaphoreV2` and ours on one path with one
/// bound: together never more than two holders; a Curator holder's release
/// lets our waiter in, and our release lets Curator's waiter in.
#[tokio::test]
async fn we_and_curator_share_a_semaphores_bound() {
    let zk = ZooKeeper::start();
    let c = client(&zk).await;
    let mut curator = Curator::start(&zk.connect_string()).await;
    let path = "/locks/partner";

    // One permit each: the bound of two is reached for both.
    assert!(curator.semaphore_acquire(path, 2, 10_000).await);
    let ours = c.semaphore("partner", 2).acquire().await.unwrap();
    assert_eq!(leases(&zk, "partner").await.len(), 2);
    assert!(line(&zk, "partner").await.is_empty(), "the mutex is free");
    for lease in leases(&zk, "partner").await {
        assert!(curator_lease_node(&lease), "{lease}");
    }
    assert!(
        c.semaphore("partner", 2)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    assert!(!curator.semaphore_acquire(path, 2, 300).await);
    // A smaller bound is its own: Curator's bound of one is full too.
    assert!(!curator.semaphore_acquire(path, 1, 300).await);
    assert_eq!(leases(&zk, "partner").await.len(), 2, "no lease left over");

    let info = c.inspect("partner").await.unwrap().expect("held");
    assert_eq!(info.kind, LockKind::Semaphore);
    assert_eq!(info.holders.len(), 2, "{info:?}");
    let mine = info
        .holders
        .iter()
        .find(|h| h.id == ours.holder_id())
        .expect("our permit is listed");
    assert_eq!(mine.token, Some(ours.token()));

    // Our waiter holds the mutex with its lease, and gets in when
    // Curator's holder lets go.
    let waiter = tokio::spawn({
        let c = c.clone();
        async move { c.semaphore("partner", 2).wait(LONG).acquire().await }
    });
    until_leases(&zk, "partner", 3).await;
    let info = c.inspect("partner").await.unwrap().expect("held");
    assert_eq!(info.holders.len(), 2, "our waiting lease holds nothing");
    assert_eq!(info.queue.len(), 1, "{info:?}");
    curator.semaphore_release(path).await;
    let second = tests::finish(LONG, waiter).await;
    assert!(second.token() > ours.token());
    assert_eq!(leases(&zk, "partner").await.len(), 2);
    assert!(line(&zk, "partner").await.is_empty());

    // Curator's waiter gets in when we let go.
    let (got, ()) = tokio::join!(curator.semaphore_acquire(path, 2, 20_000), async {
        until_leases(&zk, "partner", 3).await;
        assert!(
            c.semaphore("partner", 2)
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "Curator holds the mutex while it waits"
        );
        ours.release().await.unwrap();
    });
    assert!(got, "Curator's waiter got a lease");
    assert_eq!(leases(&zk, "partner").await.len(), 2);

    second.release().await.unwrap();
    curator.semaphore_release(path).await;
    assert!(leases(&zk, "partner").await.is_empty());
    assert!(c.inspect("partner").await.unwrap().is_none());
    curator.close().await;
}

/// Our waiters and Curator's queue in the semaphore's one mutex, each
/// with its own node there; while a permit is held by each side the
/// bound of two holds however many wait, and every waiter gets in.
#[tokio::test]
async fn waiters_of_both_queue_in_one_mutex_and_all_get_in() {
    let zk = ZooKeeper::start();
    let c = client(&zk).await;
    let mut curator = Curator::start(&zk.connect_string()).await;
    let path = "/locks/pool";

    let first = c.semaphore("pool", 1).acquire().await.unwrap();
    // Each waiter, once in, counts the leases, then lets go.
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let (c, connect) = (c.clone(), zk.connect_string());
            tokio::spawn(async move {
                let permit = c.semaphore("pool", 1).wait(LONG).acquire().await?;
                let seen = zk_children(&connect, "/locks/pool/leases").await.len();
                permit.release().await?;
                Ok::<_, lock_runtime::LockError>(seen)
            })
        })
        .collect();
    eventually("three waiters in the mutex", LONG, || async {
        line(&zk, "pool").await.len() == 3
    })
    .await;
    // The first waiter holds the mutex and has a lease that waits (the
    // others' leases, made before they saw the mutex taken, go at once).
    until_leases(&zk, "pool", 2).await;
    let (got, ()) = tokio::join!(curator.semaphore_acquire(path, 1, 60_000), async {
        eventually("Curator in the mutex's line", LONG, || async {
            line(&zk, "pool").await.len() == 4
        })
        .await;
        first.release().await.unwrap();
        for waiter in waiters {
            // Ours, and at most the next one's that waits.
            let seen = tests::finish(LONG, waiter).await;
            assert!(seen <= 2, "{seen} leases with a permit of one in");
        }
    });
    assert!(got, "Curator got in after our waiters");
    assert_eq!(leases(&zk, "pool").await.len(), 1);
    curator.semaphore_release(path).await;
    assert!(leases(&zk, "pool").await.is_empty());
    assert!(line(&zk, "pool").await.is_empty());
    curator.close().await;
}

/// An acquisition dropped while it waits for room (it holds the mutex
/// and a lease) leaves neither behind: the next one gets in at once.
#[tokio::test]
async fn a_dropped_permit_waiter_deletes_its_lease_and_its_place_in_the_mutex() {
    let zk = ZooKeeper::start();
    let (a, b) = (client(&zk).await, client(&zk).await);
    let held = a.semaphore("shard", 1).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.semaphore("shard", 1).acquire().await }
    });
    until_leases(&zk, "shard", 2).await;
    assert_eq!(line(&zk, "shard").await.len(), 1);
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    until_leases(&zk, "shard", 1).await;
    eventually("the mutex is free", LONG, || async {
        line(&zk, "shard").await.is_empty()
    })
    .await;
    held.release().await.unwrap();
    assert!(leases(&zk, "shard").await.is_empty());
    let next = b.semaphore("shard", 1).try_acquire().await.unwrap();
    next.expect("a free permit").release().await.unwrap();
}
