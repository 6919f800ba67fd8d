//! The metrics (feature `metrics`) of locks on etcd, read back through
//! `metrics-util`'s debugging recorder as `tests/metrics.rs` reads those
//! of Redis: the names and labels are the engine-independent ones of
//! DESIGN §3. One test function: the recorder is global to the process,
//! and every step's counts are exact.

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use metrics_util::debugging::DebuggingRecorder;
use tests::etcd::Etcd;
use tests::eventually;
use tests::recorded::Seen;

const WITHIN: Duration = Duration::from_secs(20);

async fn connect(etcd: &Etcd, tune: impl FnOnce(Config) -> Config) -> LockClient {
    LockClient::connect(tune(Config::new(etcd.url())))
        .await
        .expect("connect to etcd")
}

#[tokio::test]
async fn every_metric_moves_as_locks_on_etcd_are_taken_waited_for_renewed_and_lost() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this process");
    let mut seen = Seen::default();

    let etcd = Etcd::start();
    // The shortest lease etcd grants: kept alive every 2/3 s.
    let client = connect(&etcd, |c| {
        c.watchdog_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
    })
    .await;
    let other = connect(&etcd, |c| c).await;
    assert_eq!(client.engine_name(), "etcd");

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

    // A watchdog hold force-unlocked: its loss is counted once, not again
    // by the release that reports it.
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

    // The watchdog keeps a held lock's lease alive (every 2/3 s here):
    // renewals are counted, as they are on Redis.
    let kept = client.lock("m:8").acquire().await.unwrap();
    eventually("a renewal is counted", WITHIN, || {
        seen.read(&snapshotter);
        let renewed = seen.counter("lock_renewals_total{}");
        async move { renewed >= 1 }
    })
    .await;
    assert!(!kept.is_lost());
    kept.release().await.unwrap();

    // A failure that is not a busy lock: a name etcd refuses (its keys
    // would look like another lock's).
    let failed = client.lock("m/9").acquire().await;
    assert!(
        matches!(failed, Err(LockError::BadName { .. })),
        "{failed:?}"
    );
    seen.read(&snapshotter);
    assert_eq!(
        seen.samples("lock_acquire_seconds{kind=reentrant,outcome=error}"),
        1
    );

    // Labels are kinds and outcomes only: never a lock name.
    seen.labels.sort();
    seen.labels.dedup();
    assert_eq!(seen.labels, ["kind", "outcome"]);
}
