//! The contract that does not depend on the store, run on every engine:
//! every case below is one `async fn case(store: &Store)` (`&mut Store`
//! for the one that stops it), and
//! [`on_every_engine!`] makes it one test per engine of the suite's list
//! ([`tests::every_engine!`]), `<case>::on_redis`, `<case>::on_etcd`,
//! `<case>::on_zookeeper`, `<case>::on_postgres`, `<case>::on_mysql` (on
//! MariaDB) and `<case>::on_memory`, each against a fresh store of its own
//! (DESIGN §3,
//! §9: "the client, builders, guards, attribute, `inspect`/`force_unlock`
//! ... are the same for all").
//!
//! What a case may look at in the store is what [`Store`] offers: lock
//! clients, how many callers wait for a lock (to await a waiter's
//! arrival instead of sleeping), and how many records of a lock the store
//! keeps. Everything else goes through the public
//! API, so a case asserts only what every engine promises. Layouts,
//! interop and faults stay in the engine's own test files.
//!
//! The same holds for `lockctl` (the `lockctl` module here: what it shows
//! and does on any engine's URL) and for the metrics (`metrics`: each
//! engine's case in a child process, with a recorder of its own) and the
//! global client (`global`: `LOCK_URL` of any scheme, in a child process).
//!
//! Run one engine's part with `cargo test -p tests --test engines on_etcd`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockKind, RwMode, distributed_lock};
use tests::engines::Store;
use tests::{Kind, Section, eventually, finish};
use tokio::time::timeout;

/// Generous bound on one wait for an event (it asserts no speed). Shorter
/// than the default watchdog lease (30 s), so a waiter that gets a lock
/// within it was woken by a release, not by the holder's lease running out.
const WITHIN: Duration = Duration::from_secs(20);

/// Makes each named `async fn(&mut Store)` case one test per row of
/// [`tests::every_engine!`]'s list, in a module of the case's name (row
/// `on_redis` makes `<case>::on_redis`, run against `Store::redis()`):
/// every row (`all`), those whose store is a server (`servers`), or the
/// SQL stores (`sql`).
macro_rules! on_engines {
    ($which:ident [$($case:ident),+] $rows:tt) => {
        $( on_engines!(@case $which $case $rows); )+
    };
    (@case $which:ident $case:ident
        [$(($test:ident, $store:ident, $where:ident, $family:ident)),+ $(,)?]) => {
        mod $case {
            use tests::engines::Store;

            $( on_engines!(@test $which $where $family $case $test $store); )+
        }
    };
    (@test servers in_process $($rest:tt)*) => {};
    (@test sql $where:ident other $($rest:tt)*) => {};
    (@test $which:ident $where:ident $family:ident $case:ident $test:ident $store:ident) => {
        #[tokio::test]
        async fn $test() {
            super::$case(&mut Store::$store()).await;
        }
    };
}

/// Makes each named case a test on every engine.
macro_rules! on_every_engine {
    ($($case:ident),+ $(,)?) => {
        tests::every_engine!(on_engines!(all [$($case),+]));
    };
}

/// Makes each named case a test per engine with a server (every one but
/// the memory engine's, which has no server to stop or miss).
macro_rules! on_every_server {
    ($($case:ident),+ $(,)?) => {
        tests::every_engine!(on_engines!(servers [$($case),+]));
    };
}

/// Makes each named case a test per SQL store (PostgreSQL, MySQL): what
/// ShedLock's table promises on both.
macro_rules! on_every_sql_engine {
    ($($case:ident),+ $(,)?) => {
        tests::every_engine!(on_engines!(sql [$($case),+]));
    };
}

/// Makes `$case` a test per engine with a server, in a module of its
/// name, each calling `$run(engine, start)`: for the cases that run in a
/// child process of their own (see [`run_in_child`]), where the store is
/// started. `and memory`: on the memory engine too.
macro_rules! in_a_child_on_every_engine {
    ($case:ident, $run:path) => {
        tests::every_engine!(in_a_child!(servers $case $run));
    };
    ($case:ident, $run:path, and memory) => {
        tests::every_engine!(in_a_child!(all $case $run));
    };
}

/// [`in_a_child_on_every_engine!`]'s tests, from the list's rows.
macro_rules! in_a_child {
    ($which:ident $case:ident $run:path
        [$(($test:ident, $store:ident, $where:ident, $family:ident)),+ $(,)?]) => {
        mod $case {
            use tests::engines::Store;

            $( in_a_child!(@test $which $where $test $store $run); )+
        }
    };
    (@test servers in_process $($rest:tt)*) => {};
    (@test $which:ident $where:ident $test:ident $store:ident $run:path) => {
        #[test]
        fn $test() {
            $run(stringify!($store), Store::$store);
        }
    };
}

/// Runs this binary's test `test` again in a child process, with `vars`
/// set there, and fails when it fails there: for what is one per process
/// (the metrics recorder, the global client, the environment).
fn run_in_child(test: &str, vars: &[(&str, String)]) {
    let status = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([test, "--exact", "--nocapture"])
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .status()
        .expect("the child test runs");
    assert!(status.success(), "{test} failed in the child");
}

mod global;
mod lockctl;
mod metrics;
mod semaphore;
mod sql;

on_every_engine!(
    waiting_runs_out_with_a_typed_timeout_and_a_release_wakes_a_waiter,
    one_holder_at_a_time_across_clients_and_tasks,
    tokens_strictly_increase_across_holders_and_reentries,
    reentry_follows_the_scope_not_the_task,
    a_release_after_a_fixed_lease_ran_out_is_lost,
    lost_resolves_after_force_unlock_and_the_waiter_gets_the_lock,
    inspect_names_the_holders,
    a_multi_lock_takes_both_names_or_neither,
    a_segmented_lock_takes_one_segment_or_all,
    hold_at_least_keeps_the_lock_taken_after_an_early_release,
    the_attribute_locks_on_the_client_it_is_given,
    a_dropped_guard_is_released,
    a_cancelled_waiter_leaves_nothing_behind,
    a_cancelled_acquisition_leaves_no_record_in_the_store,
    acquisitions_joined_in_a_block_on_body_exclude_each_other,
    an_unbounded_wait_acquires_a_free_lock_a_released_one_and_every_segment,
    a_lease_beyond_the_maximum_is_a_config_error_that_writes_nothing,
    an_acquisition_dropped_at_any_point_leaves_no_record,
    a_waiter_dropped_with_its_client_leaves_no_record,
    a_waiter_on_a_runtime_that_shut_down_leaves_no_record,
    a_clients_own_force_unlock_tells_its_guard_at_once,
    the_watchdog_keeps_a_hold_past_its_lease,
    extend_moves_a_fixed_lease_forward,
    bad_input_is_a_typed_error,
    a_dead_store_is_an_error_not_a_busy_lock,
);

on_every_server!(a_store_not_there_is_a_connect_error_that_may_heal);

on_every_engine!(
    a_fair_lock_serves_clients_in_arrival_order,
    a_fair_lock_serves_tasks_and_clients_in_arrival_order,
    readers_share_and_a_writer_excludes,
    a_read_taken_under_a_write_is_a_read_hold_once_the_write_is_released,
    a_reader_and_a_writer_joined_in_one_task_both_get_the_lock,
);

/// A reader and a writer of one client joined in one task are two holders
/// (neither runs in the other's scope): whichever the store lets in first,
/// the other gets the lock after it; a reader that holds first keeps its
/// hold until the writer waits in the store, then lets it in. (The
/// per-task model made them one holder, and the writer was refused as an
/// upgrade.)
async fn a_reader_and_a_writer_joined_in_one_task_both_get_the_lock(store: &Store) {
    let client = store.client().await;
    let rw = client.read_write_lock("rwj");
    let written = std::sync::atomic::AtomicBool::new(false);
    let reading = async {
        let guard = rw.read().acquire().await?;
        // The writer either came first (and is done) or waits for this read.
        let seen = timeout(WITHIN, async {
            while !written.load(Ordering::Acquire) && store.waiting(Kind::Write, "rwj").await < 1 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(seen.is_ok(), "the writer neither came first nor waits");
        guard.release().await
    };
    let writing = async {
        let guard = rw.write().wait(WITHIN).acquire().await?;
        written.store(true, Ordering::Release);
        guard.release().await
    };
    let (read, write) = timeout(WITHIN * 3, async { tokio::join!(reading, writing) })
        .await
        .expect("the joined reader and writer finished");
    read.expect("the reader");
    write.expect("the writer waits for the reader, then writes");
}

/// The lock's holders' ids, as `client` inspects them (none when free).
async fn holder_ids(client: &LockClient, name: &str) -> Vec<String> {
    let info = client.inspect(name).await.expect("inspect");
    info.map(|i| i.holders.into_iter().map(|h| h.id).collect())
        .unwrap_or_default()
}

/// One attempt at `kind` on `name`: whether it was free (then given back).
async fn free(client: &LockClient, kind: Kind, name: &str) -> bool {
    match kind.builder(client, name).try_acquire().await.expect("try") {
        Some(guard) => {
            guard.release().await.expect("release");
            true
        }
        None => false,
    }
}

async fn waiting_runs_out_with_a_typed_timeout_and_a_release_wakes_a_waiter(store: &Store) {
    let (a, b) = (store.client().await, store.client().await);
    let guard = a.lock("busy").acquire().await.unwrap();
    assert!(b.lock("busy").try_acquire().await.unwrap().is_none());

    let wait = Duration::from_millis(300);
    match b.lock("busy").wait(wait).acquire().await {
        Err(LockError::Timeout { name, waited }) => {
            assert_eq!(name, "busy");
            assert_eq!(waited, wait);
        }
        other => panic!("expected a timeout after {wait:?}, got {other:?}"),
    }
    match b.fair_lock("busy").wait(Duration::ZERO).acquire().await {
        Err(LockError::Timeout { name, waited }) => {
            assert_eq!(name, "busy");
            assert_eq!(waited, Duration::ZERO);
        }
        other => panic!("expected a timeout of one attempt, got {other:?}"),
    }
    // The waits that ran out left nobody waiting, and the holder holding.
    store
        .until_waiting(Kind::Reentrant, "busy", 0, WITHIN)
        .await;
    assert_eq!(holder_ids(&b, "busy").await, [guard.holder_id()]);
    assert!(!guard.is_lost());

    // A waiter with time to spare is woken by the release (the holder's
    // watchdog lease would outlast its wait).
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("busy").wait(WITHIN).acquire().await }
    });
    store
        .until_waiting(Kind::Reentrant, "busy", 1, WITHIN)
        .await;
    guard.release().await.unwrap();
    let next = finish(WITHIN, waiter).await;
    assert_eq!(holder_ids(&a, "busy").await, [next.holder_id()]);
    next.release().await.unwrap();
    assert!(a.inspect("busy").await.unwrap().is_none());
}

/// Mutual exclusion of every exclusive kind: two clients, four tasks each,
/// five rounds each; never two inside at once.
async fn one_holder_at_a_time_across_clients_and_tasks(store: &Store) {
    let clients = [store.client().await, store.client().await];
    for kind in [Kind::Reentrant, Kind::Fair, Kind::Write] {
        let name = format!("count-{kind:?}");
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let entries = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for client in &clients {
            for _ in 0..4 {
                let (client, name) = (client.clone(), name.clone());
                let (inside, most, entries) = (inside.clone(), most.clone(), entries.clone());
                tasks.push(tokio::spawn(async move {
                    for _ in 0..5 {
                        let guard = kind.builder(&client, &name).wait(WITHIN).acquire().await?;
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        entries.fetch_add(1, Ordering::SeqCst);
                        // An await point inside: a second holder would get in.
                        tokio::task::yield_now().await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        guard.release().await?;
                    }
                    Ok::<_, LockError>(())
                }));
            }
        }
        for task in tasks {
            finish(Duration::from_secs(60), task).await;
        }
        assert_eq!(entries.load(Ordering::SeqCst), 40, "{kind:?}");
        assert_eq!(
            most.load(Ordering::SeqCst),
            1,
            "{kind:?}: two holders inside at once"
        );
        assert!(clients[0].inspect(&name).await.unwrap().is_none());
    }
}

async fn tokens_strictly_increase_across_holders_and_reentries(store: &Store) {
    let (a, b) = (store.client().await, store.client().await);
    for kind in [Kind::Reentrant, Kind::Fair, Kind::Write] {
        let name = format!("fenced-{kind:?}");
        let mut last = 0;
        for round in 0..6 {
            let client = if round % 2 == 0 { &a } else { &b };
            let outer = kind.builder(client, &name).acquire().await.unwrap();
            assert!(
                outer.token() > last,
                "{kind:?} round {round}: {} after {last}",
                outer.token()
            );
            let inner = outer
                .scope(kind.builder(client, &name).wait(Duration::ZERO).acquire())
                .await
                .unwrap_or_else(|e| panic!("{kind:?}: re-entry in the scope: {e}"));
            assert!(
                inner.token() > outer.token(),
                "{kind:?}: a re-entry takes a new token: {} after {}",
                inner.token(),
                outer.token()
            );
            last = inner.token();
            inner.release().await.unwrap();
            outer.release().await.unwrap();
        }
    }
}

/// Takes `name` as a new holder (no scope), runs `section` under it, releases.
async fn exclusive(client: &LockClient, name: &str, section: &Section) -> Result<(), LockError> {
    let guard = client.lock(name).wait(WITHIN).acquire().await?;
    section.enter(async {}).await;
    guard.release().await
}

async fn reentry_follows_the_scope_not_the_task(store: &Store) {
    let (client, other) = (store.client().await, store.client().await);

    // Joined in one task outside any scope: two holders.
    let (first, second) = tokio::join!(
        client.lock("joined").wait(Duration::ZERO).acquire(),
        client.lock("joined").wait(Duration::ZERO).acquire()
    );
    match (first, second) {
        (Ok(guard), Err(LockError::Timeout { .. }))
        | (Err(LockError::Timeout { .. }), Ok(guard)) => guard.release().await.unwrap(),
        (first, second) => {
            panic!("one of two joined attempts gets the lock: {first:?}, {second:?}")
        }
    }
    let section = Section::new();
    let (first, second) = timeout(Duration::from_secs(60), async {
        tokio::join!(
            exclusive(&client, "joined", &section),
            exclusive(&client, "joined", &section)
        )
    })
    .await
    .expect("the joined acquisitions finished");
    first.unwrap();
    second.unwrap();
    assert_eq!(section.max(), 1, "two joined futures were inside at once");

    let outer = client.lock("scoped").acquire().await.unwrap();
    // Outside the guard's scope, the same task is another holder...
    assert!(client.lock("scoped").try_acquire().await.unwrap().is_none());
    // ...and so is a task spawned inside it (it starts with no scope).
    let spawned = outer
        .scope(tokio::spawn({
            let client = client.clone();
            async move {
                client
                    .lock("scoped")
                    .try_acquire()
                    .await
                    .map(|g| g.is_some())
            }
        }))
        .await
        .unwrap()
        .unwrap();
    assert!(!spawned, "a task spawned in the scope re-entered");
    // Inside the scope: a re-entry, one attempt suffices.
    outer
        .scope(async {
            let inner = client
                .lock("scoped")
                .wait(Duration::ZERO)
                .acquire()
                .await
                .expect("re-entry in the scope");
            assert_eq!(inner.holder_id(), outer.holder_id());
            let info = client.inspect("scoped").await.unwrap().expect("held");
            assert_eq!(info.holders.len(), 1);
            assert_eq!(info.holders[0].count, 2, "one holder, held twice");
            inner.release().await.unwrap();
        })
        .await;
    // The outer hold remains after the inner release.
    assert!(other.lock("scoped").try_acquire().await.unwrap().is_none());
    let info = client.inspect("scoped").await.unwrap().expect("held");
    assert_eq!(info.holders[0].count, 1);
    outer.release().await.unwrap();
    assert!(free(&other, Kind::Reentrant, "scoped").await);
}

async fn a_release_after_a_fixed_lease_ran_out_is_lost(store: &Store) {
    let (a, b) = (store.client().await, store.client().await);
    let guard = a
        .lock("leased")
        .lease(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();
    assert_eq!(a.renewed_locks(), 0, "a fixed lease is not renewed");
    // Nobody releases it: the other client gets it when the lease ends.
    let next = b.lock("leased").wait(WITHIN).acquire().await.unwrap();
    assert!(next.token() > guard.token());
    assert!(guard.is_lost(), "the guard knows its lease ran out");
    timeout(WITHIN, guard.lost())
        .await
        .expect("lost() resolves");
    match guard.release().await {
        Err(LockError::Lost { name }) => assert_eq!(name, "leased"),
        other => panic!("expected Lost, got {other:?}"),
    }
    // The late release left the new holder alone.
    assert_eq!(holder_ids(&a, "leased").await, [next.holder_id()]);
    assert!(a.lock("leased").try_acquire().await.unwrap().is_none());
    next.release().await.unwrap();
}

async fn lost_resolves_after_force_unlock_and_the_waiter_gets_the_lock(store: &Store) {
    // Renewed every second: by its own clock the hold is never lost, so
    // only the force-unlock can end it.
    let a = store
        .client_with(|c| c.watchdog_timeout(Duration::from_secs(3)))
        .await;
    let (b, c) = (store.client().await, store.client().await);
    let guard = a.lock("stuck").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let c = c.clone();
        async move { c.lock("stuck").wait(WITHIN).acquire().await }
    });
    store
        .until_waiting(Kind::Reentrant, "stuck", 1, WITHIN)
        .await;
    assert!(!guard.is_lost());

    assert!(b.force_unlock("stuck").await.unwrap(), "there was a holder");
    timeout(WITHIN, guard.lost())
        .await
        .expect("lost() resolves after a force-unlock");
    assert!(guard.is_lost());
    let next = finish(WITHIN, waiter).await;
    assert_eq!(holder_ids(&b, "stuck").await, [next.holder_id()]);
    match guard.release().await {
        Err(LockError::Lost { name }) => assert_eq!(name, "stuck"),
        other => panic!("expected Lost, got {other:?}"),
    }
    eventually("a lost hold is no longer renewed", WITHIN, || async {
        a.renewed_locks() == 0
    })
    .await;
    // The old holder's late release left the new holder alone.
    assert_eq!(holder_ids(&b, "stuck").await, [next.holder_id()]);
    next.release().await.unwrap();
    assert!(!b.force_unlock("stuck").await.unwrap(), "nothing to free");
    assert!(free(&a, Kind::Reentrant, "stuck").await);
}

async fn inspect_names_the_holders(store: &Store) {
    let (a, b) = (store.client().await, store.client().await);
    assert_eq!(b.inspect("seen").await.unwrap(), None);

    let guard = a.lock("seen").acquire().await.unwrap();
    assert!(
        guard.holder_id().starts_with(&format!("{}:", a.id())),
        "holder id <client id>:<n>: {}",
        guard.holder_id()
    );
    let info = b.inspect("seen").await.unwrap().expect("held");
    assert_eq!(info.name, "seen");
    assert_eq!(info.kind, LockKind::Reentrant);
    assert_eq!(info.mode, None);
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(info.holders[0].id, guard.holder_id());
    assert_eq!(info.holders[0].client_id(), a.id());
    assert_eq!(info.holders[0].count, 1);
    assert!(!info.holders[0].write);
    let ttl = info.ttl.expect("a watchdog lease has a TTL");
    assert!(
        ttl > Duration::ZERO && ttl <= Duration::from_secs(30),
        "{ttl:?}"
    );
    assert!(info.queue.is_empty(), "{info:?}");
    guard.release().await.unwrap();
    assert_eq!(b.inspect("seen").await.unwrap(), None);

    // Two readers, then a writer.
    let r1 = a.read_write_lock("doc").read().acquire().await.unwrap();
    let r2 = b.read_write_lock("doc").read().acquire().await.unwrap();
    let info = a.inspect("doc").await.unwrap().expect("read");
    assert_eq!(info.kind, LockKind::ReadWrite);
    assert_eq!(info.mode, Some(RwMode::Read));
    let mut ids: Vec<&str> = info.holders.iter().map(|h| h.id.as_str()).collect();
    ids.sort();
    let mut expected = [r1.holder_id(), r2.holder_id()];
    expected.sort();
    assert_eq!(ids, expected);
    assert!(info.holders.iter().all(|h| !h.write && h.count == 1));
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = b.read_write_lock("doc").write().acquire().await.unwrap();
    let info = a.inspect("doc").await.unwrap().expect("written");
    assert_eq!(info.kind, LockKind::ReadWrite);
    assert_eq!(info.mode, Some(RwMode::Write));
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(info.holders[0].id, w.holder_id());
    assert!(info.holders[0].write);
    w.release().await.unwrap();
    assert_eq!(a.inspect("doc").await.unwrap(), None);
}

async fn a_fair_lock_serves_clients_in_arrival_order(store: &Store) {
    let holder = store.client().await;
    let guard = holder.fair_lock("line").acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let client = store.client().await;
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = client.fair_lock("line").wait(WITHIN).acquire().await?;
            order.lock().unwrap().push(i);
            guard.release().await
        }));
        // The next one arrives after this one waits.
        store.until_waiting(Kind::Fair, "line", i + 1, WITHIN).await;
    }
    guard.release().await.unwrap();
    for waiter in waiters {
        finish(WITHIN, waiter).await;
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
    store.until_waiting(Kind::Fair, "line", 0, WITHIN).await;
    assert!(holder.inspect("line").await.unwrap().is_none());
}

/// Issue 34: arrival order holds across the tasks of one client too, the
/// holder's own among them: each waiting call chain has its own place in
/// the store's line (on etcd and ZooKeeper a fair waiter has a record of
/// its own; a plain lock's waiters of one client may share one).
async fn a_fair_lock_serves_tasks_and_clients_in_arrival_order(store: &Store) {
    let (ours, theirs) = (store.client().await, store.client().await);
    let guard = ours.fair_lock("mixed").acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..6 {
        // The holder's client and another, taking turns.
        let client = if i % 2 == 0 {
            ours.clone()
        } else {
            theirs.clone()
        };
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = client.fair_lock("mixed").wait(WITHIN).acquire().await?;
            order.lock().unwrap().push(i);
            guard.release().await
        }));
        store
            .until_waiting(Kind::Fair, "mixed", i + 1, WITHIN)
            .await;
    }
    guard.release().await.unwrap();
    for waiter in waiters {
        finish(WITHIN, waiter).await;
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4, 5]);
    assert!(theirs.inspect("mixed").await.unwrap().is_none());
}

async fn readers_share_and_a_writer_excludes(store: &Store) {
    let (a, b, w) = (
        store.client().await,
        store.client().await,
        store.client().await,
    );
    let r1 = a.read_write_lock("doc").read().try_acquire().await.unwrap();
    let r2 = b.read_write_lock("doc").read().try_acquire().await.unwrap();
    let (r1, r2) = (
        r1.expect("a reader"),
        r2.expect("a second reader beside it"),
    );
    assert!(
        !free(&w, Kind::Write, "doc").await,
        "a writer beside readers"
    );

    // A writer waits for every reader.
    let writer = tokio::spawn({
        let w = w.clone();
        async move {
            w.read_write_lock("doc")
                .write()
                .wait(WITHIN)
                .acquire()
                .await
        }
    });
    store.until_waiting(Kind::Write, "doc", 1, WITHIN).await;
    r1.release().await.unwrap();
    // One reader left: it alone holds, in read mode.
    let info = a.inspect("doc").await.unwrap().expect("read");
    assert_eq!(info.mode, Some(RwMode::Read));
    let ids: Vec<&str> = info.holders.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, [r2.holder_id()]);
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    r2.release().await.unwrap();
    let writing = finish(WITHIN, writer).await;

    // A writer excludes readers and writers.
    assert!(
        !free(&a, Kind::Read, "doc").await,
        "a reader beside a writer"
    );
    assert!(!free(&b, Kind::Write, "doc").await, "two writers");
    writing.release().await.unwrap();
    assert!(free(&a, Kind::Read, "doc").await);
    assert!(free(&b, Kind::Write, "doc").await);
}

async fn a_multi_lock_takes_both_names_or_neither(store: &Store) {
    let (a, b, c) = (
        store.client().await,
        store.client().await,
        store.client().await,
    );
    let both = a.multi_lock(["m:b", "m:a"]).acquire().await.unwrap();
    assert_eq!(both.name(), "m:a+m:b");
    assert_eq!(holder_ids(&c, "m:a").await, [both.holder_id()]);
    assert_eq!(holder_ids(&c, "m:b").await, [both.holder_id()]);
    assert!(!free(&b, Kind::Reentrant, "m:a").await);
    assert!(!free(&b, Kind::Reentrant, "m:b").await);
    let token = both.token();
    both.release().await.unwrap();
    assert!(c.inspect("m:a").await.unwrap().is_none());
    assert!(c.inspect("m:b").await.unwrap().is_none());

    // One name busy: neither is taken.
    let blocker = b.lock("m:b").acquire().await.unwrap();
    match a
        .multi_lock(["m:a", "m:b"])
        .wait(Duration::ZERO)
        .acquire()
        .await
    {
        Err(LockError::Timeout { name, .. }) => assert_eq!(name, "m:b", "names the busy lock"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    eventually("the failed attempt gave m:a back", WITHIN, || async {
        c.inspect("m:a").await.unwrap().is_none()
    })
    .await;
    assert_eq!(a.renewed_locks(), 0, "nothing left for the watchdog");

    // A waiting multi lock holds nothing while it waits, and gets both.
    let waiting = tokio::spawn({
        let a = a.clone();
        async move { a.multi_lock(["m:a", "m:b"]).wait(WITHIN).acquire().await }
    });
    store.until_waiting(Kind::Reentrant, "m:b", 1, WITHIN).await;
    // Eventually: the waiter seen may be the one-attempt try at m:b that
    // comes before the wait, while m:a is still held; once waiting, the
    // multi lock holds m:a no more.
    eventually(
        "the waiting multi lock holds m:a no more",
        WITHIN,
        || async { free(&c, Kind::Reentrant, "m:a").await },
    )
    .await;
    blocker.release().await.unwrap();
    let both = finish(WITHIN, waiting).await;
    assert!(both.token() > token, "{} after {token}", both.token());
    assert!(!free(&c, Kind::Reentrant, "m:a").await);
    assert!(!free(&c, Kind::Reentrant, "m:b").await);
    both.release().await.unwrap();
}

async fn a_segmented_lock_takes_one_segment_or_all(store: &Store) {
    let (a, b, c) = (
        store.client().await,
        store.client().await,
        store.client().await,
    );
    let ours = a.segmented_lock("sku", 3);
    let one = ours.segment(1).acquire().await.unwrap();
    assert_eq!(one.segment(), 1);
    assert_eq!(one.name(), ours.segment_name(1));
    assert_eq!(
        holder_ids(&c, &ours.segment_name(1)).await,
        [one.guard().holder_id()]
    );
    let theirs = b.segmented_lock("sku", 3);
    assert!(theirs.segment(1).try_acquire().await.unwrap().is_none());
    // Whichever segment it starts from, `any` finds a free one.
    for _ in 0..3 {
        let got = theirs
            .any()
            .try_acquire()
            .await
            .unwrap()
            .expect("a free one");
        assert_ne!(got.segment(), 1);
        got.release().await.unwrap();
    }

    // `all` while one is held: a timeout naming the lock, holding none.
    match theirs
        .all()
        .wait(Duration::from_millis(300))
        .acquire()
        .await
    {
        Err(LockError::Timeout { name, .. }) => assert_eq!(name, "sku"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let probe = c.segmented_lock("sku", 3);
    eventually("segments 0 and 2 given back", WITHIN, || async {
        let mut given_back = true;
        for segment in [0, 2] {
            match probe.segment(segment).try_acquire().await.unwrap() {
                Some(guard) => guard.release().await.unwrap(),
                None => given_back = false,
            }
        }
        given_back
    })
    .await;

    // A waiting `all` gets every segment once the holder leaves.
    let waiting = tokio::spawn(async move { theirs.all().wait(WITHIN).acquire().await });
    one.release().await.unwrap();
    let all = finish(WITHIN, waiting).await;
    let segments: Vec<usize> = all.segments().iter().map(|g| g.segment()).collect();
    assert_eq!(segments, [0, 1, 2]);
    assert!((0..3).all(|i| all.token(i).is_some_and(|t| t > 0)));
    assert!(ours.any().try_acquire().await.unwrap().is_none());
    assert!(probe.segment(2).try_acquire().await.unwrap().is_none());
    all.release().await.unwrap();
    let again = ours.any().try_acquire().await.unwrap().expect("free again");
    again.release().await.unwrap();
}

async fn hold_at_least_keeps_the_lock_taken_after_an_early_release(store: &Store) {
    let (a, b) = (store.client().await, store.client().await);
    let minimum = Duration::from_secs(3);
    let guard = a
        .lock("job")
        .hold_at_least(minimum)
        .acquire()
        .await
        .unwrap();
    let (holder, token) = (guard.holder_id().to_owned(), guard.token());
    guard.release().await.unwrap();
    assert_eq!(
        a.renewed_locks(),
        0,
        "a released guard kept by its minimum is not counted as renewed"
    );
    // Released, but taken until the minimum ends.
    assert!(b.lock("job").try_acquire().await.unwrap().is_none());
    let during = b.inspect("job").await.unwrap().expect("still taken");
    // Then it is free without anyone releasing it again.
    let later = b.lock("job").wait(WITHIN).acquire().await.unwrap();
    assert!(later.token() > token);
    later.release().await.unwrap();

    assert_eq!(during.holders.len(), 1, "{during:?}");
    assert_eq!(during.holders[0].id, holder);
    let ttl = during.ttl.expect("the minimum's end is a TTL");
    assert!(ttl <= minimum, "{ttl:?}");
    assert_eq!(
        during.holders[0].count, 0,
        "a holder whose holds are all released, kept until its minimum ends, \
         counts 0 (HolderInfo::count): {during:?}"
    );
}

// The attribute on a client of its own (`client = locks`), not the global one.

#[distributed_lock(key = "attr:<id>", client = locks)]
async fn critical(locks: &LockClient, id: u64, section: &Section) -> Result<(), LockError> {
    section.enter(async {}).await;
    Ok(())
}

/// Calls [`inner`] inside its locked body.
#[distributed_lock(key = "attr:<id>", client = locks)]
async fn outer(locks: &LockClient, id: u64) -> Result<u64, LockError> {
    inner(locks, id).await
}

/// The hold count of `attr:<id>` from inside its locked body.
#[distributed_lock(key = "attr:<id>", client = locks)]
async fn inner(locks: &LockClient, id: u64) -> Result<u64, LockError> {
    let info = locks.inspect(&format!("attr:{id}")).await?;
    Ok(info.expect("held inside the body").holders[0].count)
}

#[distributed_lock(key = "attr:<id>", wait = "0s", client = locks)]
async fn once(locks: &LockClient, id: u64, ran: &AtomicUsize) -> Result<(), LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "attr:<id>", on_busy = "skip", client = locks)]
async fn skipped(locks: &LockClient, id: u64, ran: &AtomicUsize) -> Result<(), LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

async fn the_attribute_locks_on_the_client_it_is_given(store: &Store) {
    let (ours, theirs) = (store.client().await, store.client().await);

    // Locked calls joined in one task exclude each other.
    let section = Section::new();
    let (first, second) = timeout(Duration::from_secs(60), async {
        tokio::join!(critical(&ours, 1, &section), critical(&ours, 1, &section))
    })
    .await
    .expect("the joined calls finished");
    first.unwrap();
    second.unwrap();
    assert_eq!(section.max(), 1, "two joined bodies ran at once");

    // A locked call awaited in a locked body re-enters.
    let count = timeout(WITHIN, outer(&ours, 2))
        .await
        .expect("the nested call re-entered instead of waiting for its caller")
        .unwrap();
    assert_eq!(count, 2, "one holder, held twice");
    assert!(ours.inspect("attr:2").await.unwrap().is_none(), "released");

    // Busy on another client: a timeout, or a skip; the body never runs.
    let ran = AtomicUsize::new(0);
    let held = theirs.lock("attr:3").acquire().await.unwrap();
    match once(&ours, 3, &ran).await {
        Err(LockError::Timeout { name, .. }) => assert_eq!(name, "attr:3"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    timeout(WITHIN, skipped(&ours, 3, &ran))
        .await
        .expect("a skip makes one attempt")
        .expect("a skipped call is Ok(())");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "a body ran without the lock");
    assert_eq!(holder_ids(&ours, "attr:3").await, [held.holder_id()]);
    held.release().await.unwrap();
    once(&ours, 3, &ran).await.unwrap();
    skipped(&ours, 3, &ran).await.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    assert!(free(&theirs, Kind::Reentrant, "attr:3").await);
}

async fn a_dropped_guard_is_released(store: &Store) {
    let (a, b) = (store.client().await, store.client().await);
    let guard = a.lock("dropped").acquire().await.unwrap();
    drop(guard);
    // Only the background release frees it within the wait: the watchdog
    // lease would outlast it.
    let next = b.lock("dropped").wait(WITHIN).acquire().await.unwrap();
    next.release().await.unwrap();
    // Eventually: the background release lets the lock go before it lets
    // go of its hold's bookkeeping.
    eventually("the dropped guard is renewed no more", WITHIN, || async {
        a.renewed_locks() == 0
    })
    .await;

    // Dropped outside any runtime too.
    let guard = a.lock("dropped").acquire().await.unwrap();
    std::thread::spawn(move || drop(guard)).join().unwrap();
    eventually("released from a plain thread", WITHIN, || async {
        b.inspect("dropped").await.unwrap().is_none()
    })
    .await;
    assert!(free(&b, Kind::Reentrant, "dropped").await);

    // A release dropped before it ever ran (a `select!` whose other arm was
    // ready, a task aborted before it started) is a dropped guard too.
    let guard = a.lock("dropped").acquire().await.unwrap();
    drop(guard.release());
    let next = b.lock("dropped").wait(WITHIN).acquire().await.unwrap();
    next.release().await.unwrap();
    eventually(
        "the dropped release's guard is renewed no more",
        WITHIN,
        || async { a.renewed_locks() == 0 },
    )
    .await;
}

/// A plain acquisition cancelled at any point (before its first call
/// went out, with it in flight, while it waits) leaves no record of its
/// own in the store, where another program would look (etcd's keys,
/// ZooKeeper's nodes, Redis's holder fields, the SQL stores' rows): the
/// holder's alone stays, and nothing is left to keep the next holder out.
/// A dropped guard's record goes too, given back in the background.
async fn a_cancelled_acquisition_leaves_no_record_in_the_store(store: &Store) {
    let (c, other) = (store.client().await, store.client().await);
    let held = other.lock("cancel").acquire().await.unwrap();
    store.until_records("cancel", 1, WITHIN).await;
    for micros in [0, 50, 200, 500, 1_000, 2_000, 5_000, 20_000, 100_000] {
        let attempt = c.lock("cancel").acquire();
        let _ = timeout(Duration::from_micros(micros), attempt).await;
        store.until_records("cancel", 1, WITHIN).await;
    }
    held.release().await.unwrap();
    let next = c.lock("cancel").wait(WITHIN).acquire().await.unwrap();
    next.release().await.unwrap();
    store.until_records("cancel", 0, WITHIN).await;
    let dropped = c.lock("cancel").acquire().await.unwrap();
    drop(dropped);
    store.until_records("cancel", 0, WITHIN).await;
}

/// Acquisitions joined in a `block_on` body (as in `#[tokio::main]`) are
/// two holders, not one thread's: they exclude each other (moved from
/// the Redis-only `hold_model.rs`).
async fn acquisitions_joined_in_a_block_on_body_exclude_each_other(store: &Store) {
    let url = store.url();
    let inside = tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        runtime.block_on(async {
            let client = LockClient::connect(lock_runtime::Config::new(url))
                .await
                .expect("connect");
            let section = Section::new();
            // Inside the section under the lock: a second one inside at
            // once would be seen there.
            let exclusive = || async {
                let guard = client.lock("joined").wait(WITHIN).acquire().await?;
                section.enter(async {}).await;
                guard.release().await
            };
            let (a, b) = timeout(WITHIN * 2, async { tokio::join!(exclusive(), exclusive()) })
                .await
                .expect("the joined acquisitions finished");
            a.expect("the first joined acquisition");
            b.expect("the second joined acquisition");
            section.max()
        })
    });
    let max = inside.await.expect("the block_on thread");
    assert_eq!(max, 1, "two joined futures were inside the lock at once");
}

/// A wait too long for the clock to represent is no deadline: a free lock
/// is taken at once, a held one once released, and so is every segment of
/// a segmented lock (moved from the Redis-only `hold_model.rs`).
async fn an_unbounded_wait_acquires_a_free_lock_a_released_one_and_every_segment(store: &Store) {
    let client = store.client().await;
    let holder = timeout(
        WITHIN,
        client.lock("unbounded").wait(Duration::MAX).acquire(),
    )
    .await
    .expect("a free lock is taken at once")
    .unwrap();
    let waiter = tokio::spawn({
        let client = store.client().await;
        async move {
            let guard = client
                .lock("unbounded")
                .wait(Duration::MAX)
                .acquire()
                .await?;
            guard.release().await
        }
    });
    store
        .until_waiting(Kind::Reentrant, "unbounded", 1, WITHIN)
        .await;
    holder.release().await.unwrap();
    finish(WITHIN, waiter).await;
    let all = client.segmented_lock("unbounded-segments", 2).all();
    let all = timeout(WITHIN, all.wait(Duration::MAX).acquire())
        .await
        .expect("free segments are taken at once")
        .unwrap();
    assert_eq!(all.segments().len(), 2);
    all.release().await.unwrap();
}

/// A lease too long for the store is a configuration error, and nothing is
/// written (moved from the Redis-only `hold_model.rs`).
async fn a_lease_beyond_the_maximum_is_a_config_error_that_writes_nothing(store: &Store) {
    let client = store.client().await;
    let taken = client.lock("too-long").lease(Duration::MAX).acquire().await;
    assert!(matches!(taken, Err(LockError::Config(_))), "{taken:?}");
    assert_eq!(store.records("too-long").await, 0);
    assert!(client.inspect("too-long").await.unwrap().is_none());
}

async fn a_cancelled_waiter_leaves_nothing_behind(store: &Store) {
    let (a, b) = (store.client().await, store.client().await);
    for kind in [Kind::Reentrant, Kind::Fair] {
        let name = format!("cancel-{kind:?}");
        let guard = kind.builder(&a, &name).acquire().await.unwrap();
        let waiter = tokio::spawn({
            let (b, name) = (b.clone(), name.clone());
            async move { kind.builder(&b, &name).acquire().await }
        });
        store.until_waiting(kind, &name, 1, WITHIN).await;
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        store.until_waiting(kind, &name, 0, WITHIN).await;
        guard.release().await.unwrap();
        // Nothing of the cancelled waiter's is in the way: not in the store,
        // nor in its client's own queue.
        let again = kind
            .builder(&b, &name)
            .try_acquire()
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{kind:?}: the cancelled waiter left something"));
        again.release().await.unwrap();
        assert!(a.inspect(&name).await.unwrap().is_none());
    }
}

/// A runtime of worker threads, as services run, for acquisitions to be
/// dropped or shut down on (the test's own runtime has one thread).
fn workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A client whose session or watchdog lease outlives [`WITHIN`] by far: a
/// record it left behind would keep its lock taken past any wait below.
async fn long_lived(store: &Store) -> LockClient {
    store
        .client_with(|c| c.watchdog_timeout(Duration::from_secs(120)))
        .await
}

/// A few locks taken and given back on `runtime`, so its near clients
/// (made on a runtime's first lock calls) serve what follows.
async fn warm(runtime: &tokio::runtime::Runtime, client: &LockClient) {
    for _ in 0..20 {
        let client = client.clone();
        runtime
            .spawn(async move {
                let guard = client.lock("warm-up").acquire().await.unwrap();
                guard.release().await.unwrap();
                tokio::task::yield_now().await;
            })
            .await
            .unwrap();
    }
}

/// Issue 34: an acquisition dropped anywhere on its way (its create in
/// flight, its answer on its way back, waiting, contended or not, of any
/// kind) leaves no record that keeps the lock taken: the next contender
/// gets it at once, and at the end nothing is left. Dropped from another
/// thread after a spread of delays, so some drops land while the store's
/// answer is on its way (before the fix, etcd's undo could overtake its
/// own create there, and the key then blocked the lock for a third of a
/// session).
async fn an_acquisition_dropped_at_any_point_leaves_no_record(store: &Store) {
    let (a, b) = (long_lived(store).await, store.client().await);
    let runtime = workers();
    warm(&runtime, &a).await;
    for kind in [Kind::Reentrant, Kind::Fair, Kind::Read, Kind::Write] {
        let name = format!("dropped-{kind:?}");
        for contended in [false, true] {
            for micros in [0, 20, 50, 100, 150, 200, 300, 500, 800, 1500, 3000] {
                let held = match contended {
                    true => Some(kind.builder(&b, &name).acquire().await.unwrap()),
                    false => None,
                };
                let task = runtime.spawn({
                    let (a, name) = (a.clone(), name.clone());
                    async move { kind.builder(&a, &name).acquire().await }
                });
                let task = tokio::task::spawn_blocking(move || {
                    std::thread::sleep(Duration::from_micros(micros));
                    task.abort();
                    task
                })
                .await
                .unwrap();
                // Taken before the drop came, it is given back by its
                // guard's drop.
                drop(task.await);
                if let Some(held) = held {
                    held.release().await.unwrap();
                }
                let next = kind
                    .builder(&b, &name)
                    .wait(WITHIN)
                    .acquire()
                    .await
                    .unwrap_or_else(|e| {
                        panic!("{kind:?} after a drop at {micros} µs (contended: {contended}): {e}")
                    });
                next.release().await.unwrap();
            }
        }
        // A record whose create landed after the next contender's is seen
        // here: it would be the lock's holder for a third of a session.
        eventually(
            &format!("{kind:?}: nothing left of the dropped acquisitions"),
            WITHIN,
            || async { b.inspect(&name).await.unwrap().is_none() },
        )
        .await;
    }
    runtime.shutdown_background();
}

/// Issue 34: a waiter whose future held its client's last clone, dropped
/// (a task aborted at shutdown), still has its record deleted: the client's
/// runtime keeps running until the undo is done.
async fn a_waiter_dropped_with_its_client_leaves_no_record(store: &Store) {
    let holder = store.client().await;
    let name = "dropped-with-client";
    let guard = holder.lock(name).acquire().await.unwrap();
    let waiter = {
        let client = long_lived(store).await;
        tokio::spawn(async move { client.lock(name).acquire().await })
    };
    store.until_waiting(Kind::Reentrant, name, 1, WITHIN).await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    guard.release().await.unwrap();
    let next = store.client().await;
    let taken = next.lock(name).wait(WITHIN).acquire().await;
    taken
        .expect("the dropped waiter's record is gone with it")
        .release()
        .await
        .unwrap();
}

/// Issue 34: a waiter on a runtime that shut down (its near clients and
/// sessions with it) leaves no record: its undo goes through the client's
/// own connection, and the client keeps working (DESIGN §3).
async fn a_waiter_on_a_runtime_that_shut_down_leaves_no_record(store: &Store) {
    let (a, b) = (long_lived(store).await, store.client().await);
    let name = "shut-down";
    let guard = b.lock(name).acquire().await.unwrap();
    let runtime = workers();
    warm(&runtime, &a).await;
    let waiter = runtime.spawn({
        let a = a.clone();
        async move { a.lock(name).acquire().await.map(drop) }
    });
    store.until_waiting(Kind::Reentrant, name, 1, WITHIN).await;
    runtime.shutdown_background();
    assert!(waiter.await.unwrap_err().is_cancelled());
    guard.release().await.unwrap();
    let next = b.lock(name).wait(WITHIN).acquire().await;
    next.expect("the shut-down waiter's record is gone")
        .release()
        .await
        .unwrap();
    let again = a.lock(name).wait(WITHIN).acquire().await.unwrap();
    again.release().await.unwrap();
}

/// Issue 34: a client that force-unlocks its own hold tells the guard at
/// once, not at its watchdog's or keep-alive's next round (a third of a
/// lease that outlasts the wait below): the guard never says held while
/// another client holds the lock.
async fn a_clients_own_force_unlock_tells_its_guard_at_once(store: &Store) {
    let (a, b) = (long_lived(store).await, store.client().await);
    let guard = a.lock("own-force").acquire().await.unwrap();
    assert!(
        a.force_unlock("own-force").await.unwrap(),
        "there was a holder"
    );
    timeout(WITHIN, guard.lost())
        .await
        .expect("the guard learns its own client's force-unlock");
    assert!(guard.is_lost());
    let next = b.lock("own-force").try_acquire().await.unwrap();
    let next = next.expect("free after the force-unlock");
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
    next.release().await.unwrap();
}

/// Issue 34: a downgrade. A read taken in the scope of the same client's
/// write, kept after the write is released, is a read hold: other
/// readers share it, writers wait, `inspect` says read. A writer that was
/// already waiting behind the write does not get in while that read holds.
async fn a_read_taken_under_a_write_is_a_read_hold_once_the_write_is_released(store: &Store) {
    let (a, b) = (store.client().await, store.client().await);
    let (ours, theirs) = (a.read_write_lock("down"), b.read_write_lock("down"));
    let write = ours.write().acquire().await.unwrap();
    let read = write.scope(ours.read().acquire()).await.unwrap();
    assert!(read.token() > write.token());
    assert!(theirs.read().try_acquire().await.unwrap().is_none());
    // In the read's scope, while the write holds, the write is re-entered.
    let again = read.scope(ours.write().acquire()).await.unwrap();
    again.release().await.unwrap();
    write.release().await.unwrap();
    let shared = theirs.read().try_acquire().await.unwrap();
    let shared = shared.expect("other readers share the downgraded hold");
    assert!(theirs.write().try_acquire().await.unwrap().is_none());
    let info = b.inspect("down").await.unwrap().expect("held");
    assert_eq!(info.mode, Some(RwMode::Read), "{info:?}");
    shared.release().await.unwrap();
    read.release().await.unwrap();
    assert!(free(&b, Kind::Write, "down").await);

    // A writer waiting behind the write waits for the read too.
    let write = ours.write().acquire().await.unwrap();
    let waiter = tokio::spawn({
        let theirs = b.read_write_lock("down");
        async move { theirs.write().wait(WITHIN).acquire().await }
    });
    store.until_waiting(Kind::Write, "down", 1, WITHIN).await;
    let read = write.scope(ours.read().acquire()).await.unwrap();
    write.release().await.unwrap();
    assert!(!read.is_lost());
    assert!(
        !waiter.is_finished(),
        "a writer got the lock while a downgraded read held it"
    );
    let token = read.token();
    read.release().await.unwrap();
    let next = finish(WITHIN, waiter).await;
    assert!(next.token() > token);
    next.release().await.unwrap();
    assert!(b.inspect("down").await.unwrap().is_none());
}

async fn the_watchdog_keeps_a_hold_past_its_lease(store: &Store) {
    let lease = Duration::from_secs(2);
    let a = store.client_with(|c| c.watchdog_timeout(lease)).await;
    let b = store.client().await;
    let guard = a.lock("kept").acquire().await.unwrap();
    assert_eq!(a.renewed_locks(), 1);
    // Three leases long: still held, never lost.
    match b.lock("kept").wait(lease * 3).acquire().await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("the lock was free within three leases: {other:?}"),
    }
    assert!(!guard.is_lost());
    assert!(guard.remaining() > Duration::ZERO);
    assert_eq!(holder_ids(&b, "kept").await, [guard.holder_id()]);
    guard.release().await.unwrap();
    assert_eq!(a.renewed_locks(), 0, "a released guard is not renewed");
}

async fn extend_moves_a_fixed_lease_forward(store: &Store) {
    let (a, b) = (store.client().await, store.client().await);
    let mut guard = a
        .lock("ext")
        .lease(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    guard.extend(Duration::from_secs(30)).await.unwrap();
    assert!(guard.remaining() > Duration::from_secs(20), "{guard:?}");
    let ttl = b.inspect("ext").await.unwrap().expect("held").ttl;
    assert!(ttl.expect("a TTL") > Duration::from_secs(20), "{ttl:?}");
    // Held past the first lease's end.
    match b.lock("ext").wait(Duration::from_secs(3)).acquire().await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("the extended lease ended with the first one: {other:?}"),
    }
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
    assert!(b.inspect("ext").await.unwrap().is_none());

    // A watchdog lease is the watchdog's to renew.
    let mut watched = a.lock("ext").acquire().await.unwrap();
    assert!(matches!(
        watched.extend(Duration::from_secs(30)).await,
        Err(LockError::Config(_))
    ));
    watched.release().await.unwrap();
}

async fn bad_input_is_a_typed_error(store: &Store) {
    let client = store.client().await;
    let bad_name = client.lock("").acquire().await;
    assert!(
        matches!(bad_name, Err(LockError::BadName { .. })),
        "{bad_name:?}"
    );
    let bad_name = client.inspect("").await;
    assert!(
        matches!(bad_name, Err(LockError::BadName { .. })),
        "{bad_name:?}"
    );
    let no_lease = client.lock("x").lease(Duration::ZERO).acquire().await;
    assert!(
        matches!(no_lease, Err(LockError::Config(_))),
        "{no_lease:?}"
    );
    let no_segments = client.segmented_lock("sku", 0).any().acquire().await;
    assert!(
        matches!(no_segments, Err(LockError::Config(_))),
        "{no_segments:?}"
    );
    let past_the_end = client.segmented_lock("sku", 3).segment(3).acquire().await;
    assert!(
        matches!(past_the_end, Err(LockError::Config(_))),
        "{past_the_end:?}"
    );
    // None of it left a lock behind.
    assert!(client.inspect("x").await.unwrap().is_none());
    assert!(client.locks("*").await.unwrap().is_empty());
}

/// A store that is gone is a fault, never a busy lock: one attempt (and
/// so `on_busy = "skip"` and `fallback`, which take `Timeout` for busy)
/// must not read it as `Timeout`.
async fn a_dead_store_is_an_error_not_a_busy_lock(store: &mut Store) {
    let client = store
        .client_with(|c| {
            c.response_timeout(Duration::from_secs(2))
                .connect_timeout(Duration::from_secs(2))
        })
        .await;
    tests::take_and_release(client.lock("gone")).await;
    store.stop();
    let attempt = timeout(WITHIN, client.lock("gone").wait(Duration::ZERO).acquire())
        .await
        .expect("one attempt returns");
    assert!(
        matches!(&attempt, Err(e) if !e.is_timeout()),
        "one attempt on a dead store: {attempt:?}"
    );
    let tried = timeout(WITHIN, client.lock("gone").try_acquire())
        .await
        .expect("try_acquire returns");
    assert!(tried.is_err(), "try_acquire on a dead store: {tried:?}");
}

/// A store that cannot be reached when a client connects is
/// `LockError::Connect` on every engine: it names the engine and where the
/// address came from, shows no password, and may heal by itself
/// (`is_transient`), unlike a busy lock.
async fn a_store_not_there_is_a_connect_error_that_may_heal(store: &mut Store) {
    let url = store.url();
    store.stop();
    let config = lock_runtime::Config::new(&url).connect_timeout(Duration::from_secs(2));
    let refused = timeout(WITHIN, LockClient::connect(config))
        .await
        .expect("connect returns");
    match refused {
        Err(e @ LockError::Connect { engine, origin, .. }) => {
            assert_eq!(engine, store.engine(), "{e}");
            assert_eq!(origin, "from Config", "{e}");
            assert!(e.is_transient(), "{e:?}");
            assert!(!e.is_timeout(), "{e:?}");
            assert!(!e.to_string().contains("secret"), "no password: {e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("cannot connect to {engine} at ")),
                "{e}"
            );
        }
        other => panic!("connect to a stopped {} store: {other:?}", store.engine()),
    }
}
