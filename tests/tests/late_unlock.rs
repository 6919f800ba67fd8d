//! Releases that arrive late, and a chain's holds given back in any order
//! (issue 23, defects 1 and 3).
//!
//! A release whose answer is lost is retried under one request id, and the
//! unlock latch remembers the first answer for a few response timeouts. A
//! copy of the call can still reach Redis much later (held in a partition).
//! It must not count a second time: each hold of a re-entered chain is given
//! back by its own identity, so a late copy finds its hold already gone and
//! changes nothing.

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, LockGuard};
use redis::AsyncCommands;
use tests::proxy::Proxy;
use tests::{Kind, Server, eventually};
use tokio::time::timeout;

const WITHIN: Duration = Duration::from_secs(10);

/// The unlock latches left on the server (read directly, not through the proxy).
async fn latches(raw: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    raw.keys("redisson_unlock_latch:*").await.unwrap()
}

/// The kinds of lock that count re-entries in one hash field (read holds
/// are found by their own keys).
const COUNTED: [Kind; 3] = [Kind::Reentrant, Kind::Fair, Kind::Write];

/// A holds `x` twice (re-entry). The inner release runs on the server but its
/// answer is held back in a stalled link, and so are its retries; the
/// release fails with a timeout. The link flows again only after the unlock
/// latch has expired: the retries reach Redis as new calls. They must not
/// count: the outer hold stays, and no other client gets the lock.
async fn a_late_retry_of_a_release_counts_once(kind: Kind) {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    // A short response timeout: the latch lives 3 x 200 ms + 1 s.
    let client =
        LockClient::connect(Config::new(proxy.url()).response_timeout(Duration::from_millis(200)))
            .await
            .unwrap();
    let other = server.client().await;
    let mut raw = server.raw().await;

    // Fixed leases: no watchdog traffic on the link meanwhile.
    let lease = Duration::from_secs(120);
    let outer = timeout(WITHIN, kind.builder(&client, "x").lease(lease).acquire())
        .await
        .expect("the first acquire answers")
        .expect("the lock is free");
    let inner: LockGuard = outer
        .scope(async { kind.builder(&client, "x").lease(lease).acquire().await })
        .await
        .expect("re-entered");
    let field = kind.field(outer.holder_id());
    let count: Option<i64> = raw.hget("x", &field).await.unwrap();
    assert_eq!(count, Some(2), "{kind:?}: two holds");
    assert_named_beside(&mut raw, "x", kind).await;

    // The unlock's answer (an integer 0: holds left) stalls the link: the
    // unlock ran, its answer and every retry are held back.
    proxy.stall_on(b":0\r\n");
    let released = timeout(WITHIN, inner.release())
        .await
        .expect("the release gives up within its tries");
    assert!(
        matches!(&released, Err(LockError::Redis(_))),
        "{kind:?}: the release could not learn its answer: {released:?}"
    );
    assert!(proxy.triggered(), "{kind:?}: the answer was held back");
    let count: Option<i64> = raw.hget("x", &field).await.unwrap();
    assert_eq!(count, Some(1), "{kind:?}: the first call ran");

    // Past the latch's life, the held retries arrive as new calls.
    eventually("the unlock latch expired", WITHIN, || {
        let mut raw = raw.clone();
        async move { latches(&mut raw).await.is_empty() }
    })
    .await;
    proxy.resume();
    timeout(WITHIN, proxy.flushed())
        .await
        .expect("the held requests reach the server");
    // Through the client's own connection, behind the retries it carried.
    let info = timeout(WITHIN, client.inspect("x"))
        .await
        .expect("inspect answers")
        .expect("inspect works")
        .expect("still held");
    assert_eq!(
        info.holders.iter().map(|h| h.count).collect::<Vec<_>>(),
        [1],
        "{kind:?}: the outer hold is still there, counted once: {info:?}"
    );
    assert!(!outer.is_lost(), "{kind:?}");
    let taken = timeout(WITHIN, kind.builder(&other, "x").try_acquire())
        .await
        .expect("the other client answers")
        .expect("no error");
    assert!(taken.is_none(), "{kind:?}: two holders");
    timeout(WITHIN, outer.release())
        .await
        .expect("the outer release answers")
        .expect("the outer hold was never lost");
    let exists: bool = raw.exists("x").await.unwrap();
    assert!(!exists, "{kind:?}: freed by the outer release");
    let left: Vec<String> = raw.keys("redisson_lock_holds:*").await.unwrap();
    assert!(left.is_empty(), "{kind:?}: no record left: {left:?}");
}

/// While a holder has re-entered, the lock's hash is Redisson's layout and
/// nothing more (another program reading it sees the counts), and the holds
/// are named beside it, in a record that lives at least as long as the lock.
async fn assert_named_beside(raw: &mut redis::aio::MultiplexedConnection, name: &str, kind: Kind) {
    let fields: Vec<(String, String)> = raw.hgetall(name).await.unwrap();
    assert!(
        fields
            .iter()
            .all(|(field, value)| field == "mode" || value.parse::<u64>().is_ok()),
        "{kind:?}: only Redisson's fields: {fields:?}"
    );
    let record = format!("redisson_lock_holds:{{{name}}}");
    // The record first: read second, the lock's lease can only be shorter.
    let record_ttl: i64 = raw.pttl(&record).await.unwrap();
    let lock_ttl: i64 = raw.pttl(name).await.unwrap();
    assert!(
        record_ttl >= lock_ttl && lock_ttl > 0,
        "{kind:?}: the record outlives the lock: {record_ttl} vs {lock_ttl}"
    );
}

/// A watchdog renews the lock past its first lease: the record of the
/// re-entered holds follows it, so the re-entry is still named (and its
/// release counts) after the record's first lease ran out.
#[tokio::test]
async fn the_record_of_reentered_holds_lives_as_long_as_the_lock() {
    let server = Server::start();
    let client = server
        .client_with(|c| c.watchdog_timeout(Duration::from_secs(1)))
        .await;
    let mut raw = server.raw().await;
    for kind in COUNTED {
        let name = format!("{kind:?}");
        let outer = kind.builder(&client, &name).acquire().await.unwrap();
        let inner = outer
            .scope(async { kind.builder(&client, &name).acquire().await })
            .await
            .unwrap();
        // Several renewals (every third of a second) past the first lease.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!outer.is_lost() && !inner.is_lost(), "{kind:?}: renewed");
        assert_named_beside(&mut raw, &name, kind).await;
        // Operations see the lock, not its record.
        let listed: Vec<String> = client
            .locks("*")
            .await
            .unwrap()
            .into_iter()
            .map(|info| info.name)
            .collect();
        assert_eq!(listed, std::slice::from_ref(&name), "{kind:?}");
        inner
            .release()
            .await
            .expect("the inner hold is still named");
        let count: Option<i64> = raw
            .hget(&name, kind.field(outer.holder_id()))
            .await
            .unwrap();
        assert_eq!(count, Some(1), "{kind:?}");
        let record: bool = raw
            .exists(format!("redisson_lock_holds:{{{name}}}"))
            .await
            .unwrap();
        assert!(!record, "{kind:?}: only the first hold is left: no record");
        outer.release().await.unwrap();
        let exists: bool = raw.exists(&name).await.unwrap();
        assert!(!exists, "{kind:?}");
    }
}

#[tokio::test]
async fn a_late_retry_of_a_reentrant_release_counts_once() {
    a_late_retry_of_a_release_counts_once(Kind::Reentrant).await;
}

#[tokio::test]
async fn a_late_retry_of_a_fair_release_counts_once() {
    a_late_retry_of_a_release_counts_once(Kind::Fair).await;
}

#[tokio::test]
async fn a_late_retry_of_a_write_release_counts_once() {
    a_late_retry_of_a_release_counts_once(Kind::Write).await;
}

/// `hold_at_least` belongs to the chain, not to the guard that asked for it:
/// the outer guard (with the minimum) is released first, while its re-entry
/// still holds, and the re-entry's release, the chain's last, keeps the lock
/// taken for the minimum all the same. Both orders, both kinds.
#[tokio::test]
async fn hold_at_least_holds_whatever_order_a_chains_holds_go_back_in() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;
    let minimum = Duration::from_secs(30);
    let kinds = [Kind::Reentrant, Kind::Fair, Kind::Reentrant, Kind::Fair];
    for (i, kind) in kinds.into_iter().enumerate() {
        let name = format!("job{i}");
        let outer = kind
            .builder(&client, &name)
            .hold_at_least(minimum)
            .acquire()
            .await
            .unwrap();
        let inner = outer
            .scope(async { kind.builder(&client, &name).acquire().await })
            .await
            .unwrap();
        if i < 2 {
            // The outer first (count 2 -> 1), then the re-entry, dropped.
            outer.release().await.unwrap();
            drop(inner);
        } else {
            inner.release().await.unwrap();
            outer.release().await.unwrap();
        }
        // The dropped guard's release runs in the background: wait until the
        // hash holds nothing but the holder's count at 0 (released, kept
        // taken), or the lock is gone.
        eventually("every hold was given back", WITHIN, || {
            let mut raw = raw.clone();
            let name = name.clone();
            async move {
                let fields: Vec<(String, String)> = raw.hgetall(&name).await.unwrap();
                fields.iter().all(|(_, count)| count == "0")
            }
        })
        .await;
        let ttl: i64 = raw.pttl(&name).await.unwrap();
        assert!(
            ttl > 20_000,
            "{name} ({kind:?}): kept taken for the minimum, pttl {ttl}"
        );
        let taken = kind.builder(&other, &name).try_acquire().await.unwrap();
        assert!(
            taken.is_none(),
            "{name} ({kind:?}): taken before the minimum"
        );
    }
}

/// A re-entry promised a longer lease than the lock had left lengthens the
/// lock, and its record with it (found in review: the record took the
/// lock's old lease, expired first, and the re-entry's release then changed
/// nothing, leaving the lock taken with no guard). For the read-write lock,
/// a read hold the writer takes lengthens the lock too.
#[tokio::test]
async fn a_longer_reentry_lengthens_the_record_with_the_lock() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    let (short, long) = (Duration::from_millis(1500), Duration::from_secs(20));
    for kind in COUNTED {
        let name = format!("long-{kind:?}");
        let outer = kind
            .builder(&client, &name)
            .lease(short)
            .acquire()
            .await
            .unwrap();
        let inner = outer
            .scope(async { kind.builder(&client, &name).lease(long).acquire().await })
            .await
            .unwrap();
        assert_named_beside(&mut raw, &name, kind).await;
        // Past the outer lease: the lock lives on by the inner one.
        tokio::time::sleep(short + Duration::from_millis(300)).await;
        assert_named_beside(&mut raw, &name, kind).await;
        inner.release().await.expect("the re-entry is still named");
        assert!(matches!(outer.release().await, Err(LockError::Lost { .. })));
        let exists: bool = raw.exists(&name).await.unwrap();
        assert!(!exists, "{kind:?}: the chain's last release freed the lock");
    }

    // The writer re-enters, then reads with a longer lease.
    let rw = client.read_write_lock("long-rw");
    let outer = rw.write().lease(short).acquire().await.unwrap();
    let (inner, read) = outer
        .scope(async {
            let inner = rw.write().lease(short).acquire().await?;
            let read = rw.read().lease(long).acquire().await?;
            Ok::<_, LockError>((inner, read))
        })
        .await
        .unwrap();
    tokio::time::sleep(short + Duration::from_millis(300)).await;
    assert_named_beside(&mut raw, "long-rw", Kind::Write).await;
    assert!(matches!(inner.release().await, Err(LockError::Lost { .. })));
    assert!(matches!(outer.release().await, Err(LockError::Lost { .. })));
    let writer: Option<i64> = raw
        .hget("long-rw", format!("{}:write", read.holder_id()))
        .await
        .unwrap();
    assert_eq!(
        writer, None,
        "both write holds given back, the read hold left"
    );
    read.release().await.unwrap();
    let exists: bool = raw.exists("long-rw").await.unwrap();
    assert!(!exists);
}

/// A record of another type is refused before the first write (found in
/// review): the re-entry fails naming it, and the outer hold is as it was.
#[tokio::test]
async fn a_record_of_another_type_is_refused_before_any_write() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    for kind in COUNTED {
        let name = format!("wt-{kind:?}");
        let record = format!("redisson_lock_holds:{{{name}}}");
        let _: () = raw.rpush(&record, "x").await.unwrap();
        let outer = kind.builder(&client, &name).acquire().await.unwrap();
        let inner = outer
            .scope(async { kind.builder(&client, &name).acquire().await })
            .await;
        assert!(
            matches!(&inner, Err(LockError::Redis(e)) if e.to_string().contains(&record)),
            "{kind:?}: an error naming the record: {inner:?}"
        );
        let count: Option<i64> = raw
            .hget(&name, kind.field(outer.holder_id()))
            .await
            .unwrap();
        assert_eq!(count, Some(1), "{kind:?}: nothing written");
        // Releases refuse it too (they cannot tell which holds are live),
        // writing nothing: the lease ends the hold unless it is fixed.
        let released = outer.release().await;
        assert!(
            matches!(&released, Err(LockError::Redis(e)) if e.to_string().contains(&record)),
            "{kind:?}: {released:?}"
        );
        let list: Vec<String> = raw.lrange(&record, 0, -1).await.unwrap();
        assert_eq!(list, ["x"], "{kind:?}: left as it was");
    }
}
