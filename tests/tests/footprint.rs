//! Nothing left behind (issue 10): Redis keeps no key per lock name once
//! the locks are released and their latches have expired, fencing tokens
//! keep increasing across a counter's expiry and a crash, and no acquire
//! that ends in an error leaves a subscription or a fair-queue place behind.

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use redis::AsyncCommands;
use tests::proxy::Proxy;
use tests::{
    Server, eventually, keys_and_ttls, numsub, scratch_dir, take_and_release, until_no_channels,
};

const WITHIN: Duration = Duration::from_secs(15);

/// A client whose keys are short-lived: a 300 ms watchdog lease and a
/// 200 ms response timeout (so its unlock latches live 1.6 s).
fn quick(config: Config) -> Config {
    config
        .watchdog_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(200))
}

/// Locking many distinct names, of every kind, leaves only keys with an
/// expiry, none longer than a lease or an unlock latch; once those have
/// passed, nothing at all. Before issue 10, each name left its fencing token
/// counter behind for ever.
#[tokio::test]
async fn distinct_names_leave_no_keys_behind() {
    let server = Server::start();
    // A longer watchdog lease than `quick`'s, so a renewal that runs late on
    // a loaded machine does not lose a hold before its release; its
    // counters still live less than a latch (two leases, 1.2 s).
    let client = server
        .client_with(|c| quick(c).watchdog_timeout(Duration::from_millis(600)))
        .await;
    let mut raw = server.raw().await;
    for i in 0..200 {
        let guards = [
            client.lock(format!("order:{i}")).acquire().await.unwrap(),
            client
                .fair_lock(format!("fair:{i}"))
                .acquire()
                .await
                .unwrap(),
            client
                .read_write_lock(format!("doc:{i}"))
                .read()
                .acquire()
                .await
                .unwrap(),
            client
                .read_write_lock(format!("sheet:{i}"))
                .write()
                .lease(Duration::from_millis(500))
                .acquire()
                .await
                .unwrap(),
        ];
        for guard in guards {
            guard.release().await.unwrap();
        }
    }
    let left = keys_and_ttls(&mut raw).await;
    assert!(!left.is_empty(), "counters and latches live a while");
    let forever: Vec<_> = left.iter().filter(|(_, ttl)| *ttl < 0).collect();
    assert!(
        forever.is_empty(),
        "{} keys without expiry, such as {:?}",
        forever.len(),
        &forever[..forever.len().min(5)]
    );
    let longest = left.iter().map(|(_, ttl)| *ttl).max().unwrap();
    assert!(
        longest <= 1_600,
        "no key outlives a lease or a latch: {longest} ms"
    );
    eventually("every key expired", WITHIN, || {
        let mut raw = raw.clone();
        async move { keys_and_ttls(&mut raw).await.is_empty() }
    })
    .await;
}

/// A counter that expired is made again at the server's clock in
/// microseconds: above every token the old one handed out.
#[tokio::test]
async fn tokens_keep_increasing_across_a_counters_expiry() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    let counter = "redisson_lock_token:{t}";
    let mut last = 0;
    for _ in 0..500 {
        let guard = client.lock("t").acquire().await.unwrap();
        assert!(guard.token() > last, "{} after {last}", guard.token());
        last = guard.token();
        guard.release().await.unwrap();
    }
    let ttl: i64 = raw.pttl(counter).await.unwrap();
    assert!(ttl > 0, "the counter expires: {ttl}");
    // Its expiry, now (waiting out 30 s proves nothing more).
    let _: () = raw.del(counter).await.unwrap();
    let guard = client.lock("t").acquire().await.unwrap();
    assert!(guard.token() > last, "{} after {last}", guard.token());
    guard.release().await.unwrap();
}

/// A counter without expiry (Redisson's RFencedLock makes one starting at 1)
/// is raised to the clock, never lowered, and from then on expires; one
/// ahead of the clock keeps counting as INCR does, so Redisson's tokens and
/// ours interleave while it exists.
#[tokio::test]
async fn a_counter_without_expiry_is_raised_never_lowered() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;

    let _: () = raw.set("redisson_lock_token:{low}", 5).await.unwrap();
    let guard = client.lock("low").acquire().await.unwrap();
    let clock_us = 1_700_000_000_000_000u64; // November 2023, in microseconds
    assert!(
        guard.token() > clock_us,
        "raised to the clock: {}",
        guard.token()
    );
    let ttl: i64 = raw.pttl("redisson_lock_token:{low}").await.unwrap();
    assert!(ttl > 0, "and expires from then on: {ttl}");
    guard.release().await.unwrap();

    let ahead = 1u64 << 52;
    let _: () = raw.set("redisson_lock_token:{high}", ahead).await.unwrap();
    let guard = client.lock("high").acquire().await.unwrap();
    assert_eq!(guard.token(), ahead + 1, "INCR as usual");
    // Redisson's RFencedLock INCRs the same key: the next token is above it.
    let _: u64 = raw.incr("redisson_lock_token:{high}", 1).await.unwrap();
    guard.release().await.unwrap();
    let guard = client.lock("high").acquire().await.unwrap();
    assert_eq!(guard.token(), ahead + 3);
    guard.release().await.unwrap();
}

/// Tokens keep increasing across a crash (SIGKILL) of a server that persists
/// every write; the lock's keys come back with their expiry.
#[tokio::test]
async fn tokens_keep_increasing_across_a_crash() {
    let dir = scratch_dir("footprint-crash");
    let mut server = Server::start_persistent(&dir);
    let client = server.client().await;
    let guard = client.lock("crash").acquire().await.unwrap();
    let before = guard.token();
    guard.release().await.unwrap();

    server.crash();
    server.restart();
    let mut raw = server.raw().await;
    let ttl: i64 = raw.pttl("redisson_lock_token:{crash}").await.unwrap();
    assert!(ttl > 0, "the counter came back, expiring: {ttl}");
    // The first call may find the old connection broken; the client
    // reconnects for the next one.
    let guard = reconnected(|| client.lock("crash").wait(WITHIN).acquire()).await;
    assert!(guard.token() > before, "{} after {before}", guard.token());
    guard.release().await.unwrap();

    // Lost entirely (a server without the data): the clock still counts up.
    let _: () = redis::cmd("FLUSHALL").query_async(&mut raw).await.unwrap();
    let guard = client.lock("crash").acquire().await.unwrap();
    assert!(guard.token() > before, "{} after {before}", guard.token());
    guard.release().await.unwrap();
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs `acquire` until it stops failing with a lost connection (a client
/// learns that its connection broke from the call that finds it broken).
async fn reconnected<F, Fut>(acquire: F) -> lock_runtime::LockGuard
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<lock_runtime::LockGuard, LockError>>,
{
    for _ in 0..20 {
        match acquire().await {
            Ok(guard) => return guard,
            Err(LockError::Redis(e)) => {
                println!("before the client reconnected: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("acquire failed: {e:?}"),
        }
    }
    panic!("the client never reconnected");
}

/// A fair lock's queue and deadline keys expire at the last waiter's
/// deadline, so a waiter that died leaves nothing behind for good.
#[tokio::test]
async fn a_dead_fair_waiters_place_expires() {
    let server = Server::start();
    let holder = server.client().await;
    let proxy = Proxy::start(server.port());
    let waiter = LockClient::connect(
        quick(Config::new(proxy.url())).fair_wait_timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap();
    let mut raw = server.raw().await;

    let guard = holder
        .fair_lock("q")
        .lease(Duration::from_millis(800))
        .acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.fair_lock("q").acquire().await }
    });
    let queue = "redisson_lock_queue:{q}";
    let deadlines = "redisson_lock_timeout:{q}";
    eventually("the waiter queued", WITHIN, || {
        let mut raw = raw.clone();
        async move { raw.llen::<_, i64>(queue).await.unwrap() == 1 }
    })
    .await;
    for key in [queue, deadlines] {
        let ttl: i64 = raw.pttl(key).await.unwrap();
        assert!(ttl > 0, "{key} expires: {ttl}");
    }
    // The waiter's process is cut off for good: it can neither retry nor
    // leave the queue.
    proxy.refuse();
    waiting.abort();
    drop(guard);
    eventually("the dead waiter's place expired", WITHIN, || {
        let mut raw = raw.clone();
        async move {
            !raw.exists::<_, bool>(queue).await.unwrap()
                && !raw.exists::<_, bool>(deadlines).await.unwrap()
        }
    })
    .await;
    // And the next caller is not held up by it.
    take_and_release(holder.fair_lock("q").wait(WITHIN)).await;
}

/// Starts a waiter on `name` (held by someone else) with a `wait` of its
/// own, and returns once it listens for the lock's release.
async fn waiting(
    client: &LockClient,
    raw: &redis::aio::MultiplexedConnection,
    name: &str,
    wait: Duration,
) -> tokio::task::JoinHandle<Result<lock_runtime::LockGuard, LockError>> {
    let task = tokio::spawn({
        let (client, name) = (client.clone(), name.to_owned());
        async move { client.lock(name).wait(wait).acquire().await }
    });
    let channel = format!("redisson_lock__channel:{{{name}}}");
    eventually("the waiter subscribed", WITHIN, || {
        let (mut raw, channel) = (raw.clone(), channel.clone());
        async move { numsub(&mut raw, &channel).await == 1 }
    })
    .await;
    task
}

/// A wait that ends while the server is down (its last attempt is refused)
/// leaves no subscription once the server is back: the connection makes its
/// subscriptions again after reconnecting, and the unsubscribe that failed
/// is owed until it succeeds.
#[tokio::test]
async fn a_wait_ended_by_a_server_restart_leaves_no_subscription() {
    let mut server = Server::start();
    let holder = server.client().await;
    let client = server.client_with(quick).await;
    let raw = server.raw().await;
    let _guard = holder
        .lock("restart")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let task = waiting(&client, &raw, "restart", Duration::from_millis(1500)).await;
    server.stop();
    let ended = tokio::time::timeout(WITHIN, task).await.unwrap().unwrap();
    // Retried while the wait lasted (issue 23): a wait spent on a fault
    // ends in a timeout.
    assert!(
        matches!(ended, Err(LockError::Timeout { .. })),
        "the wait ran out while the server was down: {ended:?}"
    );

    server.restart();
    let raw = server.raw().await;
    // The client is back (and has made its subscriptions again).
    reconnected(|| client.lock("other").wait(WITHIN).acquire())
        .await
        .release()
        .await
        .unwrap();
    until_no_channels(&raw, WITHIN).await;
}

/// A lock `name` held for a minute by one client, and another client
/// (short leases and latches) that reaches the same server through a proxy.
/// Dropping it stops the server and the proxy.
struct Held {
    /// Kept for their `Drop`: the server runs, and the lock is held, as
    /// long as this lives.
    _server: Server,
    proxy: Proxy,
    client: LockClient,
    raw: redis::aio::MultiplexedConnection,
    _guard: lock_runtime::LockGuard,
}

async fn held_elsewhere(name: &str) -> Held {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let client = LockClient::connect(quick(Config::new(proxy.url())))
        .await
        .unwrap();
    let raw = server.raw().await;
    let guard = server
        .client()
        .await
        .lock(name)
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    Held {
        _server: server,
        proxy,
        client,
        raw,
        _guard: guard,
    }
}

/// A subscribe that timed out may still be confirmed later: it is
/// unsubscribed again.
#[tokio::test]
async fn a_subscribe_that_timed_out_leaves_no_subscription() {
    let held = held_elsewhere("slow").await;
    let (proxy, client, raw) = (&held.proxy, &held.client, &held.raw);
    proxy.stall_on(b"\r\nSUBSCRIBE\r\n");
    let ended = client
        .lock("slow")
        .wait(Duration::from_secs(5))
        .acquire()
        .await;
    // Subscribing is retried while the wait lasts (issue 23): a wait spent
    // on a fault ends in a timeout.
    assert!(
        matches!(&ended, Err(LockError::Timeout { .. })),
        "the subscribe timed out until the wait ran out: {ended:?}"
    );
    assert!(proxy.triggered(), "the subscribe was held back");
    proxy.resume();
    tokio::time::timeout(WITHIN, proxy.flushed()).await.unwrap();
    until_no_channels(raw, WITHIN).await;
}

/// A wait whose last attempt loses its connection (reset), while new
/// connections are refused for a while, leaves no subscription once the
/// client can connect again.
#[tokio::test]
async fn a_wait_ended_by_a_reset_and_refused_connections_leaves_no_subscription() {
    let held = held_elsewhere("reset").await;
    let (proxy, client, raw) = (&held.proxy, &held.client, &held.raw);
    let task = waiting(client, raw, "reset", Duration::from_millis(1500)).await;
    proxy.stall_on(b"EVALSHA");
    eventually("the last attempt is on its way", WITHIN, || async {
        proxy.triggered()
    })
    .await;
    proxy.refuse();
    proxy.resume();
    let ended = tokio::time::timeout(WITHIN, task).await.unwrap().unwrap();
    // Retried while the wait lasted (issue 23): a wait spent on a fault
    // ends in a timeout.
    assert!(
        matches!(ended, Err(LockError::Timeout { .. })),
        "the wait ran out while the connection was refused: {ended:?}"
    );
    proxy.accept();
    // A fixed lease long enough for any machine: the client's 300 ms
    // watchdog lease would be lost by one late renewal on a busy machine,
    // and what is asserted here is the reconnection and the subscriptions.
    reconnected(|| {
        client
            .lock("other")
            .lease(Duration::from_secs(60))
            .wait(WITHIN)
            .acquire()
    })
    .await
    .release()
    .await
    .unwrap();
    until_no_channels(raw, WITHIN).await;
}
