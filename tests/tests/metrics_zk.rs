//! The metrics (feature `metrics`) of locks on ZooKeeper where it differs
//! from the other engines (what they share is `tests/engines/metrics.rs`):
//! a fixed `lease(d)` is ended by its holder, who gives its node back at
//! `d`, and kept only by `extend`; a watchdog hold is kept by the
//! session's heartbeat and counted among the client's renewed locks. The
//! recorder is global to the process and every step's counts are exact,
//! so the case runs in a child process of this test binary, alone with
//! its own recorder.

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
fn a_fixed_lease_is_ended_and_extended_by_its_holder_and_counted_so() {
    let case = "a_fixed_lease_is_ended_and_extended_by_its_holder_and_counted_so";
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
    // A 6 s session: a few late heartbeats on a loaded machine do not lose
    // the holds.
    let client = connect(&zk, |c| c.watchdog_timeout(Duration::from_secs(6))).await;

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
    assert_eq!(seen.counter("lock_lost_total{kind=reentrant}"), 1);
    assert_eq!(seen.gauge("lock_held{kind=reentrant}"), 0.0);

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

    // Labels are kinds and outcomes only: never a lock name.
    seen.labels.sort();
    seen.labels.dedup();
    assert_eq!(seen.labels, ["kind", "outcome"]);
}
