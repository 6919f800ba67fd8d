//! What the fault suites share (`tests/faults.rs` on Redis,
//! `tests/sql_faults.rs` on PostgreSQL and MariaDB): a worker process
//! (`src/bin/fault_worker.rs`) whose tasks lock a few hot names and names
//! used once, writing every critical section to a ledger (`ledger.lua`, on
//! a Redis server the faults never touch), and the check that every
//! overlap of two sections was reported to one of its holders.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A fault of one worker's link, through the loopback proxy it reaches
/// the lock server by.
#[derive(Clone, Copy, Debug)]
pub enum LinkFault {
    /// Every connection cut.
    Cut,
    /// New connections refused for a second (the port closed).
    Refuse,
    /// The link stalled, without closing, for 1.5 s.
    Stall,
}

/// Injects `fault` at `proxy`, and undoes it when it lasts.
pub async fn on_link(proxy: &crate::proxy::Proxy, fault: LinkFault) {
    match fault {
        LinkFault::Cut => proxy.cut(),
        LinkFault::Refuse => {
            proxy.refuse();
            tokio::time::sleep(Duration::from_secs(1)).await;
            proxy.accept();
        }
        LinkFault::Stall => {
            proxy.stall();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            proxy.resume();
        }
    }
}

/// How a worker runs: its tasks, how long, each acquisition's `wait`, its
/// client's watchdog lease and response timeout.
#[derive(Clone, Copy, Debug)]
pub struct Knobs {
    /// Tasks, each a loop of acquisitions.
    pub tasks: usize,
    /// How long the tasks go on.
    pub run: Duration,
    /// Each acquisition's `wait`.
    pub wait: Duration,
    /// The client's watchdog lease.
    pub lease: Duration,
    /// The client's response timeout.
    pub response: Duration,
    /// 0: the hot names are locks; N: semaphores of N permits (DESIGN
    /// §11), and the ledger notes a section begun while N were open.
    pub permits: u32,
}

/// A worker process and what it printed when its run was over.
pub struct Worker {
    child: Child,
    /// The name its section ids begin with.
    pub name: String,
    /// Its lock client's id: the prefix of its holder ids.
    pub id: String,
    done: std::sync::mpsc::Receiver<String>,
}

impl Worker {
    /// Starts worker `name` (the program `program`, the suite's
    /// `fault_worker`) locking on `lock_url` and writing to the ledger at
    /// `ledger_url`; returns once it has said its client's id.
    pub fn spawn(
        program: &str,
        name: &str,
        lock_url: &str,
        ledger_url: &str,
        knobs: &Knobs,
    ) -> Worker {
        let mut child = Command::new(program)
            .args([
                format!("lock={lock_url}"),
                format!("ledger={ledger_url}"),
                format!("worker={name}"),
                format!("tasks={}", knobs.tasks),
                format!("run_ms={}", knobs.run.as_millis()),
                format!("wait_ms={}", knobs.wait.as_millis()),
                format!("lease_ms={}", knobs.lease.as_millis()),
                format!("response_ms={}", knobs.response.as_millis()),
                format!("permits={}", knobs.permits),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the fault worker starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("its stdout"));
        let mut first = String::new();
        stdout
            .read_line(&mut first)
            .expect("the worker's first line");
        let id = first
            .trim()
            .strip_prefix("CLIENT ")
            .expect("the worker says its client id")
            .to_owned();
        let (tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if line.starts_with("DONE") {
                    let _ = tx.send(line);
                }
            }
        });
        Worker {
            child,
            name: name.to_owned(),
            id,
            done,
        }
    }

    /// Kills it (SIGKILL) and waits until it is gone, then closes its
    /// open sections in the ledger `ledger` (a dead process writes no
    /// more, so a section begun after its death overlaps none of its), and
    /// returns them: their holder can tell nobody of a loss.
    pub async fn kill(&mut self, ledger: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let open: Vec<String> = redis::cmd("KEYS")
            .arg("open:*")
            .query_async(ledger)
            .await
            .expect("the ledger's open sections");
        let prefix = format!("{}:", self.name);
        let mut closed = Vec::new();
        for key in open {
            let ids: Vec<String> = redis::cmd("HKEYS")
                .arg(&key)
                .query_async(ledger)
                .await
                .expect("HKEYS");
            for id in ids.iter().filter(|id| id.starts_with(&prefix)) {
                let _: i64 = redis::cmd("HDEL")
                    .arg(&key)
                    .arg(id)
                    .query_async(ledger)
                    .await
                    .expect("HDEL");
                closed.push(id.clone());
            }
        }
        closed
    }

    /// Sends it `signal` (`-STOP`, `-CONT`, `-KILL`).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal}");
    }

    /// The `DONE` line's `key=value` counts.
    pub fn counts(&self, within: Duration) -> Vec<(String, u64)> {
        let line = self
            .done
            .recv_timeout(within)
            .expect("the worker finished its run (no hang, no panic)");
        println!("{line}");
        line.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.parse().expect("a count")))
            .collect()
    }

    /// Tells the worker to exit, and checks that it exits cleanly.
    pub fn finish(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().expect("the worker exits");
        assert!(status.success(), "the worker failed: {status}");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The sections `workers` wrote in all, once each finished its run
/// (within `within`): no hang, no panic.
pub fn sections_of(workers: &[Worker], within: Duration) -> u64 {
    workers
        .iter()
        .map(|worker| {
            worker
                .counts(within)
                .iter()
                .find(|(k, _)| k == "sections")
                .map(|(_, v)| *v)
                .expect("the count is printed")
        })
        .sum()
}

/// What the ledger at `ledger` shows: the sections' overlaps, the
/// sections whose holder was told of a loss, and the overlaps excused.
/// Panics when an overlap was reported to neither holder, unless one of
/// its sections is `excused` (a worker killed in it, which can tell
/// nobody).
pub async fn overlaps_reported(
    ledger: &mut redis::aio::MultiplexedConnection,
    excused: &dyn Fn(&str) -> bool,
) -> (usize, usize, usize) {
    use redis::AsyncCommands;
    let overlaps: Vec<String> = ledger.lrange("overlaps", 0, -1).await.unwrap();
    let reported: HashSet<String> = ledger.smembers("reported").await.unwrap();
    let mut forgiven = 0;
    // A pair of a lock's sections, or the N + 1 or more of a semaphore's
    // that were open at once: reported when any of their holders was told.
    for overlap in &overlaps {
        let ids: Vec<&str> = overlap.split_whitespace().collect();
        if ids.iter().any(|id| reported.contains(*id)) {
            continue;
        }
        assert!(
            ids.iter().any(|id| excused(id)),
            "sections {ids:?} were open at once, above their bound, and none of their \
             holders was told"
        );
        forgiven += 1;
    }
    (overlaps.len(), reported.len(), forgiven)
}
