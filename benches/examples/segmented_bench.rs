//! Benchmark: the flash sale of one SKU behind one lock, then behind a
//! segmented lock of 10 segments: the same buyers on the same service
//! instances buy the same stock, one unit each, with a realistic critical
//! section (every read and write of the stock costs 2 ms of simulated storage
//! latency on top of the Redis round trip).
//!
//! ```text
//! cargo run --release -p benches --example segmented_bench
//! cargo run --release -p benches --example segmented_bench -- --stock 1000 --buyers 1200 --segments 10
//! ```
//!
//! Starts its own `redis-server` on a free loopback port (never 6379). The
//! last line reads `speedup <x>x oversold <n>`: the segmented run's throughput
//! against the single lock's, and the units the segmented run sold that it
//! did not have. Exits non-zero when either run oversells.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_runtime::{
    Config, Inventory, InventoryError, LockClient, RedisSegmentStore, SegmentKey, SegmentStore,
    StoreError,
};
use tokio::task::JoinSet;

/// Service instances: each has its own lock client (connections, watchdog).
const CLIENTS: usize = 4;

/// Simulated latency of every storage read and write.
const LATENCY: Duration = Duration::from_millis(2);

/// The shape of the sale; both runs sell the same.
#[derive(Debug, Clone, Copy)]
struct Sale {
    stock: u64,
    buyers: usize,
    segments: usize,
}

/// The outcome of one run.
#[derive(Debug, Default)]
struct Outcome {
    elapsed: Duration,
    sold: u64,
    sold_out: u64,
    merged: u64,
    remaining: u64,
}

impl Outcome {
    /// Units sold that were not in stock (including lost updates, which show
    /// as more left than was not sold).
    fn oversold(&self, stock: u64) -> u64 {
        (self.sold + self.remaining).saturating_sub(stock)
    }
}

/// A store whose every call takes `LATENCY` longer: the database round trip
/// and work of a real deduction.
#[derive(Clone)]
struct Slow<S>(S);

impl<S: SegmentStore> SegmentStore for Slow<S> {
    async fn get(&self, at: SegmentKey<'_>, token: Option<u64>) -> Result<u64, StoreError> {
        if !LATENCY.is_zero() {
            tokio::time::sleep(LATENCY).await;
        }
        self.0.get(at, token).await
    }

    async fn set(&self, at: SegmentKey<'_>, count: u64, token: u64) -> Result<(), StoreError> {
        if !LATENCY.is_zero() {
            tokio::time::sleep(LATENCY).await;
        }
        self.0.set(at, count, token).await
    }
}

/// One lock for the SKU: lock, read, write if enough, release.
async fn run_single(clients: &[LockClient], sale: Sale) -> Result<Outcome, StoreError> {
    let name = "bench:single";
    let key = SegmentKey {
        inventory: name,
        segment: 0,
    };
    let setup = Slow(RedisSegmentStore::new(&clients[0]));
    let guard = clients[0].lock(name).acquire().await?;
    setup.set(key, sale.stock, guard.token()).await?;
    guard.release().await?;

    let started = Instant::now();
    let mut buyers = JoinSet::new();
    for buyer in 0..sale.buyers {
        let client = clients[buyer % clients.len()].clone();
        buyers.spawn(async move {
            let store = Slow(RedisSegmentStore::new(&client));
            let guard = client.lock(name).acquire().await?;
            let have = store.get(key, Some(guard.token())).await?;
            let bought = have >= 1;
            if bought {
                store.set(key, have - 1, guard.token()).await?;
            }
            guard.release().await?;
            Ok::<_, StoreError>(bought)
        });
    }
    let mut outcome = Outcome::default();
    while let Some(bought) = buyers.join_next().await {
        if bought?.map_err(|e| e.to_string())? {
            outcome.sold += 1;
        } else {
            outcome.sold_out += 1;
        }
    }
    outcome.elapsed = started.elapsed();
    outcome.remaining = RedisSegmentStore::new(&clients[0]).get(key, None).await?;
    Ok(outcome)
}

/// The segmented inventory: one segment's lock per deduction, merging when
/// the segment a buyer holds is short.
async fn run_segmented(clients: &[LockClient], sale: Sale) -> Result<Outcome, StoreError> {
    let name = "bench:segmented";
    let inventory = |client: &LockClient| {
        Inventory::new(
            client.segmented_lock(name, sale.segments),
            Slow(RedisSegmentStore::new(client)),
        )
    };
    inventory(&clients[0]).restock(sale.stock).await?;

    let instances: Vec<_> = clients.iter().map(|c| Arc::new(inventory(c))).collect();
    let started = Instant::now();
    let mut buyers = JoinSet::new();
    for buyer in 0..sale.buyers {
        let stock = instances[buyer % instances.len()].clone();
        buyers.spawn(async move { stock.deduct(1).await });
    }
    let mut outcome = Outcome::default();
    while let Some(result) = buyers.join_next().await {
        match result? {
            Ok(deduction) => {
                outcome.sold += deduction.quantity();
                outcome.merged += u64::from(deduction.merged());
            }
            Err(InventoryError::Insufficient { .. }) => outcome.sold_out += 1,
            Err(e) => return Err(e.into()),
        }
    }
    outcome.elapsed = started.elapsed();
    let plain = RedisSegmentStore::new(&clients[0]);
    for segment in 0..sale.segments {
        let key = SegmentKey {
            inventory: name,
            segment,
        };
        outcome.remaining += plain.get(key, None).await?;
    }
    Ok(outcome)
}

fn report(label: &str, sale: Sale, outcome: &Outcome) {
    let secs = outcome.elapsed.as_secs_f64();
    println!(
        "{label:<13} {:>8.3} s {:>8.0} buyers/s  sold {} sold-out {} merged {} left {} oversold {}",
        secs,
        sale.buyers as f64 / secs,
        outcome.sold,
        outcome.sold_out,
        outcome.merged,
        outcome.remaining,
        outcome.oversold(sale.stock),
    );
}

#[tokio::main]
async fn main() -> ExitCode {
    match bench().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("segmented_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn bench() -> Result<bool, StoreError> {
    let sale = parse_args()?;
    // Our own throwaway server: the figures never depend on a shared one.
    let server = examples::Redis::start_local()?;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(LockClient::connect(Config::new(server.url())).await?);
    }
    println!(
        "flash sale: {} buyers on {CLIENTS} service instances, {} units in stock, one unit each, \
         {LATENCY:?} storage latency per read and per write (redis-server at {})",
        sale.buyers,
        sale.stock,
        server.url(),
    );
    let single = run_single(&clients, sale).await?;
    report("single lock", sale, &single);
    let segmented = run_segmented(&clients, sale).await?;
    report(&format!("{} segments", sale.segments), sale, &segmented);
    let speedup = single.elapsed.as_secs_f64() / segmented.elapsed.as_secs_f64();
    let oversold = segmented.oversold(sale.stock);
    println!("speedup {speedup:.1}x oversold {oversold}");
    Ok(oversold == 0 && single.oversold(sale.stock) == 0)
}

fn parse_args() -> Result<Sale, String> {
    let mut sale = Sale {
        stock: 1000,
        buyers: 1200,
        segments: 10,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("{flag} needs a positive number"))
        };
        match flag.as_str() {
            "--stock" => sale.stock = value()?,
            "--buyers" => sale.buyers = value()? as usize,
            "--segments" => sale.segments = value()? as usize,
            "-h" | "--help" => {
                println!("usage: segmented_bench [--stock N] [--buyers N] [--segments N]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument `{other}` (try --help)")),
        }
    }
    Ok(sale)
}
