//! Operations against a real redis-server: `inspect` of every kind (ours and
//! a Redisson holder's layout written by hand), `force_unlock` waking
//! waiters at once and the old guard learning its loss, and a guard's
//! `remaining` / `extend`.

use std::time::Duration;

use lock_runtime::{LockError, LockKind, RwMode};
use redis::AsyncCommands;
use tests::{Server, eventually, keys_and_ttls};

const WITHIN: Duration = Duration::from_secs(20);

/// A client whose holds have 120 s watchdog leases: a waiter that is not
/// woken sleeps out the holder's lease (80 s or more), far past [`WITHIN`].
async fn long_leases(server: &Server) -> lock_runtime::LockClient {
    server
        .client_with(|c| c.watchdog_timeout(Duration::from_secs(120)))
        .await
}

/// Every key the server has.
async fn key_names(server: &Server) -> Vec<String> {
    let mut raw = server.raw().await;
    keys_and_ttls(&mut raw)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

/// A waiting task's outcome, once woken (bounded by [`WITHIN`], well below
/// the lease it would otherwise sleep out).
async fn woken<T>(task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(WITHIN, task)
        .await
        .expect("the waiter was woken")
        .unwrap()
}

#[tokio::test]
async fn inspect_shows_a_reentrant_lock_its_holder_count_guards_and_lease() {
    let server = Server::start();
    let client = server.client().await;
    assert_eq!(client.inspect("stock:1").await.unwrap(), None);

    let outer = client.lock("stock:1").acquire().await.unwrap();
    let info = client.inspect("stock:1").await.unwrap().expect("held");
    assert_eq!(info.name, "stock:1");
    assert_eq!(info.kind, LockKind::Reentrant);
    assert_eq!(info.mode, None);
    assert!(info.queue.is_empty());
    let ttl = info.ttl.expect("a watchdog lease expires");
    assert!(
        ttl > Duration::ZERO && ttl <= Duration::from_secs(30),
        "{ttl:?}"
    );
    let [holder] = &info.holders[..] else {
        panic!("one holder: {info:?}")
    };
    assert_eq!(holder.id, outer.holder_id());
    assert_eq!(holder.client_id(), client.id());
    assert_eq!(holder.count, 1);
    assert!(!holder.write);
    let tokens: Vec<u64> = holder.guards.iter().map(|g| g.token).collect();
    assert_eq!(tokens, [outer.token()]);
    assert_eq!(holder.guards[0].lease, None, "a watchdog lease");

    // A re-entry: count 2, two guards listed; after its release, one again.
    outer
        .scope(async {
            let inner = client
                .lock("stock:1")
                .lease(Duration::from_secs(60))
                .acquire()
                .await
                .unwrap();
            let info = client.inspect("stock:1").await.unwrap().unwrap();
            assert_eq!(info.holders.len(), 1);
            assert_eq!(info.holders[0].count, 2);
            let guards = &info.holders[0].guards;
            assert_eq!(guards.len(), 2, "{guards:?}");
            assert_eq!(guards[1].token, inner.token());
            assert_eq!(guards[1].lease, Some(Duration::from_secs(60)));
            inner.release().await.unwrap();
        })
        .await;
    let info = client.inspect("stock:1").await.unwrap().unwrap();
    assert_eq!(info.holders[0].count, 1);
    assert_eq!(info.holders[0].guards.len(), 1);

    // Another client sees the holder, but not its guards.
    let other = server.client().await;
    let seen = other.inspect("stock:1").await.unwrap().unwrap();
    assert_eq!(seen.holders[0].id, outer.holder_id());
    assert!(seen.holders[0].guards.is_empty());

    outer.release().await.unwrap();
    assert_eq!(client.inspect("stock:1").await.unwrap(), None);
}

#[tokio::test]
async fn inspect_shows_a_fair_lock_and_its_queue_in_order() {
    let server = Server::start();
    let client = server.client().await;
    let holder = client.fair_lock("report").acquire().await.unwrap();
    // Two waiters of two other clients, queued one after the other.
    let mut waiters = Vec::new();
    let mut ids: Vec<String> = Vec::new();
    for n in 1..=2 {
        let waiter_client = server.client().await;
        let task = tokio::spawn(async move {
            let guard = waiter_client.fair_lock("report").acquire().await?;
            guard.release().await
        });
        waiters.push(task);
        eventually("the waiter is queued", WITHIN, || async {
            let info = client.inspect("report").await.unwrap().unwrap();
            info.queue.len() == n
        })
        .await;
        let info = client.inspect("report").await.unwrap().unwrap();
        ids.push(info.queue[n - 1].clone());
    }
    let info = client.inspect("report").await.unwrap().unwrap();
    assert_eq!(info.kind, LockKind::Fair);
    assert_eq!(info.queue, ids);
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].id, holder.holder_id());
    assert_ne!(ids[0], ids[1]);

    holder.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn inspect_shows_a_read_write_lock_mode_and_sides() {
    let server = Server::start();
    let client = server.client().await;
    let rw = client.read_write_lock("doc");
    let r1 = rw.read().acquire().await.unwrap();
    let r2 = rw.read().acquire().await.unwrap();
    let info = client.inspect("doc").await.unwrap().unwrap();
    assert_eq!(info.kind, LockKind::ReadWrite);
    assert_eq!(info.mode, Some(RwMode::Read));
    let mut ids: Vec<&str> = info.holders.iter().map(|h| h.id.as_str()).collect();
    ids.sort();
    let mut expected = vec![r1.holder_id(), r2.holder_id()];
    expected.sort();
    assert_eq!(ids, expected);
    assert!(info.holders.iter().all(|h| !h.write && h.count == 1));
    r1.release().await.unwrap();
    r2.release().await.unwrap();

    let writer = rw.write().acquire().await.unwrap();
    let info = client.inspect("doc").await.unwrap().unwrap();
    assert_eq!(info.mode, Some(RwMode::Write));
    let [holder] = &info.holders[..] else {
        panic!("one writer: {info:?}")
    };
    assert_eq!(holder.id, writer.holder_id());
    assert!(holder.write);
    assert_eq!(holder.guards.len(), 1);
    writer.release().await.unwrap();
}

#[tokio::test]
async fn inspect_reads_a_redisson_holder_and_refuses_a_key_that_is_not_a_lock() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    // What a Java service's RLock writes: thread 57 holds it twice.
    let java = "6f1c5a2e-8d1b-4c53-9a3e-7b2d2c1e0f44";
    let _: () = raw
        .hset("inventory", format!("{java}:57"), 2)
        .await
        .unwrap();
    let _: () = raw.pexpire("inventory", 30_000).await.unwrap();
    let info = client.inspect("inventory").await.unwrap().unwrap();
    assert_eq!(info.kind, LockKind::Reentrant);
    let [holder] = &info.holders[..] else {
        panic!("{info:?}")
    };
    assert_eq!(holder.id, format!("{java}:57"));
    assert_eq!(holder.client_id(), java);
    assert_eq!(holder.count, 2);
    assert!(holder.guards.is_empty());

    // A Redisson read-write lock held for writing, without expiry.
    let _: () = redis::cmd("HSET")
        .arg("ledger")
        .arg("mode")
        .arg("write")
        .arg(format!("{java}:9:write"))
        .arg(1)
        .query_async(&mut raw)
        .await
        .unwrap();
    let info = client.inspect("ledger").await.unwrap().unwrap();
    assert_eq!(info.kind, LockKind::ReadWrite);
    assert_eq!(info.mode, Some(RwMode::Write));
    assert_eq!(info.ttl, None);
    assert_eq!(info.holders[0].id, format!("{java}:9"));
    assert!(info.holders[0].write);

    let _: () = raw.set("plain", "x").await.unwrap();
    assert!(matches!(
        client.inspect("plain").await,
        Err(LockError::WrongType { name }) if name == "plain"
    ));
    assert!(matches!(
        client.force_unlock("plain").await,
        Err(LockError::WrongType { .. })
    ));
    let value: String = raw.get("plain").await.unwrap();
    assert_eq!(value, "x", "a key that is not a lock is left alone");
    assert!(matches!(
        client.inspect("").await,
        Err(LockError::BadName { .. })
    ));
}

#[tokio::test]
async fn force_unlock_wakes_a_waiter_at_once_and_the_old_guard_learns_its_loss() {
    let server = Server::start();
    let holder_client = long_leases(&server).await;
    let old = holder_client.lock("job").acquire().await.unwrap();
    let waiter_client = server.client().await;
    let waiter = tokio::spawn(async move {
        let guard = waiter_client.lock("job").acquire().await?;
        let token = guard.token();
        guard.release().await?;
        Ok::<_, LockError>(token)
    });
    let mut raw = server.raw().await;
    tests::eventually("the waiter listens", WITHIN, || {
        let mut raw = raw.clone();
        async move { tests::numsub(&mut raw, "redisson_lock__channel:{job}").await == 1 }
    })
    .await;

    let operator = server.client().await;
    assert!(operator.force_unlock("job").await.unwrap());
    let token = woken(waiter).await.expect("woken and acquired");
    assert!(token > old.token(), "tokens keep rising");
    // The old guard's release reports the loss.
    assert!(matches!(old.release().await, Err(LockError::Lost { .. })));
    assert!(!operator.force_unlock("job").await.unwrap(), "nothing left");
    let exists: bool = raw.exists("job").await.unwrap();
    assert!(!exists);

    // A guard whose watchdog renews often learns the loss at its next
    // renewal, before any release.
    let quick = server
        .client_with(|c| c.watchdog_timeout(Duration::from_millis(600)))
        .await;
    let held = quick.lock("job2").acquire().await.unwrap();
    assert!(operator.force_unlock("job2").await.unwrap());
    tokio::time::timeout(WITHIN, held.lost())
        .await
        .expect("lost");
    assert!(held.is_lost());
    assert!(matches!(held.release().await, Err(LockError::Lost { .. })));
}

#[tokio::test]
async fn force_unlock_clears_a_fair_queue_and_wakes_every_waiter() {
    let server = Server::start();
    let client = long_leases(&server).await;
    let stuck = client.fair_lock("q").acquire().await.unwrap();
    let mut waiters = Vec::new();
    for n in 1..=3 {
        let other = server.client().await;
        waiters.push(tokio::spawn(async move {
            let guard = other.fair_lock("q").acquire().await?;
            guard.release().await
        }));
        eventually("queued", WITHIN, || async {
            client.inspect("q").await.unwrap().unwrap().queue.len() == n
        })
        .await;
    }
    assert!(client.force_unlock("q").await.unwrap());
    for waiter in waiters {
        woken(waiter).await.expect("every waiter got its turn");
    }
    let keys = key_names(&server).await;
    assert!(
        !keys
            .iter()
            .any(|k| k == "q" || k.starts_with("redisson_lock_queue")),
        "{keys:?}"
    );
    assert!(matches!(stuck.release().await, Err(LockError::Lost { .. })));
}

#[tokio::test]
async fn force_unlock_frees_a_read_write_lock_and_its_read_holds() {
    let server = Server::start();
    let client = long_leases(&server).await;
    let rw = client.read_write_lock("doc");
    let r1 = rw.read().acquire().await.unwrap();
    let r2 = rw.read().acquire().await.unwrap();
    let writer_client = server.client().await;
    let writer = tokio::spawn(async move {
        let guard = writer_client
            .read_write_lock("doc")
            .write()
            .acquire()
            .await?;
        guard.release().await
    });
    let raw = server.raw().await;
    tests::eventually("the writer listens", WITHIN, || {
        let mut raw = raw.clone();
        async move { tests::numsub(&mut raw, "redisson_rwlock:{doc}").await >= 1 }
    })
    .await;
    assert!(client.force_unlock("doc").await.unwrap());
    woken(writer).await.expect("the writer was woken");
    let keys = key_names(&server).await;
    assert!(
        !keys
            .iter()
            .any(|k| k.contains("rwlock_timeout") || k == "doc"),
        "{keys:?}"
    );
    assert!(matches!(r1.release().await, Err(LockError::Lost { .. })));
    assert!(matches!(r2.release().await, Err(LockError::Lost { .. })));
}

#[tokio::test]
async fn a_fixed_lease_can_be_extended_and_remaining_follows_it() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    let mut guard = client
        .lock("batch")
        .lease(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let left = guard.remaining();
    assert!(
        left > Duration::ZERO && left <= Duration::from_secs(2),
        "{left:?}"
    );

    guard.extend(Duration::from_secs(60)).await.unwrap();
    assert!(guard.remaining() > Duration::from_secs(2));
    let pttl: i64 = raw.pttl("batch").await.unwrap();
    assert!(pttl > 2_000, "the server's lease grew: {pttl}");
    // A shorter extension keeps the longer lease.
    guard.extend(Duration::from_secs(1)).await.unwrap();
    let pttl: i64 = raw.pttl("batch").await.unwrap();
    assert!(pttl > 2_000, "never shortened: {pttl}");
    assert!(guard.remaining() > Duration::from_secs(2));

    assert!(matches!(
        guard.extend(Duration::ZERO).await,
        Err(LockError::Config(_))
    ));
    // Once the lock is gone, extend reports the loss and revives nothing.
    assert!(client.force_unlock("batch").await.unwrap());
    assert!(matches!(
        guard.extend(Duration::from_secs(60)).await,
        Err(LockError::Lost { .. })
    ));
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(guard.is_lost());
    let exists: bool = raw.exists("batch").await.unwrap();
    assert!(!exists);
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));

    // A watchdog lease is the watchdog's to renew.
    let mut renewed = client.lock("batch").acquire().await.unwrap();
    let left = renewed.remaining();
    assert!(left > Duration::ZERO && left <= Duration::from_secs(30));
    assert!(matches!(
        renewed.extend(Duration::from_secs(60)).await,
        Err(LockError::Config(msg)) if msg.contains("watchdog")
    ));
    renewed.release().await.unwrap();
}
