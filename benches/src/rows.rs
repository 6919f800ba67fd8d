//! The four rows every engine but Redis is measured by, written once: what
//! a lock costs against the floor on the same store, all measured in one
//! run, every lock call from spawned tasks. Each engine brings only its
//! [`Floor`] (the etcd one in [`crate::etcd_rows`], the ZooKeeper one in
//! [`crate::zk_rows`], the PostgreSQL one in [`crate::pg_rows`], the
//! MySQL/MariaDB one in [`crate::my_rows`]); `etcd_bench`, `zk_bench`,
//! `pg_bench` and `my_bench` run the rows alone (rows 1-4, through
//! [`main`]), `lock_bench` after the Redis rows (rows 7-10, 11-14, 15-18
//! and 19-22, through [`run`]).
//!
//! - **floor**: the least a lock of that store can do, on one raw client of
//!   the store ([`Floor::pairs`]).
//! - **ours**: `client.lock(name).acquire()` + `guard.release()` on a
//!   `LockClient` of the store's URL.
//!
//! Rows (variants take turns inside each round; ratios are medians of
//! per-round ratios):
//!
//! 1. uncontended acquire + release, 1 task;
//! 2. 64 tasks on one client, distinct names;
//! 3. handoff: from the start of `release()` to the instant another
//!    client's waiter returns, p50 / p99, also in round trips of one write
//!    ([`Floor::round_trip`], measured alongside);
//! 4. 10,000 waiters on 1,000 names: release all → all done, the memory
//!    each waiter holds while waiting (live heap, counted by a counting
//!    allocator), and, where the store counts them ([`Floor::STREAMS`]),
//!    the streams or connections the waiting client opened there.

use std::fmt::Write as _;
use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};

use examples::{NoServer, median, per_second, percentile};

#[doc(hidden)]
pub use stats_alloc;

/// What a row can fail with.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// The name row 3 hands over.
pub const HANDOFF: &str = "bench-handoff";

/// How the names row 4 waits on begin (then a number).
pub const DRAIN: &str = "bench-drain-";

/// A server the rows run against: `LOCK_URL` when it names one of the
/// store's kind, otherwise a throwaway one this program starts and stops.
pub trait Server: Sized + Send + Sync + 'static {
    /// `LOCK_URL`'s server, or a throwaway one.
    fn from_env_or_start() -> Result<Self, NoServer>;
    /// The URL a `LockClient` connects to.
    fn url(&self) -> &str;
    /// Where the server comes from, for the report.
    fn describe(&self) -> String;
}

/// Makes the servers of `lib.rs` [`Server`]s through their own methods.
macro_rules! servers {
    ($($server:ty),*) => {$(
        impl Server for $server {
            fn from_env_or_start() -> Result<Self, NoServer> {
                <$server>::from_env_or_start()
            }
            fn url(&self) -> &str {
                <$server>::url(self)
            }
            fn describe(&self) -> String {
                <$server>::describe(self)
            }
        }
    )*};
}

servers!(
    examples::Etcd,
    examples::ZooKeeper,
    examples::Postgres,
    examples::MariaDb
);

/// What the store counts in row 4: the streams or connections the waiting
/// client opened on the server.
#[derive(Debug, Clone, Copy)]
pub struct Streams {
    /// How row 4 names them after their number (`"watch stream(s)"`).
    pub unit: &'static str,
    /// The goal's label (`"one watch stream"`).
    pub goal: &'static str,
    /// The most the goal allows.
    pub most: i64,
}

/// What one store contributes to the rows: its floor's raw client and what
/// the rows ask of the store directly. Every future is `Send`: the rows run
/// in spawned tasks.
pub trait Floor: Sized + Send + Sync + 'static {
    /// The server the rows run against.
    type Server: Server;
    /// What row 4 polls to see the waiters queued ([`Floor::drain_probe`]).
    type Probe: Send;
    /// The report's prefix of the server line (`"etcd"`).
    const LABEL: &'static str;
    /// The store in prose (`"ZooKeeper"`): "goals of the {NAME} rows".
    const NAME: &'static str;
    /// The issue that set the rows' goals.
    const ISSUE: u32;
    /// What row 4 counts on the server; `None` when it counts nothing there.
    const STREAMS: Option<Streams> = None;
    /// Whether row 4 counts [`Floor::STREAMS`] from before the waiting
    /// client connects (what its connect opens counts too: PostgreSQL's
    /// connections) rather than from after (only what its waiters open:
    /// etcd's watch stream).
    const STREAMS_FROM_CONNECT: bool = false;
    /// How row 3 names its unit ([`Floor::round_trip`]) after the time.
    const ROUND_TRIP: &'static str = "one write RT";
    /// Row 3's goal: the handoff p50 in units of [`Floor::ROUND_TRIP`] at
    /// most; `None` for a store whose handoff is only reported (MySQL's
    /// waiters poll).
    const HANDOFF_GOAL: Option<f64> = Some(2.0);

    /// The floor's raw client on `server`, set up for [`Floor::pairs`].
    fn connect(server: &Self::Server) -> impl Future<Output = Result<Self, BenchError>> + Send;

    /// `n` of the floor's acquire + release pairs on `name`.
    fn pairs(&self, name: &str, n: usize) -> impl Future<Output = Result<(), BenchError>> + Send;

    /// Makes ready what [`Floor::round_trip`] writes (row 3, once).
    fn prepare_round_trip(&self) -> impl Future<Output = Result<(), BenchError>> + Send {
        async { Ok(()) }
    }

    /// Row 3's unit: one plain write (or what [`Floor::ROUND_TRIP`]
    /// says), and how long it took.
    fn round_trip(&self) -> impl Future<Output = Result<Duration, BenchError>> + Send;

    /// How many contenders (holder and waiters) lock `name` has in the store.
    fn contenders(&self, name: &str) -> impl Future<Output = Result<usize, BenchError>> + Send;

    /// Row 4, once its waiters have started: what [`Floor::all_queued`]
    /// polls with. Made inside the measured stretch, so what it keeps counts
    /// in the heap per waiter.
    fn drain_probe(&self) -> impl Future<Output = Result<Self::Probe, BenchError>> + Send;

    /// Whether every one of `names` has its holder and its head waiter in
    /// the store.
    fn all_queued(
        &self,
        probe: &mut Self::Probe,
        names: &[String],
    ) -> impl Future<Output = Result<bool, BenchError>> + Send;

    /// The server's count of [`Floor::STREAMS`] (only asked when that is
    /// `Some`).
    fn streams(&self) -> Result<i64, BenchError> {
        Err(format!("the {} rows count no streams", Self::NAME).into())
    }
}

/// What the rows run: their sizes.
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
            // Enough rounds for a steady median on a busy two-core machine:
            // at five, one run's ratio moved by a tenth from run to run.
            rounds: 25,
            ops: 300,
            handoffs: 300,
            waiters: 10_000,
            names: 1_000,
        }
    }
}

impl Args {
    /// The sizes a bench program's arguments (`it`, past the program's
    /// name) ask for: an empty error for `--help`.
    fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut args = Args::default();
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--rounds" => args.rounds = examples::positive(&mut it, "--rounds")?,
                "--ops" => args.ops = examples::positive(&mut it, "--ops")?,
                "--handoffs" => args.handoffs = examples::positive(&mut it, "--handoffs")?,
                "--waiters" => args.waiters = examples::positive(&mut it, "--waiters")?,
                "--names" => args.names = examples::positive(&mut it, "--names")?,
                "-h" | "--help" => return Err(String::new()),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(args)
    }
}

/// The usage of a bench program named `program`.
fn usage(program: &str) -> String {
    format!(
        "usage: {program} [--rounds N] [--ops N] [--handoffs N] [--waiters N] [--names N]
  --rounds N    measured rounds, each running both variants (default 25)
  --ops N       pairs per round of row 1 (default 300; row 2: N/4 per task)
  --handoffs N  handoffs measured in row 3 (default 300)
  --waiters N   waiters of row 4 (default 10000)
  --names N     names they wait on (default 1000)"
    )
}

/// The whole of a bench program named `program` (see
/// [`bench_main!`](crate::bench_main)): its arguments, the server, a
/// multi-thread runtime, and rows 1-4 in a task spawned on it (nothing
/// measured in `block_on`).
pub fn main<F: Floor>(program: &str) -> ExitCode {
    let usage = usage(program);
    let parse = || Args::parse(std::env::args().skip(1));
    let (args, server) =
        match examples::start_with(parse, &usage, |_| F::Server::from_env_or_start()) {
            Ok(started) => started,
            Err(code) => return code,
        };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Spawned, as a service's handlers run: nothing measured in block_on.
    match runtime
        .block_on(async { tokio::spawn(async move { run::<F>(&server, args, 1).await }).await })
    {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("the benchmark failed: {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("the benchmark panicked: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A bench program of one store: `bench_main!(Floor, "program")` makes
/// the counting allocator (`stats_alloc`) the program's global allocator,
/// which row 4 reads, and its `main` [`main`]`::<Floor>("program")`.
#[macro_export]
macro_rules! bench_main {
    ($floor:ty, $program:literal) => {
        #[global_allocator]
        static HEAP: &$crate::rows::stats_alloc::StatsAlloc<::std::alloc::System> =
            &$crate::rows::stats_alloc::INSTRUMENTED_SYSTEM;

        fn main() -> ::std::process::ExitCode {
            $crate::rows::main::<$floor>($program)
        }
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Floor,
    Ours,
}

/// What both variants run on.
struct Peers<F> {
    floor: F,
    ours: LockClient,
}

impl<F: Floor> Peers<F> {
    /// `n` acquire + release pairs of `variant` on `name`.
    async fn pairs(&self, variant: Variant, name: &str, n: usize) -> Result<(), BenchError> {
        match variant {
            Variant::Floor => self.floor.pairs(name, n).await,
            Variant::Ours => {
                for _ in 0..n {
                    self.ours.lock(name).acquire().await?.release().await?;
                }
                Ok(())
            }
        }
    }
}

/// Pairs per second of each variant, round by round (`tasks` tasks each
/// doing `per_task` pairs on a name of its own).
async fn interleaved<F: Floor>(
    peers: &Arc<Peers<F>>,
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

/// Row 3: client A holds, client B's waiter is woken by the release; also
/// the median of one write measured after each handoff.
async fn handoff<F: Floor>(
    url: &str,
    floor: &F,
    n: usize,
) -> Result<(Vec<Duration>, Duration), BenchError> {
    let (a, b) = (
        LockClient::connect(Config::new(url)).await?,
        LockClient::connect(Config::new(url)).await?,
    );
    floor.prepare_round_trip().await?;
    let mut samples = Vec::with_capacity(n);
    let mut writes = Vec::with_capacity(n);
    for _ in 0..n {
        let held = a.lock(HANDOFF).acquire().await?;
        let (queued_in, queued) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn({
            let b = b.clone();
            async move {
                let acquire = b.lock(HANDOFF).acquire();
                let _ = queued_in.send(());
                let guard = acquire.await?;
                let at = Instant::now();
                guard.release().await?;
                Ok::<_, BenchError>(at)
            }
        });
        queued.await?;
        // The waiter is queued in the store: two contenders.
        while floor.contenders(HANDOFF).await? < 2 {
            tokio::task::yield_now().await;
        }
        let released = Instant::now();
        held.release().await?;
        let woken = waiter.await??;
        samples.push(woken.saturating_duration_since(released));
        writes.push(floor.round_trip().await?);
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
    /// What the waiting client opened on the server ([`Floor::STREAMS`]).
    streams: Option<i64>,
}

/// Row 4: a holder takes `names` locks; `waiters` tasks on another client
/// wait for them, as many per name; then the holder releases them all.
async fn drain<F: Floor>(url: &str, floor: &F, args: Args) -> Result<Drain, BenchError> {
    let names: Vec<String> = (0..args.names).map(|n| format!("{DRAIN}{n}")).collect();
    let holder = LockClient::connect(Config::new(url)).await?;
    let mut held = Vec::new();
    for name in &names {
        held.push(holder.lock(name.clone()).acquire().await?);
    }
    let from_connect = match F::STREAMS {
        Some(_) if F::STREAMS_FROM_CONNECT => Some(floor.streams()?),
        _ => None,
    };
    let client = LockClient::connect(Config::new(url)).await?;
    let streams_before = match (F::STREAMS, from_connect) {
        (Some(_), Some(before)) => Some(before),
        (Some(_), None) => Some(floor.streams()?),
        (None, _) => None,
    };
    let before = live_heap();
    let started = Arc::new(AtomicUsize::new(0));
    let tasks = examples::spawn_waiters::<BenchError>(&client, &names, args.waiters, &started);
    while started.load(Ordering::Relaxed) < args.waiters {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Every name's head waiter is queued behind its holder.
    let mut probe = floor.drain_probe().await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if floor.all_queued(&mut probe, &names).await? {
            break;
        }
        if Instant::now() > deadline {
            return Err("the waiters never queued".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let bytes = live_heap() - before;
    let streams = match streams_before {
        Some(before) => Some(floor.streams()? - before),
        None => None,
    };
    let released = Instant::now();
    let mut releases = Vec::new();
    for guard in held {
        releases.push(tokio::spawn(guard.release()));
    }
    let drained = examples::drained(released, tasks, releases).await?;
    Ok(Drain {
        drained,
        bytes_per_waiter: bytes as f64 / args.waiters as f64,
        streams,
    })
}

/// Runs the rows against `server` and prints them, numbered from `first`,
/// then the goals of [`Floor::ISSUE`]. The live heap is read from
/// `stats_alloc::INSTRUMENTED_SYSTEM`: the program must make it its global
/// allocator (as [`bench_main!`](crate::bench_main) does).
pub async fn run<F: Floor>(server: &F::Server, args: Args, first: usize) -> Result<(), BenchError> {
    let row = |n: usize| first + n - 1;
    let url = server.url();
    let peers = Arc::new(Peers {
        floor: F::connect(server).await?,
        ours: LockClient::connect(Config::new(url)).await?,
    });
    println!("{}: {}", F::LABEL, server.describe());
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
    let (mut samples, write) = handoff(url, &peers.floor, args.handoffs).await?;
    let (p50, p99) = (
        percentile(&mut samples, 50.0),
        percentile(&mut samples, 99.0),
    );
    let rt = |d: Duration| d.as_secs_f64() / write.as_secs_f64().max(1e-9);
    println!(
        "{}. handoff: p50 {p50:>8.1?} ({:.1} RT)   p99 {p99:>8.1?} ({:.1} RT)   {} {write:.1?}",
        row(3),
        rt(p50),
        rt(p99),
        F::ROUND_TRIP
    );
    let d = drain(url, &peers.floor, args).await?;
    let mut line = format!(
        "{}. {} waiters on {} names: drained in {:.1?}, {:.0} B per waiter",
        row(4),
        args.waiters,
        args.names,
        d.drained,
        d.bytes_per_waiter,
    );
    let counted = F::STREAMS.zip(d.streams);
    if let Some((streams, n)) = counted {
        let _ = write!(line, ", {n} {}", streams.unit);
    }
    println!("{line}");
    println!();
    println!("goals of the {} rows (issue {})", F::NAME, F::ISSUE);
    let mut goals = vec![
        ("uncontended >= 0.8x floor", format!("{r1:.2}x"), r1 >= 0.8),
        ("64 tasks >= 0.8x floor", format!("{r2:.2}x"), r2 >= 0.8),
    ];
    if let Some(most) = F::HANDOFF_GOAL {
        goals.push((
            "handoff p50 <= 2 RT",
            format!("{:.1} RT", rt(p50)),
            rt(p50) <= most,
        ));
    }
    goals.push((
        "<= 1.5 KiB per waiter",
        format!("{:.0} B", d.bytes_per_waiter),
        d.bytes_per_waiter <= 1536.0,
    ));
    if let Some((streams, n)) = counted {
        goals.push((streams.goal, n.to_string(), n <= streams.most));
    }
    for (goal, value, met) in goals {
        println!(
            "  {:<28} {value:>10}  {}",
            goal,
            if met { "met" } else { "NOT met" }
        );
    }
    Ok(())
}

/// The lock table a SQL engine's lock URL names (`table=`, else the
/// engine's default), each part quoted with `quote` (doubled inside).
pub fn lock_table(url: &str, quote: char) -> String {
    let table = url
        .split_once('?')
        .and_then(|(_, query)| query.split('&').find_map(|p| p.strip_prefix("table=")))
        .unwrap_or("distributed_locks");
    let doubled = format!("{quote}{quote}");
    table
        .split('.')
        .map(|part| format!("{quote}{}{quote}", part.replace(quote, &doubled)))
        .collect::<Vec<_>>()
        .join(".")
}
