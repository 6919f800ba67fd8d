//! The metrics (feature `metrics`) of locks on ZooKeeper, read back through
//! `metrics-util`'s debugging recorder as `tests/metrics_etcd.rs` reads
//! those of etcd: the names and labels are the engine-independent ones of
//! DESIGN §3. The recorder is global to the process and every step's
//! counts are exact, so each test function here runs its case in a child
//! process of this test binary, alone with its own recorder.
//!
//! Where ZooKeeper differs, the cases say so: the watchdog is the session's
//! heartbeat (no lease per hold to renew), and a fixed `lease(d)` is ended
//! by its holder, who gives its node back at `d`.

use std::process::Command;
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use metrics_util::debugging::{DebuggingRecorder, Snapshotter};
use tests::eventually;
use tests::recorded::Seen;
use tests::zookeeper::{ZooKeeper, zk_children};

const WITHIN: Duration = Duration::from_secs(20);

/// Set in the child process: which case to run.
const CASE: &str = "METRICS_ZK_CASE";

/// Runs this binary's test `case` in a child process (where [`in_child`]
/// holds) and fails when it fails there.
fn run_in_child(case: &str) {
    let status = Command::new(std::env::current_exe().expect("the test binary"))
        .args([case, "--exact", "--nocapture", "--include-ignored"])
        .env(CASE, case)
        .status()
        .expect("the child test runs");
    assert!(status.success(), "{case} failed in the child");
}

fn in_child() -> bool {
    std::env::var_os(CASE).is_some()
}

/// The process's recorder, installed once (the child runs one case).
fn recorder() -> Snapshotter {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this process");
    snapshotter
}

async fn connect(zk: &ZooKeeper, tune: impl FnOnce(Config) -> Config) -> LockClient {
    LockClient::connect(tune(Config::new(zk.url())))
        .await
        .expect("connect to ZooKeeper")
}

/// Waits until `n` nodes are under `/locks/<name>`.
async fn until_nodes(zk: &ZooKeeper, name: &str, n: usize) {
    let connect = zk.connect_string();
    let path = format!("/locks/{name}");
    eventually(&format!("{n} nodes under {path}"), WITHIN, || async {
        zk_children(&connect, &path).await.len() == n
    })
    .await;
}

#[test]
fn every_metric_moves_as_locks_on_zookeeper_are_taken_waited_for_renewed_and_lost() {
    let case = "every_metric_moves_as_locks_on_zookeeper_are_taken_waited_for_renewed_and_lost";
    if !in_child() {
        return run_in_child(case);
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(every_metric_moves());
}

async fn every_metric_moves() {
    let snapshotter = recorder();
    let mut seen = Seen::default();

    let zk = ZooKeeper::start();
    // A 6 s session: its heartbeat, which finds force-unlocked nodes gone,
    // runs every 2 s (the default session's every 10 s), and a few late
    // heartbeats on a loaded machine do not lose the holds.
    let client = connect(&zk, |c| c.watchdog_timeout(Duration::from_secs(6))).await;
    let other = connect(&zk, |c| c).await;
    assert_eq!(client.engine_name(), "zookeeper");

    // An acquisition, a hold, a busy try and a release.
    let guard = client.lock("m:1").acquire().await.unwrap();
    seen.read(&snapshotter);
    assert_eq!(
        seen.samples("lock_acquire_seconds{kind=reentrant,outcome=acquired}"),
        1
    );
    assert_eq!(seen.gauge("lock_held{kind=reentrant}"), 1.0);
    assert!(other.lock("m:1").try_acquire().await.unwrap().is_none());
    seen.read(&snapshotter);
    assert_eq!(
        seen.samples("lock_acquire_seconds{kind=reentrant,outcome=timeout}"),
        1
    );

    // A waiter shows in lock_waiters while it waits.
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move {
            let guard = other.lock("m:1").acquire().await?;
            guard.release().await
        })
    };
    eventually("a waiter is counted", WITHIN, || {
        seen.read(&snapshotter);
        let now = seen.gauge("lock_waiters{kind=reentrant}");
        async move { now == 1.0 }
    })
    .await;

    guard.release().await.unwrap();
    tests::finish(WITHIN, waiter).await;
    seen.read(&snapshotter);
    assert_eq!(seen.gauge("lock_waiters{kind=reentrant}"), 0.0);
    assert_eq!(seen.gauge("lock_held{kind=reentrant}"), 0.0);
    assert_eq!(seen.samples("lock_held_seconds{kind=reentrant}"), 2);
    assert_eq!(
        seen.samples("lock_acquire_seconds{kind=reentrant,outcome=acquired}"),
        2
    );

    // A watchdog hold force-unlocked: its loss (found by the session's next
    // heartbeat) is counted once, not again by the release that reports it.
    let doomed = client.lock("m:2").acquire().await.unwrap();
    assert!(other.force_unlock("m:2").await.unwrap());
    tokio::time::timeout(WITHIN, doomed.lost()).await.unwrap();
    assert!(matches!(
        doomed.release().await,
        Err(LockError::Lost { .. })
    ));
    seen.read(&snapshotter);
    assert_eq!(seen.counter("lock_lost_total{kind=reentrant}"), 1);

    // A fixed lease lost: counted once.
    let fixed = client
        .fair_lock("m:3")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    assert!(other.force_unlock("m:3").await.unwrap());
    assert!(matches!(fixed.release().await, Err(LockError::Lost { .. })));
    seen.read(&snapshotter);
    assert_eq!(seen.counter("lock_lost_total{kind=fair}"), 1);
    assert_eq!(seen.gauge("lock_held{kind=fair}"), 0.0);

    // A fixed lease run out: on ZooKeeper its holder ends it (the node has
    // no expiry of its own), giving the node back at the lease's end. The
    // loss is counted once.
    let short = client
        .lock("m:7")
        .lease(Duration::from_millis(500))
        .acquire()
        .await
        .unwrap();
    tokio::time::timeout(WITHIN, short.lost()).await.unwrap();
    until_nodes(&zk, "m:7", 0).await;
    assert!(matches!(short.release().await, Err(LockError::Lost { .. })));
    seen.read(&snapshotter);
    assert_eq!(seen.counter("lock_lost_total{kind=reentrant}"), 2);
    assert_eq!(seen.gauge("lock_held{kind=reentrant}"), 0.0);

    // Read, write, multi: their own kinds. A multi lock is one acquisition
    // and holds one hold per lock.
    let read = client
        .read_write_lock("m:4")
        .read()
        .acquire()
        .await
        .unwrap();
    read.release().await.unwrap();
    let write = client
        .read_write_lock("m:4")
        .write()
        .acquire()
        .await
        .unwrap();
    write.release().await.unwrap();
    let multi = client.multi_lock(["m:5", "m:6"]).acquire().await.unwrap();
    seen.read(&snapshotter);
    assert_eq!(seen.gauge("lock_held{kind=multi}"), 2.0);
    multi.release().await.unwrap();
    seen.read(&snapshotter);
    for kind in ["read", "write", "multi"] {
        assert_eq!(
            seen.samples(&format!(
                "lock_acquire_seconds{{kind={kind},outcome=acquired}}"
            )),
            1,
            "{kind}"
        );
    }
    assert_eq!(seen.gauge("lock_held{kind=multi}"), 0.0);

    // Renewals. A fixed lease is its holder's to keep: `extend` moves its
    // end, one renewal. The heartbeat does not keep it (it only bounds it),
    // so it is not among the client's renewed locks.
    let mut extended = client
        .lock("m:8")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    assert_eq!(client.renewed_locks(), 0);
    seen.read(&snapshotter);
    let before = seen.counter("lock_renewals_total{}");
    extended.extend(Duration::from_secs(60)).await.unwrap();
    seen.read(&snapshotter);
    assert_eq!(seen.counter("lock_renewals_total{}"), before + 1);
    extended.release().await.unwrap();

    // A watchdog hold is kept by the session's heartbeat: counted among the
    // client's renewed locks while it lives (whether the heartbeat counts in
    // lock_renewals_total is the other test's), and not lost meanwhile.
    let kept = client.lock("m:9").acquire().await.unwrap();
    assert_eq!(client.renewed_locks(), 1);
    // Between heartbeats the time left only shrinks; an answered heartbeat
    // moves it up again.
    let mut last = kept.remaining();
    eventually("a heartbeat keeps the hold", WITHIN, || {
        let now = kept.remaining();
        let rose = now > last;
        last = now;
        async move { rose }
    })
    .await;
    assert!(!kept.is_lost());
    kept.release().await.unwrap();
    assert_eq!(client.renewed_locks(), 0);

    // A failure that is not a busy lock: a name ZooKeeper refuses (its
    // node would be another lock's child).
    let failed = client.lock("m/10").acquire().await;
    assert!(
        matches!(failed, Err(LockError::BadName { .. })),
        "{failed:?}"
    );
    seen.read(&snapshotter);
    assert_eq!(
        seen.samples("lock_acquire_seconds{kind=reentrant,outcome=error}"),
        1
    );
    assert_eq!(seen.gauge("lock_held{kind=reentrant}"), 0.0);

    // Labels are kinds and outcomes only: never a lock name.
    seen.labels.sort();
    seen.labels.dedup();
    assert_eq!(seen.labels, ["kind", "outcome"]);
}

/// The watchdog of a hold without a fixed lease is the session's heartbeat
/// (DESIGN §9): each answered heartbeat renews the holds it keeps, as a
/// keep-alive does on etcd and a renewal script on Redis, and
/// `lock_renewals_total` counts them, so the alert "it stops while
/// `lock_held` > 0" (README) does not fire for a healthy ZooKeeper hold.
#[test]
fn the_session_heartbeat_counts_as_renewals_of_the_holds_it_keeps() {
    let case = "the_session_heartbeat_counts_as_renewals_of_the_holds_it_keeps";
    if !in_child() {
        return run_in_child(case);
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let snapshotter = recorder();
        let mut seen = Seen::default();
        let zk = ZooKeeper::start();
        // A 3 s session: a heartbeat every second.
        let client = connect(&zk, |c| c.watchdog_timeout(Duration::from_secs(3))).await;
        let kept = client.lock("r:1").acquire().await.unwrap();
        assert_eq!(client.renewed_locks(), 1);
        eventually("a renewal is counted", WITHIN, || {
            seen.read(&snapshotter);
            let renewed = seen.counter("lock_renewals_total{}");
            async move { renewed >= 1 }
        })
        .await;
        assert!(!kept.is_lost());
        kept.release().await.unwrap();
    });
}
