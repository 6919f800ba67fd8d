//! The metrics (feature `metrics`) on every engine, read back through
//! `metrics-util`'s debugging recorder: the names and labels are the
//! engine-independent ones of DESIGN §3, and every step's counts are
//! exact. The recorder is global to a process, so each engine's case runs
//! in a child process of this test binary, alone with its own recorder
//! and its own server. What only one store does (ZooKeeper's heartbeat
//! and holder-ended fixed leases) is in that engine's `metrics_*.rs`.

use std::time::Duration;

use lock_runtime::LockError;
use metrics_util::debugging::DebuggingRecorder;
use tests::engines::Store;
use tests::eventually;
use tests::recorded::Seen;

use super::{WITHIN, run_in_child};

/// Set in the child process: the engine whose case it runs.
const ENGINE: &str = "ENGINES_METRICS_ENGINE";

in_a_child_on_every_engine!(
    every_metric_moves_as_locks_are_taken_waited_for_renewed_and_lost,
    super::in_child,
    and memory
);

/// In the child process for `engine`: the case, on a store `start` makes.
/// In the test process: this test again, in a child process.
fn in_child(engine: &str, start: fn() -> Store) {
    if std::env::var(ENGINE).ok().as_deref() != Some(engine) {
        let test = format!(
            "metrics::every_metric_moves_as_locks_are_taken_waited_for_renewed_and_lost::on_{engine}"
        );
        return run_in_child(&test, &[(ENGINE, engine.to_owned())]);
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async { every_metric_moves(&mut start()).await });
}

async fn every_metric_moves(store: &mut Store) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this process");
    let mut seen = Seen::default();

    // A 6 s watchdog lease (ZooKeeper: session), renewed every 2 s: a
    // force-unlocked hold is found gone within that, and a few late
    // renewals on a loaded machine do not lose the holds.
    let client = store
        .client_with(|c| c.watchdog_timeout(Duration::from_secs(6)))
        .await;
    let other = store.client().await;
    // For the dead store at the end: gives up on it soon.
    let hasty = store
        .client_with(|c| {
            c.response_timeout(Duration::from_secs(2))
                .connect_timeout(Duration::from_secs(2))
        })
        .await;

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

    // The watchdog keeps the held lock: its renewals are counted (on
    // ZooKeeper, the session's heartbeats that keep it).
    eventually("a renewal is counted", WITHIN, || {
        seen.read(&snapshotter);
        let renewed = seen.counter("lock_renewals_total{}");
        async move { renewed >= 1 }
    })
    .await;
    assert!(!guard.is_lost());

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

    // A fixed lease lost: counted once, on a fair lock.
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
    let kinds = ["multi", "read", "write"];
    let multi = client.multi_lock(["m:5", "m:6"]).acquire().await.unwrap();
    seen.read(&snapshotter);
    assert_eq!(seen.gauge("lock_held{kind=multi}"), 2.0);
    multi.release().await.unwrap();
    seen.read(&snapshotter);
    for kind in kinds {
        assert_eq!(
            seen.samples(&format!(
                "lock_acquire_seconds{{kind={kind},outcome=acquired}}"
            )),
            1,
            "{kind}"
        );
    }
    assert_eq!(seen.gauge("lock_held{kind=multi}"), 0.0);

    // Permits count as locks do, under kind semaphore (on the engines that
    // keep them; the others refuse a permit before anything is counted).
    match client.semaphore("m:7", 2).acquire().await {
        Ok(first) => {
            let second = other.semaphore("m:7", 2).acquire().await.unwrap();
            assert!(
                client
                    .semaphore("m:7", 2)
                    .try_acquire()
                    .await
                    .unwrap()
                    .is_none()
            );
            seen.read(&snapshotter);
            assert_eq!(seen.gauge("lock_held{kind=semaphore}"), 2.0);
            assert_eq!(
                seen.samples("lock_acquire_seconds{kind=semaphore,outcome=acquired}"),
                2
            );
            assert_eq!(
                seen.samples("lock_acquire_seconds{kind=semaphore,outcome=timeout}"),
                1
            );
            first.release().await.unwrap();
            second.release().await.unwrap();
            seen.read(&snapshotter);
            assert_eq!(seen.gauge("lock_held{kind=semaphore}"), 0.0);
            assert_eq!(seen.samples("lock_held_seconds{kind=semaphore}"), 2);
        }
        Err(LockError::Unsupported { .. }) => {}
        Err(e) => panic!("a free semaphore: {e}"),
    }

    // A failure that is not a busy lock: the store is gone.
    store.stop();
    let failed = tokio::time::timeout(WITHIN, hasty.lock("m:9").wait(Duration::ZERO).acquire())
        .await
        .expect("one attempt on a dead store returns");
    assert!(
        matches!(&failed, Err(e) if !e.is_timeout()),
        "one attempt on a dead store: {failed:?}"
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
