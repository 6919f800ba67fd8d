//! The fault-injection suite (issue 10): several worker processes
//! (`src/bin/fault_worker.rs`) lock a few hot names and many names used
//! once, each through its own loopback [`Proxy`], and write every critical
//! section to a ledger on a server of its own that refuses stale fencing
//! tokens and notes every overlap. Meanwhile the suite injects, in turn:
//!
//! - a cut of one worker's connections;
//! - one worker's connections refused for a second (the port closed);
//! - one worker's link stalled, without closing, for 1.5 s (3x the response
//!   timeout);
//! - SIGKILL of the lock server (`--appendonly yes --appendfsync always`)
//!   and a restart;
//! - `CLIENT KILL` of every pub/sub connection, then of every normal one;
//! - `DEBUG SLEEP 1` (the server stops answering for a second: longer than
//!   a 1 s watchdog lease);
//! - SIGSTOP of one worker process for 3 s (3 leases), then SIGCONT.
//!
//! Then it checks what users rely on:
//!
//! - every overlap of two sections was reported to one of its holders
//!   (`is_lost()` at the end of the section, or an error from `release()`);
//! - no acquire outlived its `wait` by more than a few seconds;
//! - no worker panicked (each exits with success);
//! - and, with every worker still connected: no channel is subscribed, no
//!   key lacks an expiry, and once the locks' leases have passed only
//!   latches (short-lived records of answers) are left: nothing per name.

use std::io::Write;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use tests::fault::{Knobs, LinkFault, Worker, on_link, overlaps_reported};
use tests::proxy::Proxy;
use tests::{Server, eventually, keys_and_ttls, scratch_dir, until_no_channels};

const WORKERS: usize = 3;
const TASKS: usize = 6;
const RUN: Duration = Duration::from_secs(30);
const FAULT_EVERY: Duration = Duration::from_secs(2);
const KNOBS: Knobs = Knobs {
    tasks: TASKS,
    run: RUN,
    wait: WAIT,
    lease: LEASE,
    response: RESPONSE,
    permits: 0,
};
const WAIT: Duration = Duration::from_secs(2);
const LEASE: Duration = Duration::from_secs(1);
const RESPONSE: Duration = Duration::from_millis(500);
/// How far past its `wait` an acquire may return: its last attempt and the
/// reconcile of a lost answer (each bounded by the response timeout), plus
/// a SIGSTOP of its whole process (3 s).
const OVERRUN_LIMIT: Duration = Duration::from_secs(6);
/// The longest a latch lives: an `abandoned` mark of a reconciled attempt.
const LATCH_LIMIT: Duration = Duration::from_secs(16 * 60);

/// The faults, in the order they are injected (then again from the start).
#[derive(Debug, Clone, Copy)]
enum Fault {
    Link(LinkFault),
    Crash,
    ClientKill,
    DebugSleep,
    Stop,
}

const FAULTS: [Fault; 7] = [
    Fault::Link(LinkFault::Cut),
    Fault::Stop,
    Fault::Link(LinkFault::Refuse),
    Fault::Crash,
    Fault::Link(LinkFault::Stall),
    Fault::ClientKill,
    Fault::DebugSleep,
];

/// The index of a worker that holds one of the hot locks (or permits) now,
/// if any.
async fn holder_of_a_hot_lock(server: &Server, workers: &[Worker]) -> Option<usize> {
    let mut raw = server.raw().await;
    for k in 0..4 {
        let name = format!("hot:{k}");
        let mut holders: Vec<String> = raw.hkeys(&name).await.unwrap_or_default();
        holders.extend(
            raw.zrange::<_, Vec<String>>(&name, 0, -1)
                .await
                .unwrap_or_default(),
        );
        for holder in holders {
            if let Some(i) = workers.iter().position(|w| holder.starts_with(&w.id)) {
                return Some(i);
            }
        }
    }
    None
}

async fn pause(d: Duration) {
    tokio::time::sleep(d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_under_faults() {
    under_faults(KNOBS).await;
}

/// The same run with the hot names semaphores of 2 permits (DESIGN §11):
/// counted from the holders' side (the ledger), a section begun while 2
/// were open is an overlap, and every one was reported to a holder (a
/// holder paused or cut off past its lease, told its permit is lost);
/// with every worker connected, no permit outlives its lease (nothing
/// per name is left once the leases are over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_under_faults() {
    under_faults(Knobs {
        permits: 2,
        ..KNOBS
    })
    .await;
}

async fn under_faults(knobs: Knobs) {
    let dir = scratch_dir("faults");
    let mut server = Server::start_persistent(&dir);
    let ledger = Server::start();
    let proxies: Vec<Proxy> = (0..WORKERS).map(|_| Proxy::start(server.port())).collect();
    let workers: Vec<Worker> = proxies
        .iter()
        .enumerate()
        .map(|(i, proxy)| {
            let program = env!("CARGO_BIN_EXE_fault_worker");
            Worker::spawn(
                program,
                &format!("w{i}"),
                &proxy.url(),
                &ledger.url(),
                &knobs,
            )
        })
        .collect();

    let started = Instant::now();
    let mut injected = Vec::new();
    for (i, fault) in FAULTS.iter().cycle().enumerate() {
        pause(FAULT_EVERY).await;
        if started.elapsed() + FAULT_EVERY > RUN {
            break;
        }
        let target = i % WORKERS;
        injected.push((*fault, target));
        match fault {
            Fault::Link(fault) => on_link(&proxies[target], *fault).await,
            Fault::Crash => {
                server.crash();
                server.restart();
            }
            Fault::ClientKill => {
                let mut raw = server.raw().await;
                for kind in ["pubsub", "normal"] {
                    let _: i64 = redis::cmd("CLIENT")
                        .arg("KILL")
                        .arg("TYPE")
                        .arg(kind)
                        .query_async(&mut raw)
                        .await
                        .expect("CLIENT KILL");
                }
            }
            Fault::DebugSleep => {
                // The answer comes after the sleep, past the raw
                // connection's own response timeout: not waited for.
                let mut raw = server.raw().await;
                let _ = redis::cmd("DEBUG")
                    .arg("SLEEP")
                    .arg(1)
                    .query_async::<()>(&mut raw)
                    .await;
            }
            Fault::Stop => {
                // Freeze a worker that holds a hot lock, if one does now:
                // its lease runs out while it is in its section.
                let holding = holder_of_a_hot_lock(&server, &workers).await;
                let worker = &workers[holding.unwrap_or(target)];
                worker.signal("-STOP");
                pause(Duration::from_secs(3)).await;
                worker.signal("-CONT");
            }
        }
    }
    println!("injected: {injected:?}");

    // Every worker finishes its run: no hang, no panic.
    let mut sections = 0;
    for worker in &workers {
        let counts = worker.counts(RUN + Duration::from_secs(60));
        let count = |key: &str| {
            counts
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| *v)
                .expect("the count is printed")
        };
        sections += count("sections");
        let overrun = Duration::from_millis(count("max_overrun_ms"));
        assert!(
            overrun <= OVERRUN_LIMIT,
            "an acquire outlived its wait by {overrun:?}"
        );
    }
    assert!(
        sections > 100,
        "the workers got work done: {sections} sections"
    );

    // Every overlap was reported to one of its two holders.
    let mut book = ledger.raw().await;
    let (overlaps, reported, _) = overlaps_reported(&mut book, &|_| false).await;
    println!(
        "{sections} sections, {overlaps} overlaps (a section begun while {} were open), \
         {reported} reported sections, 0 unreported",
        knobs.permits.max(1)
    );

    // With every worker still connected: no subscription without a waiter,
    // no key without expiry, and nothing per name once the leases are over.
    let raw = server.raw().await;
    until_no_channels(&raw, Duration::from_secs(15)).await;
    let keys = keys_and_ttls(&mut raw.clone()).await;
    let forever: Vec<_> = keys.iter().filter(|(_, ttl)| *ttl < 0).collect();
    assert!(
        forever.is_empty(),
        "{} keys without expiry, such as {:?}",
        forever.len(),
        &forever[..forever.len().min(5)]
    );
    let latch = |key: &str| {
        key.starts_with("redisson_unlock_latch:") || key.starts_with("redisson_lock_acquire_latch:")
    };
    eventually("only latches are left", Duration::from_secs(15), || {
        let mut raw = raw.clone();
        async move {
            keys_and_ttls(&mut raw)
                .await
                .iter()
                .all(|(key, ttl)| latch(key) && *ttl <= LATCH_LIMIT.as_millis() as i64)
        }
    })
    .await;

    for worker in workers {
        worker.finish();
    }
    let _ = std::io::stdout().flush();
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}
