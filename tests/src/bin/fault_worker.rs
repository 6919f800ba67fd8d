//! One process of the fault suite (`tests/tests/faults.rs`): its tasks lock
//! a few hot names and names used once, and write every critical section to
//! the ledger (`tests/src/ledger.lua`) on a server the faults never touch.
//!
//! Arguments, `key=value`: `lock` (the lock server's URL, or a
//! comma-separated list of cluster seeds with `cluster=1`), `ledger` (URL),
//! `worker` (its name), `tasks`, `run_ms`, `wait_ms`, `lease_ms` (watchdog),
//! `response_ms`, `permits` (0: the hot names are locks; N: semaphores of
//! N permits, and the ledger notes a section begun while N are open).
//!
//! It first prints `CLIENT <id>`, its client's id (the prefix of its holder
//! ids). When the run is over it prints one line, `DONE key=value ...` (its
//! counts), and then keeps its client connected until its stdin closes, so
//! that the suite can check that no subscription outlives its waiters while
//! the client is still there.

use std::collections::HashMap;
use std::io::BufRead;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient, LockError};

/// What the tasks of this process counted.
#[derive(Default)]
struct Counts {
    sections: AtomicU64,
    refused: AtomicU64,
    reported: AtomicU64,
    timeouts: AtomicU64,
    errors: AtomicU64,
    max_overrun_ms: AtomicU64,
}

fn main() {
    let args: HashMap<String, String> = std::env::args()
        .skip(1)
        .filter_map(|a| a.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
    let arg = |key: &str| {
        args.get(key)
            .unwrap_or_else(|| panic!("missing argument {key}="))
            .clone()
    };
    let ms = |key: &str| Duration::from_millis(arg(key).parse().expect("a number of ms"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let counts = Arc::new(Counts::default());
    let client = runtime.block_on(async {
        let config = if args.get("cluster").is_some_and(|c| c == "1") {
            Config::cluster(arg("lock").split(','))
        } else {
            Config::new(arg("lock"))
        };
        let config = config
            .watchdog_timeout(ms("lease_ms"))
            .response_timeout(ms("response_ms"))
            .fair_wait_timeout(ms("wait_ms"));
        let client = LockClient::connect(config).await.expect("connect");
        // The suite finds which worker holds a lock by this id.
        println!("CLIENT {}", client.id());
        // No response timeout: a SIGSTOP of this process must not fail the
        // ledger's calls (the ledger itself is never faulted).
        let ledger = redis::Client::open(arg("ledger"))
            .expect("ledger url")
            .get_multiplexed_async_connection_with_config(
                &redis::AsyncConnectionConfig::new().set_response_timeout(None),
            )
            .await
            .expect("ledger");
        let deadline = Instant::now() + ms("run_ms");
        let tasks: Vec<_> = (0..arg("tasks").parse::<usize>().expect("tasks"))
            .map(|task| {
                let work = Work {
                    client: client.clone(),
                    ledger: ledger.clone(),
                    counts: counts.clone(),
                    worker: arg("worker"),
                    task,
                    wait: ms("wait_ms"),
                    permits: arg("permits").parse().expect("permits"),
                };
                tokio::spawn(work.run(deadline))
            })
            .collect();
        for task in tasks {
            task.await.expect("a task panicked");
        }
        client
    });
    let c = &counts;
    println!(
        "DONE sections={} refused={} reported={} timeouts={} errors={} max_overrun_ms={}",
        c.sections.load(Ordering::SeqCst),
        c.refused.load(Ordering::SeqCst),
        c.reported.load(Ordering::SeqCst),
        c.timeouts.load(Ordering::SeqCst),
        c.errors.load(Ordering::SeqCst),
        c.max_overrun_ms.load(Ordering::SeqCst),
    );
    // Stay connected (the client's background work goes on) until told.
    for _ in std::io::stdin().lock().lines() {}
    drop(client);
    drop(runtime);
}

/// One task's loop of acquisitions.
struct Work {
    client: LockClient,
    ledger: redis::aio::MultiplexedConnection,
    counts: Arc<Counts>,
    worker: String,
    task: usize,
    wait: Duration,
    /// 0: locks; N: the hot names are semaphores of N permits.
    permits: u32,
}

impl Work {
    /// One call of the ledger script (see `ledger.lua`).
    async fn ledger_call(
        &mut self,
        ledger: &redis::Script,
        keys: &[String; 4],
        what: &str,
        id: &str,
        value: &str,
        bound: u32,
    ) -> i64 {
        ledger
            .key(&keys[0])
            .key(&keys[1])
            .key(&keys[2])
            .key(&keys[3])
            .arg(what)
            .arg(id)
            .arg(value)
            .arg(bound)
            .invoke_async(&mut self.ledger)
            .await
            .expect("the ledger answers")
    }

    async fn run(mut self, deadline: Instant) {
        let ledger = redis::Script::new(include_str!("../ledger.lua"));
        let mut n = 0u64;
        while Instant::now() < deadline {
            n += 1;
            // Mostly four hot names; every fifth a name used once (fair on
            // every other such name, so queue keys are exercised too).
            let once = n.is_multiple_of(5);
            let name = if once {
                format!("once:{}:{}:{n}", self.worker, self.task)
            } else {
                format!("hot:{}", n % 4)
            };
            let builder = if once && n.is_multiple_of(2) {
                self.client.fair_lock(&name)
            } else if !once && self.permits > 0 {
                self.client.semaphore(&name, self.permits)
            } else {
                self.client.lock(&name)
            };
            let started = Instant::now();
            let acquired = builder.wait(self.wait).acquire().await;
            let overrun = started.elapsed().saturating_sub(self.wait);
            self.counts
                .max_overrun_ms
                .fetch_max(overrun.as_millis() as u64, Ordering::SeqCst);
            let guard = match acquired {
                Ok(guard) => guard,
                Err(LockError::Timeout { .. }) => {
                    self.counts.timeouts.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                Err(_) => {
                    self.counts.errors.fetch_add(1, Ordering::SeqCst);
                    // Do not spin while the server is away.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            let id = format!("{}:{}:{n}", self.worker, self.task);
            let keys = [
                format!("fence:{name}"),
                format!("open:{name}"),
                "overlaps".to_owned(),
                "reported".to_owned(),
            ];
            // How many sections may be open at once on the name.
            let bound = if !once && self.permits > 0 {
                self.permits
            } else {
                1
            };
            let began = self
                .ledger_call(
                    &ledger,
                    &keys,
                    "begin",
                    &id,
                    &guard.token().to_string(),
                    bound,
                )
                .await;
            if began == 1 {
                // The critical section: long enough for faults to land in it.
                tokio::time::sleep(Duration::from_millis(5 + n % 20)).await;
            } else {
                self.counts.refused.fetch_add(1, Ordering::SeqCst);
            }
            // The section ends before the release (the next holder may begin
            // the moment it is free); a loss learnt at release is reported
            // after it.
            let lost = guard.is_lost();
            if began == 1 {
                let told = if lost { "1" } else { "0" };
                self.ledger_call(&ledger, &keys, "end", &id, told, bound)
                    .await;
                self.counts.sections.fetch_add(1, Ordering::SeqCst);
            }
            let released = guard.release().await;
            if began == 1 && released.is_err() && !lost {
                self.ledger_call(&ledger, &keys, "end", &id, "1", bound)
                    .await;
            }
            let reported = lost || released.is_err();
            if reported {
                self.counts.reported.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}
