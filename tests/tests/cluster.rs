//! Locks on a Redis Cluster (three masters, one replica each): names spread
//! over every shard, per-slot renewal, waking waiters with sharded and
//! classic pub/sub, the attribute over a cluster-wide global client, and
//! master failovers with and without replica sync.
//!
//! Tests that only lock share one cluster per test binary; tests that kill
//! nodes start their own.

use std::collections::HashSet;
use std::time::Duration;

use lock_runtime::{LockError, ReplicaSync, distributed_lock};
use redis::AsyncCommands;
use tests::topology::{Cluster, key_slot};

const WITHIN: Duration = Duration::from_secs(20);

/// Names that land on every shard of `cluster`.
fn spread_names(cluster: &Cluster, prefix: &str, n: usize) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}:{i}")).collect();
    let shards: HashSet<u16> = names.iter().map(|name| cluster.master_of(name)).collect();
    assert_eq!(shards.len(), 3, "the names cover every shard");
    names
}

/// Subscribers of a sharded channel, on the node serving it.
async fn shard_numsub(cluster: &Cluster, channel: &str) -> i64 {
    let mut node = cluster.raw_node(cluster.master_of(channel)).await;
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query_async(&mut node)
        .await
        .expect("PUBSUB SHARDNUMSUB");
    n
}

#[tokio::test]
async fn reentrant_locks_on_every_shard_are_held_renewed_and_released() {
    let cluster = Cluster::shared();
    // Renewed every half second: slack for a loaded machine running six
    // servers (a renewal may run about a second late).
    let lease = Duration::from_millis(1500);
    let client = cluster.client_with(|c| c.watchdog_timeout(lease)).await;
    let other = cluster.client().await;
    let mut raw = cluster.raw().await;
    let names = spread_names(cluster, "spread", 60);

    let mut guards = Vec::new();
    for name in &names {
        guards.push(client.lock(name.as_str()).acquire().await.unwrap());
    }
    for (name, guard) in names.iter().zip(&guards) {
        let count: Option<i64> = raw.hget(name, guard.holder_id()).await.unwrap();
        assert_eq!(count, Some(1), "{name} is a Redisson hash on its shard");
        let token: u64 = raw
            .get(format!("redisson_lock_token:{{{name}}}"))
            .await
            .unwrap();
        assert_eq!(token, guard.token());
    }
    // Outlive the lease several times over: only per-slot renewals (one
    // script call may not cross slots) keep every lock.
    tokio::time::sleep(lease * 3).await;
    for (name, guard) in names.iter().zip(&guards) {
        assert!(!guard.is_lost(), "{name} was renewed");
        let held: bool = raw.exists(name).await.unwrap();
        assert!(held, "{name} outlived its lease");
    }
    for name in names.iter().step_by(7) {
        assert!(
            other
                .lock(name.as_str())
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "{name} excludes"
        );
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert_eq!(client.renewed_locks(), 0);
    for name in &names {
        let held: bool = raw.exists(name).await.unwrap();
        assert!(!held, "{name} was released");
    }
}

#[tokio::test]
async fn reentry_and_exclusion_work_per_name() {
    let cluster = Cluster::shared();
    let client = cluster.client().await;
    let other = cluster.client().await;
    let names = spread_names(cluster, "reenter", 12);
    for name in &names {
        let outer = client.lock(name.as_str()).acquire().await.unwrap();
        // Re-entry is in the outer guard's scope; outside it the same task
        // is another holder.
        assert!(
            client
                .lock(name.as_str())
                .try_acquire()
                .await
                .unwrap()
                .is_none()
        );
        let inner = outer
            .scope(client.lock(name.as_str()).try_acquire())
            .await
            .unwrap()
            .expect("re-entry");
        assert!(inner.token() > outer.token());
        assert_eq!(inner.holder_id(), outer.holder_id());
        assert!(
            other
                .lock(name.as_str())
                .try_acquire()
                .await
                .unwrap()
                .is_none()
        );
        inner.release().await.unwrap();
        assert!(
            other
                .lock(name.as_str())
                .try_acquire()
                .await
                .unwrap()
                .is_none(),
            "the outer hold remains"
        );
        outer.release().await.unwrap();
        let taken = other
            .lock(name.as_str())
            .try_acquire()
            .await
            .unwrap()
            .expect("free after release");
        taken.release().await.unwrap();
    }
}

/// Holds `names` with `holder`, starts a waiter per name on `waiter`, waits
/// until every waiter listens (`listening`), releases, and expects every
/// waiter to get its lock well before the holder's 30 s lease would have
/// let it retry: only an unlock message wakes it that early.
async fn waiters_wake(
    cluster: &Cluster,
    holder: &lock_runtime::LockClient,
    waiter: &lock_runtime::LockClient,
    names: &[String],
    sharded: bool,
) {
    let mut guards = Vec::new();
    for name in names {
        guards.push(holder.lock(name.as_str()).acquire().await.unwrap());
    }
    let waiting: Vec<_> = names
        .iter()
        .map(|name| {
            let waiter = waiter.clone();
            let name = name.clone();
            tokio::spawn(async move {
                waiter
                    .lock(name)
                    .wait(Duration::from_secs(25))
                    .acquire()
                    .await
            })
        })
        .collect();
    for name in names {
        let channel = format!("redisson_lock__channel:{{{name}}}");
        tests::eventually("the waiter listens on the lock's channel", WITHIN, || {
            let channel = channel.clone();
            async move {
                if sharded {
                    shard_numsub(cluster, &channel).await == 1
                } else {
                    let mut node = cluster.raw_node(cluster.master_of(&channel)).await;
                    tests::numsub(&mut node, &channel).await == 1
                }
            }
        })
        .await;
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
    for task in waiting {
        let guard = tokio::time::timeout(WITHIN, task)
            .await
            .expect("woken by the unlock message")
            .unwrap()
            .unwrap();
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn waiters_are_woken_by_sharded_pubsub() {
    let cluster = Cluster::shared();
    let holder = cluster.client().await;
    let waiter = cluster.client().await;
    let names = spread_names(cluster, "wake-sharded", 9);
    waiters_wake(cluster, &holder, &waiter, &names, true).await;
}

#[tokio::test]
async fn waiters_are_woken_by_classic_pubsub_when_configured() {
    let cluster = Cluster::shared();
    let holder = cluster.client_with(|c| c.sharded_pubsub(false)).await;
    let waiter = cluster.client_with(|c| c.sharded_pubsub(false)).await;
    let names = spread_names(cluster, "wake-classic", 9);
    waiters_wake(cluster, &holder, &waiter, &names, false).await;
}

#[distributed_lock(key = "attr:<id>", wait = "10s")]
async fn locked_body(
    id: u64,
    raw: redis::cluster_async::ClusterConnection,
) -> Result<u64, LockError> {
    let mut raw = raw;
    let holders: i64 = raw.hlen(format!("attr:{id}")).await.expect("HLEN");
    assert_eq!(holders, 1, "the body runs under its lock");
    Ok(id)
}

#[tokio::test]
async fn the_attribute_works_with_a_cluster_global_client() {
    let cluster = Cluster::shared();
    lock_runtime::init(cluster.config()).await.unwrap();
    let raw = cluster.raw().await;
    let ids: Vec<u64> = (0..30).collect();
    let shards: HashSet<u16> = ids
        .iter()
        .map(|id| cluster.master_of(&format!("attr:{id}")))
        .collect();
    assert_eq!(shards.len(), 3);
    // Two calls per id in one task: siblings, not nested, so they are two
    // holders and take turns.
    let calls = ids
        .iter()
        .flat_map(|&id| [locked_body(id, raw.clone()), locked_body(id, raw.clone())]);
    let done = futures_util::future::try_join_all(calls).await.unwrap();
    assert_eq!(done.len(), 60);
}

#[tokio::test]
async fn derived_keys_share_the_lock_slot() {
    let cluster = Cluster::shared();
    for name in ["stock:42", "a{tag}b", "}{x}"] {
        let slot = key_slot(name);
        let tagged = if name.contains('{') {
            name.to_owned()
        } else {
            format!("{{{name}}}")
        };
        assert_eq!(
            key_slot(&format!("redisson_lock__channel:{tagged}")),
            slot,
            "{name}"
        );
        assert_eq!(
            key_slot(&format!("redisson_lock_token:{tagged}")),
            slot,
            "{name}"
        );
    }
    let client = cluster.client().await;
    // A name carrying its own hash tag works, and names sharing a tag share a slot.
    let cart = client.lock("order:{user:7}:cart").acquire().await.unwrap();
    let items = client.lock("order:{user:7}:items").acquire().await.unwrap();
    cart.release().await.unwrap();
    items.release().await.unwrap();
    // A brace without a usable tag would scatter the lock's keys over slots:
    // refused, typed, instead of a CROSSSLOT error from the server.
    for name in ["q{", "{}odd", "a}b"] {
        match client.lock(name).try_acquire().await {
            Err(LockError::BadName { name: refused, .. }) => assert_eq!(refused, name),
            other => panic!("{name}: expected BadName, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_failover_keeps_synced_locks_and_reports_lost_ones() {
    let cluster = Cluster::start();
    let watchdog = Duration::from_secs(6);
    let client = cluster.client_with(|c| c.watchdog_timeout(watchdog)).await;
    let unsynced = cluster
        .client_with(|c| c.watchdog_timeout(watchdog).replica_sync(ReplicaSync::Off))
        .await;
    let other = cluster.client().await;

    // Two names on one shard.
    let kept_name = "failover:kept".to_owned();
    let shard = cluster.master_of(&kept_name);
    let lost_name = (0..)
        .map(|i| format!("failover:lost:{i}"))
        .find(|n| cluster.master_of(n) == shard)
        .unwrap();

    // Acquired with replica sync (the default when replicas exist).
    let kept = client.lock(kept_name.as_str()).acquire().await.unwrap();
    // A waiter listening (sharded) on the shard that will fail.
    let kept_channel = format!("redisson_lock__channel:{{{kept_name}}}");
    let waiter = tokio::spawn({
        let other = other.clone();
        let kept_name = kept_name.clone();
        async move {
            other
                .lock(kept_name)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        }
    });
    let (shared, channel) = (&cluster, kept_channel.as_str());
    tests::eventually("the waiter listens", WITHIN, || async move {
        shard_numsub(shared, channel).await == 1
    })
    .await;

    // Then the shard's replication is cut: an acquisition that must be
    // synced (Always) now fails, typed, and leaves nothing behind; Auto no
    // longer waits for the shard's replica, which cannot answer (it is
    // taken, by the master alone); an unsynced one exists on the master
    // alone.
    cluster.cut_replication_of(&kept_name);
    let always = cluster
        .client_with(|c| c.replica_sync(ReplicaSync::Always))
        .await;
    match always.lock(lost_name.as_str()).acquire().await {
        Err(LockError::NotReplicated { name, .. }) => assert_eq!(name, lost_name),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let mut master = cluster.raw_node(shard).await;
    let left: bool = master.exists(&lost_name).await.unwrap();
    assert!(!left, "the unreplicated hold was given back");
    let auto = tokio::time::timeout(WITHIN, client.lock(lost_name.as_str()).acquire())
        .await
        .expect("Auto does not wait for a replica that cannot answer")
        .expect("Auto takes it");
    auto.release().await.unwrap();
    let lost = unsynced.lock(lost_name.as_str()).acquire().await.unwrap();

    let new_master = cluster.fail_over(&kept_name).await;
    assert_ne!(new_master, shard);

    // The lost lock: its guard learns it at the next renewal.
    tokio::time::timeout(WITHIN, lost.lost())
        .await
        .expect("the loss is reported");
    assert!(matches!(lost.release().await, Err(LockError::Lost { .. })));

    // The kept lock: still held on the new master, renewed there, exclusive.
    let mut promoted = cluster.raw_node(new_master).await;
    tests::eventually("the kept lock is renewed on the new master", WITHIN, || {
        let mut promoted = promoted.clone();
        let kept_name = kept_name.clone();
        async move {
            promoted.pttl::<_, i64>(&kept_name).await.unwrap() > (watchdog.as_millis() as i64) / 2
        }
    })
    .await;
    assert!(!kept.is_lost());
    let holder: Option<i64> = promoted.hget(&kept_name, kept.holder_id()).await.unwrap();
    assert_eq!(holder, Some(1));
    assert!(
        other
            .lock(kept_name.as_str())
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );

    // New acquisitions work, also on the failed-over shard.
    let fresh = other
        .lock(lost_name.as_str())
        .wait(WITHIN)
        .acquire()
        .await
        .unwrap();
    fresh.release().await.unwrap();

    // The waiter's subscription followed the slot to the new master, where
    // the unlock wakes it.
    tests::eventually(
        "the waiter listens on the new master",
        WITHIN,
        || async move { shard_numsub(shared, channel).await == 1 },
    )
    .await;
    assert!(!waiter.is_finished());
    kept.release().await.unwrap();
    let next = tests::finish(WITHIN, waiter).await;
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_resharded_lock_keeps_its_holder_and_its_waiters() {
    let cluster = Cluster::shared();
    // Renewed every half second: slack for a loaded machine running six
    // servers and a slot migration.
    let lease = Duration::from_millis(1500);
    let client = cluster.client_with(|c| c.watchdog_timeout(lease)).await;
    let other = cluster.client().await;
    let name = "reshard:moved";
    let channel = format!("redisson_lock__channel:{{{name}}}");

    let guard = client.lock(name).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let other = other.clone();
        async move {
            other
                .lock(name)
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        }
    });
    let channel = channel.as_str();
    tests::eventually("the waiter listens", WITHIN, || async move {
        shard_numsub(cluster, channel).await == 1
    })
    .await;

    let from = cluster.master_of(name);
    let to = cluster.masters().into_iter().find(|m| *m != from).unwrap();
    cluster.move_slot_of(name, to);

    // Renewals follow MOVED to the new owner: the lock outlives its lease
    // several times over there.
    tokio::time::sleep(lease * 3).await;
    assert!(!guard.is_lost(), "renewed on the slot's new owner");
    let mut owner = cluster.raw_node(to).await;
    let count: Option<i64> = owner.hget(name, guard.holder_id()).await.unwrap();
    assert_eq!(count, Some(1));
    assert!(other.lock(name).try_acquire().await.unwrap().is_none());

    // The old owner dropped the waiter's sharded subscription; it was made
    // again on the new owner, where the unlock wakes the waiter.
    tests::eventually(
        "the waiter listens on the new owner",
        WITHIN,
        || async move { shard_numsub(cluster, channel).await == 1 },
    )
    .await;
    guard.release().await.unwrap();
    let next = tests::finish(WITHIN, waiter).await;
    next.release().await.unwrap();
}

#[tokio::test]
async fn fair_locks_on_every_shard_serve_waiters_in_order() {
    let cluster = Cluster::shared();
    let holder = cluster.client().await;
    let first = cluster.client().await;
    let second = cluster.client().await;
    let raw = cluster.raw().await;
    let shards: Vec<String> = {
        let mut seen = HashSet::new();
        spread_names(cluster, "fair", 12)
            .into_iter()
            .filter(|name| seen.insert(cluster.master_of(name)))
            .collect()
    };
    for name in shards {
        let queue = format!("redisson_lock_queue:{{{name}}}");
        let guard = holder.fair_lock(name.as_str()).acquire().await.unwrap();
        let mut waiters = Vec::new();
        for (i, waiter) in [&first, &second].into_iter().enumerate() {
            let waiter = waiter.clone();
            let lock = name.clone();
            waiters.push(tokio::spawn(async move {
                waiter
                    .fair_lock(lock)
                    .wait(Duration::from_secs(25))
                    .acquire()
                    .await
            }));
            // Queued in this order.
            tests::eventually("the waiter is queued", WITHIN, || {
                let mut raw = raw.clone();
                let queue = queue.clone();
                async move { raw.llen::<_, usize>(&queue).await.unwrap() == i + 1 }
            })
            .await;
        }
        let second_waiter = waiters.pop().unwrap();
        let first_waiter = waiters.pop().unwrap();
        // Each unlock wakes the head of the queue only, well before the
        // holder's 30 s lease would have.
        guard.release().await.unwrap();
        let next = tests::finish(WITHIN, first_waiter).await;
        assert!(
            !second_waiter.is_finished(),
            "{name}: the second waits behind the first"
        );
        next.release().await.unwrap();
        let last = tests::finish(WITHIN, second_waiter).await;
        last.release().await.unwrap();
    }
}

#[tokio::test]
async fn read_write_locks_on_every_shard_share_reads_and_exclude_writes() {
    let cluster = Cluster::shared();
    let a = cluster.client().await;
    let b = cluster.client().await;
    let writer = cluster.client().await;
    let shards: Vec<String> = {
        let mut seen = HashSet::new();
        spread_names(cluster, "rw", 12)
            .into_iter()
            .filter(|name| seen.insert(cluster.master_of(name)))
            .collect()
    };
    for name in shards {
        let read_a = a
            .read_write_lock(name.as_str())
            .read()
            .acquire()
            .await
            .unwrap();
        let read_b = b
            .read_write_lock(name.as_str())
            .read()
            .acquire()
            .await
            .unwrap();
        assert!(
            writer
                .read_write_lock(name.as_str())
                .write()
                .try_acquire()
                .await
                .unwrap()
                .is_none()
        );
        let waiting = tokio::spawn({
            let writer = writer.clone();
            let name = name.clone();
            async move {
                writer
                    .read_write_lock(name)
                    .write()
                    .wait(Duration::from_secs(25))
                    .acquire()
                    .await
            }
        });
        let channel = format!("redisson_rwlock:{{{name}}}");
        let channel = channel.as_str();
        tests::eventually("the writer listens", WITHIN, || async move {
            shard_numsub(cluster, channel).await == 1
        })
        .await;
        read_a.release().await.unwrap();
        read_b.release().await.unwrap();
        let write = tests::finish(WITHIN, waiting).await;
        assert!(
            a.read_write_lock(name.as_str())
                .read()
                .try_acquire()
                .await
                .unwrap()
                .is_none()
        );
        write.release().await.unwrap();
        let read = a
            .read_write_lock(name.as_str())
            .read()
            .try_acquire()
            .await
            .unwrap()
            .expect("free again");
        read.release().await.unwrap();
    }
}

#[tokio::test]
async fn fair_and_read_write_holds_are_renewed_per_slot() {
    let cluster = Cluster::shared();
    // Renewed every half second: slack for a loaded machine running six
    // servers (a renewal may run about a second late).
    let lease = Duration::from_millis(1500);
    let client = cluster.client_with(|c| c.watchdog_timeout(lease)).await;
    let mut guards = Vec::new();
    for name in spread_names(cluster, "renew-kinds", 30) {
        guards.push(
            client
                .fair_lock(format!("{name}:fair"))
                .acquire()
                .await
                .unwrap(),
        );
        guards.push(
            client
                .read_write_lock(format!("{name}:read"))
                .read()
                .acquire()
                .await
                .unwrap(),
        );
        guards.push(
            client
                .read_write_lock(format!("{name}:write"))
                .write()
                .acquire()
                .await
                .unwrap(),
        );
    }
    // Outlive the lease several times over: only renewals keep them.
    tokio::time::sleep(lease * 3).await;
    for guard in guards {
        assert!(!guard.is_lost(), "{} was renewed", guard.name());
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn every_kind_latches_its_acquisitions_on_a_cluster() {
    // A cluster connection resends a command whose answer it lost; each
    // acquisition leaves a latch holding its token, so that a resend answers
    // the same instead of taking the lock twice.
    let cluster = Cluster::shared();
    let client = cluster.client().await;
    let guards = vec![
        client.lock("latched:plain").acquire().await.unwrap(),
        client.fair_lock("latched:fair").acquire().await.unwrap(),
        client
            .read_write_lock("latched:read")
            .read()
            .acquire()
            .await
            .unwrap(),
        client
            .read_write_lock("latched:write")
            .write()
            .acquire()
            .await
            .unwrap(),
    ];
    for (name, guard) in [
        "latched:plain",
        "latched:fair",
        "latched:read",
        "latched:write",
    ]
    .into_iter()
    .zip(&guards)
    {
        let mut node = cluster.raw_node(cluster.master_of(name)).await;
        let latches: Vec<String> = node
            .keys(format!("redisson_lock_acquire_latch:{{{name}}}:*"))
            .await
            .unwrap();
        assert_eq!(latches.len(), 1, "{name}: one latch per acquisition");
        let token: u64 = node.get(&latches[0]).await.unwrap();
        assert_eq!(token, guard.token(), "{name}: the latch keeps the token");
    }
    for guard in guards {
        guard.release().await.unwrap();
    }
}

/// Issue 10 on a cluster: locking names of every kind on every shard, and
/// waiters timing out, leave no key without expiry and no subscription; once
/// the leases are over, only latches (short-lived answers) are left of them.
#[tokio::test]
async fn distinct_names_leave_no_keys_or_channels_behind() {
    let cluster = Cluster::shared();
    // Short leases and latches, so that they pass within the test.
    let quick = |c: lock_runtime::Config| {
        c.watchdog_timeout(Duration::from_millis(600))
            .response_timeout(Duration::from_millis(200))
    };
    let client = cluster.client_with(quick).await;
    let other = cluster.client_with(quick).await;
    let names = spread_names(cluster, "footprint", 60);
    for name in &names {
        for guard in [
            client.lock(name.as_str()).acquire().await.unwrap(),
            client
                .fair_lock(format!("{name}:fair"))
                .acquire()
                .await
                .unwrap(),
            client
                .read_write_lock(format!("{name}:rw"))
                .read()
                .acquire()
                .await
                .unwrap(),
        ] {
            guard.release().await.unwrap();
        }
    }
    // Waiters that time out, plain and fair, on names held elsewhere.
    for name in names.iter().take(6) {
        for fair in [false, true] {
            let lock = |c: &lock_runtime::LockClient| {
                if fair {
                    c.fair_lock(format!("{name}:fair"))
                } else {
                    c.lock(name.as_str())
                }
            };
            let held = lock(&other).acquire().await.unwrap();
            let waited = lock(&client)
                .wait(Duration::from_millis(100))
                .acquire()
                .await;
            assert!(
                matches!(waited, Err(LockError::Timeout { .. })),
                "{waited:?}"
            );
            held.release().await.unwrap();
        }
    }

    for port in cluster.masters() {
        let mut node = cluster.raw_node(port).await;
        let keys: Vec<String> = node.keys("*footprint*").await.unwrap();
        assert!(
            !keys.is_empty(),
            "node {port} has counters and latches for a while"
        );
        for key in &keys {
            let ttl: i64 = node.pttl(key).await.unwrap();
            assert!(ttl != -1, "{key} on node {port} has no expiry");
        }
        let latch = |key: &str| {
            key.starts_with("redisson_unlock_latch:")
                || key.starts_with("redisson_lock_acquire_latch:")
        };
        let deadline = std::time::Instant::now() + WITHIN;
        loop {
            let keys: Vec<String> = node.keys("*footprint*").await.unwrap();
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("SHARDCHANNELS")
                .arg("*footprint*")
                .query_async(&mut node)
                .await
                .unwrap();
            let per_name: Vec<&String> = keys.iter().filter(|k| !latch(k)).collect();
            if per_name.is_empty() && channels.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "node {port} keeps {per_name:?} and channels {channels:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A script the shards lost from their caches (restart, `SCRIPT FLUSH`) is
/// loaded again: acquire, release and a local handover still work on every
/// shard.
#[tokio::test]
async fn scripts_flushed_on_every_shard_are_loaded_again() {
    let cluster = Cluster::shared();
    let client = cluster.client().await;
    let names = spread_names(cluster, "flushed", 12);
    for name in &names {
        tests::take_and_release(client.lock(name.as_str())).await;
    }
    for port in cluster.masters() {
        let mut node = cluster.raw_node(port).await;
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut node)
            .await
            .unwrap();
    }
    for name in &names {
        // Acquire, then a waiter of the same client, which the release
        // hands the lock over to (the handoff script) or wakes.
        let guard = client.lock(name.as_str()).acquire().await.unwrap();
        let waiter = tokio::spawn({
            let client = client.clone();
            let name = name.clone();
            async move { client.lock(name).acquire().await }
        });
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let channel = channel.as_str();
        tests::eventually("the waiter listens", WITHIN, || async move {
            shard_numsub(cluster, channel).await == 1
        })
        .await;
        guard.release().await.unwrap();
        waiter.await.unwrap().unwrap().release().await.unwrap();
    }
}
