//! The flash sale: one SKU's stock in the store the locks are on (Redis,
//! etcd, ZooKeeper, PostgreSQL or MySQL/MariaDB), many buyers across several
//! service instances, each deducting with a read-modify-write that is not
//! atomic (read the stock, a moment of work, write it back one less).
//!
//! Without a lock, buyers read the same stock and the shop sells more than it
//! has. With `#[distributed_lock]` (and `client.lock(..)` on the other
//! instances) every deduction runs alone and the shop sells exactly its stock.
//! Only the URL changes from one store to another: the attribute, the
//! builder and the guard are the same.
//!
//! ```text
//! cargo run --release -p examples --example flash_sale
//! cargo run --release -p examples --example flash_sale -- --stock 2000 --clients 4 --buyers 50
//! cargo run --release -p examples --example flash_sale -- --segments 10
//! cargo run --release -p examples --example flash_sale -- --metrics
//! cargo run --release -p examples --features etcd --example flash_sale -- --engine etcd
//! cargo run --release -p examples --features all --example flash_sale -- --engine postgres
//! cargo run --release -p examples --features mysql --example flash_sale -- --url mysql://u:p@db:3306/shop
//! ```
//!
//! `--engine redis|etcd|zk|postgres|mysql` starts a throwaway server of that
//! store on free loopback ports (or uses the one `REDIS_URL`, for Redis, or
//! `LOCK_URL` names); `--url` runs on a server of yours instead (the stock
//! goes in a key, node or table row of its own: see `examples::store`).
//! Each store other than Redis is a feature of the examples crate, so the
//! Redis demo's first build compiles no other driver.
//!
//! `--metrics` prints, at the end, the lock metrics of the run as Prometheus
//! text (lock-runtime's `metrics` feature, rendered by
//! `metrics-exporter-prometheus`): the names, labels and buckets a
//! deployment would scrape.
//!
//! `--segments N` adds a third run: the stock split over the N segments of a
//! segmented lock (`lock_runtime::Inventory`), so N buyers deduct at once,
//! next to the single lock's run.
//!
//! Exits non-zero when a locked run does not sell exactly the stock.

use std::fmt;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use examples::store::{Counts, DataError, Engine, Server};
use examples::{Tally, per_second};
use lock_runtime::{
    Config, Inventory, InventoryError, LockClient, LockError, SegmentKey, SegmentStore, StoreError,
    distributed_lock,
};
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::task::JoinSet;

/// Histogram buckets in seconds for `--metrics`: 100 µs to 30 s, for
/// acquire times (a round trip to a busy wait) and hold times alike.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
];

/// The SKU on sale. Its stock is a plain string key; its lock is `stock:<sku>`.
const SKU: &str = "flash-sale-demo";

/// How long a buyer waits for the lock before giving up (an error in the report).
const WAIT: Duration = Duration::from_secs(30);

/// The shape of one sale; every run of the demo sells the same.
#[derive(Debug, Clone, Copy)]
struct Sale {
    /// Units in stock when the sale opens.
    stock: u64,
    /// Service instances (each with its own connections and lock client).
    clients: usize,
    /// Buyer tasks per instance; each buys one unit at a time until it has
    /// its share of the demand or the SKU is sold out.
    buyers: usize,
    /// With `--metrics`: print the run's lock metrics at the end.
    metrics: bool,
    /// With `--segments N`: also sell through a segmented lock of N segments.
    segments: Option<usize>,
    /// The store: `--engine`, or the scheme of `--url`.
    engine: Engine,
    /// `--url`: a server of the user's instead of a throwaway one.
    url: Option<&'static str>,
}

impl Sale {
    /// Units each buyer wants: together, twice the stock.
    fn wants(&self) -> u64 {
        let buyers = (self.clients * self.buyers) as u64;
        (2 * self.stock).div_ceil(buyers)
    }

    /// Units all buyers want together.
    fn demand(&self) -> u64 {
        self.wants() * (self.clients * self.buyers) as u64
    }
}

/// What one purchase attempt found.
enum Purchase {
    Bought,
    SoldOut,
}

/// The shop's error: the attribute needs `From<LockError>`.
#[derive(Debug)]
enum ShopError {
    Lock(LockError),
    Data(DataError),
    Stock(InventoryError),
}

impl From<LockError> for ShopError {
    fn from(e: LockError) -> Self {
        ShopError::Lock(e)
    }
}

impl From<DataError> for ShopError {
    fn from(e: DataError) -> Self {
        ShopError::Data(e)
    }
}

impl fmt::Display for ShopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShopError::Lock(e) => write!(f, "lock: {e}"),
            ShopError::Data(e) => write!(f, "stock: {e}"),
            ShopError::Stock(e) => write!(f, "segmented stock: {e}"),
        }
    }
}

/// How a service instance protects its deductions.
#[derive(Clone)]
enum Locking {
    /// Not at all: the bug.
    Unlocked,
    /// `#[distributed_lock]` on the global client.
    Attribute,
    /// `client.lock(..)` on the instance's own client.
    Builder(LockClient),
}

/// One service instance: its data connection and how it locks.
#[derive(Clone)]
struct Shop {
    data: Counts,
    locking: Locking,
}

fn stock_key(sku: &str) -> String {
    format!("flash_sale:stock:{sku}")
}

/// Sells one unit the way the code in the story does: read the stock, do a
/// little work, write it back. Between the read and the write other buyers
/// read the same value.
async fn deduct_one(shop: &Shop, sku: &str) -> Result<Purchase, ShopError> {
    let stock = shop.data.get(&stock_key(sku)).await?;
    if stock <= 0 {
        return Ok(Purchase::SoldOut);
    }
    // The work between read and write (pricing, logging): widens the race.
    tokio::task::yield_now().await;
    shop.data.set(&stock_key(sku), stock - 1).await?;
    Ok(Purchase::Bought)
}

/// The same deduction, one buyer at a time across every instance.
#[distributed_lock(key = "stock:<sku>", wait = "30s")]
async fn deduct_one_locked(shop: &Shop, sku: &str) -> Result<Purchase, ShopError> {
    deduct_one(shop, sku).await
}

/// One purchase attempt, protected as the instance is configured.
async fn buy(shop: &Shop, sku: &str) -> Result<Purchase, ShopError> {
    match &shop.locking {
        Locking::Unlocked => deduct_one(shop, sku).await,
        Locking::Attribute => deduct_one_locked(shop, sku).await,
        Locking::Builder(client) => {
            let guard = client
                .lock(format!("stock:{sku}"))
                .wait(WAIT)
                .acquire()
                .await?;
            let result = deduct_one(shop, sku).await;
            let released = guard.release().await;
            let purchase = result?;
            released?;
            Ok(purchase)
        }
    }
}

/// What one run did.
struct Report {
    run: &'static str,
    /// Every deduction ran under a lock: the run must sell exactly the stock.
    locked: bool,
    stock: u64,
    sold: u64,
    /// The stock the store shows at the end.
    left: i64,
    errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
}

impl Report {
    /// Units sold beyond the stock.
    fn oversold(&self) -> u64 {
        self.sold.saturating_sub(self.stock)
    }

    /// Sold exactly the stock, none left, no errors.
    fn exact(&self) -> bool {
        self.sold == self.stock && self.left == 0 && self.errors == 0
    }
}

/// Opens the sale with `sale.stock` units, lets every buyer of every shop buy
/// until sold out, and reports.
async fn sell(
    run: &'static str,
    sale: Sale,
    shops: Vec<Shop>,
    data: &Counts,
) -> Result<Report, ShopError> {
    let locked = shops
        .iter()
        .all(|s| !matches!(s.locking, Locking::Unlocked));
    data.set(&stock_key(SKU), sale.stock as i64).await?;
    let started = Instant::now();
    let mut buyers = JoinSet::new();
    for shop in &shops {
        for _ in 0..sale.buyers {
            let shop = shop.clone();
            buyers.spawn(async move {
                let mut bought = 0u64;
                for _ in 0..sale.wants() {
                    match buy(&shop, SKU).await {
                        Ok(Purchase::Bought) => bought += 1,
                        Ok(Purchase::SoldOut) => return (bought, None),
                        Err(e) => return (bought, Some(e)),
                    }
                }
                (bought, None)
            });
        }
    }
    let Tally {
        sold,
        errors,
        first_error,
    } = Tally::of(buyers).await;
    let elapsed = started.elapsed();
    let left = data.get(&stock_key(SKU)).await?;
    Ok(Report {
        run,
        locked,
        stock: sale.stock,
        sold,
        left,
        errors,
        first_error,
        elapsed,
    })
}

/// A data connection of its own for a service instance.
async fn data_connection(sale: Sale, url: &str) -> Result<Counts, ShopError> {
    Ok(Counts::connect(sale.engine, url).await?)
}

/// The bug: no lock at all.
async fn run_unlocked(sale: Sale, url: &str) -> Result<Report, ShopError> {
    let mut shops = Vec::new();
    for _ in 0..sale.clients {
        shops.push(Shop {
            data: data_connection(sale, url).await?,
            locking: Locking::Unlocked,
        });
    }
    sell("no lock", sale, shops, &data_connection(sale, url).await?).await
}

/// The fix: the first instance uses `#[distributed_lock]` (the global client,
/// set up by `lock_runtime::init` in `main`), the others `client.lock(..)` on
/// their own clients. All of them take the same lock, `stock:<sku>`.
async fn run_locked(sale: Sale, url: &str) -> Result<Report, ShopError> {
    let mut shops = Vec::new();
    for i in 0..sale.clients {
        let locking = if i == 0 {
            Locking::Attribute
        } else {
            Locking::Builder(LockClient::connect(Config::new(url)).await?)
        };
        shops.push(Shop {
            data: data_connection(sale, url).await?,
            locking,
        });
    }
    sell(
        "distributed lock",
        sale,
        shops,
        &data_connection(sale, url).await?,
    )
    .await
}

/// `--segments N`: the stock in N segments, each behind its own lock; a
/// buyer deducts under one segment's lock, merging segments when its own is
/// short. Every instance has its own client, as in `run_locked`.
async fn run_segmented(sale: Sale, segments: usize, url: &str) -> Result<Report, ShopError> {
    let name = format!("stock:{SKU}");
    let mut shops = Vec::new();
    for _ in 0..sale.clients {
        let client = LockClient::connect(Config::new(url)).await?;
        let lock = client.segmented_lock(name.as_str(), segments);
        shops.push(std::sync::Arc::new(Inventory::new(
            lock,
            Segments(data_connection(sale, url).await?),
        )));
    }
    shops[0]
        .restock(sale.stock)
        .await
        .map_err(ShopError::Stock)?;
    let started = Instant::now();
    let mut buyers = JoinSet::new();
    for shop in &shops {
        for _ in 0..sale.buyers {
            let shop = shop.clone();
            buyers.spawn(async move {
                let mut bought = 0u64;
                for _ in 0..sale.wants() {
                    match shop.deduct(1).await {
                        Ok(_) => bought += 1,
                        Err(InventoryError::Insufficient { .. }) => return (bought, None),
                        Err(e) => return (bought, Some(e)),
                    }
                }
                (bought, None)
            });
        }
    }
    let Tally {
        sold,
        errors,
        first_error,
    } = Tally::of(buyers).await;
    let elapsed = started.elapsed();
    let mut left = 0;
    for segment in 0..segments {
        let at = SegmentKey {
            inventory: &name,
            segment,
        };
        left += shops[0]
            .store()
            .get(at, None)
            .await
            .map_err(|e| ShopError::Stock(InventoryError::Store(e)))?;
        shops[0]
            .store()
            .0
            .remove(&format!("{}:count", at.lock_name()))
            .await?;
    }
    Ok(Report {
        run: "segmented lock",
        locked: true,
        stock: sale.stock,
        sold,
        left: left as i64,
        errors,
        first_error,
        elapsed,
    })
}

/// The segments' counts, in the store the locks are on: each under its
/// segment's lock name (`{stock:<sku>:seg:<i>}:count`).
struct Segments(Counts);

impl SegmentStore for Segments {
    async fn get(&self, at: SegmentKey<'_>, _token: Option<u64>) -> Result<u64, StoreError> {
        let count = self.0.get(&format!("{}:count", at.lock_name())).await?;
        Ok(u64::try_from(count)?)
    }

    async fn set(&self, at: SegmentKey<'_>, count: u64, _token: u64) -> Result<(), StoreError> {
        let count = i64::try_from(count)?;
        Ok(self
            .0
            .set(&format!("{}:count", at.lock_name()), count)
            .await?)
    }
}

fn print_report(sale: Sale, reports: &[Report]) {
    println!();
    println!(
        "{:<18} {:>8} {:>9} {:>6} {:>7} {:>9} {:>14}",
        "run", "sold", "oversold", "left", "errors", "time", "deductions/s"
    );
    for r in reports {
        println!(
            "{:<18} {:>8} {:>9} {:>6} {:>7} {:>8.2}s {:>14.0}",
            r.run,
            r.sold,
            r.oversold(),
            r.left,
            r.errors,
            r.elapsed.as_secs_f64(),
            per_second(r.sold, r.elapsed),
        );
    }
    println!();
    for r in reports {
        if let Some(e) = &r.first_error {
            println!("{}: {} buyers failed; first error: {e}", r.run, r.errors);
        }
        if r.oversold() > 0 {
            println!(
                "{}: sold {} of {} units: OVERSOLD by {} (the store still shows {} left)",
                r.run,
                r.sold,
                sale.stock,
                r.oversold(),
                r.left
            );
        } else if r.exact() {
            println!("{}: sold exactly {} of {} units", r.run, r.sold, sale.stock);
        } else {
            println!(
                "{}: sold {} of {} units, {} left",
                r.run, r.sold, sale.stock, r.left
            );
        }
    }
}

const USAGE: &str =
    "usage: flash_sale [--engine E | --url URL] [--stock N] [--clients N] [--buyers N]
  --engine E   redis (default), etcd, zk, postgres or mysql: a throwaway server of that store
  --url URL    the store at URL instead (redis://, etcd://, zk://, postgres://, mysql://)
  --stock N    units on sale (default 1000 on Redis, 300 on the others)
  --clients N  service instances, each with its own lock client (default 4)
  --buyers N   buyer tasks per instance (default 50)
  --segments N also sell through a segmented lock of N segments
  --metrics    print the run's lock metrics as Prometheus text at the end";

fn parse_args() -> Result<Sale, String> {
    let mut sale = Sale {
        stock: 0,
        clients: 4,
        buyers: 50,
        segments: None,
        metrics: false,
        engine: Engine::Redis,
        url: None,
    };
    let mut engine = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--engine" || arg == "--url" {
            let given = args.next().ok_or(format!("{arg} needs a value"))?;
            match arg.as_str() {
                "--engine" => engine = Some(Engine::named(&given)?),
                _ => sale.url = Some(given.leak()),
            }
            continue;
        }
        let mut value = |name: &str| examples::positive::<u64>(&mut args, name);
        match arg.as_str() {
            "--stock" => sale.stock = value("--stock")?,
            "--clients" => sale.clients = value("--clients")? as usize,
            "--buyers" => sale.buyers = value("--buyers")? as usize,
            "--segments" => sale.segments = Some(value("--segments")? as usize),
            "--metrics" => sale.metrics = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    sale.engine = match (engine, sale.url) {
        (None, None) => Engine::Redis,
        (Some(engine), None) => engine,
        (engine, Some(url)) => {
            let of_url = Engine::of_url(url)?;
            if engine.is_some_and(|engine| engine != of_url) {
                return Err(format!(
                    "--engine {} and a {} --url name different stores",
                    engine.map_or("", Engine::name),
                    of_url.name()
                ));
            }
            of_url
        }
    };
    if sale.stock == 0 {
        // Every store but Redis takes a few milliseconds a deduction.
        sale.stock = if sale.engine == Engine::Redis {
            1000
        } else {
            300
        };
    }
    Ok(sale)
}

#[tokio::main]
async fn main() -> ExitCode {
    let (sale, server) = match examples::start_with(parse_args, USAGE, |sale: &Sale| {
        Server::find(sale.engine, sale.url.map(str::to_owned))
    }) {
        Ok(started) => started,
        Err(code) => return code,
    };
    println!(
        "flash sale: {} units of {SKU}; {} instances x {} buyers want {} units in all",
        sale.stock,
        sale.clients,
        sale.buyers,
        sale.demand()
    );
    println!("each deduction: read the stock, yield, write it back one less");
    if let Some(segments) = sale.segments {
        println!("segmented lock: the stock split in {segments} segments, one lock each");
    }
    println!("{}: {}", server.engine().name(), server.describe());
    // Before the first lock call, so that every metric is recorded.
    let prometheus = match sale.metrics {
        true => match PrometheusBuilder::new()
            .set_buckets(&LATENCY_BUCKETS)
            .and_then(|b| b.install_recorder())
        {
            Ok(handle) => Some(handle),
            Err(e) => {
                eprintln!("cannot record metrics: {e}");
                return ExitCode::FAILURE;
            }
        },
        false => None,
    };
    let url = server.url();
    let reports = async {
        lock_runtime::init(Config::new(url)).await?;
        // One function per mode; each sells the same sale from a fresh stock.
        let mut reports = vec![run_unlocked(sale, url).await?, run_locked(sale, url).await?];
        if let Some(segments) = sale.segments {
            reports.push(run_segmented(sale, segments, url).await?);
        }
        data_connection(sale, url)
            .await?
            .remove(&stock_key(SKU))
            .await?;
        Ok::<_, ShopError>(reports)
    }
    .await;
    let reports = match reports {
        Ok(reports) => reports,
        Err(e) => {
            eprintln!("the demo failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    print_report(sale, &reports);
    if let Some(prometheus) = prometheus {
        println!();
        println!("# the lock metrics of this run, as Prometheus scrapes them:");
        print!("{}", prometheus.render());
    }
    if reports.iter().filter(|r| r.locked).all(Report::exact) {
        ExitCode::SUCCESS
    } else {
        eprintln!("FAILED: a locked run did not sell exactly the stock");
        ExitCode::FAILURE
    }
}
