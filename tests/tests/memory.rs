//! The memory engine as a test kit (DESIGN §12): virtual time, and the
//! fault hooks a service's tests drive its loss, busy and fallback paths
//! with. (The contract every engine keeps runs on it in `engines`.)
//!
//! Every test here runs on a paused clock (`start_paused`): a lease of
//! minutes ends in no real time, and nothing waits on the machine's clock,
//! so they pass however busy the machine is.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::memory::{self, MemoryStore};
use lock_runtime::{Config, LockClient, LockError, distributed_lock};

/// A store of a name no other test uses, and two clients of it (two
/// instances of a service).
async fn store(name: &str, watchdog: Duration) -> (MemoryStore, LockClient, LockClient) {
    let url = format!("memory://kit-{name}");
    let connect = || LockClient::connect(Config::new(url.clone()).watchdog_timeout(watchdog));
    let (a, b) = (connect().await.unwrap(), connect().await.unwrap());
    assert_eq!(a.engine_name(), "memory");
    (memory::store(&format!("kit-{name}")), a, b)
}

#[tokio::test(start_paused = true)]
async fn a_fixed_lease_ends_when_the_tests_clock_passes_it() {
    let (_store, a, b) = store("lease", Duration::from_secs(30)).await;
    let guard = a
        .lock("job")
        .lease(Duration::from_secs(600))
        .acquire()
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(590)).await;
    assert!(!guard.is_lost(), "lost before its lease ended");
    assert!(b.lock("job").try_acquire().await.unwrap().is_none());

    // The guard counts its hold lost a margin (1% + 2 ms) before the
    // store frees the name: never two holders by their own clocks.
    tokio::time::advance(Duration::from_secs(5)).await;
    assert!(guard.is_lost(), "held into its margin");
    assert!(b.lock("job").try_acquire().await.unwrap().is_none());

    tokio::time::advance(Duration::from_secs(6)).await;
    let next = b.lock("job").try_acquire().await.unwrap();
    assert!(next.is_some(), "the name is free once the lease ended");
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_renews_on_the_tests_clock_and_a_waiter_times_out_on_it() {
    let (_store, a, b) = store("watchdog", Duration::from_secs(3)).await;
    let guard = a.lock("job").acquire().await.unwrap();
    assert_eq!(a.renewed_locks(), 1);
    // An hour of virtual time: the watchdog's rounds keep the 3 s lease.
    let waited = b
        .lock("job")
        .wait(Duration::from_secs(3600))
        .acquire()
        .await;
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "{waited:?}"
    );
    assert!(!guard.is_lost(), "the watchdog let the hold go");
    guard.release().await.unwrap();
    assert_eq!(a.renewed_locks(), 0, "a released hold is not renewed");
    assert!(b.lock("job").try_acquire().await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn failed_renewals_end_a_hold_at_its_lease_and_the_next_holder_gets_it() {
    let (store, a, b) = store("renewals", Duration::from_secs(10)).await;
    let guard = a.lock("job").acquire().await.unwrap();
    store.fail_renewals(&a, true);
    let waiter = tokio::spawn(async move {
        let guard = b.lock("job").acquire().await.unwrap();
        guard.token()
    });
    guard.lost().await;
    assert!(guard.is_lost());
    let taken = waiter.await.unwrap();
    assert!(taken > guard.token(), "the next holder's token is larger");
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));

    // Renewals that work again keep the next hold.
    store.fail_renewals(&a, false);
    let kept = a.lock("other").acquire().await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!kept.is_lost());
    kept.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn expire_ends_every_hold_of_a_name_now_and_wakes_its_waiters() {
    let (store, a, b) = store("expire", Duration::from_secs(30)).await;
    let guard = a.lock("stock:42").acquire().await.unwrap();
    let waiter = tokio::spawn(async move { b.lock("stock:42").acquire().await.map(|g| g.token()) });
    while store.waiting("stock:42") == 0 {
        tokio::task::yield_now().await;
    }
    assert!(store.expire("stock:42"));
    assert!(guard.is_lost(), "told at once");
    guard.lost().await;
    let token = waiter.await.unwrap().unwrap();
    assert!(token > guard.token());
    assert!(!store.expire("nobody-holds-this"));
}

#[tokio::test(start_paused = true)]
async fn a_cut_off_client_gets_transient_errors_until_healed() {
    let (store, a, b) = store("partition", Duration::from_secs(30)).await;
    let held = b.lock("job").acquire().await.unwrap();
    store.partition(&a);
    let err = a.lock("free").try_acquire().await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert!(a.inspect("job").await.unwrap_err().is_transient());
    // A waiting acquisition tries again until its wait runs out.
    let waited = a.lock("free").wait(Duration::from_secs(5)).acquire().await;
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "{waited:?}"
    );
    store.heal(&a);
    assert!(a.lock("free").try_acquire().await.unwrap().is_some());
    held.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_cut_off_holder_loses_its_hold_at_its_lease() {
    let (store, a, b) = store("cut-holder", Duration::from_secs(10)).await;
    let guard = a.lock("job").acquire().await.unwrap();
    store.partition(&a);
    guard.lost().await;
    let next = b.lock("job").wait(Duration::from_secs(60)).acquire().await;
    assert!(next.is_ok(), "the name frees at the lease's end: {next:?}");
    store.heal(&a);
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
}

// A service's functions, tested with the kit.

#[distributed_lock(key = "report:<day>", on_busy = "skip", client = locks)]
async fn report(locks: &LockClient, day: u32, ran: &AtomicUsize) -> Result<(), LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "price:<id>", wait = "1s", fallback = cached_price, client = locks)]
async fn price(locks: &LockClient, id: u64) -> Result<u64, LockError> {
    Ok(100 + id)
}

async fn cached_price(_locks: &LockClient, _id: u64) -> Result<u64, LockError> {
    Ok(1)
}

#[distributed_lock(key = "nightly", hold_at_least = "1h", wait = "0s", on_busy = "skip", client = locks)]
async fn nightly(locks: &LockClient, ran: &AtomicUsize) -> Result<(), LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_services_skip_fallback_and_minimum_paths_run_without_a_server() {
    let (_store, a, b) = store("service", Duration::from_secs(30)).await;
    let ran = AtomicUsize::new(0);

    // on_busy = "skip": the body does not run while another instance holds.
    let held = b.lock("report:7").acquire().await.unwrap();
    report(&a, 7, &ran).await.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    held.release().await.unwrap();
    report(&a, 7, &ran).await.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);

    // fallback: called when the lock is not taken within its wait.
    let held = b.lock("price:3").acquire().await.unwrap();
    assert_eq!(price(&a, 3).await.unwrap(), 1);
    held.release().await.unwrap();
    assert_eq!(price(&a, 3).await.unwrap(), 103);

    // hold_at_least: a second instance skips for an hour of virtual time.
    let nightly_ran = AtomicUsize::new(0);
    nightly(&a, &nightly_ran).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3599)).await;
    nightly(&b, &nightly_ran).await.unwrap();
    assert_eq!(
        nightly_ran.load(Ordering::SeqCst),
        1,
        "ran again within its minimum"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    nightly(&b, &nightly_ran).await.unwrap();
    assert_eq!(nightly_ran.load(Ordering::SeqCst), 2);
}

#[distributed_lock(key = "cancel:<id>", on_lost = "cancel", client = locks)]
async fn long_job(locks: &LockClient, id: u64) -> Result<(), LockError> {
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn on_lost_cancel_stops_a_body_whose_lock_was_taken_away() {
    let (store, a, _b) = store("on-lost", Duration::from_secs(30)).await;
    let job = tokio::spawn(async move { long_job(&a, 5).await });
    // Taken away as soon as the job holds it.
    while !store.expire("cancel:5") {
        tokio::task::yield_now().await;
    }
    let ended = job.await.unwrap();
    assert!(matches!(ended, Err(LockError::Lost { .. })), "{ended:?}");
}

/// One client serves one test's runtime after another (the global
/// client's case): a hold's renewals run on the runtime that took it, and
/// a guard dropped as its test ends is still given back.
#[test]
fn a_client_serves_one_paused_runtime_after_another() {
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let client = paused().block_on(async {
        LockClient::connect(
            Config::new("memory://kit-runtimes").watchdog_timeout(Duration::from_secs(3)),
        )
        .await
        .unwrap()
    });
    for _ in 0..2 {
        let client = client.clone();
        paused().block_on(async move {
            let guard = client.lock("job").acquire().await.unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
            assert!(!guard.is_lost(), "renewed on this runtime's clock");
            let info = client.inspect("job").await.unwrap().expect("held");
            assert!(info.ttl.is_some_and(|t| t <= Duration::from_secs(3)));
            guard.release().await.unwrap();
        });
    }
    // A guard dropped as its test's runtime ends is given back all the same
    // (on the client's own runtime), not left to its lease.
    let kept = client.clone();
    paused().block_on(async move {
        let _guard = kept.lock("dropped").acquire().await.unwrap();
    });
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async move {
            tests::eventually(
                "the dropped guard is given back",
                Duration::from_secs(20),
                || async { client.inspect("dropped").await.unwrap().is_none() },
            )
            .await;
            assert!(
                client
                    .lock("dropped")
                    .try_acquire()
                    .await
                    .unwrap()
                    .is_some()
            );
        });
}

#[tokio::test(start_paused = true)]
async fn a_fair_waiter_behind_a_holder_whose_lease_ends_gets_the_lock() {
    let (store, a, b) = store("fair-lease", Duration::from_secs(30)).await;
    let lease = Duration::from_secs(10);
    let first = a.fair_lock("line").acquire().await.unwrap();
    // In line: b first (it will hold, and let its lease end), then a task
    // of a's.
    let second = tokio::spawn({
        let b = b.clone();
        async move { b.fair_lock("line").lease(lease).acquire().await.unwrap() }
    });
    while store.waiting("line") < 1 {
        tokio::task::yield_now().await;
    }
    let third = tokio::spawn({
        let a = a.clone();
        async move {
            // No wait of its own: only the line's moves wake it.
            a.fair_lock("line").acquire().await.map(|g| g.token())
        }
    });
    while store.waiting("line") < 2 {
        tokio::task::yield_now().await;
    }
    // b is cut off as the name frees: the third finds it free, but not its
    // turn, and waits; b takes it once healed.
    store.partition(&b);
    first.release().await.unwrap();
    // The woken waiters try once (a test's runtime has one thread: they run
    // while this task yields), b in vain; then b is healed.
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    store.heal(&b);
    let held = second.await.unwrap();
    // Nobody releases `held`: the third gets the lock when its lease ends.
    let token = tokio::time::timeout(Duration::from_secs(300), third)
        .await
        .expect("the line moved on at the lease's end")
        .unwrap()
        .unwrap();
    assert!(token > held.token());
    assert!(held.is_lost());
}

#[tokio::test(start_paused = true)]
async fn after_failed_renewals_the_same_client_takes_the_name_again() {
    let (store, a, _b) = store("retake", Duration::from_secs(3)).await;
    let old = a.lock("job").acquire().await.unwrap();
    store.fail_renewals(&a, true);
    old.lost().await;
    store.fail_renewals(&a, false);
    // The lost guard is still alive: it keeps nothing of the client's.
    let again = a.lock("job").wait(Duration::from_secs(60)).acquire().await;
    assert!(again.is_ok(), "{again:?}");
    assert_eq!(
        a.renewed_locks(),
        1,
        "the lost hold is not counted as renewed"
    );
    assert!(matches!(old.release().await, Err(LockError::Lost { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_read_in_the_scope_of_a_lost_write_waits_for_the_new_writer() {
    let (_store, a, b) = store("read-under-lost-write", Duration::from_secs(30)).await;
    let write = a
        .read_write_lock("doc")
        .write()
        .lease(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(write.is_lost());
    // The write's lease ended and another client's writer holds the name: a
    // read asked in the lost write's scope is no downgrade of it.
    let other = b.read_write_lock("doc").write().acquire().await.unwrap();
    let read = write
        .scope(async { a.read_write_lock("doc").read().try_acquire().await })
        .await;
    assert!(
        !matches!(read, Ok(Some(_))),
        "a read beside another client's write: {read:?}"
    );
    other.release().await.unwrap();
}
