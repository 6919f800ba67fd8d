//! The hold model through the builder API: re-entry follows the call chain
//! (a guard's `scope`), not the tokio task; one hold, one owner, one lease;
//! a guard knows its loss by its own clock; an acquire whose answer is
//! unknown leaves no hold behind; bad input is a typed error.
//!
//! Each test names what the old per-task model (holder = tokio task, or the
//! thread under `block_on`) did wrong there. The cases that do not depend
//! on the store run on every engine in `tests/engines/` (joined
//! acquisitions in `reentry_follows_the_scope_not_the_task`, a reader and
//! a writer joined in one task).

use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{
    Config, Inventory, LockClient, LockError, RedisSegmentStore, ReplicaSync, SegmentKey,
    SegmentStore,
};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use tests::proxy::Proxy;
use tests::{Server, eventually, finish, numsub};
use tokio::time::timeout;

/// Generous bound on one wait for an event: it asserts no speed.
const WITHIN: Duration = Duration::from_secs(10);

/// Generous bound on whole scenarios: a deadlock fails the test instead of
/// hanging it.
const NO_DEADLOCK: Duration = Duration::from_secs(60);

async fn pttl(raw: &mut MultiplexedConnection, key: &str) -> i64 {
    raw.pttl(key).await.expect("PTTL")
}

async fn keys(raw: &mut MultiplexedConnection, pattern: &str) -> Vec<String> {
    let mut keys: Vec<String> = raw.keys(pattern).await.expect("KEYS");
    keys.sort();
    keys
}

/// Old model: re-entry was decided by the task, so there was no way to say
/// which hold an acquisition re-enters, and the holder id came from the
/// client (`LockClient::holder_id`), not the guard. Here the inner
/// acquisition re-enters through the scope (one attempt suffices), while a
/// task that was already waiting keeps waiting until both holds are gone.
#[tokio::test]
async fn an_acquisition_awaited_in_a_guards_scope_reenters_its_hold() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;

    let outer = client.lock("b").acquire().await.unwrap();
    let sibling = tokio::spawn({
        let client = client.clone();
        async move {
            let guard = client.lock("b").wait(NO_DEADLOCK).acquire().await?;
            let holder = guard.holder_id().to_owned();
            guard.release().await?;
            Ok::<_, LockError>(holder)
        }
    });
    let waiting = raw.clone();
    eventually("the sibling task waits for the lock", WITHIN, || {
        let mut raw = waiting.clone();
        async move { numsub(&mut raw, "redisson_lock__channel:{b}").await >= 1 }
    })
    .await;

    outer
        .scope(async {
            let inner = client
                .lock("b")
                .wait(Duration::ZERO)
                .acquire()
                .await
                .expect("an acquisition in the guard's scope re-enters at once");
            assert_eq!(inner.holder_id(), outer.holder_id());
            assert!(inner.token() > outer.token(), "re-entry takes a new token");
            let count: i64 = raw.hget("b", outer.holder_id()).await.unwrap();
            assert_eq!(count, 2, "one holder, held twice");
            inner.release().await.expect("inner release");
        })
        .await;
    let fields: Vec<(String, i64)> = raw.hgetall("b").await.unwrap();
    assert_eq!(fields, vec![(outer.holder_id().to_owned(), 1)]);
    assert!(
        !sibling.is_finished(),
        "the sibling got in beside the outer hold"
    );

    let outer_holder = outer.holder_id().to_owned();
    outer.release().await.unwrap();
    let sibling_holder = finish(WITHIN, sibling).await;
    assert_ne!(
        sibling_holder, outer_holder,
        "the sibling is another holder"
    );
}

/// Old model: the re-entry set the key's expiry to its own 300 ms lease, so
/// after the inner release the outer hold had about 300 ms left instead of
/// the watchdog's 2 s, and another client got in before the next renewal.
#[tokio::test]
async fn a_nested_short_lease_never_shortens_the_outer_hold() {
    let server = Server::start();
    let client = server
        .client_with(|c| c.watchdog_timeout(Duration::from_secs(2)))
        .await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    let outer = client.lock("c").acquire().await.unwrap();
    outer
        .scope(async {
            let inner = client
                .lock("c")
                .lease(Duration::from_millis(300))
                .acquire()
                .await
                .unwrap();
            let left = pttl(&mut raw, "c").await;
            assert!(left > 1000, "the re-entry cut the lease to {left} ms");
            inner.release().await.unwrap();
        })
        .await;

    let intruder = other
        .lock("c")
        .wait(Duration::from_millis(1500))
        .acquire()
        .await;
    assert!(
        matches!(intruder, Err(LockError::Timeout { .. })),
        "another client got in while the outer hold lasted: {intruder:?}"
    );
    assert!(!outer.is_lost());
    outer.release().await.expect("the outer hold lasted");
}

/// Old model: the nested watchdog hold set the key's expiry to the 1 s
/// watchdog lease (and its renewals kept it there), so once it was released
/// the outer 5 s lease had at most 1 s left.
#[tokio::test]
async fn a_nested_watchdog_hold_never_shortens_an_outer_fixed_lease() {
    let server = Server::start();
    let client = server
        .client_with(|c| c.watchdog_timeout(Duration::from_secs(1)))
        .await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    let outer = client
        .lock("d")
        .lease(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    outer
        .scope(async {
            let inner = client.lock("d").acquire().await.unwrap();
            let left = pttl(&mut raw, "d").await;
            assert!(left > 1000, "the re-entry cut the lease to {left} ms");
            // Spans several renewals of the inner hold (every 333 ms).
            let intruder = other.lock("d").wait(Duration::from_secs(1)).acquire().await;
            assert!(
                matches!(intruder, Err(LockError::Timeout { .. })),
                "another client got in beside two holds: {intruder:?}"
            );
            inner.release().await.unwrap();
        })
        .await;

    let intruder = other.lock("d").wait(Duration::from_secs(2)).acquire().await;
    assert!(
        matches!(intruder, Err(LockError::Timeout { .. })),
        "another client got in while the outer 5 s lease lasted: {intruder:?}"
    );
    assert!(!outer.is_lost());
    outer.release().await.expect("the outer lease lasted");
}

/// Old model: releasing a read hold deleted the holder's newest timeout key
/// (`:2`, the 60 s hold's) and left the 1 s one, so the hash expired with
/// the short lease and a writer got in while the 60 s read hold was live.
#[tokio::test]
async fn releasing_a_read_hold_leaves_the_other_read_holds_lease() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;
    let rw = client.read_write_lock("e");

    let r1 = rw
        .read()
        // Long enough to be live at its release on a loaded machine, short
        // enough for the writer below to outwait it.
        .lease(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();
    let holder = r1.holder_id().to_owned();
    let r2 = r1
        .scope(rw.read().lease(Duration::from_secs(60)).acquire())
        .await
        .unwrap();
    assert_eq!(r2.holder_id(), holder, "the scope re-enters the read hold");
    let count: i64 = raw.hget("e", &holder).await.unwrap();
    assert_eq!(count, 2);

    r1.release().await.expect("the first read hold was live");
    let left = keys(&mut raw, &format!("{{e}}:{holder}:rwlock_timeout:*")).await;
    assert_eq!(
        left.len(),
        1,
        "one read hold left, one timeout key: {left:?}"
    );
    let ttl = pttl(&mut raw, &left[0]).await;
    assert!(
        ttl > 5_000,
        "the key left is the 60 s hold's ({ttl} ms left)"
    );

    let writer = other
        .read_write_lock("e")
        .write()
        // Past the first hold's lease: the old model let it in by then.
        .wait(Duration::from_millis(2500))
        .acquire()
        .await;
    assert!(
        matches!(writer, Err(LockError::Timeout { .. })),
        "a writer got in beside a live read hold: {writer:?}"
    );
    assert!(!r2.is_lost());
    r2.release().await.expect("the second read hold was live");
    let writer = other
        .read_write_lock("e")
        .write()
        .wait(WITHIN)
        .acquire()
        .await
        .expect("the writer gets in once every read hold is gone");
    writer.release().await.unwrap();
}

/// Old model: the task that held the lapsed lease re-entered as the same
/// holder, and a stale guard's release ran the unlock with the task's holder
/// id, which could free a newer hold of that task.
#[tokio::test]
async fn a_guard_whose_lease_lapsed_neither_reenters_nor_releases_another_hold() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    let stale = client
        .lock("f")
        .lease(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    timeout(WITHIN, stale.lost())
        .await
        .expect("a fixed lease is reported lost once it lapses");
    let gone = raw.clone();
    eventually("the lapsed lease's key expired", WITHIN, || {
        let mut raw = gone.clone();
        async move { !raw.exists::<_, bool>("f").await.unwrap() }
    })
    .await;
    let newer = other.lock("f").wait(WITHIN).acquire().await.unwrap();

    let again = timeout(WITHIN, stale.scope(client.lock("f").acquire()))
        .await
        .expect("an acquisition in a lost hold's scope fails at once");
    assert!(
        matches!(&again, Err(LockError::Lost { name }) if name == "f"),
        "{again:?}"
    );
    assert!(matches!(stale.release().await, Err(LockError::Lost { .. })));

    let fields: Vec<(String, i64)> = raw.hgetall("f").await.unwrap();
    assert_eq!(
        fields,
        vec![(newer.holder_id().to_owned(), 1)],
        "the newer hold is untouched and no hold was added"
    );
    newer.release().await.expect("the newer hold was untouched");
}

/// Old model: the guard learned of the loss only when the renewal call timed
/// out (the 5 s response timeout), long after the lease lapsed in Redis and
/// another client got the lock.
#[tokio::test]
async fn a_stalled_link_is_reported_lost_before_another_client_gets_the_lock() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let a = LockClient::connect(Config::new(proxy.url()).watchdog_timeout(Duration::from_secs(2)))
        .await
        .unwrap();
    let b = server.client().await;
    let mut raw = server.raw().await;

    let a_guard = Arc::new(a.lock("g").acquire().await.unwrap());
    proxy.stall();
    let b_task = tokio::spawn({
        let a_guard = a_guard.clone();
        async move {
            let guard = b.lock("g").wait(Duration::from_secs(10)).acquire().await?;
            // Read right when the acquire returns.
            let a_knew = a_guard.is_lost();
            Ok::<_, LockError>((guard, a_knew))
        }
    });
    timeout(WITHIN, a_guard.lost())
        .await
        .expect("the stalled holder's guard reports its lease lost");
    let (b_guard, a_knew) = finish(Duration::from_secs(20), b_task).await;
    assert!(
        a_knew,
        "another client got the lock before the stalled guard knew it was lost"
    );

    proxy.resume();
    let a_guard = Arc::try_unwrap(a_guard).expect("the only guard handle left");
    let released = timeout(WITHIN, a_guard.release())
        .await
        .expect("the release finished");
    assert!(
        matches!(released, Err(LockError::Lost { .. })),
        "{released:?}"
    );
    let fields: Vec<(String, i64)> = raw.hgetall("g").await.unwrap();
    assert_eq!(fields, vec![(b_guard.holder_id().to_owned(), 1)]);
    b_guard
        .release()
        .await
        .expect("the new holder was untouched");
}

/// Old model: the acquire script wrote the hash, then failed on `INCR` of the
/// corrupt counter; Lua does not roll back, so a hold nobody owned stayed.
#[tokio::test]
async fn a_corrupt_token_counter_fails_the_acquire_without_writing_a_hold() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    let _: () = raw.set("redisson_lock_token:{c}", "abc").await.unwrap();

    let taken = timeout(WITHIN, client.lock("c").acquire())
        .await
        .expect("the acquire failed at once");
    assert!(matches!(taken, Err(LockError::Redis(_))), "{taken:?}");
    assert!(
        !raw.exists::<_, bool>("c").await.unwrap(),
        "no hold written"
    );
    assert_eq!(
        keys(&mut raw, "*").await,
        vec!["redisson_lock_token:{c}".to_owned()],
        "nothing but the corrupt counter"
    );
}

/// A reentrant acquisition answers its common cases before its full script
/// (`reentrant_fast.lua`): a counter with a lease or more to live goes
/// straight to its `INCR`. A counter that gives no usable token there is
/// refused as the full script refuses it, and left as it was, its expiry
/// included.
#[tokio::test]
async fn a_counter_that_still_has_time_to_live_is_refused_the_same_way() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    let top = (1u64 << 53) - 1;
    let _: () = raw.set("redisson_lock_token:{big}", top).await.unwrap();
    let _: () = raw.set("redisson_lock_token:{neg}", -5).await.unwrap();
    let _: () = raw.set("redisson_lock_token:{text}", "abc").await.unwrap();
    let _: () = raw.rpush("redisson_lock_token:{list}", "x").await.unwrap();
    let names = ["big", "neg", "text", "list"];
    for name in names {
        let _: () = raw
            .pexpire(format!("redisson_lock_token:{{{name}}}"), 600_000)
            .await
            .unwrap();
        let taken = at_once(client.lock(name).acquire()).await;
        assert!(
            matches!(&taken, Err(LockError::Redis(e))
                if e.to_string().contains(&format!("redisson_lock_token:{{{name}}}"))),
            "{name}: an error naming the counter, {taken:?}"
        );
        assert!(
            !raw.exists::<_, bool>(name).await.unwrap(),
            "{name}: no hold written"
        );
        let ttl: i64 = raw
            .pttl(format!("redisson_lock_token:{{{name}}}"))
            .await
            .unwrap();
        assert!(ttl > 0, "{name}: the counter keeps its expiry");
    }
    let big: u64 = raw.get("redisson_lock_token:{big}").await.unwrap();
    assert_eq!(big, top, "put back");
    let neg: i64 = raw.get("redisson_lock_token:{neg}").await.unwrap();
    assert_eq!(neg, -5, "put back");
    let mut all = keys(&mut raw, "*").await;
    all.sort();
    assert_eq!(all.len(), names.len(), "nothing but the counters: {all:?}");
}

/// `acquire`'s answer, which must come at once (a refusal does).
async fn at_once<T>(acquire: impl std::future::Future<Output = T>) -> T {
    timeout(WITHIN, acquire)
        .await
        .expect("the acquire answered at once")
}

/// The reentrant and read acquisitions check the counter with its own
/// `INCR`, their first write (issue 11): a counter one step from leaving
/// the integers Lua carries exactly is put back, a key of another type is
/// not touched, and neither leaves a hold or an expiry behind.
#[tokio::test]
async fn a_counter_too_large_or_of_another_type_is_refused_and_left_as_it_was() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    let top = (1u64 << 53) - 1;
    let _: () = raw.set("redisson_lock_token:{big}", top).await.unwrap();
    let _: () = raw.rpush("redisson_lock_token:{list}", "x").await.unwrap();

    for name in ["big", "list"] {
        let taken = timeout(WITHIN, client.lock(name).acquire())
            .await
            .expect("the acquire failed at once");
        assert!(
            matches!(&taken, Err(LockError::Redis(e))
                if e.to_string().contains(&format!("redisson_lock_token:{{{name}}}"))),
            "{name}: an error naming the counter, {taken:?}"
        );
        // Every kind names the counter, never the lock (whose key is free):
        // fair and write locks check the counter before their first write.
        let rw = client.read_write_lock(name);
        let attempts = [
            at_once(rw.read().acquire()).await,
            at_once(rw.write().acquire()).await,
            at_once(client.fair_lock(name).acquire()).await,
        ];
        for (kind, taken) in ["read", "write", "fair"].iter().zip(attempts) {
            assert!(
                matches!(&taken, Err(LockError::Redis(e))
                    if e.to_string().contains(&format!("redisson_lock_token:{{{name}}}"))),
                "{name}, {kind}: an error naming the counter, {taken:?}"
            );
        }
        assert!(
            !raw.exists::<_, bool>(name).await.unwrap(),
            "{name}: no hold written"
        );
    }
    let left: u64 = raw.get("redisson_lock_token:{big}").await.unwrap();
    assert_eq!(left, top, "put back");
    let ttl: i64 = raw.pttl("redisson_lock_token:{big}").await.unwrap();
    assert_eq!(ttl, -1, "no expiry given");
    let list: Vec<String> = raw
        .lrange("redisson_lock_token:{list}", 0, -1)
        .await
        .unwrap();
    assert_eq!(list, ["x"]);
    let mut all = keys(&mut raw, "*").await;
    all.sort();
    assert_eq!(
        all,
        ["redisson_lock_token:{big}", "redisson_lock_token:{list}"],
        "nothing but the two counters"
    );

    // A negative counter, and one written with a leading zero (which INCR
    // refuses): every kind of lock refuses them the same way, fair and
    // write locks included (they check before their first write).
    let _: () = raw.set("redisson_lock_token:{neg}", -5).await.unwrap();
    let _: () = raw.set("redisson_lock_token:{zero}", "007").await.unwrap();
    let _: () = raw
        .pexpire("redisson_lock_token:{zero}", 600_000)
        .await
        .unwrap();
    for name in ["neg", "zero"] {
        let rw = client.read_write_lock(name);
        // Bounded: were one taken, the next would wait for it.
        let attempts = [
            at_once(client.lock(name).acquire()).await,
            at_once(rw.read().acquire()).await,
            at_once(rw.write().acquire()).await,
            at_once(client.fair_lock(name).acquire()).await,
        ];
        for (kind, taken) in ["reentrant", "read", "write", "fair"].iter().zip(attempts) {
            assert!(
                matches!(&taken, Err(LockError::Redis(e))
                    if e.to_string().contains(&format!("redisson_lock_token:{{{name}}}"))),
                "{name}, {kind}: an error naming the counter, {taken:?}"
            );
        }
        assert!(
            !raw.exists::<_, bool>(name).await.unwrap(),
            "{name}: no hold written"
        );
    }
    let neg: i64 = raw.get("redisson_lock_token:{neg}").await.unwrap();
    let zero: String = raw.get("redisson_lock_token:{zero}").await.unwrap();
    assert_eq!((neg, zero.as_str()), (-5, "007"), "left as they were");

    // One step lower, the last exact token is handed out.
    let _: () = raw
        .set("redisson_lock_token:{edge}", top - 1)
        .await
        .unwrap();
    let guard = client.lock("edge").acquire().await.unwrap();
    assert_eq!(guard.token(), top);
    guard.release().await.unwrap();
}

/// The counter's `INCR` is the reentrant and read acquisitions' first write:
/// an error that is not about the counter (here `READONLY`, from a replica,
/// which a Sentinel client reads as "find the new master") comes back with
/// its own code, not as a corrupt counter.
#[tokio::test]
async fn a_read_only_replica_answers_an_acquire_with_readonly() {
    let replica = Server::start();
    let mut raw = replica.raw().await;
    // A master that is not there: the server is a read-only replica.
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(tests::free_port())
        .query_async(&mut raw)
        .await
        .expect("REPLICAOF");
    let client = replica.client().await;
    let rw = client.read_write_lock("ro");
    let attempts = [
        at_once(client.lock("ro").acquire()).await,
        at_once(rw.read().acquire()).await,
    ];
    for (kind, taken) in ["reentrant", "read"].iter().zip(attempts) {
        assert!(
            matches!(&taken, Err(LockError::Redis(e)) if e.code() == Some("READONLY")),
            "{kind}: {taken:?}"
        );
    }
}

#[tokio::test]
async fn an_unbounded_response_timeout_is_a_config_error() {
    let server = Server::start();
    let connected =
        LockClient::connect(Config::new(server.url()).response_timeout(Duration::MAX)).await;
    assert!(
        matches!(connected, Err(LockError::Config(_))),
        "{connected:?}"
    );
}

/// Old model: the deductions all ran in one task, so they all re-entered the
/// same segment lock and their read-modify-writes of the count overlapped:
/// units were sold twice.
#[tokio::test]
async fn deductions_joined_in_one_task_never_oversell() {
    let server = Server::start();
    let client = server.client().await;
    let stock = Inventory::new(
        client.segmented_lock("sku:joined", 2),
        RedisSegmentStore::new(&client),
    );
    stock.restock(100).await.unwrap();

    let sales = timeout(
        NO_DEADLOCK,
        futures_util::future::join_all((0..20).map(|_| stock.deduct(1))),
    )
    .await
    .expect("the joined deductions finished");
    for sale in sales {
        sale.expect("100 units cover 20 sales of 1");
    }

    let store = RedisSegmentStore::new(&client);
    let mut left = 0;
    for segment in 0..2 {
        let key = SegmentKey {
            inventory: "sku:joined",
            segment,
        };
        left += store.get(key, None).await.unwrap();
    }
    assert_eq!(left, 80, "exactly 20 units sold");
}

/// Old model: the acquire whose answer timed out still reached Redis when
/// the link came back and took the lock for a holder nobody tracked; it
/// stayed for the whole 20 s watchdog lease.
#[tokio::test]
async fn an_acquire_with_an_unknown_answer_leaves_no_hold() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let a = LockClient::connect(
        Config::new(proxy.url())
            .response_timeout(Duration::from_millis(300))
            // The replica sync timeout follows (issue 10): no second knob.
            .watchdog_timeout(Duration::from_secs(20)),
    )
    .await
    .unwrap();
    let b = server.client().await;
    let raw = server.raw().await;
    // The client's connections exist before the fault.
    tests::take_and_release(a.lock("warm")).await;

    proxy.stall();
    // A wait, so that it ends: within it a fault is ridden out (issue 23).
    let taken = timeout(WITHIN, a.lock("amb").wait(Duration::from_secs(1)).acquire())
        .await
        .expect("the acquire gave up when its wait ran out");
    assert!(taken.is_err(), "acquired over a stalled link: {taken:?}");
    assert!(
        proxy.held_back() > 0,
        "the request was held in the link, its outcome unknown"
    );

    proxy.resume();
    timeout(WITHIN, proxy.flushed())
        .await
        .expect("the held request reached the server");
    eventually("the lock is free", WITHIN, || {
        let mut raw = raw.clone();
        async move { !raw.exists::<_, bool>("amb").await.unwrap() }
    })
    .await;
    let guard = b
        .lock("amb")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("no orphan hold blocks the lock");
    guard.release().await.unwrap();
}

/// A re-entry whose hold no replica confirmed is given back once, never
/// twice: the client gives it back at once and reconciles the failure
/// again, under one unlock request id. Counted twice, the second give-back
/// would free the outer hold while its guard still says it holds.
#[tokio::test]
async fn an_unreplicated_reentry_is_given_back_once_and_the_outer_hold_stays() {
    let master = Server::start();
    let replica = Server::start();
    let mut replica_raw = replica.raw().await;
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port())
        .query_async(&mut replica_raw)
        .await
        .expect("REPLICAOF");
    eventually("the replica is in sync", WITHIN, || {
        let mut replica_raw = replica_raw.clone();
        async move {
            // A replica busy with its first sync may answer late: not yet.
            let info: redis::RedisResult<String> = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut replica_raw)
                .await;
            info.is_ok_and(|info| info.contains("master_link_status:up"))
        }
    })
    .await;
    let client = master
        .client_with(|c| {
            c.replica_sync(ReplicaSync::Always)
                .replica_sync_timeout(Duration::from_millis(200))
        })
        .await;
    let mut raw = master.raw().await;
    let outer = client
        .lock("unsynced")
        .acquire()
        .await
        .expect("outer, replicated");

    // The replica stops acknowledging while it is stopped (SIGSTOP).
    let pid = timeout(WITHIN, async {
        loop {
            // Under load the answer may come late: ask again.
            let info: redis::RedisResult<String> = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut replica_raw)
                .await;
            if let Some(pid) = info
                .ok()
                .and_then(|info| tests::topology::info_field(&info, "process_id"))
            {
                break pid;
            }
        }
    })
    .await
    .expect("the replica's pid");
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([name, pid.as_str()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {name} {pid}");
    };
    /// Lets the replica run again however the test ends.
    struct Continue<'a>(&'a str);
    impl Drop for Continue<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("kill")
                .args(["-CONT", self.0])
                .status();
        }
    }
    signal("-STOP");
    let stopped = Continue(&pid);
    // A write the replica read before it stopped may still be acknowledged:
    // such a re-entry is given back and tried again.
    let refused = timeout(WITHIN, async {
        loop {
            match outer.scope(client.lock("unsynced").acquire()).await {
                Ok(inner) => inner.release().await.expect("inner release"),
                Err(e) => break e,
            }
        }
    })
    .await
    .expect("a re-entry went unreplicated");
    assert!(
        matches!(refused, LockError::NotReplicated { .. }),
        "{refused:?}"
    );
    let count: Option<i64> = raw.hget("unsynced", outer.holder_id()).await.unwrap();
    assert_eq!(count, Some(1), "only the re-entry was given back");
    assert!(!outer.is_lost());
    drop(stopped);
    outer.release().await.expect("the outer hold was kept");
    let left: bool = raw.exists("unsynced").await.unwrap();
    assert!(!left, "released for good");
}
