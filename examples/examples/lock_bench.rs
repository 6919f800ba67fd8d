//! The first benchmark: what a lock costs, against the floor measured in the
//! same run.
//!
//! - Uncontended acquire + release: `client.lock(name).acquire()` then
//!   `guard.release()`, one after the other, against the floor: raw redis-rs
//!   `SET key token NX PX 30000` plus a compare-and-delete script (2 round
//!   trips) on a plain `MultiplexedConnection`. Reported in ops/s and as the
//!   ratio ours / floor (median of the per-round ratios; variants take turns
//!   within each round so that drift hits all of them alike). Measured twice:
//!   on a multi-thread tokio runtime (`#[tokio::main]`'s default) and on a
//!   current-thread one (`#[tokio::test]`'s default, `flavor = "current_thread"`).
//! - Contended handoff: one holder releases while a task on another client
//!   waits; the latency from just before `release()` to the instant the waiter
//!   has its guard, p50 / p99, in µs and in round trips (`PING` p50, sampled
//!   between the handoffs so that it sees the same machine load).
//!
//! ```text
//! cargo run --release -p examples --example lock_bench
//! cargo run --release -p examples --example lock_bench -- --rounds 40 --ops 1000 --handoffs 4000
//! ```
//!
//! Uses `REDIS_URL` when set; otherwise starts a throwaway `redis-server` on a
//! free loopback port. BENCHMARKS.md explains the figures.

use std::future::Future;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use examples::{Redis, per_second, percentile};
use lock_runtime::{Config, LockClient, LockError, distributed_lock};
use redis::aio::MultiplexedConnection;
use tokio::sync::oneshot;

/// The floor's release: delete the key only if it still holds our token.
const COMPARE_AND_DELETE: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0";

/// The goal of issue 2: acquire + release at no less than this share of the floor.
const GOAL: f64 = 0.9;

#[derive(Debug, Clone, Copy)]
struct Args {
    /// Measured rounds; each runs every variant once.
    rounds: usize,
    /// Acquire + release pairs per variant per round.
    ops: usize,
    /// Measured handoffs.
    handoffs: usize,
}

/// The uncontended variants, each one acquire + release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Floor,
    FloorViaThread,
    Watchdog,
    Lease,
    Attribute,
}

impl Variant {
    const ALL: [Variant; 5] = [
        Variant::Floor,
        Variant::FloorViaThread,
        Variant::Watchdog,
        Variant::Lease,
        Variant::Attribute,
    ];

    fn label(self) -> &'static str {
        match self {
            Variant::Floor => "floor: SET NX PX + compare-and-delete",
            Variant::FloorViaThread => "  the same, each call via a helper thread",
            Variant::Watchdog => "client.lock(..).acquire() + release()",
            Variant::Lease => "  the same with .lease(30s)",
            Variant::Attribute => "#[distributed_lock] on an empty fn",
        }
    }
}

#[derive(Debug)]
enum BenchError {
    Lock(LockError),
    Redis(redis::RedisError),
    Broken(String),
}

impl From<LockError> for BenchError {
    fn from(e: LockError) -> Self {
        BenchError::Lock(e)
    }
}

impl From<redis::RedisError> for BenchError {
    fn from(e: redis::RedisError) -> Self {
        BenchError::Redis(e)
    }
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchError::Lock(e) => write!(f, "lock: {e}"),
            BenchError::Redis(e) => write!(f, "redis: {e}"),
            BenchError::Broken(what) => f.write_str(what),
        }
    }
}

/// What the attribute costs around a body that does nothing.
#[distributed_lock(key = "bench:attribute")]
async fn locked_noop() -> Result<(), LockError> {
    Ok(())
}

/// The floor's acquire: `SET key token NX PX 30000`.
async fn floor_acquire(conn: &mut MultiplexedConnection, token: &str) -> Result<(), BenchError> {
    let set: Option<String> = redis::cmd("SET")
        .arg("bench:floor")
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(conn)
        .await?;
    match set {
        Some(_) => Ok(()),
        None => Err(BenchError::Broken(
            "floor: SET NX found the key taken".into(),
        )),
    }
}

/// The floor's release: the compare-and-delete script.
async fn floor_release(
    conn: &mut MultiplexedConnection,
    compare_and_delete: &redis::Script,
    token: &str,
) -> Result<(), BenchError> {
    let deleted: i64 = compare_and_delete
        .key("bench:floor")
        .arg(token)
        .invoke_async(conn)
        .await?;
    match deleted {
        1 => Ok(()),
        _ => Err(BenchError::Broken("floor: the token was not ours".into())),
    }
}

/// A current-thread runtime on a thread of its own; stops when dropped.
struct Helper {
    handle: tokio::runtime::Handle,
    _stop: oneshot::Sender<()>,
}

impl Helper {
    fn start() -> Result<Helper, BenchError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| BenchError::Broken(format!("cannot start a runtime: {e}")))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::spawn(move || {
            runtime.block_on(async {
                let _ = stopped.await;
            })
        });
        Ok(Helper {
            handle,
            _stop: stop,
        })
    }

    /// Runs `fut` on the helper thread and waits for it.
    async fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, BenchError> {
        self.handle
            .spawn(fut)
            .await
            .map_err(|e| BenchError::Broken(format!("helper task failed: {e}")))
    }
}

/// The tools every variant needs.
struct Bench {
    raw: MultiplexedConnection,
    /// A thread running Redis calls for the caller, the way the lock client
    /// runs every call on its own thread; `helper_conn` lives there.
    helper: Helper,
    helper_conn: MultiplexedConnection,
    compare_and_delete: redis::Script,
    client: LockClient,
    /// Distinct tokens for the floor.
    next_token: u64,
}

impl Bench {
    /// A fresh token for the floor.
    fn token(&mut self) -> String {
        self.next_token += 1;
        self.next_token.to_string()
    }

    /// One acquire + release of `variant`.
    async fn once(&mut self, variant: Variant) -> Result<(), BenchError> {
        match variant {
            Variant::Floor => {
                let token = self.token();
                floor_acquire(&mut self.raw, &token).await?;
                floor_release(&mut self.raw, &self.compare_and_delete, &token).await?;
            }
            Variant::FloorViaThread => {
                let token = self.token();
                let (mut conn, t) = (self.helper_conn.clone(), token.clone());
                self.helper
                    .run(async move { floor_acquire(&mut conn, &t).await })
                    .await??;
                let (mut conn, script) =
                    (self.helper_conn.clone(), self.compare_and_delete.clone());
                self.helper
                    .run(async move { floor_release(&mut conn, &script, &token).await })
                    .await??;
            }
            Variant::Watchdog => {
                let guard = self.client.lock("bench:ours").acquire().await?;
                guard.release().await?;
            }
            Variant::Lease => {
                let guard = self
                    .client
                    .lock("bench:ours")
                    .lease(Duration::from_secs(30))
                    .acquire()
                    .await?;
                guard.release().await?;
            }
            Variant::Attribute => locked_noop().await?,
        }
        Ok(())
    }

    /// `ops` acquire + release pairs of `variant`, one after the other; the
    /// latency of each.
    async fn run(&mut self, variant: Variant, ops: usize) -> Result<Vec<Duration>, BenchError> {
        let mut samples = Vec::with_capacity(ops);
        for _ in 0..ops {
            let started = Instant::now();
            self.once(variant).await?;
            samples.push(started.elapsed());
        }
        Ok(samples)
    }
}

/// Handoff latencies, and round trips sampled between them.
struct Handoffs {
    samples: Vec<Duration>,
    round_trips: Vec<Duration>,
}

/// Per variant: ops/s of each round, and every latency sample.
#[derive(Default)]
struct Measured {
    ops_per_s: Vec<f64>,
    samples: Vec<Duration>,
}

async fn uncontended(bench: &mut Bench, args: Args) -> Result<Vec<Measured>, BenchError> {
    // Warm-up: connections, script caches, allocator, CPU frequency.
    for variant in Variant::ALL {
        bench.run(variant, args.ops.min(1000)).await?;
    }
    let mut measured: Vec<Measured> = Variant::ALL.iter().map(|_| Measured::default()).collect();
    for round in 0..args.rounds {
        // Take turns: each variant runs first in some round.
        for i in 0..Variant::ALL.len() {
            let index = (i + round) % Variant::ALL.len();
            let started = Instant::now();
            let samples = bench.run(Variant::ALL[index], args.ops).await?;
            let elapsed = started.elapsed();
            measured[index]
                .ops_per_s
                .push(per_second(args.ops as u64, elapsed));
            measured[index].samples.extend(samples);
        }
    }
    Ok(measured)
}

/// `handoffs` handoffs of one lock between tasks on two clients, taking turns:
/// the latency from just before the holder's `release()` to the instant the
/// waiter (already asleep on the unlock channel) holds the lock.
async fn handoff(
    url: &str,
    raw: &mut MultiplexedConnection,
    handoffs: usize,
) -> Result<Handoffs, BenchError> {
    const NAME: &str = "bench:handoff";
    let channel = format!("redisson_lock__channel:{{{NAME}}}");
    let mut holder_client = LockClient::connect(Config::new(url)).await?;
    let mut waiter_client = LockClient::connect(Config::new(url)).await?;
    let mut guard = holder_client.lock(NAME).acquire().await?;
    let warm_up = (handoffs / 10).max(10);
    let mut samples = Vec::with_capacity(handoffs);
    let mut round_trips = Vec::with_capacity(handoffs);
    for i in 0..warm_up + handoffs {
        let (started_tx, started) = oneshot::channel();
        let client = waiter_client.clone();
        let waiter = tokio::spawn(async move {
            let _ = started_tx.send(());
            let guard = client.lock(NAME).acquire().await;
            (Instant::now(), guard)
        });
        started
            .await
            .map_err(|_| BenchError::Broken("the waiter died".into()))?;
        // The waiter is asleep once it has subscribed and its retry came back
        // busy: wait for the subscription, then give the retry time to finish.
        let deadline = Instant::now() + Duration::from_secs(10);
        while numsub(raw, &channel).await? < 1 {
            if Instant::now() > deadline {
                return Err(BenchError::Broken("the waiter never subscribed".into()));
            }
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        let released_at = Instant::now();
        guard.release().await?;
        let (acquired_at, next) = waiter
            .await
            .map_err(|e| BenchError::Broken(format!("the waiter panicked: {e}")))?;
        guard = next?;
        if i >= warm_up {
            samples.push(acquired_at - released_at);
            let started = Instant::now();
            let _: String = redis::cmd("PING").query_async(raw).await?;
            round_trips.push(started.elapsed());
        }
        std::mem::swap(&mut holder_client, &mut waiter_client);
    }
    guard.release().await?;
    Ok(Handoffs {
        samples,
        round_trips,
    })
}

async fn numsub(raw: &mut MultiplexedConnection, channel: &str) -> Result<i64, BenchError> {
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(raw)
        .await?;
    Ok(n)
}

fn median(values: &[f64]) -> f64 {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Prints one runtime flavour's uncontended table; returns ours / floor.
fn report_uncontended(flavor: &str, args: Args, measured: &mut [Measured]) -> f64 {
    println!();
    println!(
        "uncontended acquire + release, {flavor} runtime ({} rounds x {} ops)",
        args.rounds, args.ops
    );
    println!(
        "  {:<40} {:>9} {:>8} {:>8} {:>9}",
        "", "ops/s", "p50 µs", "p99 µs", "vs floor"
    );
    let floor = measured[0].ops_per_s.clone();
    let mut ours_ratio = 0.0;
    for (variant, m) in Variant::ALL.iter().zip(measured.iter_mut()) {
        // Per round, so that drift between rounds cancels out.
        let ratios: Vec<f64> = m
            .ops_per_s
            .iter()
            .zip(&floor)
            .map(|(ours, floor)| ours / floor)
            .collect();
        let ratio = median(&ratios);
        if *variant == Variant::Watchdog {
            ours_ratio = ratio;
        }
        println!(
            "  {:<40} {:>9.0} {:>8.1} {:>8.1} {:>8.2}x",
            variant.label(),
            median(&m.ops_per_s),
            micros(percentile(&mut m.samples, 50.0)),
            micros(percentile(&mut m.samples, 99.0)),
            ratio,
        );
    }
    ours_ratio
}

/// Prints the handoff figures; returns p50 in round trips.
fn report_handoff(mut handoffs: Handoffs) -> f64 {
    let rtt_us = micros(percentile(&mut handoffs.round_trips, 50.0)).max(f64::MIN_POSITIVE);
    let samples = &mut handoffs.samples;
    let p50 = micros(percentile(samples, 50.0));
    let p99 = micros(percentile(samples, 99.0));
    let max = micros(percentile(samples, 100.0));
    println!();
    println!(
        "contended handoff, multi-thread runtime: release() -> the other client's waiter holds it ({} handoffs)",
        samples.len()
    );
    println!(
        "  p50 {p50:.1} µs ({:.1} round trips)   p99 {p99:.1} µs ({:.1} round trips)   max {max:.1} µs",
        p50 / rtt_us,
        p99 / rtt_us
    );
    println!("  round trip (PING p50, sampled between handoffs): {rtt_us:.1} µs");
    p50 / rtt_us
}

const USAGE: &str = "usage: lock_bench [--rounds N] [--ops N] [--handoffs N]
  --rounds N    measured rounds, each running every variant (default 20)
  --ops N       acquire + release pairs per variant per round (default 1000)
  --handoffs N  measured contended handoffs (default 2000)";

fn parse_args() -> Result<Args, String> {
    let mut parsed = Args {
        rounds: 20,
        ops: 1000,
        handoffs: 2000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            let v = args.next().ok_or(format!("{name} needs a value"))?;
            match v.parse() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{name}: expected a positive number, got {v:?}")),
            }
        };
        match arg.as_str() {
            "--rounds" => parsed.rounds = value("--rounds")?,
            "--ops" => parsed.ops = value("--ops")?,
            "--handoffs" => parsed.handoffs = value("--handoffs")?,
            "-h" | "--help" => return Err(String::new()),
            // `cargo bench` style flags, harmless here.
            "--bench" => {}
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(parsed)
}

/// The tools, with connections made on the current runtime (a redis-rs
/// connection's driver runs on the runtime that made it).
async fn make_bench(url: &str) -> Result<Bench, BenchError> {
    let helper = Helper::start()?;
    let client = redis::Client::open(url)?;
    let helper_conn = helper
        .run(async move { client.get_multiplexed_async_connection().await })
        .await??;
    Ok(Bench {
        raw: redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?,
        helper,
        helper_conn,
        compare_and_delete: redis::Script::new(COMPARE_AND_DELETE),
        client: LockClient::connect(Config::new(url)).await?,
        next_token: 0,
    })
}

/// The uncontended variants on the current runtime.
async fn uncontended_on_this_runtime(url: &str, args: Args) -> Result<Vec<Measured>, BenchError> {
    uncontended(&mut make_bench(url).await?, args).await
}

/// Redis' own CPU time per acquire + release (`INFO commandstats`, summed over
/// every command), for the floor and for `client.lock`. Resets the server's
/// statistics: only for a server this process started.
async fn redis_cpu_on_this_runtime(url: &str, ops: usize) -> Result<(f64, f64), BenchError> {
    let mut bench = make_bench(url).await?;
    let mut per_op = Vec::new();
    for variant in [Variant::Floor, Variant::Watchdog] {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut bench.raw)
            .await?;
        bench.run(variant, ops).await?;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut bench.raw)
            .await?;
        let usec: f64 = info
            .lines()
            .filter_map(|line| line.split(",usec=").nth(1))
            .filter_map(|rest| rest.split(',').next()?.parse::<f64>().ok())
            .sum();
        per_op.push(usec / ops as f64);
    }
    Ok((per_op[0], per_op[1]))
}

async fn handoff_on_this_runtime(url: &str, args: Args) -> Result<Handoffs, BenchError> {
    let mut raw = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    handoff(url, &mut raw, args.handoffs).await
}

fn bench(redis: &Redis, args: Args) -> Result<(), BenchError> {
    let url = redis.url();
    let runtime = |multi: bool| {
        let mut builder = if multi {
            tokio::runtime::Builder::new_multi_thread()
        } else {
            tokio::runtime::Builder::new_current_thread()
        };
        builder
            .enable_all()
            .build()
            .map_err(|e| BenchError::Broken(format!("cannot start a runtime: {e}")))
    };
    let multi = runtime(true)?;
    // The attribute's global client; it runs on its own thread, so the
    // current-thread runtime below uses it as well.
    multi.block_on(lock_runtime::init(Config::new(url)))?;
    let mut on_multi = multi.block_on(uncontended_on_this_runtime(url, args))?;
    let handoffs = multi.block_on(handoff_on_this_runtime(url, args))?;
    drop(multi);
    let current = runtime(false)?;
    let mut on_current = current.block_on(uncontended_on_this_runtime(url, args))?;
    let redis_cpu = if redis.started_here() {
        Some(current.block_on(redis_cpu_on_this_runtime(url, 2000))?)
    } else {
        None
    };

    let ratio_multi = report_uncontended("multi-thread", args, &mut on_multi);
    let ratio_current = report_uncontended("current-thread", args, &mut on_current);
    if let Some((floor, ours)) = redis_cpu {
        println!(
            "  Redis CPU per acquire + release (INFO commandstats): floor {floor:.1} µs, client.lock {ours:.1} µs"
        );
    }
    let handoff_rtts = report_handoff(handoffs);
    let verdict = |ratio: f64| if ratio >= GOAL { "met" } else { "NOT met" };
    println!();
    println!(
        "ours/floor: multi-thread {ratio_multi:.2}x ({}), current-thread {ratio_current:.2}x ({}); goal >= {GOAL}x",
        verdict(ratio_multi),
        verdict(ratio_current)
    );
    println!("handoff p50: {handoff_rtts:.1} round trips");
    Ok(())
}

fn main() -> ExitCode {
    let (args, redis) = match examples::start(parse_args, USAGE) {
        Ok(started) => started,
        Err(code) => return code,
    };
    println!(
        "lock_bench: {}, {} cores",
        redis.describe(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    match bench(&redis, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("the benchmark failed: {e}");
            ExitCode::FAILURE
        }
    }
}
