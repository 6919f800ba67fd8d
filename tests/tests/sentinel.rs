//! Locks on a master with two replicas behind three sentinels: the client
//! finds the master through the sentinels, waits for a replica after each
//! acquisition, and follows a failover (locks that reached a replica survive
//! it, a lock that did not is reported lost, waiters keep listening, new
//! acquisitions work).

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, ReplicaSync};
use redis::AsyncCommands;
use tests::topology::{MASTER_NAME, Sentinels};

const WITHIN: Duration = Duration::from_secs(20);

#[tokio::test]
async fn locks_work_through_the_sentinels() {
    let group = Sentinels::start();
    let client = group.client().await;
    let other = group.client().await;
    let mut master = group.raw_master().await;

    let guard = client.lock("sentinel:basic").acquire().await.unwrap();
    let count: Option<i64> = master
        .hget("sentinel:basic", guard.holder_id())
        .await
        .unwrap();
    assert_eq!(
        count,
        Some(1),
        "the lock is on the master the sentinels name"
    );
    assert!(
        other
            .lock("sentinel:basic")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );

    let waiter = tokio::spawn({
        let other = other.clone();
        async move { other.lock("sentinel:basic").wait(WITHIN).acquire().await }
    });
    tests::eventually("the waiter listens", WITHIN, || {
        let mut master = master.clone();
        async move { tests::numsub(&mut master, "redisson_lock__channel:{sentinel:basic}").await == 1 }
    })
    .await;
    guard.release().await.unwrap();
    let next = tests::finish(WITHIN, waiter).await;
    next.release().await.unwrap();

    // With replicas attached, an acquisition waits for one of them (Auto),
    // and so does an explicit Always.
    let always = group
        .client_with(|c| c.replica_sync(ReplicaSync::Always))
        .await;
    let synced = always.lock("sentinel:synced").acquire().await.unwrap();
    synced.release().await.unwrap();
}

#[tokio::test]
async fn bad_sentinel_configurations_are_typed_errors() {
    let empty = LockClient::connect(Config::sentinel(Vec::<String>::new(), MASTER_NAME)).await;
    assert!(matches!(empty, Err(LockError::Config(_))), "{empty:?}");
    let unnamed = LockClient::connect(Config::sentinel(["redis://127.0.0.1:1"], "")).await;
    assert!(matches!(unnamed, Err(LockError::Config(_))), "{unnamed:?}");
    let sharded =
        LockClient::connect(Config::sentinel(["redis://127.0.0.1:1"], "m").sharded_pubsub(true))
            .await;
    assert!(matches!(sharded, Err(LockError::Config(_))), "{sharded:?}");
    // Nobody listens there: a Redis error within the connect timeout, no hang.
    let port = tests::free_port();
    let unreachable = LockClient::connect(
        Config::sentinel([format!("redis://127.0.0.1:{port}")], MASTER_NAME)
            .connect_timeout(Duration::from_secs(2)),
    )
    .await;
    assert!(
        matches!(&unreachable, Err(LockError::Connect { server, .. }) if server.contains(&port.to_string())),
        "{unreachable:?}"
    );
}

#[tokio::test]
async fn a_failover_is_followed_synced_locks_survive_and_lost_ones_are_reported() {
    let group = Sentinels::start();
    // Renewals pause while the sentinels fail over; a lease this long
    // outlasts that pause.
    let watchdog = Duration::from_secs(15);
    let client = group.client_with(|c| c.watchdog_timeout(watchdog)).await;
    let other = group.client_with(|c| c.watchdog_timeout(watchdog)).await;
    let old_master = group.master();

    // Acquired with replica sync (Auto: the master has two replicas).
    let kept = client.lock("failover:kept").acquire().await.unwrap();
    // A waiter listening when the master dies.
    let waiter = tokio::spawn({
        let other = other.clone();
        async move {
            other
                .lock("failover:kept")
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        }
    });
    let mut master = group.raw_master().await;
    tests::eventually("the waiter listens", WITHIN, || {
        let mut master = master.clone();
        async move { tests::numsub(&mut master, "redisson_lock__channel:{failover:kept}").await == 1 }
    })
    .await;

    // Replication is cut: Always refuses, typed, and leaves nothing behind;
    // without replica sync the lock exists on the master alone.
    group.cut_replication();
    let always = group
        .client_with(|c| c.replica_sync(ReplicaSync::Always))
        .await;
    match always.lock("failover:lost").acquire().await {
        Err(LockError::NotReplicated { name, .. }) => assert_eq!(name, "failover:lost"),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let left: bool = master.exists("failover:lost").await.unwrap();
    assert!(!left, "the unreplicated hold was given back");
    let unsynced = group
        .client_with(|c| c.watchdog_timeout(watchdog).replica_sync(ReplicaSync::Off))
        .await;
    let lost = unsynced.lock("failover:lost").acquire().await.unwrap();

    let new_master = group.fail_over().await;
    assert_ne!(new_master, old_master);
    let mut promoted = group.raw_master().await;

    // The lost lock: its guard learns it at the first renewal on the new master.
    tokio::time::timeout(WITHIN * 2, lost.lost())
        .await
        .expect("the loss is reported");
    assert!(matches!(lost.release().await, Err(LockError::Lost { .. })));

    // The kept lock: on the new master, renewed there, still exclusive.
    let count: Option<i64> = promoted
        .hget("failover:kept", kept.holder_id())
        .await
        .unwrap();
    assert_eq!(count, Some(1), "the synced lock survived the failover");
    tests::eventually(
        "the kept lock is renewed on the new master",
        WITHIN * 2,
        || {
            let mut promoted = promoted.clone();
            async move {
                promoted.pttl::<_, i64>("failover:kept").await.unwrap()
                    > (watchdog.as_millis() as i64) * 2 / 3
            }
        },
    )
    .await;
    assert!(!kept.is_lost());
    assert!(!waiter.is_finished());

    // The waiter listens on the new master, and an unlock there wakes it.
    tests::eventually("the waiter listens on the new master", WITHIN, || {
        let mut promoted = promoted.clone();
        async move { tests::numsub(&mut promoted, "redisson_lock__channel:{failover:kept}").await == 1 }
    })
    .await;
    kept.release().await.unwrap();
    let next = tests::finish(WITHIN, waiter).await;
    next.release().await.unwrap();

    // New acquisitions work, the lost name included.
    let fresh = client
        .lock("failover:lost")
        .wait(WITHIN)
        .acquire()
        .await
        .unwrap();
    fresh.release().await.unwrap();
}
