//! Replica sync (`ReplicaSync::Auto`) waits only for replicas that can
//! answer: a replica that is attached but not online (its first sync) or
//! that stopped acknowledging (stopped, partitioned) does not stop locking.
//! `ReplicaSync::Always` still refuses then. Real servers on loopback: a
//! master and one replica.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, ReplicaSync};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tests::{Server, eventually};

/// Generous: bounds a wait, asserts no speed.
const WITHIN: Duration = Duration::from_secs(20);

/// How long an acquisition that must not wait for the troubled replica may
/// take at most (it may still spend one `WAIT` timeout, 1 s, on a view that
/// was not yet looked up again).
const PROMPTLY: Duration = Duration::from_secs(5);

/// `lock_replica_sync_skipped_total` so far in this process: the recorder is
/// global, and a snapshot resets the counters it reads, so every read is
/// added up here.
fn skipped() -> u64 {
    static RECORDER: OnceLock<Snapshotter> = OnceLock::new();
    static SEEN: Mutex<u64> = Mutex::new(0);
    let snapshotter = RECORDER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this process");
        snapshotter
    });
    let mut seen = SEEN.lock().unwrap();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        if let DebugValue::Counter(n) = value
            && key.key().name() == "lock_replica_sync_skipped_total"
        {
            *seen += n;
        }
    }
    *seen
}

/// The master's `INFO replication` line of its first replica
/// (`ip=...,port=...,state=...,offset=...,lag=...`), if it has one.
async fn first_replica(master: &Server) -> Option<String> {
    let mut raw = master.raw().await;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut raw)
        .await
        .ok()?;
    tests::topology::info_field(&info, "slave0")
}

/// A field (`state`, `lag`) of a replica line of `INFO replication`.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split(',')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// Stops a process with SIGSTOP; lets it run again (SIGCONT) when dropped,
/// however the test ends.
struct Stopped(String);

impl Stopped {
    fn stop(pid: String) -> Stopped {
        let status = std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -STOP {pid}");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0])
            .status();
    }
}

/// Empty working directories for a master and its replica: a file left in
/// a shared one (an RDB with a replication id) would let the replica resume
/// instead of making its first sync.
fn dirs(tag: &str) -> (String, String) {
    let dir = |role: &str| {
        tests::scratch_dir(&format!("replica-health-{tag}-{role}"))
            .to_string_lossy()
            .into_owned()
    };
    (dir("master"), dir("replica"))
}

/// Clients of `master` in Auto (the default) and Always mode.
async fn clients(master: &Server) -> (LockClient, LockClient) {
    let auto = master.client().await;
    let always = master
        .client_with(|c| c.replica_sync(ReplicaSync::Always))
        .await;
    (auto, always)
}

/// Takes and releases `name` in Auto mode; it must not wait for the
/// troubled replica (well within [`PROMPTLY`]).
async fn auto_acquires(auto: &LockClient, name: &str) {
    let guard = tokio::time::timeout(PROMPTLY, auto.lock(name).acquire())
        .await
        .unwrap_or_else(|_| panic!("{name}: Auto waited for a replica that cannot answer"))
        .unwrap_or_else(|e| panic!("{name}: Auto refused: {e:?}"));
    guard.release().await.expect("release");
}

/// Always mode still refuses, and leaves nothing behind.
async fn always_refuses(always: &LockClient, master: &Server, name: &str) {
    match always.lock(name).acquire().await {
        Err(LockError::NotReplicated { name: refused, .. }) => assert_eq!(refused, name),
        other => panic!("{name}: expected NotReplicated, got {other:?}"),
    }
    let mut raw = master.raw().await;
    let left: bool = redis::cmd("EXISTS")
        .arg(name)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!left, "the unreplicated hold was given back");
}

#[tokio::test]
async fn a_replica_in_its_first_sync_does_not_stop_locking() {
    // The master holds its full sync back for 30 s: its replica stays
    // attached but not online (`wait_bgsave`) for the whole test.
    let (master_dir, replica_dir) = dirs("first-sync");
    let master = Server::start_with(&[
        "--dir",
        &master_dir,
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "30",
    ]);
    let mut raw = master.raw().await;
    let _: () = redis::cmd("SET")
        .arg("some:data")
        .arg("x")
        .query_async(&mut raw)
        .await
        .unwrap();
    let port = master.port().to_string();
    let _replica = Server::start_with(&["--dir", &replica_dir, "--replicaof", "127.0.0.1", &port]);
    eventually("the replica is attached, not online", WITHIN, || async {
        first_replica(&master)
            .await
            .is_some_and(|line| field(&line, "state").is_some_and(|s| s != "online"))
    })
    .await;

    let (auto, always) = clients(&master).await;
    let before = skipped();
    auto_acquires(&auto, "first-sync:auto").await;
    auto_acquires(&auto, "first-sync:auto").await;
    assert!(skipped() > before, "the skipped wait is counted");
    always_refuses(&always, &master, "first-sync:always").await;
    // Still in its first sync: the case above held throughout.
    let line = first_replica(&master).await.expect("still attached");
    assert_ne!(field(&line, "state"), Some("online"), "{line}");
}

#[tokio::test]
async fn a_stopped_replica_does_not_stop_locking() {
    let (master_dir, replica_dir) = dirs("stopped");
    let master = Server::start_with(&["--dir", &master_dir]);
    let port = master.port().to_string();
    let replica = Server::start_with(&["--dir", &replica_dir, "--replicaof", "127.0.0.1", &port]);
    eventually("the replica is online", WITHIN, || async {
        first_replica(&master)
            .await
            .is_some_and(|line| field(&line, "state") == Some("online"))
    })
    .await;
    let (auto, always) = clients(&master).await;
    // Healthy: both modes wait for it, and get it.
    auto_acquires(&auto, "stopped:auto").await;
    let guard = always.lock("stopped:always").acquire().await.unwrap();
    guard.release().await.unwrap();

    let mut replica_raw = replica.raw().await;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut replica_raw)
        .await
        .unwrap();
    let pid = tests::topology::info_field(&info, "process_id").expect("the replica's pid");
    let stopped = Stopped::stop(pid);
    // Past the bound on its last acknowledgement (the master's `lag`).
    eventually(
        "the replica's acknowledgements are late",
        WITHIN,
        || async {
            first_replica(&master).await.is_some_and(|line| {
                field(&line, "lag")
                    .and_then(|lag| lag.parse::<u64>().ok())
                    .is_some_and(|lag| lag > 3)
            })
        },
    )
    .await;

    let before = skipped();
    auto_acquires(&auto, "stopped:auto").await;
    auto_acquires(&auto, "stopped:auto").await;
    assert!(skipped() > before, "the skipped wait is counted");
    always_refuses(&always, &master, "stopped:always").await;

    // Running again: Always is served again once the replica catches up.
    drop(stopped);
    eventually("the replica acknowledges again", WITHIN, || async {
        first_replica(&master).await.is_some_and(|line| {
            field(&line, "state") == Some("online")
                && field(&line, "lag").is_some_and(|lag| lag == "0" || lag == "1")
        })
    })
    .await;
    let guard = always.lock("stopped:always").acquire().await.unwrap();
    guard.release().await.unwrap();
}
