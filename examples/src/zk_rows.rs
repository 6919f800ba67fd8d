//! The ZooKeeper rows of the benchmarks: what a lock costs against the
//! floor on the same server, all measured in one run, every lock call from
//! spawned tasks. `zk_bench` runs them alone (rows 1-4); `lock_bench` runs
//! them after the etcd rows (rows 11-14).
//!
//! - **floor**: on one `zookeeper-client` session, an ephemeral create plus
//!   a delete (2 round trips, 2 writes). The least a ZooKeeper lock can do.
//! - **ours**: `client.lock(name).acquire()` + `guard.release()` on a
//!   `LockClient` of `zk://`.
//!
//! Rows (variants take turns inside each round; ratios are medians of
//! per-round ratios):
//!
//! 1. uncontended acquire + release, 1 task;
//! 2. 64 tasks on one client, distinct names;
//! 3. handoff: from the start of `release()` to the instant another
//!    client's waiter returns, p50 / p99, also in round trips of one write
//!    (a plain `setData`, measured alongside);
//! 4. 10,000 waiters on 1,000 names: release all → all done, and the
//!    memory each waiter holds while waiting (live heap, counted by a
//!    counting allocator). Each client has one session (one connection).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};
use zookeeper_client as zk;

use crate::{ZooKeeper, median, per_second, percentile};

/// What a row can fail with.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// What the ZooKeeper rows run: their sizes.
#[derive(Debug, Clone, Copy)]
pub struct Args {
    /// Measured rounds of rows 1-2, each running both variants.
    pub rounds: usize,
    /// Pairs per round of row 1 (row 2: a quarter per task).
    pub ops: usize,
    /// Handoffs measured in row 3.
    pub handoffs: usize,
    /// Waiters of row 4.
    pub waiters: usize,
    /// Names they wait on.
    pub names: usize,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            rounds: 5,
            ops: 300,
            handoffs: 300,
            waiters: 10_000,
            names: 1_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Floor,
    Ours,
}

/// What both variants run on.
struct Peers {
    raw: zk::Client,
    ours: LockClient,
}

/// The floor's parent node.
const FLOOR: &str = "/bench-floor";

impl Peers {
    /// `n` acquire + release pairs of `variant` on `name`.
    async fn pairs(&self, variant: Variant, name: &str, n: usize) -> Result<(), BenchError> {
        let node = format!("{FLOOR}/{name}");
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        for _ in 0..n {
            match variant {
                Variant::Floor => {
                    self.raw.create(&node, b"", &ephemeral).await?;
                    self.raw.delete(&node, None).await?;
                }
                Variant::Ours => {
                    self.ours.lock(name).acquire().await?.release().await?;
                }
            }
        }
        Ok(())
    }
}

/// Pairs per second of each variant, round by round (`tasks` tasks each
/// doing `per_task` pairs on a name of its own).
async fn interleaved(
    peers: &Arc<Peers>,
    args: Args,
    tasks: usize,
    per_task: usize,
) -> Result<[Vec<f64>; 2], BenchError> {
    let variants = [Variant::Floor, Variant::Ours];
    let mut rates = [Vec::new(), Vec::new()];
    for round in 0..=args.rounds {
        for i in 0..2 {
            let index = (i + round) % 2;
            let variant = variants[index];
            let started = Instant::now();
            let runs: Vec<_> = (0..tasks)
                .map(|t| {
                    let peers = peers.clone();
                    let name = format!("bench-{variant:?}-{tasks}-{t}");
                    tokio::spawn(async move { peers.pairs(variant, &name, per_task).await })
                })
                .collect();
            for run in runs {
                run.await??;
            }
            // Round 0 warms up (connections, the session, the allocator).
            if round > 0 {
                rates[index].push(per_second((tasks * per_task) as u64, started.elapsed()));
            }
        }
    }
    Ok(rates)
}

/// Median of the per-round ratios ours / floor, and ours' median rate.
fn ratio(rates: &[Vec<f64>; 2]) -> (f64, f64) {
    let ratios: Vec<f64> = rates[1].iter().zip(&rates[0]).map(|(o, f)| o / f).collect();
    (median(&ratios), median(&rates[1]))
}

/// Row 3: client A holds, client B's waiter is woken by the release.
async fn handoff(
    url: &str,
    raw: &zk::Client,
    n: usize,
) -> Result<(Vec<Duration>, Duration), BenchError> {
    let (a, b) = (
        LockClient::connect(Config::new(url)).await?,
        LockClient::connect(Config::new(url)).await?,
    );
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match raw.create("/bench-rt", b"", &persistent).await {
        Ok(_) | Err(zk::Error::NodeExists) => {}
        Err(e) => return Err(e.into()),
    }
    let mut samples = Vec::with_capacity(n);
    let mut writes = Vec::with_capacity(n);
    for _ in 0..n {
        let held = a.lock("bench-handoff").acquire().await?;
        let (queued_in, queued) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn({
            let b = b.clone();
            async move {
                let acquire = b.lock("bench-handoff").acquire();
                let _ = queued_in.send(());
                let guard = acquire.await?;
                let at = Instant::now();
                guard.release().await?;
                Ok::<_, BenchError>(at)
            }
        });
        queued.await?;
        // The waiter's node is in ZooKeeper: two contenders.
        while raw.list_children("/locks/bench-handoff").await?.len() < 2 {
            tokio::task::yield_now().await;
        }
        let released = Instant::now();
        held.release().await?;
        let woken = waiter.await??;
        samples.push(woken.saturating_duration_since(released));
        let write = Instant::now();
        raw.set_data("/bench-rt", b"x", None).await?;
        writes.push(write.elapsed());
    }
    writes.sort();
    Ok((samples, writes[writes.len() / 2]))
}

/// Live heap bytes of this process.
fn live_heap() -> i64 {
    let s = stats_alloc::INSTRUMENTED_SYSTEM.stats();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64 + s.bytes_reallocated as i64
}

/// Row 4's result.
struct Drain {
    drained: Duration,
    bytes_per_waiter: f64,
}

/// Row 4: a holder takes `names` locks; `waiters` tasks on another client
/// wait for them, as many per name; then the holder releases them all.
async fn drain(url: &str, raw: &zk::Client, args: Args) -> Result<Drain, BenchError> {
    let names: Vec<String> = (0..args.names)
        .map(|n| format!("bench-drain-{n}"))
        .collect();
    let holder = LockClient::connect(Config::new(url)).await?;
    let mut held = Vec::new();
    for name in &names {
        held.push(holder.lock(name.clone()).acquire().await?);
    }
    let client = LockClient::connect(Config::new(url)).await?;
    let before = live_heap();
    let started = Arc::new(AtomicUsize::new(0));
    let tasks = crate::spawn_waiters::<BenchError>(&client, &names, args.waiters, &started);
    while started.load(Ordering::Relaxed) < args.waiters {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Every name's head waiter has its node: under /locks, each name's
    // node and two contenders, besides the benchmark's other names.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut queued = 0;
        for name in &names {
            if raw.list_children(&format!("/locks/{name}")).await?.len() >= 2 {
                queued += 1;
            }
        }
        if queued == names.len() {
            break;
        }
        if Instant::now() > deadline {
            return Err("the waiters never queued".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let bytes = live_heap() - before;
    let released = Instant::now();
    let mut releases = Vec::new();
    for guard in held {
        releases.push(tokio::spawn(guard.release()));
    }
    let drained = crate::drained(released, tasks, releases).await?;
    Ok(Drain {
        drained,
        bytes_per_waiter: bytes as f64 / args.waiters as f64,
    })
}

/// Runs the rows against `server` and prints them, numbered from `first`,
/// then the goals of issue 25. The live heap is read from
/// `stats_alloc::INSTRUMENTED_SYSTEM`: the program must make it its global
/// allocator.
pub async fn run(server: &ZooKeeper, args: Args, first: usize) -> Result<(), BenchError> {
    let row = |n: usize| first + n - 1;
    let url = server.url();
    let raw = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(30))
        .connect(&server.connect_string())
        .await?;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match raw.create(FLOOR, b"", &persistent).await {
        Ok(_) | Err(zk::Error::NodeExists) => {}
        Err(e) => return Err(e.into()),
    }
    let peers = Arc::new(Peers {
        raw: raw.clone(),
        ours: LockClient::connect(Config::new(url)).await?,
    });
    println!("zookeeper: {}", server.describe());
    let one = interleaved(&peers, args, 1, args.ops).await?;
    let (r1, o1) = ratio(&one);
    println!(
        "{}. uncontended pair, 1 task:      ours {o1:>8.0}/s   floor {:>8.0}/s   ours/floor {r1:.2}x",
        row(1),
        median(&one[0])
    );
    let many = interleaved(&peers, args, 64, (args.ops / 4).max(5)).await?;
    let (r2, o2) = ratio(&many);
    println!(
        "{}. 64 tasks, distinct names:      ours {o2:>8.0}/s   floor {:>8.0}/s   ours/floor {r2:.2}x",
        row(2),
        median(&many[0])
    );
    let (mut samples, write) = handoff(url, &raw, args.handoffs).await?;
    let (p50, p99) = (
        percentile(&mut samples, 50.0),
        percentile(&mut samples, 99.0),
    );
    let rt = |d: Duration| d.as_secs_f64() / write.as_secs_f64().max(1e-9);
    println!(
        "{}. handoff: p50 {p50:>8.1?} ({:.1} RT)   p99 {p99:>8.1?} ({:.1} RT)   one write RT {write:.1?}",
        row(3),
        rt(p50),
        rt(p99)
    );
    let d = drain(url, &raw, args).await?;
    println!(
        "{}. {} waiters on {} names: drained in {:.1?}, {:.0} B per waiter",
        row(4),
        args.waiters,
        args.names,
        d.drained,
        d.bytes_per_waiter,
    );
    println!();
    println!("goals of the ZooKeeper rows (issue 25)");
    let goals = [
        ("uncontended >= 0.8x floor", format!("{r1:.2}x"), r1 >= 0.8),
        ("64 tasks >= 0.8x floor", format!("{r2:.2}x"), r2 >= 0.8),
        (
            "handoff p50 <= 2 RT",
            format!("{:.1} RT", rt(p50)),
            rt(p50) <= 2.0,
        ),
        (
            "<= 1.5 KiB per waiter",
            format!("{:.0} B", d.bytes_per_waiter),
            d.bytes_per_waiter <= 1536.0,
        ),
    ];
    for (goal, value, met) in goals {
        println!(
            "  {:<28} {value:>10}  {}",
            goal,
            if met { "met" } else { "NOT met" }
        );
    }
    Ok(())
}
