//! The reentrant lock against a real redis-server: layout, re-entry in a
//! guard's scope, exclusion, timeouts, leases, the watchdog, release,
//! cancellation, faults.

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use redis::AsyncCommands;
use tests::{Server, count_under_lock, eventually, numsub, until_unsubscribed};

const WITHIN: Duration = Duration::from_secs(10);

async fn exists(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> bool {
    conn.exists(key).await.expect("EXISTS")
}

/// Drops `fut` at moment `i` of a sweep: every third one right after its
/// first poll, without yielding (its request handed to the connection but
/// not yet written), the others after 0-900 µs (often mid-flight).
async fn abandon_at<F: std::future::Future>(i: u64, fut: F) {
    if i.is_multiple_of(3) {
        let mut fut = std::pin::pin!(fut);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let _ = fut.as_mut().poll(&mut cx);
        return;
    }
    let cut = Duration::from_micros((i * 37) % 900);
    drop(tokio::time::timeout(cut, fut).await);
}

#[tokio::test]
async fn layout_is_redissons() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;

    let guard = client.lock("stock:42").acquire().await.unwrap();
    let fields: Vec<(String, i64)> = raw.hgetall("stock:42").await.unwrap();
    assert_eq!(fields, vec![(guard.holder_id().to_owned(), 1)]);
    let (uuid, n) = guard.holder_id().rsplit_once(':').unwrap();
    assert_eq!(uuid, client.id());
    assert!(n.parse::<u64>().is_ok(), "holder id ends in a number: {n}");
    let pttl: i64 = raw.pttl("stock:42").await.unwrap();
    assert!(pttl > 0 && pttl <= 30_000, "watchdog lease is 30 s: {pttl}");
    let token: u64 = raw.get("redisson_lock_token:{stock:42}").await.unwrap();
    assert_eq!(token, guard.token());

    guard.release().await.unwrap();
    assert!(!exists(&mut raw, "stock:42").await);
    let latches: Vec<String> = raw
        .keys("redisson_unlock_latch:{stock:42}:*")
        .await
        .unwrap();
    assert_eq!(latches.len(), 1, "the unlock left its latch");
}

#[tokio::test]
async fn reentry_in_a_scope_counts_holds() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;

    let outer = client.lock("r").acquire().await.unwrap();
    let holder = outer.holder_id().to_owned();
    // Re-entry follows the call chain: an acquisition awaited inside the
    // outer guard's scope is the same holder.
    let inner = outer
        .scope(client.lock("r").wait(Duration::ZERO).acquire())
        .await
        .unwrap();
    assert!(inner.token() > outer.token(), "re-entry takes a new token");
    assert_eq!(inner.holder_id(), holder, "the re-entry is the same holder");
    let count: i64 = raw.hget("r", &holder).await.unwrap();
    assert_eq!(count, 2);

    inner.release().await.unwrap();
    let count: i64 = raw.hget("r", &holder).await.unwrap();
    assert_eq!(count, 1, "the outer hold remains");
    assert_eq!(
        client.renewed_locks(),
        1,
        "still renewed for the outer guard"
    );

    outer.release().await.unwrap();
    assert!(!exists(&mut raw, "r").await);
    assert_eq!(client.renewed_locks(), 0, "a released guard is not renewed");
}

#[tokio::test]
async fn other_tasks_and_clients_are_excluded() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let guard = client.lock("x").acquire().await.unwrap();

    // Outside the guard's scope, the same task is another holder.
    assert!(client.lock("x").try_acquire().await.unwrap().is_none());
    let same_client_other_task = {
        let client = client.clone();
        tokio::spawn(async move { client.lock("x").try_acquire().await.map(|g| g.is_some()) })
    };
    assert!(!same_client_other_task.await.unwrap().unwrap());
    assert!(other.lock("x").try_acquire().await.unwrap().is_none());

    guard.release().await.unwrap();
    let taken = other.lock("x").try_acquire().await.unwrap();
    assert!(taken.is_some(), "free after release");
}

#[tokio::test]
async fn waiting_times_out_with_a_typed_error() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let _guard = client.lock("busy").acquire().await.unwrap();

    let wait = Duration::from_millis(150);
    match other.lock("busy").wait(wait).acquire().await {
        Err(LockError::Timeout { name, waited }) => {
            assert_eq!(name, "busy");
            assert_eq!(waited, wait);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    let raw = server.raw().await;
    until_unsubscribed(&raw, "redisson_lock__channel:{busy}").await;
}

#[tokio::test]
async fn a_fixed_lease_expires_and_late_release_errors() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    let guard = client
        .lock("leased")
        .lease(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap();
    assert_eq!(client.renewed_locks(), 0, "a fixed lease is not renewed");
    let pttl: i64 = raw.pttl("leased").await.unwrap();
    assert!(pttl > 0 && pttl <= 200, "{pttl}");

    // Another client waits and gets it once the lease runs out.
    let next = other.lock("leased").wait(WITHIN).acquire().await.unwrap();
    assert!(guard.is_lost(), "the guard knows its lease ran out");
    tokio::time::timeout(WITHIN, guard.lost())
        .await
        .expect("lost() resolves");
    match guard.release().await {
        Err(LockError::Lost { name }) => assert_eq!(name, "leased"),
        other => panic!("expected Lost, got {other:?}"),
    }
    let holder: Option<i64> = raw.hget("leased", next.holder_id()).await.unwrap();
    assert_eq!(
        holder,
        Some(1),
        "the late release left the new holder alone"
    );
    next.release().await.unwrap();
}

#[tokio::test]
async fn the_watchdog_keeps_the_lease_alive() {
    let server = Server::start();
    // Short, but renewed every third of it: a renewal may run up to about
    // two thirds of a second late on a loaded machine before the hold counts
    // as lost (a 300 ms lease left that 200 ms, which CI machines exceed).
    let timeout = Duration::from_secs(1);
    let client = server.client_with(|c| c.watchdog_timeout(timeout)).await;
    let mut raw = server.raw().await;

    let guard = client.lock("renewed").acquire().await.unwrap();
    // Outlive the lease several times over: only renewals keep the key.
    tokio::time::sleep(timeout * 3).await;
    assert!(exists(&mut raw, "renewed").await, "renewed past its lease");
    assert!(!guard.is_lost());
    let pttl: i64 = raw.pttl("renewed").await.unwrap();
    assert!(pttl > 0 && pttl <= 1000, "{pttl}");
    guard.release().await.unwrap();
    assert_eq!(client.renewed_locks(), 0);
}

#[tokio::test]
async fn the_watchdog_reports_a_stolen_lock() {
    let server = Server::start();
    let client = server
        .client_with(|c| c.watchdog_timeout(Duration::from_millis(300)))
        .await;
    let mut raw = server.raw().await;

    let guard = client.lock("stolen").acquire().await.unwrap();
    let _: () = raw.del("stolen").await.unwrap();
    let _: () = raw.hset("stolen", "someone-else:1", 1).await.unwrap();
    tokio::time::timeout(WITHIN, guard.lost())
        .await
        .expect("the loss is signalled");
    assert!(guard.is_lost());
    // lost() may resolve by this client's clock before the watchdog's next
    // renewal fails and drops the hold.
    eventually("a lost hold is no longer renewed", WITHIN, || async {
        client.renewed_locks() == 0
    })
    .await;
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
    let other: Option<i64> = raw.hget("stolen", "someone-else:1").await.unwrap();
    assert_eq!(other, Some(1), "another holder's lock is never deleted");
}

#[tokio::test]
async fn dropping_a_guard_releases_it() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    let guard = client.lock("dropped").acquire().await.unwrap();
    drop(guard);
    // The other client is woken by the release's unlock message.
    let next = other.lock("dropped").wait(WITHIN).acquire().await.unwrap();
    next.release().await.unwrap();
    assert!(!exists(&mut raw, "dropped").await);
    assert_eq!(client.renewed_locks(), 0);

    // Dropping outside any runtime works too.
    let guard = client.lock("dropped").acquire().await.unwrap();
    std::thread::spawn(move || drop(guard)).join().unwrap();
    eventually("released from a plain thread", WITHIN, || {
        let mut raw = raw.clone();
        async move { !exists(&mut raw, "dropped").await }
    })
    .await;
}

#[tokio::test]
async fn a_cancelled_waiter_leaves_nothing_behind() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;
    let channel = "redisson_lock__channel:{cancel}";

    let guard = client.lock("cancel").acquire().await.unwrap();
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move { other.lock("cancel").acquire().await })
    };
    eventually("the waiter subscribed", WITHIN, || {
        let mut raw = raw.clone();
        async move { numsub(&mut raw, channel).await == 1 }
    })
    .await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    eventually("the subscription is gone", WITHIN, || {
        let mut raw = raw.clone();
        async move { numsub(&mut raw, channel).await == 0 }
    })
    .await;
    guard.release().await.unwrap();
    assert!(
        !exists(&mut raw, "cancel").await,
        "the cancelled waiter took nothing"
    );
    // The local queue was left too: the next waiter is not stuck behind it.
    let again = other.lock("cancel").wait(WITHIN).acquire().await.unwrap();
    again.release().await.unwrap();
}

#[tokio::test]
async fn acquires_cancelled_at_any_point_leave_no_lock() {
    cancelled_acquires_leave_no_lock().await;
}

/// The same on a multi-thread runtime, from a spawned task, the way a
/// server's handlers call: there too the calls run on the caller's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_cancelled_at_any_point_leave_no_lock_on_a_multi_thread_runtime() {
    tokio::spawn(cancelled_acquires_leave_no_lock())
        .await
        .unwrap();
}

async fn cancelled_acquires_leave_no_lock() {
    let server = Server::start();
    let client = server.client().await;
    let raw = server.raw().await;

    // Cut acquisitions short at many different moments, some while the
    // script is in flight; a hold that arrives for nobody must be given back.
    for i in 0..200u64 {
        abandon_at(i, client.lock("cut").acquire()).await;
    }
    eventually("no hold remains", WITHIN, || {
        let mut raw = raw.clone();
        async move { !exists(&mut raw, "cut").await }
    })
    .await;
    eventually("no hold is renewed", WITHIN, || {
        let client = client.clone();
        async move { client.renewed_locks() == 0 }
    })
    .await;
    until_unsubscribed(&raw, "redisson_lock__channel:{cut}").await;
}

#[tokio::test]
async fn cancelled_reentries_give_back_only_their_own_hold() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    let outer = client.lock("nest").acquire().await.unwrap();
    let field = outer.holder_id().to_owned();

    // Re-entries (in the outer guard's scope) cut short at many moments:
    // each one that was granted is given back once, never the outer hold.
    outer
        .scope(async {
            for i in 0..200u64 {
                abandon_at(i, client.lock("nest").acquire()).await;
            }
            // The scope still re-enters after all that.
            let again = client.lock("nest").wait(Duration::ZERO).acquire().await;
            again.unwrap().release().await.unwrap();
        })
        .await;
    eventually("only the outer hold remains", WITHIN, || {
        let mut raw = raw.clone();
        let field = field.clone();
        async move { raw.hget::<_, _, Option<i64>>("nest", &field).await.unwrap() == Some(1) }
    })
    .await;
    outer.release().await.unwrap();
    assert!(!exists(&mut raw, "nest").await, "released for good");
}

#[tokio::test]
async fn releases_dropped_at_any_point_still_complete() {
    dropped_releases_still_complete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_dropped_at_any_point_still_complete_on_a_multi_thread_runtime() {
    tokio::spawn(dropped_releases_still_complete())
        .await
        .unwrap();
}

async fn dropped_releases_still_complete() {
    let server = Server::start();
    let client = server.client().await;
    let raw = server.raw().await;

    // The release future is dropped at many moments, some while its unlock
    // is in flight: the unlock still completes.
    for i in 0..150u64 {
        let name = format!("let-go:{i}");
        let guard = client.lock(name.as_str()).acquire().await.unwrap();
        abandon_at(i, guard.release()).await;
    }
    eventually("every lock is free", WITHIN, || {
        let mut raw = raw.clone();
        async move {
            let left: Vec<String> = raw.keys("let-go:*").await.unwrap();
            left.is_empty()
        }
    })
    .await;
    assert_eq!(
        client.renewed_locks(),
        0,
        "nothing is renewed after release"
    );
}

#[tokio::test]
async fn read_modify_write_is_exclusive_across_clients_and_tasks() {
    let server = Server::start();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(server.client().await);
    }
    let n = count_under_lock(
        &server,
        &clients,
        "counter",
        (10, 10),
        |client| async move { client.lock("counter-lock").acquire().await },
    )
    .await;
    assert_eq!(n, 300, "no increment was lost");
}

#[tokio::test]
async fn tokens_increase_across_clients() {
    let server = Server::start();
    let a = server.client().await;
    let b = server.client().await;
    let mut last = 0;
    for i in 0..10 {
        let client = if i % 2 == 0 { &a } else { &b };
        let guard = client.lock("fenced").acquire().await.unwrap();
        assert!(guard.token() > last);
        last = guard.token();
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_redisson_holder_excludes_us_and_its_unlock_wakes_us() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;

    // What a Java service holding the lock looks like in Redis.
    let _: () = raw
        .hset("shared", "9f0e6a3c-java-client:57", 1)
        .await
        .unwrap();
    let _: () = raw.pexpire("shared", 60_000).await.unwrap();
    assert!(client.lock("shared").try_acquire().await.unwrap().is_none());

    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .lock("shared")
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    eventually("our waiter listens on Redisson's channel", WITHIN, || {
        let mut raw = raw.clone();
        async move { numsub(&mut raw, "redisson_lock__channel:{shared}").await == 1 }
    })
    .await;
    // Redisson's unlock: delete the hash, publish 0 on the channel. The
    // lease has a minute left, so only the message can wake the waiter
    // within its 20 s wait.
    let _: () = raw.del("shared").await.unwrap();
    let _: () = raw
        .publish("redisson_lock__channel:{shared}", "0")
        .await
        .unwrap();
    let guard = waiter.await.unwrap().expect("woken by the unlock message");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn many_waiters_share_one_connection_and_one_subscription_per_name() {
    let server = Server::start();
    let holder = server.client().await;
    let client = server.client().await;
    let mut raw = server.raw().await;

    let mut guards = Vec::new();
    for i in 0..200 {
        guards.push(holder.lock(format!("hot:{i}")).acquire().await.unwrap());
    }
    guards.push(holder.lock("hot").acquire().await.unwrap());
    let mut waiters = Vec::new();
    for i in 0..200 {
        let client = client.clone();
        waiters.push(tokio::spawn(async move {
            client.lock(format!("hot:{i}")).acquire().await
        }));
    }
    for _ in 0..20 {
        let client = client.clone();
        waiters.push(tokio::spawn(
            async move { client.lock("hot").acquire().await },
        ));
    }
    eventually("every name has its subscription", WITHIN, || {
        let mut raw = raw.clone();
        async move { numsub(&mut raw, "redisson_lock__channel:{hot:199}").await == 1 }
    })
    .await;
    eventually(
        "20 local waiters on one name, one subscription",
        WITHIN,
        || {
            let mut raw = raw.clone();
            async move { numsub(&mut raw, "redisson_lock__channel:{hot}").await == 1 }
        },
    )
    .await;
    let connected = connected_clients(&mut raw).await;
    // Each lock client: its own connection, plus at most one near connection
    // for this (current-thread) test runtime; and ours. 220 waiters on 201
    // names add none.
    assert!(
        (3..=5).contains(&connected),
        "connections do not grow with waiters or names: {connected}"
    );

    for guard in guards {
        guard.release().await.unwrap();
    }
    for waiter in waiters {
        waiter.await.unwrap().unwrap().release().await.unwrap();
    }
}

#[tokio::test]
async fn bad_input_gives_typed_errors() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;

    assert!(matches!(
        client.lock("").acquire().await,
        Err(LockError::BadName { .. })
    ));
    let _: () = raw.set("plain-string", "x").await.unwrap();
    match client.lock("plain-string").acquire().await {
        Err(LockError::WrongType { name }) => assert_eq!(name, "plain-string"),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(matches!(
        client.lock("x").lease(Duration::ZERO).acquire().await,
        Err(LockError::Config(_))
    ));
    assert!(matches!(
        LockClient::connect(Config::new("definitely not a url")).await,
        Err(LockError::Config(_))
    ));
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let unreachable = LockClient::connect(
        Config::new(format!("redis://127.0.0.1:{closed}"))
            .connect_timeout(Duration::from_millis(500)),
    )
    .await;
    assert!(
        matches!(&unreachable, Err(LockError::Connect { server, .. }) if *server == format!("127.0.0.1:{closed}")),
        "{unreachable:?}"
    );
}

#[tokio::test]
async fn scripts_survive_a_flushed_script_cache() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    tests::take_and_release(client.lock("s")).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    tests::take_and_release(client.lock("s")).await;
}

/// What a release of a reentrant lock runs.
const UNLOCK: &str = lock_runtime::__scripts::UNLOCK;

/// One send of unlock request `request` for hold `hold` of holder `holder`
/// on lock `name`; `first`: '1' for the request's first send (which does
/// not read the latch), '0' for a retry.
async fn unlock_call(
    raw: &redis::aio::MultiplexedConnection,
    (name, holder, hold): (&str, &str, &str),
    request: &str,
    first: &str,
) -> i64 {
    redis::Script::new(UNLOCK)
        .key(name)
        .key(format!("redisson_lock__channel:{{{name}}}"))
        .key(format!("redisson_unlock_latch:{{{name}}}:{request}"))
        .key(format!("redisson_lock_holds:{{{name}}}"))
        .arg(holder)
        .arg(30_000)
        .arg("publish")
        .arg(hold)
        // The message: wake one waiter.
        .arg("0")
        .arg(first)
        .invoke_async(&mut raw.clone())
        .await
        .unwrap()
}

#[tokio::test]
async fn unlock_is_idempotent_under_retry() {
    let server = Server::start();
    let mut raw = server.raw().await;
    let _: () = raw.hset("idem", "h:1", 1).await.unwrap();
    // The holder's first hold: its first send, then a retry.
    let hold = ("idem", "h:1", "0");
    assert_eq!(unlock_call(&raw, hold, "req-1", "1").await, 1, "released");
    assert_eq!(
        unlock_call(&raw, hold, "req-1", "0").await,
        1,
        "the retry gets the first answer, not 'not held'"
    );

    // A copy of the first send that reaches Redis after the retry (it does
    // not read the latch) finds its hold gone: another holder's lock stays
    // theirs, and the latch keeps the first answer for a later retry.
    let _: () = raw.hset("idem", "h:2", 1).await.unwrap();
    assert_eq!(unlock_call(&raw, hold, "req-1", "1").await, -1);
    let other: i64 = raw.hget("idem", "h:2").await.unwrap();
    assert_eq!(other, 1, "the next holder's lock is untouched");
    assert_eq!(unlock_call(&raw, hold, "req-1", "0").await, 1);
}

/// A holder with a re-entry (token 7): the release of its first hold is
/// retried and runs, then the first send arrives. It must not count the
/// re-entry's hold, nor change the latch's answer.
#[tokio::test]
async fn a_late_first_send_of_a_release_counts_nothing() {
    let server = Server::start();
    let mut raw = server.raw().await;
    let _: () = raw.hset("late", "h:1", 2).await.unwrap();
    let _: () = raw
        .hset("redisson_lock_holds:{late}", "h:1", " 0 7 ")
        .await
        .unwrap();
    let first = ("late", "h:1", "0");
    assert_eq!(
        unlock_call(&raw, first, "req-1", "0").await,
        0,
        "one hold left"
    );
    assert_eq!(
        unlock_call(&raw, first, "req-1", "1").await,
        0,
        "counts nothing"
    );
    let count: i64 = raw.hget("late", "h:1").await.unwrap();
    assert_eq!(count, 1, "the re-entry's hold is still held");
    let latch: i64 = raw.get("redisson_unlock_latch:{late}:req-1").await.unwrap();
    assert_eq!(latch, 0);
    // The re-entry's own release frees the lock.
    let reentry = ("late", "h:1", "7");
    assert_eq!(unlock_call(&raw, reentry, "req-2", "1").await, 1, "freed");
    assert!(!raw.exists::<_, bool>("late").await.unwrap());
}

#[tokio::test]
async fn a_server_restart_loses_the_lease_and_the_client_recovers() {
    let mut server = Server::start();
    let client = server
        .client_with(|c| c.watchdog_timeout(Duration::from_millis(600)))
        .await;

    let guard = client.lock("restart").acquire().await.unwrap();
    server.restart();
    tokio::time::timeout(WITHIN, guard.lost())
        .await
        .expect("the loss is signalled");
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));

    // New acquisitions work once the client has reconnected (the first
    // calls may still see the old connection's failure).
    let mut taken = None;
    for _ in 0..100 {
        match client
            .lock("restart")
            .wait(Duration::from_secs(1))
            .acquire()
            .await
        {
            Ok(guard) => {
                taken = Some(guard);
                break;
            }
            Err(LockError::Redis(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("unexpected error after restart: {e:?}"),
        }
    }
    let guard = taken.expect("acquire works after the restart");
    let mut raw = server.raw().await;
    assert!(exists(&mut raw, "restart").await);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn subscriptions_come_back_after_a_reconnect() {
    let server = Server::start();
    let holder = server.client().await;
    let waiter_client = server.client().await;
    let mut raw = server.raw().await;
    let channel = "redisson_lock__channel:{resub}";

    // A fixed lease of a minute: within the waiter's 20 s only an unlock
    // message can wake it.
    let guard = holder
        .lock("resub")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = {
        let client = waiter_client.clone();
        tokio::spawn(async move {
            client
                .lock("resub")
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    eventually("the waiter subscribed", WITHIN, || {
        let mut raw = raw.clone();
        async move { numsub(&mut raw, channel).await == 1 }
    })
    .await;

    // Cut the waiter's connection (the one with a subscription).
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut raw)
        .await
        .unwrap();
    let id = clients
        .lines()
        .find(|l| l.contains(" sub=1 "))
        .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .expect("a subscribed connection")
        .to_owned();
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(&id)
        .query_async(&mut raw)
        .await
        .unwrap();
    eventually(
        "the client reconnected and subscribed again",
        WITHIN,
        || {
            let mut raw = raw.clone();
            async move { numsub(&mut raw, channel).await == 1 }
        },
    )
    .await;

    guard.release().await.unwrap();
    let taken = waiter
        .await
        .unwrap()
        .expect("woken through the renewed subscription");
    taken.release().await.unwrap();
}

/// Connections a server or a proxy closes while the client is idle (an idle
/// timeout, a failover of a proxy, `CLIENT KILL`) cost no caller an error:
/// an attempt that fails on a dead connection and provably took nothing is
/// made again on the client's own connection, which reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_closed_while_idle_cost_no_caller_an_error() {
    tokio::spawn(async {
        let server = Server::start();
        let client = server.client().await;
        let mut raw = server.raw().await;
        for round in 0..5 {
            // Warm: the runtime's near connection is made on its first calls.
            for _ in 0..20 {
                let guard = client.lock("idle").acquire().await.unwrap();
                guard.release().await.unwrap();
            }
            let () = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .arg("SKIPME")
                .arg("yes")
                .query_async(&mut raw)
                .await
                .unwrap();
            let guard = client.lock("idle").acquire().await.unwrap_or_else(|e| {
                panic!("round {round}: the acquire after the kill failed: {e}")
            });
            guard.release().await.unwrap_or_else(|e| {
                panic!("round {round}: the release after the kill failed: {e}")
            });
        }
        assert!(!exists(&mut raw, "idle").await);
    })
    .await
    .unwrap();
}

/// `connected_clients` of the server's `INFO clients`.
async fn connected_clients(raw: &mut redis::aio::MultiplexedConnection) -> usize {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query_async(raw)
        .await
        .unwrap();
    tests::topology::info_field(&info, "connected_clients")
        .and_then(|n| n.parse().ok())
        .unwrap()
}

#[test]
fn one_client_serves_many_short_lived_runtimes() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let server = Server::start();
    let client = runtime().block_on(server.client());
    // Each runtime takes the lock a few times (its near connection is made
    // on its first call), then shuts down, taking its connection with it.
    for _ in 0..80 {
        runtime().block_on(async {
            for _ in 0..3 {
                let guard = client.lock("short").acquire().await.unwrap();
                guard.release().await.unwrap();
            }
        });
    }
    runtime().block_on(async {
        let mut raw = server.raw().await;
        assert!(!exists(&mut raw, "short").await);
        eventually("the dead runtimes' connections are closed", WITHIN, || {
            let mut raw = raw.clone();
            // The client's own, at most one near one of this runtime, ours.
            async move { connected_clients(&mut raw).await <= 3 }
        })
        .await;
    });
}

#[tokio::test]
async fn a_resent_acquire_takes_the_lock_once() {
    // What an acquisition runs (scripts/mod.rs): the acquire script wrapped
    // by the acquire latch, so that a command resent after its answer was
    // lost (as a cluster connection does) does not take the lock a second
    // time.
    const LATCHED: &str = lock_runtime::__scripts::REENTRANT_ACQUIRE;
    let server = Server::start();
    let mut raw = server.raw().await;
    let script = redis::Script::new(LATCHED);
    // `reentry`: '1' when the caller re-enters a hold of its scope.
    let attempt = |name: &str, latch: &str, reentry: &str| {
        let mut call = script.key(name);
        call.key(format!("redisson_lock_token:{{{name}}}"))
            .key(format!("redisson_lock_holds:{{{name}}}"))
            .arg(30_000)
            .arg("client:1")
            .arg(reentry)
            .key(latch)
            .arg(30_000);
        call
    };
    let first: (i64, i64) = attempt("resent", "latch:a", "0")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    let resent: (i64, i64) = attempt("resent", "latch:a", "0")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(first.0, 1, "taken");
    assert_eq!(resent, first, "the resend gets the first answer");
    let holds: i64 = raw.hget("resent", "client:1").await.unwrap();
    assert_eq!(holds, 1, "taken once");

    // A new attempt (a real re-entry) has a new latch and counts.
    let again: (i64, i64) = attempt("resent", "latch:b", "1")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(again.0, 1);
    assert!(again.1 > first.1, "a new token");
    let holds: i64 = raw.hget("resent", "client:1").await.unwrap();
    assert_eq!(holds, 2);

    // The same when the counter needs no care: `reentrant_fast.lua` takes
    // the lock and records the token itself.
    let _: () = raw
        .set_ex("redisson_lock_token:{fast}", 5, 600)
        .await
        .unwrap();
    let first: (i64, i64) = attempt("fast", "latch:f", "0")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    let resent: (i64, i64) = attempt("fast", "latch:f", "0")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(first, (1, 6), "taken with the next token");
    assert_eq!(resent, first, "the resend gets the first answer");
    let holds: i64 = raw.hget("fast", "client:1").await.unwrap();
    assert_eq!(holds, 1, "taken once");

    // An attempt abandoned before it ran takes nothing, however free the
    // lock and its counter.
    let _: () = raw
        .set_ex("redisson_lock_token:{gone}", 5, 600)
        .await
        .unwrap();
    let _: () = raw.set("latch:g", "abandoned").await.unwrap();
    let abandoned: (i64, i64) = attempt("gone", "latch:g", "0")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(abandoned, (4, 0), "abandoned");
    assert!(
        !raw.exists::<_, bool>("gone").await.unwrap(),
        "nothing taken"
    );
    let counter: i64 = raw.get("redisson_lock_token:{gone}").await.unwrap();
    assert_eq!(counter, 5, "no token taken");
}
