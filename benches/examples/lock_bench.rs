//! The benchmark of record: what a lock costs against the floor and against
//! rslock (the crate a user would otherwise pick), all measured in one run.
//!
//! Every lock call is made from tasks spawned on the runtime under test, the
//! way a server's handlers run; nothing is measured inside `block_on`.
//!
//! - **floor**: raw `SET key token NX PX 30000` plus a compare-and-delete
//!   script (2 round trips) on a plain redis-rs `MultiplexedConnection` made
//!   on the runtime under test. The least any Redis lock can do.
//! - **rslock 0.10**: `LockManager::lock` + `unlock` on one server.
//! - **ours**: `client.lock(name).acquire()` + `guard.release()`.
//!
//! Rows (variants take turns inside each round, so that load that comes and
//! goes hits them alike; ratios are medians of per-round ratios):
//!
//! 1. uncontended acquire + release, 1 task, multi-thread runtime;
//! 2. the same on a current-thread runtime;
//! 3. 64 tasks on one client (one connection / lock manager), distinct names;
//! 4. handoff: from the start of `release()` to the instant another client's
//!    waiter returns, p50 / p99, also in `PING` round trips; its floor is a
//!    compare-and-delete script that publishes, and a waiter on a RESP3
//!    subscription of the runtime under test that then sends `SET NX PX`;
//! 5. one hot name, 16 tasks over 2 clients: sections/s, and fairness as the
//!    least / the most sections any one task got;
//! 6. 10,000 waiters on 1,000 names: release all → all done, and the memory
//!    each waiter holds while waiting (this process's live heap, counted by a
//!    counting allocator), and how many connections the waiting client
//!    uses (its own and the near connection of the runtime it waits on: 2);
//! 7. to 10. the etcd engine against its floor on the same etcd
//!    (`benches::rows`: uncontended, 64 tasks, handoff, 10,000 waiters;
//!    the floor in `benches::etcd_rows`), unless `--no-etcd`; `etcd_bench`
//!    runs them alone;
//! 11. to 14. the ZooKeeper engine against its floor on the same server
//!     (the same four rows; the floor in `benches::zk_rows`), unless
//!     `--no-zookeeper`; `zk_bench` runs them alone;
//! 15. to 18. the PostgreSQL engine against its floor on the same database
//!     (the same four rows; the floor in `benches::pg_rows`), unless
//!     `--no-postgres`; `pg_bench` runs them alone;
//! 19. to 22. the MySQL/MariaDB engine against its floor on the same
//!     database (the same four rows; the floor in `benches::my_rows`),
//!     then what its polling cost, unless `--no-mysql`; `my_bench` runs
//!     them alone.
//!
//! ```text
//! cargo run --release -p benches --example lock_bench
//! cargo run --release -p benches --example lock_bench -- --rounds 20 --ops 1000 --handoffs 2000
//! ```
//!
//! Uses `REDIS_URL` when set; otherwise starts a throwaway `redis-server` on a
//! free loopback port; the etcd rows use `LOCK_URL` when it names an etcd,
//! otherwise a throwaway `etcd` (the ZooKeeper, PostgreSQL and MySQL rows
//! likewise). `BENCH_COUNTS=1` also prints row 5's sections per task.
//! BENCHMARKS.md explains the figures.

use std::alloc::System;
use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use benches::etcd_rows::EtcdFloor;
use benches::my_rows::MyFloor;
use benches::pg_rows::PgFloor;
use benches::rows::{self, Floor, Server};
use benches::zk_rows::ZkFloor;
use examples::{Redis, median, per_second, percentile};
use lock_runtime::{Config, LockClient, LockError, distributed_lock};
use redis::aio::MultiplexedConnection;
use rslock::LockManager;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static HEAP: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The floor's release: delete the key only if it still holds our token.
const COMPARE_AND_DELETE: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0";

/// Every lease the benchmark asks for.
const LEASE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy)]
struct Args {
    /// Measured rounds; each runs every variant once.
    rounds: usize,
    /// Acquire + release pairs per variant per round (1 task); the 64 tasks
    /// share as many again.
    ops: usize,
    /// Measured handoffs of ours (rslock's, which poll, get a tenth).
    handoffs: usize,
    /// How long each hot-name run lasts.
    hot: Duration,
    /// Waiters, and the names they wait on, of the drain row.
    waiters: usize,
    names: usize,
    /// Whether rows 7-10 (etcd) run.
    etcd: bool,
    /// Whether rows 11-14 (ZooKeeper) run.
    zookeeper: bool,
    /// Whether rows 15-18 (PostgreSQL) run.
    postgres: bool,
    /// Whether rows 19-22 (MySQL/MariaDB) run.
    mysql: bool,
}

#[derive(Debug)]
enum BenchError {
    Lock(LockError),
    Redis(redis::RedisError),
    Rslock(rslock::LockError),
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

impl From<rslock::LockError> for BenchError {
    fn from(e: rslock::LockError) -> Self {
        BenchError::Rslock(e)
    }
}

impl From<tokio::task::JoinError> for BenchError {
    fn from(e: tokio::task::JoinError) -> Self {
        BenchError::Broken(format!("a benchmark task failed: {e}"))
    }
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchError::Lock(e) => write!(f, "lock: {e}"),
            BenchError::Redis(e) => write!(f, "redis: {e}"),
            BenchError::Rslock(e) => write!(f, "rslock: {e}"),
            BenchError::Broken(what) => f.write_str(what),
        }
    }
}

/// What the attribute costs around a body that does nothing.
#[distributed_lock(key = "bench:attribute")]
async fn locked_noop() -> Result<(), LockError> {
    Ok(())
}

/// The uncontended variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Floor,
    Rslock,
    Ours,
    OursLease,
    Attribute,
}

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::Floor => "floor: SET NX PX + compare-and-delete",
            Variant::Rslock => "rslock 0.10: lock + unlock",
            Variant::Ours => "ours: lock(..).acquire() + release()",
            Variant::OursLease => "  the same with .lease(30s)",
            Variant::Attribute => "  #[distributed_lock] on an empty fn",
        }
    }
}

/// The floor's acquisition: `SET name token NX PX`; whether it took the key.
async fn set_nx(
    conn: &mut MultiplexedConnection,
    name: &str,
    token: &str,
) -> Result<bool, BenchError> {
    let set: Option<String> = redis::cmd("SET")
        .arg(name)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(LEASE.as_millis() as u64)
        .query_async(conn)
        .await?;
    Ok(set.is_some())
}

/// The three implementations, with their connections made on the runtime
/// under test (a redis-rs connection's driver runs where it was made).
/// Cheap to clone: clones share connections.
#[derive(Clone)]
struct Peers {
    raw: MultiplexedConnection,
    compare_and_delete: redis::Script,
    rslock: LockManager,
    ours: LockClient,
    tokens: Arc<AtomicUsize>,
}

impl Peers {
    async fn new(url: &str) -> Result<Peers, BenchError> {
        let rslock = LockManager::new(vec![url]);
        // Its connection is made on first use: make it here, on this runtime.
        let warm = rslock.lock("bench:warm", LEASE).await?;
        rslock.unlock(&warm).await;
        Ok(Peers {
            raw: redis::Client::open(url)?
                .get_multiplexed_async_connection()
                .await?,
            compare_and_delete: redis::Script::new(COMPARE_AND_DELETE),
            rslock,
            ours: LockClient::connect(Config::new(url)).await?,
            tokens: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// One acquire + release of `variant` on lock `name`.
    async fn once(&mut self, variant: Variant, name: &str) -> Result<(), BenchError> {
        match variant {
            Variant::Floor => {
                let token = self.tokens.fetch_add(1, Ordering::Relaxed).to_string();
                if !set_nx(&mut self.raw, name, &token).await? {
                    return Err(BenchError::Broken(
                        "floor: SET NX found the key taken".into(),
                    ));
                }
                let deleted: i64 = self
                    .compare_and_delete
                    .key(name)
                    .arg(&token)
                    .invoke_async(&mut self.raw)
                    .await?;
                if deleted != 1 {
                    return Err(BenchError::Broken("floor: the token was not ours".into()));
                }
            }
            Variant::Rslock => {
                let lock = self.rslock.lock(name, LEASE).await?;
                self.rslock.unlock(&lock).await;
            }
            Variant::Ours => self.ours.lock(name).acquire().await?.release().await?,
            Variant::OursLease => {
                let guard = self.ours.lock(name).lease(LEASE).acquire().await?;
                guard.release().await?;
            }
            Variant::Attribute => locked_noop().await?,
        }
        Ok(())
    }

    /// `ops` pairs of `variant` on `name`, one after the other, in a task of
    /// its own; the latency of each.
    async fn run(
        &self,
        variant: Variant,
        name: String,
        ops: usize,
    ) -> Result<Vec<Duration>, BenchError> {
        self.spawn(variant, name, ops).await?
    }

    /// Starts [`run`](Self::run)'s task at once.
    fn spawn(
        &self,
        variant: Variant,
        name: String,
        ops: usize,
    ) -> tokio::task::JoinHandle<Result<Vec<Duration>, BenchError>> {
        let mut peers = self.clone();
        tokio::spawn(async move {
            let mut samples = Vec::with_capacity(ops);
            for _ in 0..ops {
                let started = Instant::now();
                peers.once(variant, &name).await?;
                samples.push(started.elapsed());
            }
            Ok(samples)
        })
    }
}

/// Per variant: ops/s of each round, and every latency sample.
#[derive(Default)]
struct Measured {
    ops_per_s: Vec<f64>,
    samples: Vec<Duration>,
}

/// Runs `variants` in turns for `rounds` rounds; `round(variant)` runs one
/// variant once and returns (pairs done, latency samples).
async fn interleaved<F, Fut>(
    variants: &[Variant],
    rounds: usize,
    mut round: F,
) -> Result<Vec<Measured>, BenchError>
where
    F: FnMut(Variant) -> Fut,
    Fut: Future<Output = Result<(usize, Vec<Duration>), BenchError>>,
{
    // Warm-up: connections, script caches, allocator, CPU frequency.
    for &variant in variants {
        round(variant).await?;
    }
    let mut measured: Vec<Measured> = variants.iter().map(|_| Measured::default()).collect();
    for r in 0..rounds {
        for i in 0..variants.len() {
            let index = (i + r) % variants.len();
            let started = Instant::now();
            let (pairs, samples) = round(variants[index]).await?;
            measured[index]
                .ops_per_s
                .push(per_second(pairs as u64, started.elapsed()));
            measured[index].samples.extend(samples);
        }
    }
    Ok(measured)
}

/// Row 1 or 2: one task at a time.
async fn uncontended(peers: &Peers, args: Args, all: bool) -> Result<Table, BenchError> {
    let variants: &[Variant] = if all {
        &[
            Variant::Floor,
            Variant::Rslock,
            Variant::Ours,
            Variant::OursLease,
            Variant::Attribute,
        ]
    } else {
        &[Variant::Floor, Variant::Rslock, Variant::Ours]
    };
    let measured = interleaved(variants, args.rounds, |variant| async move {
        let name = format!("bench:one:{variant:?}");
        let samples = peers.run(variant, name, args.ops).await?;
        Ok((samples.len(), samples))
    })
    .await?;
    Ok(Table::new(variants, measured))
}

/// Row 3: 64 tasks on one client, each on a name of its own.
async fn many_tasks(peers: &Peers, args: Args) -> Result<Table, BenchError> {
    const TASKS: usize = 64;
    let per_task = (args.ops / 8).max(10);
    let variants = [Variant::Floor, Variant::Rslock, Variant::Ours];
    let measured = interleaved(&variants, args.rounds, |variant| async move {
        let runs: Vec<_> = (0..TASKS)
            .map(|t| peers.spawn(variant, format!("bench:many:{variant:?}:{t}"), per_task))
            .collect();
        let mut samples = Vec::new();
        for run in runs {
            samples.extend(run.await??);
        }
        Ok((samples.len(), samples))
    })
    .await?;
    Ok(Table::new(&variants, measured))
}

/// One table of rows 1-3.
struct Table {
    rows: Vec<(Variant, Measured, f64)>,
}

impl Table {
    fn new(variants: &[Variant], measured: Vec<Measured>) -> Table {
        let floor = measured[0].ops_per_s.clone();
        let rows = variants
            .iter()
            .copied()
            .zip(measured)
            .map(|(variant, m)| {
                let ratios: Vec<f64> = m
                    .ops_per_s
                    .iter()
                    .zip(&floor)
                    .map(|(ours, floor)| ours / floor)
                    .collect();
                let ratio = median(&ratios);
                (variant, m, ratio)
            })
            .collect();
        Table { rows }
    }

    fn ratio(&self, variant: Variant) -> f64 {
        self.rows
            .iter()
            .find(|(v, ..)| *v == variant)
            .map_or(0.0, |(.., r)| *r)
    }

    /// A summary row: ours against the floor and rslock, and whether ours
    /// reaches `rslock` times rslock.
    fn goal(&self, what: &str, rslock: f64) -> (String, String, bool) {
        let ours = self.ratio(Variant::Ours);
        let theirs = self.ratio(Variant::Rslock);
        (
            format!("{what}: >= {rslock}x rslock"),
            format!("{:.2}x rslock ({ours:.2}x floor)", ours / theirs),
            ours >= rslock * theirs,
        )
    }

    fn print(&mut self, title: &str) {
        println!();
        println!("{title}");
        println!(
            "  {:<40} {:>9} {:>8} {:>8} {:>9}",
            "", "ops/s", "p50 µs", "p99 µs", "vs floor"
        );
        for (variant, m, ratio) in &mut self.rows {
            println!(
                "  {:<40} {:>9.0} {:>8.1} {:>8.1} {:>8.2}x",
                variant.label(),
                median(&m.ops_per_s),
                micros(percentile(&mut m.samples, 50.0)),
                micros(percentile(&mut m.samples, 99.0)),
                ratio,
            );
        }
    }
}

/// Handoff latencies, and `PING` round trips sampled between them.
struct Handoffs {
    samples: Vec<Duration>,
    round_trips: Vec<Duration>,
}

impl Handoffs {
    /// (p50, p99) in µs and in round trips.
    fn summary(&mut self) -> (f64, f64, f64, f64) {
        let rtt = micros(percentile(&mut self.round_trips, 50.0)).max(f64::MIN_POSITIVE);
        let p50 = micros(percentile(&mut self.samples, 50.0));
        let p99 = micros(percentile(&mut self.samples, 99.0));
        (p50, p99, p50 / rtt, p99 / rtt)
    }
}

/// Row 4, ours: a task on one client holds the lock; a task on another waits
/// in `acquire()`, asleep on the unlock channel. From the start of
/// `release()` to the instant the waiter returns; the roles swap every time.
async fn handoff_ours(url: &str, handoffs: usize) -> Result<Handoffs, BenchError> {
    const NAME: &str = "bench:handoff";
    let channel = format!("redisson_lock__channel:{{{NAME}}}");
    let mut raw = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut holder = LockClient::connect(Config::new(url)).await?;
    let mut waiter = LockClient::connect(Config::new(url)).await?;
    let mut guard = holder.lock(NAME).acquire().await?;
    let warm_up = (handoffs / 10).max(10);
    let mut out = Handoffs {
        samples: Vec::with_capacity(handoffs),
        round_trips: Vec::with_capacity(handoffs),
    };
    for i in 0..warm_up + handoffs {
        let client = waiter.clone();
        let waiting = tokio::spawn(async move {
            let guard = client.lock(NAME).acquire().await;
            (Instant::now(), guard)
        });
        // Asleep once it has subscribed and its retry came back busy: wait
        // for the subscription, then give the retry time to finish.
        let deadline = Instant::now() + Duration::from_secs(10);
        while numsub(&mut raw, std::slice::from_ref(&channel)).await? < 1 {
            if Instant::now() > deadline {
                return Err(BenchError::Broken("the waiter never subscribed".into()));
            }
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        let released_at = Instant::now();
        let released = tokio::spawn(guard.release());
        let (acquired_at, next) = waiting.await?;
        released.await??;
        guard = next?;
        if i >= warm_up {
            out.samples.push(acquired_at - released_at);
            out.round_trips.push(ping(&mut raw).await?);
        }
        std::mem::swap(&mut holder, &mut waiter);
    }
    guard.release().await?;
    Ok(out)
}

/// The floor's release for row 4: compare-and-delete, then wake one waiter.
const RELEASE_AND_PUBLISH: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], '0')
  return 1
end
return 0";

/// One side of row 4's floor: a connection for its commands and a RESP3
/// connection subscribed to the channel, both made on the runtime under
/// test, and the messages that subscription brings.
struct FloorSide {
    conn: MultiplexedConnection,
    pushes: tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>,
    _subscribed: MultiplexedConnection,
}

impl FloorSide {
    async fn new(url: &str, channel: &str) -> Result<FloorSide, BenchError> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        let (sender, pushes) = tokio::sync::mpsc::unbounded_channel();
        let config = redis::AsyncConnectionConfig::new().set_push_sender(sender);
        let mut subscribed = redis::Client::open(format!("{url}?protocol=resp3"))?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        subscribed.subscribe(channel).await?;
        Ok(FloorSide {
            conn,
            pushes,
            _subscribed: subscribed,
        })
    }

    /// Takes the lock for `token`: `SET NX PX`, and while it is busy, the
    /// next unlock message (or a second, should one be lost) and again.
    /// Says `ready` once its first try found the lock busy.
    async fn take(
        &mut self,
        name: &str,
        token: &str,
        ready: tokio::sync::oneshot::Sender<()>,
    ) -> Result<u64, BenchError> {
        let mut ready = Some(ready);
        let mut missed = 0;
        loop {
            // Messages from before this try say nothing about it.
            while self.pushes.try_recv().is_ok() {}
            if set_nx(&mut self.conn, name, token).await? {
                return Ok(missed);
            }
            if let Some(ready) = ready.take() {
                let _ = ready.send(());
            }
            loop {
                match tokio::time::timeout(Duration::from_secs(1), self.pushes.recv()).await {
                    Ok(Some(push)) if push.kind != redis::PushKind::Message => continue,
                    Ok(Some(_)) => break,
                    Ok(None) => {
                        return Err(BenchError::Broken("the floor's subscription ended".into()));
                    }
                    Err(_) => {
                        missed += 1;
                        break;
                    }
                }
            }
        }
    }
}

/// Row 4's floor release of `name`, held with `token`: an error if it was
/// not held so.
async fn release_floor(
    script: &redis::Script,
    mut conn: MultiplexedConnection,
    name: &str,
    channel: &str,
    token: u64,
) -> Result<(), BenchError> {
    let released: i64 = script
        .key(name)
        .key(channel)
        .arg(token)
        .invoke_async(&mut conn)
        .await?;
    if released != 1 {
        return Err(BenchError::Broken(
            "the floor's holder had lost its lock".into(),
        ));
    }
    Ok(())
}

/// Row 4, floor: the least a handoff through Redis pub/sub can take. The
/// holder's release is one script (compare-and-delete, `PUBLISH`); the
/// waiter, asleep on its subscription (RESP3, on the runtime under test,
/// as ours), takes the lock with `SET NX PX` once the message arrives.
/// Measured as ours: from the release's start to the waiter's return.
async fn handoff_floor(url: &str, handoffs: usize) -> Result<Handoffs, BenchError> {
    const NAME: &str = "bench:handoff:floor";
    let channel = format!("{NAME}:channel");
    let release = redis::Script::new(RELEASE_AND_PUBLISH);
    let mut raw = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut holder = FloorSide::new(url, &channel).await?;
    let mut waiter = FloorSide::new(url, &channel).await?;
    let mut token = 0u64;
    let (ready, _) = tokio::sync::oneshot::channel();
    holder.take(NAME, &token.to_string(), ready).await?;
    let warm_up = (handoffs / 10).max(10);
    let mut out = Handoffs {
        samples: Vec::with_capacity(handoffs),
        round_trips: Vec::with_capacity(handoffs),
    };
    let mut missed = 0;
    for i in 0..warm_up + handoffs {
        let next = (token + 1).to_string();
        let (ready, asleep) = tokio::sync::oneshot::channel();
        let waiting = tokio::spawn(async move {
            let taken = waiter.take(NAME, &next, ready).await;
            (Instant::now(), taken, waiter)
        });
        asleep.await.map_err(|_| {
            BenchError::Broken("the floor's waiter never found the lock busy".into())
        })?;
        // As ours: time to fall asleep after its busy answer.
        tokio::time::sleep(Duration::from_millis(2)).await;
        // Spawned, as ours is.
        let (script, conn, wakes) = (release.clone(), holder.conn.clone(), channel.clone());
        let released_at = Instant::now();
        let released =
            tokio::spawn(async move { release_floor(&script, conn, NAME, &wakes, token).await });
        let (acquired_at, taken, back) = waiting.await?;
        released.await??;
        missed += taken?;
        token += 1;
        waiter = back;
        if i >= warm_up {
            out.samples.push(acquired_at - released_at);
            out.round_trips.push(ping(&mut raw).await?);
        }
        std::mem::swap(&mut holder, &mut waiter);
    }
    release_floor(&release, holder.conn.clone(), NAME, &channel, token).await?;
    if missed > 0 {
        println!("  (the floor's waiter missed {missed} message(s) and retried after a second)");
    }
    Ok(out)
}

/// Row 4, rslock: the same with two lock managers; its waiter polls.
async fn handoff_rslock(url: &str, handoffs: usize) -> Result<Handoffs, BenchError> {
    const NAME: &str = "bench:handoff:rslock";
    let mut raw = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut holder = LockManager::new(vec![url]);
    let mut waiter = LockManager::new(vec![url]);
    let mut lock = holder.lock(NAME, LEASE).await?;
    let mut out = Handoffs {
        samples: Vec::with_capacity(handoffs),
        round_trips: Vec::with_capacity(handoffs),
    };
    for _ in 0..handoffs {
        let manager = waiter.clone();
        let waiting = tokio::spawn(async move {
            let lock = manager.acquire_no_guard(NAME, LEASE).await;
            (Instant::now(), lock)
        });
        // Into its polling.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let released_at = Instant::now();
        holder.unlock(&lock).await;
        let (acquired_at, next) = waiting.await?;
        lock = next?;
        out.samples.push(acquired_at - released_at);
        out.round_trips.push(ping(&mut raw).await?);
        std::mem::swap(&mut holder, &mut waiter);
    }
    holder.unlock(&lock).await;
    Ok(out)
}

async fn ping(raw: &mut MultiplexedConnection) -> Result<Duration, BenchError> {
    let started = Instant::now();
    let _: String = redis::cmd("PING").query_async(raw).await?;
    Ok(started.elapsed())
}

/// How many of `channels` have a subscriber.
async fn numsub(raw: &mut MultiplexedConnection, channels: &[String]) -> Result<i64, BenchError> {
    let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channels)
        .query_async(raw)
        .await?;
    Ok(counts.iter().filter(|(_, n)| *n > 0).count() as i64)
}

/// Row 5's result: sections per second and least / most per task.
struct Hot {
    per_second: f64,
    fairness: f64,
}

/// Row 5: 16 tasks over 2 clients on one name, each looping acquire →
/// release until the time is up.
async fn hot_name(url: &str, duration: Duration, rslock: bool) -> Result<Hot, BenchError> {
    const TASKS: usize = 16;
    let name = if rslock {
        "bench:hot:rslock"
    } else {
        "bench:hot"
    };
    let ours = [
        LockClient::connect(Config::new(url)).await?,
        LockClient::connect(Config::new(url)).await?,
    ];
    let theirs = [LockManager::new(vec![url]), LockManager::new(vec![url])];
    let start = Instant::now() + Duration::from_millis(50);
    let end = start + duration;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (client, manager) = (ours[t % 2].clone(), theirs[t % 2].clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(start.into()).await;
            let mut sections = 0usize;
            while Instant::now() < end {
                if rslock {
                    let lock = manager.acquire_no_guard(name, LEASE).await?;
                    manager.unlock(&lock).await;
                } else {
                    client.lock(name).acquire().await?.release().await?;
                }
                if Instant::now() <= end {
                    sections += 1;
                }
            }
            Ok::<_, BenchError>(sections)
        }));
    }
    let mut counts = Vec::new();
    for task in tasks {
        counts.push(task.await??);
    }
    let total: usize = counts.iter().sum();
    if std::env::var_os("BENCH_COUNTS").is_some() {
        eprintln!("per-task sections ({name}): {counts:?}");
    }
    let (min, max) = (
        *counts.iter().min().unwrap_or(&0),
        *counts.iter().max().unwrap_or(&1),
    );
    Ok(Hot {
        per_second: total as f64 / duration.as_secs_f64(),
        fairness: min as f64 / max.max(1) as f64,
    })
}

/// Row 6's result.
struct Drain {
    drained: Duration,
    bytes_per_waiter: f64,
    connections: i64,
}

/// Live heap bytes of this process.
fn live_heap() -> i64 {
    let s = HEAP.stats();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64 + s.bytes_reallocated as i64
}

async fn connected_clients(raw: &mut MultiplexedConnection) -> Result<i64, BenchError> {
    let info: String = redis::cmd("INFO").arg("clients").query_async(raw).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| BenchError::Broken("no connected_clients in INFO".into()))
}

/// Row 6: a holder takes `names` locks; `waiters` tasks on another client
/// (lock manager) wait for them, as many per name; then the holder releases
/// them all, and each waiter takes its lock and releases it at once.
async fn drain(url: &str, args: Args, rslock: bool) -> Result<Drain, BenchError> {
    let mut raw = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let names: Vec<String> = (0..args.names)
        .map(|n| format!("bench:drain:{rslock}:{n}"))
        .collect();
    let holder = LockClient::connect(Config::new(url)).await?;
    let holder_rs = LockManager::new(vec![url]);
    let mut held = Vec::new();
    let mut held_rs = Vec::new();
    for name in &names {
        if rslock {
            held_rs.push(holder_rs.lock(name.as_str(), LEASE).await?);
        } else {
            held.push(holder.lock(name.clone()).acquire().await?);
        }
    }
    let before_clients = connected_clients(&mut raw).await?;
    let before = live_heap();
    let started = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(args.waiters);
    if rslock {
        let manager = LockManager::new(vec![url]);
        for w in 0..args.waiters {
            let name = names[w % names.len()].clone();
            let (manager, started) = (manager.clone(), started.clone());
            tasks.push(tokio::spawn(async move {
                started.fetch_add(1, Ordering::Relaxed);
                let lock = manager.acquire_no_guard(name.as_str(), LEASE).await?;
                manager.unlock(&lock).await;
                Ok::<_, BenchError>(())
            }));
        }
    } else {
        let client = LockClient::connect(Config::new(url)).await?;
        tasks = examples::spawn_waiters(&client, &names, args.waiters, &started);
    }
    // Everyone waiting: every task started, (ours) every name's channel has
    // its subscriber, then a little time for the last retries to settle.
    while started.load(Ordering::Relaxed) < args.waiters {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if !rslock {
        let channels: Vec<String> = names
            .iter()
            .map(|n| format!("redisson_lock__channel:{{{n}}}"))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        while numsub(&mut raw, &channels).await? < channels.len() as i64 {
            if Instant::now() > deadline {
                return Err(BenchError::Broken("waiters never subscribed".into()));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let bytes = live_heap() - before;
    let connections = connected_clients(&mut raw).await? - before_clients;
    let released = Instant::now();
    let mut releases = Vec::new();
    for guard in held {
        releases.push(tokio::spawn(guard.release()));
    }
    for lock in held_rs {
        let holder = holder_rs.clone();
        releases.push(tokio::spawn(async move {
            holder.unlock(&lock).await;
            Ok(())
        }));
    }
    let drained = examples::drained(released, tasks, releases).await?;
    Ok(Drain {
        drained,
        bytes_per_waiter: bytes as f64 / args.waiters as f64,
        connections,
    })
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

const USAGE: &str =
    "usage: lock_bench [--rounds N] [--ops N] [--handoffs N] [--hot-ms N] [--waiters N] [--names N]
  --rounds N    measured rounds, each running every variant (default 10)
  --ops N       acquire + release pairs per variant per round (default 1000)
  --handoffs N  measured handoffs of ours; rslock gets a tenth (default 1000)
  --hot-ms N    length of each one-hot-name run in ms (default 3000)
  --waiters N   waiters of the drain rows (default 10000)
  --names N     names they wait on (default 1000)
  --no-etcd     skip the etcd rows (7-10)
  --no-zookeeper  skip the ZooKeeper rows (11-14)
  --no-postgres   skip the PostgreSQL rows (15-18)
  --no-mysql      skip the MySQL/MariaDB rows (19-22)";

fn parse_args() -> Result<Args, String> {
    let mut parsed = Args {
        rounds: 10,
        ops: 1000,
        handoffs: 1000,
        hot: Duration::from_secs(3),
        waiters: 10_000,
        names: 1000,
        etcd: true,
        zookeeper: true,
        postgres: true,
        mysql: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| examples::positive::<usize>(&mut args, name);
        match arg.as_str() {
            "--rounds" => parsed.rounds = value("--rounds")?,
            "--ops" => parsed.ops = value("--ops")?,
            "--handoffs" => parsed.handoffs = value("--handoffs")?,
            "--hot-ms" => parsed.hot = Duration::from_millis(value("--hot-ms")? as u64),
            "--waiters" => parsed.waiters = value("--waiters")?,
            "--names" => parsed.names = value("--names")?,
            "--no-etcd" => parsed.etcd = false,
            "--no-zookeeper" => parsed.zookeeper = false,
            "--no-postgres" => parsed.postgres = false,
            "--no-mysql" => parsed.mysql = false,
            "-h" | "--help" => return Err(String::new()),
            // `cargo bench` style flags, harmless here.
            "--bench" => {}
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(parsed)
}

fn runtime(multi: bool) -> Result<tokio::runtime::Runtime, BenchError> {
    let mut builder = if multi {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder
        .enable_all()
        .build()
        .map_err(|e| BenchError::Broken(format!("cannot start a runtime: {e}")))
}

/// Runs `fut` as a spawned task of `runtime` (never inside `block_on` itself).
fn on<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    fut: impl Future<Output = Result<T, BenchError>> + Send + 'static,
) -> Result<T, BenchError> {
    runtime.block_on(async move { tokio::spawn(fut).await? })
}

fn bench(redis: &Redis, args: Args) -> Result<(), BenchError> {
    let url = redis.url().to_owned();
    let multi = runtime(true)?;
    // The attribute's global client; it serves the current-thread runtime too.
    {
        let url = url.clone();
        on(&multi, async move {
            Ok(lock_runtime::init(Config::new(&url)).await?)
        })?;
    }
    let u = url.clone();
    let (mut one_multi, mut many) = on(&multi, async move {
        let peers = Peers::new(&u).await?;
        Ok((
            uncontended(&peers, args, true).await?,
            many_tasks(&peers, args).await?,
        ))
    })?;
    let u = url.clone();
    let (mut handoff, mut handoff_floor, mut handoff_rs) = on(&multi, async move {
        Ok((
            handoff_ours(&u, args.handoffs).await?,
            handoff_floor(&u, args.handoffs).await?,
            handoff_rslock(&u, (args.handoffs / 10).max(20)).await?,
        ))
    })?;
    let u = url.clone();
    let (hot, hot_rs) = on(&multi, async move {
        Ok((
            hot_name(&u, args.hot, false).await?,
            hot_name(&u, args.hot, true).await?,
        ))
    })?;
    let u = url.clone();
    let (drain_ours, drain_rs) = on(&multi, async move {
        Ok((drain(&u, args, false).await?, drain(&u, args, true).await?))
    })?;
    drop(multi);
    let current = runtime(false)?;
    let u = url.clone();
    let mut one_current = on(&current, async move {
        let peers = Peers::new(&u).await?;
        uncontended(&peers, args, false).await
    })?;

    one_multi.print(&format!(
        "1. uncontended acquire + release, 1 task, multi-thread runtime ({} rounds x {} ops)",
        args.rounds, args.ops
    ));
    one_current.print("2. the same, current-thread runtime");
    many.print("3. 64 tasks on one client, distinct names, multi-thread runtime");
    let (p50, p99, p50_rt, p99_rt) = handoff.summary();
    let (fl50, fl99, fl50_rt, fl99_rt) = handoff_floor.summary();
    let (rs50, rs99, rs50_rt, _) = handoff_rs.summary();
    println!();
    println!("4. handoff: release() start -> the other client's waiter returns");
    println!(
        "  ours    p50 {p50:>9.1} µs ({p50_rt:.1} round trips)   p99 {p99:>9.1} µs ({p99_rt:.1} round trips)   {} handoffs",
        handoff.samples.len()
    );
    println!(
        "  floor   p50 {fl50:>9.1} µs ({fl50_rt:.1} round trips)   p99 {fl99:>9.1} µs ({fl99_rt:.1} round trips)   {} handoffs",
        handoff_floor.samples.len()
    );
    println!(
        "  rslock  p50 {rs50:>9.1} µs ({rs50_rt:.1} round trips)   p99 {rs99:>9.1} µs   {} handoffs",
        handoff_rs.samples.len()
    );
    println!();
    println!(
        "5. one hot name, 16 tasks over 2 clients, {} s each",
        args.hot.as_secs_f64()
    );
    for (who, h) in [("ours", &hot), ("rslock", &hot_rs)] {
        println!(
            "  {who:<7} {:>9.0} sections/s   least/most per task {:.2}",
            h.per_second, h.fairness
        );
    }
    println!();
    println!(
        "6. {} waiters on {} names: release all -> all done",
        args.waiters, args.names
    );
    for (who, d) in [("ours", &drain_ours), ("rslock", &drain_rs)] {
        println!(
            "  {who:<7} {:>9.1} ms   {:>6.0} B per waiter   {} connection(s)",
            d.drained.as_secs_f64() * 1e3,
            d.bytes_per_waiter,
            d.connections
        );
    }

    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    let rows = [
        one_multi.goal("uncontended, multi-thread", 0.9),
        one_current.goal("uncontended, current-thread", 0.9),
        many.goal("64 tasks", 0.8),
        (
            "handoff: p50 <= 3 round trips, p99 <= 8".to_owned(),
            format!("p50 {p50_rt:.1}, p99 {p99_rt:.1} (floor {fl50_rt:.1}, {fl99_rt:.1})"),
            p50_rt <= 3.0 && p99_rt <= 8.0,
        ),
        (
            "hot name: >= 0.95x rslock's sections/s, least/most >= 0.4".to_owned(),
            format!(
                "{:.2}x rslock, least/most {:.2}",
                hot.per_second / hot_rs.per_second,
                hot.fairness
            ),
            hot.per_second >= 0.95 * hot_rs.per_second && hot.fairness >= 0.4,
        ),
        (
            "drain: <= rslock's time, <= 1.5 KiB per waiter, 2 connections".to_owned(),
            format!(
                "{:.2}x rslock's time, {:.0} B, {} connection(s)",
                drain_ours.drained.as_secs_f64() / drain_rs.drained.as_secs_f64(),
                drain_ours.bytes_per_waiter,
                drain_ours.connections
            ),
            drain_ours.drained <= drain_rs.drained
                && drain_ours.bytes_per_waiter <= 1536.0
                && drain_ours.connections <= 2,
        ),
    ];
    println!();
    println!("summary (goals of issue 26)");
    for (goal, value, met) in rows {
        println!("  {goal:<62} {value:<44} {}", verdict(met));
    }
    if args.etcd {
        println!();
        engine_rows::<EtcdFloor>(args, 7, "--no-etcd")?;
    }
    if args.zookeeper {
        println!();
        engine_rows::<ZkFloor>(args, 11, "--no-zookeeper")?;
    }
    if args.postgres {
        println!();
        engine_rows::<PgFloor>(args, 15, "--no-postgres")?;
    }
    if args.mysql {
        println!();
        engine_rows::<MyFloor>(args, 19, "--no-mysql")?;
        if let Some(polling) = benches::my_rows::polling() {
            println!("  {polling}");
        }
    }
    Ok(())
}

/// Rows 7-10 (etcd), 11-14 (ZooKeeper), 15-18 (PostgreSQL) or 19-22
/// (MySQL/MariaDB), numbered from `first`: the engine against its floor
/// (`benches::rows`), sized as the engine benches' defaults but for the
/// waiters. `skip` is the flag that skips
/// them.
fn engine_rows<F: Floor>(args: Args, first: usize, skip: &str) -> Result<(), BenchError> {
    let server = F::Server::from_env_or_start().map_err(|e| {
        BenchError::Broken(format!("the {} rows ({skip} skips them): {e}", F::NAME))
    })?;
    let sizes = rows::Args {
        waiters: args.waiters,
        names: args.names,
        ..Default::default()
    };
    let multi = runtime(true)?;
    on(&multi, async move {
        rows::run::<F>(&server, sizes, first)
            .await
            .map_err(|e| BenchError::Broken(e.to_string()))
    })
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
