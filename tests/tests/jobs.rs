//! Run-once jobs and busy paths against real redis-servers: `on_busy =
//! "skip"`, `fallback`, `hold_at_least` (attribute and builder) and
//! `client = expr`.
//!
//! "Another instance" is another `LockClient`: its own connection and
//! holder ids, as a second process would have.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{LockClient, LockError, distributed_lock};
use redis::AsyncCommands;
use tests::{Server, eventually, numsub};
use tokio::time::timeout;

/// Bounds a call that must not hang (asserts no speed).
const WITHIN: Duration = Duration::from_secs(20);

/// The lock's holders and their counts, as another program sees them.
async fn holds(server: &Server, key: &str) -> Vec<(String, i64)> {
    let mut raw = server.raw().await;
    raw.hgetall(key).await.expect("HGETALL")
}

/// A reentrant or a fair lock of that name.
fn builder(client: &LockClient, name: &str, fair: bool) -> lock_runtime::LockBuilder {
    if fair {
        client.fair_lock(name)
    } else {
        client.lock(name)
    }
}

async fn pttl(server: &Server, key: &str) -> i64 {
    let mut raw = server.raw().await;
    raw.pttl(key).await.expect("PTTL")
}

// ---------------------------------------------------------------- skip

/// A run-once job: skipped (not an error) while another instance has it.
#[distributed_lock(key = "job:<id>", on_busy = "skip", client = locks)]
async fn job(locks: &LockClient, id: u64, ran: &AtomicUsize) -> Result<(), LockError> {
    let _ = id;
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn skip_returns_ok_without_running_the_body_while_another_client_holds() {
    let server = Server::start();
    let (ours, theirs) = (server.client().await, server.client().await);
    let ran = AtomicUsize::new(0);

    let held = theirs
        .lock("job:1")
        .acquire()
        .await
        .expect("the other instance takes it");
    // No `wait`: one attempt, so this returns while the lock is still held.
    timeout(WITHIN, job(&ours, 1, &ran))
        .await
        .expect("a skip makes one attempt and returns")
        .expect("a skipped call is Ok(())");
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "the body ran although the lock was held"
    );
    assert_eq!(
        holds(&server, "job:1").await,
        vec![(held.holder_id().to_owned(), 1)],
        "the skipped call left the other instance's hold alone"
    );

    held.release().await.expect("release");
    job(&ours, 1, &ran)
        .await
        .expect("a free lock runs the body");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(
        holds(&server, "job:1").await.is_empty(),
        "released after the body"
    );
}

/// A job with a result: `None` when the lock stayed busy for all of `wait`.
#[distributed_lock(key = "slot:<id>", wait = "300ms", on_busy = "skip", client = locks)]
async fn slot_briefly(locks: &LockClient, id: u64) -> Result<Option<u64>, LockError> {
    Ok(Some(id * 10))
}

/// The same job, waiting long enough for the holder to finish.
#[distributed_lock(key = "slot:<id>", wait = "30s", on_busy = "skip", client = locks)]
async fn slot_patiently(locks: &LockClient, id: u64) -> Result<Option<u64>, LockError> {
    Ok(Some(id * 10))
}

#[tokio::test]
async fn option_skip_returns_none_after_wait_and_some_when_freed_within_it() {
    let server = Server::start();
    let (ours, theirs) = (server.client().await, server.client().await);

    let held = theirs
        .lock("slot:2")
        .acquire()
        .await
        .expect("the other instance takes it");
    let skipped = timeout(WITHIN, slot_briefly(&ours, 2))
        .await
        .expect("the wait ends")
        .expect("a skip is not an error");
    assert_eq!(skipped, None, "the lock stayed busy for the whole wait");

    // Freed while the call waits: it takes the lock and runs the body.
    let ours2 = ours.clone();
    let waiting = tokio::spawn(async move { slot_patiently(&ours2, 2).await });
    let mut raw = server.raw().await;
    eventually("the call waits on the lock's channel", WITHIN, || {
        let mut raw = raw.clone();
        async move { numsub(&mut raw, "redisson_lock__channel:{slot:2}").await > 0 }
    })
    .await;
    held.release().await.expect("release");
    let ran = timeout(WITHIN, waiting)
        .await
        .expect("woken when the lock freed")
        .expect("the task ran")
        .expect("no error");
    assert_eq!(ran, Some(20));
    let left: bool = raw.exists("slot:2").await.expect("EXISTS");
    assert!(!left, "released after the body");
}

// ---------------------------------------------------------------- fallback

async fn cached_price(
    locks: &LockClient,
    id: u64,
    currency: String,
    calls: &AtomicUsize,
) -> Result<String, LockError> {
    let _ = locks;
    calls.fetch_add(1, Ordering::SeqCst);
    Ok(format!("cached {id} {currency}"))
}

#[distributed_lock(key = "price:<id>", fallback = cached_price, client = locks)]
async fn price(
    locks: &LockClient,
    id: u64,
    currency: String,
    calls: &AtomicUsize,
) -> Result<String, LockError> {
    let _ = calls;
    Ok(format!("fresh {id} {currency}"))
}

#[tokio::test]
async fn fallback_is_called_with_the_arguments_while_the_lock_is_busy() {
    let server = Server::start();
    let (ours, theirs) = (server.client().await, server.client().await);
    let calls = AtomicUsize::new(0);

    let held = theirs
        .lock("price:7")
        .acquire()
        .await
        .expect("the other instance takes it");
    let busy = timeout(WITHIN, price(&ours, 7, "EUR".to_owned(), &calls))
        .await
        .expect("one attempt, then the fallback")
        .expect("the fallback's result");
    assert_eq!(busy, "cached 7 EUR");
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    held.release().await.expect("release");
    let free = price(&ours, 7, "CHF".to_owned(), &calls)
        .await
        .expect("the body's result");
    assert_eq!(free, "fresh 7 CHF");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "no fallback when the lock was free"
    );
}

/// A service with its own lock client, a method fallback (`self` first).
struct Shop {
    locks: LockClient,
    name: String,
}

impl Shop {
    #[distributed_lock(key = "shop:<self.name>:<id>", client = self.locks, fallback = Self::later)]
    async fn sell(&self, id: u64, qty: u32) -> Result<String, LockError> {
        Ok(format!("{} sold {qty} of {id}", self.name))
    }

    async fn later(&self, id: u64, qty: u32) -> Result<String, LockError> {
        Ok(format!("{} queued {qty} of {id}", self.name))
    }
}

#[tokio::test]
async fn a_method_fallback_gets_self_first() {
    let server = Server::start();
    let shop = Shop {
        locks: server.client().await,
        name: "north".to_owned(),
    };
    let theirs = server.client().await;

    let held = theirs
        .lock("shop:north:5")
        .acquire()
        .await
        .expect("taken elsewhere");
    assert_eq!(
        shop.sell(5, 3).await.expect("fallback"),
        "north queued 3 of 5"
    );
    held.release().await.expect("release");
    assert_eq!(shop.sell(5, 3).await.expect("body"), "north sold 3 of 5");
}

/// Not a circuit breaker: a Redis that cannot be reached is an error, and
/// the fallback is not called.
#[tokio::test]
async fn redis_failures_are_errors_not_fallbacks() {
    let mut server = Server::start();
    let ours = server
        .client_with(|c| {
            c.connect_timeout(Duration::from_millis(500))
                .response_timeout(Duration::from_millis(500))
        })
        .await;
    let calls = AtomicUsize::new(0);
    server.stop();

    let result = timeout(WITHIN, price(&ours, 8, "EUR".to_owned(), &calls))
        .await
        .expect("a dead server gives an error, not a hang");
    let error = result.expect_err("no server, no lock, no fallback");
    assert!(
        !error.is_timeout(),
        "a Redis failure, not a busy lock: {error}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the fallback ran on a Redis failure"
    );
}

// ---------------------------------------------------------------- hold_at_least

const MINIMUM: Duration = Duration::from_secs(3);

/// A scheduled report, run once per slot however many instances fire.
#[distributed_lock(key = "report:<slot>", on_busy = "skip", hold_at_least = "3s", client = locks)]
async fn report(locks: &LockClient, slot: u64, ran: &AtomicUsize) -> Result<(), LockError> {
    let _ = slot;
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// The same lock, waited for: when did its body start?
#[distributed_lock(key = "report:<slot>", wait = "30s", client = locks)]
async fn report_when_free(locks: &LockClient, slot: u64) -> Result<Instant, LockError> {
    let _ = slot;
    Ok(Instant::now())
}

#[tokio::test]
async fn hold_at_least_keeps_other_instances_out_until_the_minimum_then_frees() {
    let server = Server::start();
    let (a, b) = (server.client().await, server.client().await);
    let ran = AtomicUsize::new(0);

    let start = Instant::now();
    report(&a, 1, &ran).await.expect("instance a runs the slot");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    // Read first, then judge by the time: all of it within the minimum.
    let ttl = pttl(&server, "report:1").await;
    let fields = holds(&server, "report:1").await;
    if start.elapsed() < MINIMUM {
        // Released, yet still taken: by nobody's hold, until the minimum.
        assert!(
            ttl > 0 && ttl <= MINIMUM.as_millis() as i64,
            "left to expire at the minimum: {ttl}"
        );
        assert_eq!(fields.len(), 1);
        assert_eq!(fields[0].1, 0, "no hold left, only the key");
    }

    // Instance b's timer fires a little later: the slot is not run twice.
    report(&b, 1, &ran).await.expect("instance b skips");
    let b_done = start.elapsed();
    assert!(
        ran.load(Ordering::SeqCst) == 1 || b_done >= MINIMUM,
        "the slot ran twice within the minimum"
    );

    // Then it frees by itself (no unlock message: a waiter polls the TTL).
    let body_started = timeout(WITHIN, report_when_free(&b, 1))
        .await
        .expect("the lock freed after the minimum")
        .expect("b takes it");
    // Redis counts expiry in whole milliseconds.
    assert!(
        body_started.duration_since(start) + Duration::from_millis(2) >= MINIMUM,
        "another instance got in {:?} after the first took it",
        body_started.duration_since(start)
    );
    assert!(
        holds(&server, "report:1").await.is_empty(),
        "freed after b's body"
    );
}

#[tokio::test]
async fn hold_at_least_on_the_builder_for_reentrant_and_fair_locks() {
    let server = Server::start();
    let (ours, theirs) = (server.client().await, server.client().await);

    for (name, fair) in [("built:plain", false), ("built:fair", true)] {
        let lock = |client: &LockClient| builder(client, name, fair);
        let start = Instant::now();
        let guard = lock(&ours)
            .hold_at_least(Duration::from_secs(40))
            .acquire()
            .await
            .expect("acquire");
        guard.release().await.expect("release");
        // The watchdog's 30 s lease is lengthened to what is left of 40 s.
        let ttl = pttl(&server, name).await;
        let other = lock(&theirs).try_acquire().await.expect("try");
        if start.elapsed() < Duration::from_secs(10) {
            assert!(
                ttl > 30_000 && ttl <= 40_000,
                "{name}: kept for the minimum: {ttl}"
            );
            assert!(
                other.is_none(),
                "{name}: another client got in within the minimum"
            );
        }
    }

    // A fixed lease longer than the minimum is shortened to it.
    let start = Instant::now();
    let guard = ours
        .lock("built:fixed")
        .lease(Duration::from_secs(60))
        .hold_at_least(Duration::from_secs(5))
        .acquire()
        .await
        .expect("acquire");
    guard.release().await.expect("release");
    let ttl = pttl(&server, "built:fixed").await;
    if start.elapsed() < Duration::from_secs(5) {
        assert!(ttl > 0 && ttl <= 5_000, "shortened to the minimum: {ttl}");
    }
}

#[tokio::test]
async fn a_release_after_the_minimum_frees_at_once() {
    let server = Server::start();
    let client = server.client().await;
    let minimum = Duration::from_millis(200);
    let guard = client
        .lock("short:1")
        .hold_at_least(minimum)
        .acquire()
        .await
        .expect("acquire");
    // The minimum runs from the acquire's answer, which came before this.
    let answered = Instant::now();
    tokio::time::sleep_until((answered + minimum).into()).await;
    guard.release().await.expect("release");
    assert!(holds(&server, "short:1").await.is_empty(), "freed at once");
}

/// A waiter already asleep when the release leaves the lock to expire: it
/// was told the holder's 10 min watchdog lease, and must learn the shorter
/// minimum (else it sleeps on far past [`WITHIN`]).
#[tokio::test]
async fn waiters_asleep_on_the_lease_are_woken_when_the_minimum_is_shorter() {
    let server = Server::start();
    let ours = server
        .client_with(|c| c.watchdog_timeout(Duration::from_secs(600)))
        .await;
    let theirs = server.client().await;
    let raw = server.raw().await;
    for (name, fair) in [("wake:plain", false), ("wake:fair", true)] {
        let lock = |client: &LockClient| builder(client, name, fair);
        let guard = lock(&ours)
            .hold_at_least(Duration::from_millis(300))
            .acquire()
            .await
            .expect("acquire");
        // Waits as long as it takes: only a wake-up ends its sleep early.
        let waiter = tokio::spawn(lock(&theirs).acquire());
        eventually("the waiter waits", WITHIN, || {
            let mut raw = raw.clone();
            async move {
                if fair {
                    let queued: i64 = raw
                        .llen(format!("redisson_lock_queue:{{{name}}}"))
                        .await
                        .expect("LLEN");
                    queued == 1
                } else {
                    numsub(&mut raw, &format!("redisson_lock__channel:{{{name}}}")).await > 0
                }
            }
        })
        .await;
        guard.release().await.expect("release");
        let taken = timeout(WITHIN, waiter)
            .await
            .unwrap_or_else(|_| panic!("{name}: the waiter slept on past the minimum"))
            .expect("the waiter ran")
            .expect("the waiter took the lock");
        taken.release().await.expect("release");
    }
}

/// A scope opened before its guard's release cannot bring the hold back:
/// the kept lock has no hold left to re-enter.
#[tokio::test]
async fn a_kept_lock_cannot_be_reentered_after_its_release() {
    let server = Server::start();
    let client = server.client().await;
    let guard = client
        .lock("kept:1")
        .hold_at_least(Duration::from_secs(20))
        .acquire()
        .await
        .expect("acquire");
    let reentry = guard.scope(client.lock("kept:1").acquire());
    guard.release().await.expect("release");
    let reentered = reentry.await;
    assert!(
        matches!(reentered, Err(LockError::Lost { .. })),
        "a released hold came back: {reentered:?}"
    );
    let fields = holds(&server, "kept:1").await;
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].1, 0, "still no hold, only the kept key");
}

/// The watchdog's renewal may reach Redis after the release it raced: a
/// kept lock is not renewed (its minimum, not the lease, ends it).
#[tokio::test]
async fn a_kept_lock_is_not_renewed() {
    const RENEW: &str = concat!(
        include_str!("../../lock-runtime/src/engine/redis/scripts/counter.lua"),
        include_str!("../../lock-runtime/src/engine/redis/scripts/reentered.lua"),
        include_str!("../../lock-runtime/src/engine/redis/scripts/renew.lua"),
    );
    let server = Server::start();
    let mut raw = server.raw().await;
    let () = raw.hset("kept:2", "client:1", 0).await.expect("HSET");
    let () = raw.pexpire("kept:2", 5_000).await.expect("PEXPIRE");
    let renewed: Vec<i64> = redis::Script::new(RENEW)
        .key("kept:2")
        .key("redisson_lock_holds:{kept:2}")
        .arg(30_000)
        .arg("client:1")
        .invoke_async(&mut raw)
        .await
        .expect("renew");
    assert_eq!(renewed, vec![0], "a count of 0 is no hold");
    let ttl = pttl(&server, "kept:2").await;
    assert!(ttl > 0 && ttl <= 5_000, "the minimum still ends it: {ttl}");
}

#[tokio::test]
async fn hold_at_least_refuses_what_cannot_keep_it() {
    let server = Server::start();
    let client = server.client().await;

    let read = client
        .read_write_lock("rw:1")
        .read()
        .hold_at_least(Duration::from_secs(1))
        .acquire()
        .await;
    assert!(
        matches!(read, Err(LockError::Config(_))),
        "read lock: {read:?}"
    );

    let short = client
        .lock("lease:1")
        .lease(Duration::from_secs(1))
        .hold_at_least(Duration::from_secs(2))
        .acquire()
        .await;
    assert!(
        matches!(short, Err(LockError::Config(_))),
        "lease < minimum: {short:?}"
    );
    let mut raw = server.raw().await;
    let keys: Vec<String> = raw.keys("*").await.expect("KEYS");
    assert!(keys.is_empty(), "a refused acquire wrote nothing: {keys:?}");
}

// ---------------------------------------------------------------- client =

/// The holds of the lock as `server` sees them, from inside the body.
#[distributed_lock(key = "acct:<id>", client = locks)]
async fn peek(locks: &LockClient, id: u64, server: &Server) -> Result<Vec<i64>, LockError> {
    let mut raw = server.raw().await;
    Ok(raw.hvals(format!("acct:{id}")).await.expect("HVALS"))
}

static SHOP_LOCKS: OnceLock<LockClient> = OnceLock::new();

fn shop_locks() -> &'static LockClient {
    SHOP_LOCKS.get().expect("set by the test first")
}

#[distributed_lock(key = "acct:<id>", client = shop_locks())]
async fn peek_shop(id: u64, server: &Server) -> Result<Vec<i64>, LockError> {
    let mut raw = server.raw().await;
    Ok(raw.hvals(format!("acct:{id}")).await.expect("HVALS"))
}

#[tokio::test]
async fn client_expr_locks_on_that_client() {
    let (one, two) = (Server::start(), Server::start());
    let on_two = two.client().await;

    assert_eq!(
        peek(&on_two, 1, &two).await.expect("locked"),
        vec![1],
        "held on two"
    );
    assert!(
        peek(&on_two, 1, &one).await.expect("locked").is_empty(),
        "not on one"
    );

    assert!(SHOP_LOCKS.set(one.client().await).is_ok(), "set once");
    assert_eq!(
        peek_shop(2, &one).await.expect("locked"),
        vec![1],
        "held on one"
    );
    assert!(
        peek_shop(2, &two).await.expect("locked").is_empty(),
        "not on two"
    );
}
