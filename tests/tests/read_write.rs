//! The read-write lock against a real redis-server: Redisson's layout,
//! sharing and exclusion, downgrade, no upgrade, waking every reader, expired
//! read holds, renewal of one's own holds only, and exclusion under load.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockGuard};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use tests::{Server, eventually, numsub};

const WITHIN: Duration = Duration::from_secs(20);

fn hold_key(name: &str, holder: &str, k: u32) -> String {
    format!("{{{name}}}:{holder}:rwlock_timeout:{k}")
}

async fn fields(raw: &mut MultiplexedConnection, name: &str) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = raw.hgetall(name).await.expect("HGETALL");
    all.sort();
    all
}

async fn pttl(raw: &mut MultiplexedConnection, key: &str) -> i64 {
    raw.pttl(key).await.expect("PTTL")
}

/// Waits until `key`'s lease is seen to grow (only a renewal does that): a
/// sample above the lowest one seen so far.
async fn until_renewed(raw: &MultiplexedConnection, key: &str) {
    let lowest = Arc::new(AtomicI64::new(i64::MAX));
    eventually(&format!("the lease of {key} was renewed"), WITHIN, || {
        let mut raw = raw.clone();
        let key = key.to_owned();
        let lowest = lowest.clone();
        async move {
            let now = pttl(&mut raw, &key).await;
            now > lowest.fetch_min(now, Ordering::SeqCst)
        }
    })
    .await;
}

/// Waits until `n` subscribers listen on the lock's channel.
async fn until_listening(raw: &MultiplexedConnection, name: &str, n: i64) {
    let channel = format!("redisson_rwlock:{{{name}}}");
    eventually(&format!("{n} waiters listen on {channel}"), WITHIN, || {
        let mut raw = raw.clone();
        let channel = channel.clone();
        async move { numsub(&mut raw, &channel).await == n }
    })
    .await;
}

/// A reader in a task of its own (another holder, as every acquisition
/// outside a guard's scope is): `held` answers once it holds the read lock,
/// `release` tells it to let go, `task` ends with the release's result.
struct Reader {
    release: tokio::sync::oneshot::Sender<()>,
    held: tokio::sync::oneshot::Receiver<Result<(), String>>,
    task: tokio::task::JoinHandle<Result<(), LockError>>,
}

fn reader(client: &LockClient, name: &str) -> Reader {
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (held_tx, held) = tokio::sync::oneshot::channel();
    let client = client.clone();
    let name = name.to_owned();
    let task = tokio::spawn(async move {
        let guard = client
            .read_write_lock(name)
            .read()
            .wait(WITHIN)
            .acquire()
            .await;
        let guard = match guard {
            Ok(g) => {
                let _ = held_tx.send(Ok(()));
                g
            }
            Err(e) => {
                let _ = held_tx.send(Err(e.to_string()));
                return Err(e);
            }
        };
        let _ = released.await;
        guard.release().await
    });
    Reader {
        release,
        held,
        task,
    }
}

#[tokio::test]
async fn layout_is_redissons() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    let doc = client.read_write_lock("doc");

    let read = doc.read().acquire().await.unwrap();
    let me = read.holder_id().to_owned();
    // Re-entered in the first read's scope: the same holder, a second hold.
    let read_again = read.scope(doc.read().acquire()).await.unwrap();
    assert_eq!(read_again.holder_id(), me);
    assert!(read_again.token() > read.token());
    assert_eq!(
        fields(&mut raw, "doc").await,
        vec![(me.clone(), "2".into()), ("mode".into(), "read".into())]
    );
    for (k, hold) in [(1, &read), (2, &read_again)] {
        let key = hold_key("doc", &me, k);
        let ttl = pttl(&mut raw, &key).await;
        assert!(
            ttl > 0 && ttl <= 30_000,
            "read hold {k} has its own lease: {ttl}"
        );
        let token: u64 = raw.get(&key).await.unwrap();
        assert_eq!(token, hold.token(), "read hold {k} keeps its token");
    }
    let token: u64 = raw.get("redisson_lock_token:{doc}").await.unwrap();
    assert_eq!(token, read_again.token());
    let last_token = read_again.token();
    read_again.release().await.unwrap();
    assert_eq!(pttl(&mut raw, &hold_key("doc", &me, 2)).await, -2);
    let token: u64 = raw.get(hold_key("doc", &me, 1)).await.unwrap();
    assert_eq!(token, read.token(), "the first read hold is untouched");
    read.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("doc").await.unwrap());
    assert_eq!(pttl(&mut raw, &hold_key("doc", &me, 1)).await, -2);

    let write = doc.write().acquire().await.unwrap();
    assert!(write.token() > last_token);
    let me = write.holder_id();
    assert_eq!(
        fields(&mut raw, "doc").await,
        vec![
            (format!("{me}:write"), "1".into()),
            ("mode".into(), "write".into())
        ]
    );
    let ttl = pttl(&mut raw, "doc").await;
    assert!(ttl > 0 && ttl <= 30_000, "watchdog lease: {ttl}");
    write.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("doc").await.unwrap());
    assert_eq!(client.renewed_locks(), 0);
}

#[tokio::test]
async fn readers_share() {
    let server = Server::start();
    let a = server.client().await;
    let b = server.client().await;
    let mut raw = server.raw().await;

    let mine = a
        .read_write_lock("shared")
        .read()
        .try_acquire()
        .await
        .unwrap();
    let Reader {
        release: stop_same,
        held: same_held,
        task: same,
    } = reader(&a, "shared");
    let Reader {
        release: stop_other,
        held: other_held,
        task: other,
    } = reader(&b, "shared");
    same_held.await.unwrap().unwrap();
    other_held.await.unwrap().unwrap();
    assert!(mine.is_some());
    let readers = fields(&mut raw, "shared").await.len() - 1;
    assert_eq!(readers, 3, "three readers at once");

    stop_same.send(()).unwrap();
    stop_other.send(()).unwrap();
    same.await.unwrap().unwrap();
    other.await.unwrap().unwrap();
    mine.unwrap().release().await.unwrap();
    assert!(!raw.exists::<_, bool>("shared").await.unwrap());
}

#[tokio::test]
async fn a_writer_waits_for_every_reader() {
    let server = Server::start();
    let a = server.client().await;
    let b = server.client().await;
    let w = server.client().await;
    let mut raw = server.raw().await;

    let Reader {
        release: stop_1,
        held: held_1,
        task: reader_1,
    } = reader(&a, "ledger");
    let Reader {
        release: stop_2,
        held: held_2,
        task: reader_2,
    } = reader(&b, "ledger");
    held_1.await.unwrap().unwrap();
    held_2.await.unwrap().unwrap();
    let writer = {
        let w = w.clone();
        tokio::spawn(async move {
            w.read_write_lock("ledger")
                .write()
                .wait(WITHIN)
                .acquire()
                .await
        })
    };
    until_listening(&raw, "ledger", 1).await;

    stop_1.send(()).unwrap();
    reader_1.await.unwrap().unwrap();
    // One reader left: still no writer gets in.
    assert!(
        w.read_write_lock("ledger")
            .write()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        raw.hget::<_, _, String>("ledger", "mode").await.unwrap(),
        "read"
    );

    stop_2.send(()).unwrap();
    reader_2.await.unwrap().unwrap();
    let guard = writer.await.unwrap().unwrap();
    assert_eq!(
        raw.hget::<_, _, String>("ledger", "mode").await.unwrap(),
        "write"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn readers_wait_for_a_writer() {
    let server = Server::start();
    let w = server.client().await;
    let a = server.client().await;
    let b = server.client().await;
    let raw = server.raw().await;

    let writing = w.read_write_lock("page").write().acquire().await.unwrap();
    assert!(
        a.read_write_lock("page")
            .read()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let Reader {
        release: stop_1,
        held: held_1,
        task: reader_1,
    } = reader(&a, "page");
    let Reader {
        release: stop_2,
        held: held_2,
        task: reader_2,
    } = reader(&b, "page");
    until_listening(&raw, "page", 2).await;
    // Another writer is refused as well.
    assert!(
        b.read_write_lock("page")
            .write()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );

    writing.release().await.unwrap();
    held_1.await.unwrap().unwrap();
    held_2.await.unwrap().unwrap();
    stop_1.send(()).unwrap();
    stop_2.send(()).unwrap();
    reader_1.await.unwrap().unwrap();
    reader_2.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_writer_may_read_and_downgrade() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;
    let lock = client.read_write_lock("cfg");

    let write = lock.write().acquire().await.unwrap();
    let me = write.holder_id().to_owned();
    // Outside the write guard's scope, the same task is another holder.
    assert!(lock.read().try_acquire().await.unwrap().is_none());
    // In its scope, a read is the writer's own.
    let read = write
        .scope(lock.read().try_acquire())
        .await
        .unwrap()
        .expect("the writer may read");
    assert_eq!(read.holder_id(), me);
    assert_eq!(
        fields(&mut raw, "cfg").await,
        vec![
            (me.clone(), "1".into()),
            (format!("{me}:write"), "1".into()),
            ("mode".into(), "write".into())
        ]
    );
    // Others can do neither while the write lock is held.
    assert!(
        other
            .read_write_lock("cfg")
            .read()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );

    write.release().await.unwrap();
    // Downgraded: still reading; others may read, not write.
    assert_eq!(
        fields(&mut raw, "cfg").await,
        vec![(me.clone(), "1".into()), ("mode".into(), "read".into())]
    );
    let ttl = pttl(&mut raw, "cfg").await;
    assert!(ttl > 0, "the hash now lives with the read hold: {ttl}");
    assert!(
        other
            .read_write_lock("cfg")
            .write()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let other_read = other
        .read_write_lock("cfg")
        .read()
        .try_acquire()
        .await
        .unwrap();
    assert!(other_read.is_some());
    other_read.unwrap().release().await.unwrap();

    read.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("cfg").await.unwrap());
    let after = other
        .read_write_lock("cfg")
        .write()
        .try_acquire()
        .await
        .unwrap();
    after
        .expect("free once the last read is gone")
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_reader_asking_to_write_gets_an_error_not_a_deadlock() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let lock = client.read_write_lock("up");

    let read = lock.read().acquire().await.unwrap();
    // In the read guard's scope a write is an upgrade. No wait given: would
    // wait for ever if the upgrade were waited for.
    let upgrade = tokio::time::timeout(WITHIN, read.scope(lock.write().acquire()))
        .await
        .expect("the upgrade attempt answers instead of waiting");
    match upgrade {
        Err(LockError::NotHeld { name, reason }) => {
            assert_eq!(name, "up");
            assert!(reason.contains("upgrad"), "{reason}");
        }
        other => panic!("expected NotHeld, got {other:?}"),
    }
    // Also with another reader around, and with try_acquire.
    let Reader {
        release: stop,
        held,
        task: other_reader,
    } = reader(&other, "up");
    held.await.unwrap().unwrap();
    assert!(matches!(
        read.scope(lock.write().try_acquire()).await,
        Err(LockError::NotHeld { .. })
    ));
    // Outside the read guard's scope the same task is another holder: a
    // write is busy, not an upgrade.
    assert!(lock.write().try_acquire().await.unwrap().is_none());
    stop.send(()).unwrap();
    other_reader.await.unwrap().unwrap();
    // The read hold is untouched by the refusals.
    assert!(!read.is_lost());
    read.release().await.unwrap();
    lock.write()
        .try_acquire()
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_write_release_wakes_ten_waiting_readers_at_once() {
    let server = Server::start();
    let writer = server.client().await;
    let a = server.client().await;
    let b = server.client().await;
    let mut raw = server.raw().await;

    let writing = writer
        .read_write_lock("news")
        .write()
        .acquire()
        .await
        .unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(10));
    let asked = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for i in 0..10 {
        let client = if i % 2 == 0 { a.clone() } else { b.clone() };
        let barrier = barrier.clone();
        let asked = asked.clone();
        readers.push(tokio::spawn(async move {
            asked.fetch_add(1, Ordering::SeqCst);
            let guard = client
                .read_write_lock("news")
                .read()
                .wait(WITHIN)
                .acquire()
                .await?;
            // Each holds until all ten hold: only possible if they share.
            barrier.wait().await;
            guard.release().await
        }));
    }
    // Both clients' readers are waiting (one of each listens; the rest queue
    // behind it in their client).
    eventually("all readers asked", WITHIN, || {
        let asked = asked.clone();
        async move { asked.load(Ordering::SeqCst) == 10 }
    })
    .await;
    until_listening(&raw, "news", 2).await;

    writing.release().await.unwrap();
    let all = tokio::time::timeout(WITHIN, futures_util::future::join_all(readers))
        .await
        .expect("all ten readers held the lock together");
    for reader in all {
        reader.unwrap().unwrap();
    }
    assert!(!raw.exists::<_, bool>("news").await.unwrap());
}

#[tokio::test]
async fn an_expired_read_hold_stops_counting() {
    let server = Server::start();
    let short = server.client().await;
    let long = server.client().await;
    let writer = server.client().await;
    let mut raw = server.raw().await;

    // A reader whose fixed lease runs out without release (as if it died)...
    let expiring = short
        .read_write_lock("board")
        .read()
        .lease(Duration::from_millis(500))
        .acquire()
        .await
        .unwrap();
    let short_holder = expiring.holder_id().to_owned();
    // ...and one renewed by its watchdog.
    let Reader {
        release: stop,
        held,
        task: renewed,
    } = reader(&long, "board");
    held.await.unwrap().unwrap();
    let waiting = {
        let writer = writer.clone();
        tokio::spawn(async move {
            writer
                .read_write_lock("board")
                .write()
                .wait(WITHIN)
                .acquire()
                .await
        })
    };
    let key = hold_key("board", &short_holder, 1);
    eventually("the short read hold expired", WITHIN, || {
        let mut raw = raw.clone();
        let key = key.clone();
        async move { pttl(&mut raw, &key).await == -2 }
    })
    .await;
    assert!(expiring.is_lost());

    // The renewed reader leaves: the expired hold no longer counts.
    stop.send(()).unwrap();
    renewed.await.unwrap().unwrap();
    let writing = waiting.await.unwrap().unwrap();
    assert_eq!(
        raw.hget::<_, _, String>("board", "mode").await.unwrap(),
        "write"
    );
    assert!(matches!(
        expiring.release().await,
        Err(LockError::Lost { .. })
    ));
    writing.release().await.unwrap();
}

#[tokio::test]
async fn a_writer_clears_expired_read_holds() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    // A reader that died: its field is left, its hold key is gone, and the
    // hash was kept alive by someone else's lease.
    let dead = "0d0d0d0d-dead-client:3";
    let _: () = raw
        .hset_multiple("stale", &[("mode", "read"), (dead, "1")])
        .await
        .unwrap();
    let _: () = raw.pexpire("stale", 60_000).await.unwrap();
    let writing = client
        .read_write_lock("stale")
        .write()
        .try_acquire()
        .await
        .unwrap();
    let writing = writing.expect("the dead reader's expired hold does not count");
    let me = writing.holder_id();
    assert_eq!(
        fields(&mut raw, "stale").await,
        vec![
            (format!("{me}:write"), "1".into()),
            ("mode".into(), "write".into())
        ]
    );
    assert!(
        other
            .read_write_lock("stale")
            .read()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    writing.release().await.unwrap();
}

#[tokio::test]
async fn the_hash_lives_as_long_as_its_longest_read_hold() {
    let server = Server::start();
    let a = server.client().await;
    let b = server.client().await;
    let mut raw = server.raw().await;

    let short = a
        .read_write_lock("ttl")
        .read()
        .lease(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    let long = b
        .read_write_lock("ttl")
        .read()
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let ttl = pttl(&mut raw, "ttl").await;
    assert!(ttl > 20_000, "follows the 60 s hold: {ttl}");
    long.release().await.unwrap();
    let ttl = pttl(&mut raw, "ttl").await;
    assert!(ttl > 0 && ttl <= 20_000, "follows the 20 s hold now: {ttl}");
    short.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("ttl").await.unwrap());
}

#[tokio::test]
async fn the_watchdog_renews_only_its_own_clients_holds() {
    let server = Server::start();
    let renewing = server
        .client_with(|c| c.watchdog_timeout(Duration::from_millis(1500)))
        .await;
    let fixed = server.client().await;
    let mut raw = server.raw().await;

    let kept = renewing
        .read_write_lock("shared-doc")
        .read()
        .acquire()
        .await
        .unwrap();
    let expiring = fixed
        .read_write_lock("shared-doc")
        .read()
        .lease(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let kept_key = hold_key("shared-doc", kept.holder_id(), 1);
    // Renewals happen...
    until_renewed(&raw, &kept_key).await;
    // ...but the other client's fixed lease still runs out.
    let expiring_key = hold_key("shared-doc", expiring.holder_id(), 1);
    eventually("the other client's hold expired", WITHIN, || {
        let mut raw = raw.clone();
        let expiring_key = expiring_key.clone();
        async move { pttl(&mut raw, &expiring_key).await == -2 }
    })
    .await;
    assert!(pttl(&mut raw, &kept_key).await > 0, "still renewed");
    assert!(!kept.is_lost());
    assert!(matches!(
        expiring.release().await,
        Err(LockError::Lost { .. })
    ));
    kept.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("shared-doc").await.unwrap());
}

#[tokio::test]
async fn the_watchdog_keeps_a_write_lock_and_reports_its_loss() {
    let server = Server::start();
    let client = server
        .client_with(|c| c.watchdog_timeout(Duration::from_millis(1500)))
        .await;
    let mut raw = server.raw().await;

    let guard: LockGuard = client.read_write_lock("w").write().acquire().await.unwrap();
    until_renewed(&raw, "w").await;
    assert!(!guard.is_lost());
    // Someone deletes the lock: the next renewal finds it gone.
    let _: () = raw.del("w").await.unwrap();
    tokio::time::timeout(WITHIN, guard.lost())
        .await
        .expect("loss reported");
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
}

#[tokio::test]
async fn read_modify_write_is_exclusive_and_reads_are_stable_under_load() {
    let server = Server::start();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(server.client().await);
    }
    let mut raw = server.raw().await;
    let _: () = raw.set("rw-counter", 0).await.unwrap();

    let mut tasks = Vec::new();
    for client in &clients {
        for t in 0..8 {
            let lock = client.read_write_lock("rw-counter-lock");
            let mut conn = raw.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..8 {
                    if t % 2 == 0 {
                        let guard = lock.write().acquire().await.unwrap();
                        let n: i64 = conn.get("rw-counter").await.unwrap();
                        tokio::task::yield_now().await;
                        let _: () = conn.set("rw-counter", n + 1).await.unwrap();
                        guard.release().await.unwrap();
                    } else {
                        // No writer runs while a reader holds.
                        let guard = lock.read().acquire().await.unwrap();
                        let before: i64 = conn.get("rw-counter").await.unwrap();
                        tokio::task::yield_now().await;
                        let after: i64 = conn.get("rw-counter").await.unwrap();
                        assert_eq!(before, after, "a write happened under a read lock");
                        guard.release().await.unwrap();
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let n: i64 = raw.get("rw-counter").await.unwrap();
    assert_eq!(n, 3 * 4 * 8, "no increment was lost");
    assert!(!raw.exists::<_, bool>("rw-counter-lock").await.unwrap());
}
