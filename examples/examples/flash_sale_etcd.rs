//! The flash sale on etcd: the same shop as `flash_sale`, with its locks
//! (and its stock) in etcd instead of Redis. Only the URL changes: the
//! attribute, the builder and the guard are the same.
//!
//! The stock is a plain etcd key; each deduction reads it, yields, and
//! writes it back one less (not atomic). Without a lock the buyers oversell;
//! under `#[distributed_lock]` (this process's global client) and
//! `client.lock(..)` (the other instances' clients) every deduction runs
//! alone, in arrival order (every lock on etcd is FIFO), and the shop sells
//! exactly its stock.
//!
//! ```text
//! cargo run --release -p examples --example flash_sale_etcd
//! cargo run --release -p examples --example flash_sale_etcd -- --stock 500 --clients 4 --buyers 20
//! ```
//!
//! Uses `LOCK_URL` when it names an etcd (`etcd://host:port,...`);
//! otherwise starts a throwaway `etcd` on free loopback ports. Exits
//! non-zero when the locked run oversells.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use etcd_client::KvClient;
use examples::{Etcd, per_second};
use lock_runtime::{Config, LockClient, LockError, distributed_lock};
use tokio::task::JoinSet;

/// The stock's key (not under a lock's prefix: lock names hold no `/`).
const STOCK: &str = "shop/stock/flash-sale-demo";

/// How long a buyer waits for the lock.
const WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy)]
struct Sale {
    stock: u64,
    clients: usize,
    buyers: usize,
}

/// What a run sold.
struct Report {
    sold: u64,
    left: u64,
    took: Duration,
}

/// Why a run failed.
#[derive(Debug)]
enum ShopError {
    Lock(LockError),
    Etcd(etcd_client::Error),
    Corrupt(String),
}

impl std::fmt::Display for ShopError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShopError::Lock(e) => write!(f, "lock: {e}"),
            ShopError::Etcd(e) => write!(f, "etcd: {e}"),
            ShopError::Corrupt(v) => write!(f, "the stock is not a number: {v:?}"),
        }
    }
}

impl From<LockError> for ShopError {
    fn from(e: LockError) -> Self {
        ShopError::Lock(e)
    }
}

impl From<etcd_client::Error> for ShopError {
    fn from(e: etcd_client::Error) -> Self {
        ShopError::Etcd(e)
    }
}

/// One unit off the stock, if any is left: read, a moment of work, write.
async fn take_one(kv: &mut KvClient) -> Result<bool, ShopError> {
    let found = kv.get(STOCK, None).await?;
    let left = match found.kvs().first() {
        Some(kv) => {
            let text = kv.value_str().unwrap_or_default();
            text.parse::<u64>()
                .map_err(|_| ShopError::Corrupt(text.to_owned()))?
        }
        None => 0,
    };
    if left == 0 {
        return Ok(false);
    }
    tokio::task::yield_now().await;
    kv.put(STOCK, (left - 1).to_string(), None).await?;
    Ok(true)
}

/// The deduction under the attribute: this process's global client.
#[distributed_lock(key = "stock:flash-sale-demo", wait = "60s")]
async fn deduct(kv: &mut KvClient) -> Result<bool, ShopError> {
    take_one(kv).await
}

async fn run(sale: Sale, etcd: &Etcd, locked: bool) -> Result<Report, ShopError> {
    let url = etcd.url();
    let mut kv = etcd_client::Client::connect([etcd.endpoint()], None)
        .await?
        .kv_client();
    kv.put(STOCK, sale.stock.to_string(), None).await?;
    let mut buyers = JoinSet::new();
    let started = Instant::now();
    for instance in 0..sale.clients {
        // Instance 0 uses the attribute (the global client); the others
        // are services of their own, each with its own client.
        let client = match instance {
            0 => None,
            _ => Some(LockClient::connect(Config::new(url)).await?),
        };
        for _ in 0..sale.buyers {
            let (mut kv, client) = (kv.clone(), client.clone());
            buyers.spawn(async move {
                let mut bought = 0u64;
                loop {
                    let got = match (&client, locked) {
                        (_, false) => take_one(&mut kv).await?,
                        (None, true) => deduct(&mut kv).await?,
                        (Some(client), true) => {
                            let guard = client
                                .lock("stock:flash-sale-demo")
                                .wait(WAIT)
                                .acquire()
                                .await?;
                            let got = take_one(&mut kv).await;
                            guard.release().await?;
                            got?
                        }
                    };
                    if !got {
                        return Ok::<_, ShopError>(bought);
                    }
                    bought += 1;
                }
            });
        }
    }
    let mut sold = 0;
    while let Some(bought) = buyers.join_next().await {
        sold += bought.map_err(|e| ShopError::Corrupt(e.to_string()))??;
    }
    let took = started.elapsed();
    let found = kv.get(STOCK, None).await?;
    let left = found
        .kvs()
        .first()
        .and_then(|kv| kv.value_str().ok()?.parse().ok())
        .unwrap_or(0);
    kv.delete(STOCK, None).await?;
    Ok(Report { sold, left, took })
}

const USAGE: &str = "usage: flash_sale_etcd [--stock N] [--clients N] [--buyers N]";

fn parse_args() -> Result<Sale, String> {
    let mut sale = Sale {
        stock: 300,
        clients: 3,
        buyers: 10,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--stock" => sale.stock = examples::positive(&mut args, "--stock")?,
            "--clients" => sale.clients = examples::positive(&mut args, "--clients")?,
            "--buyers" => sale.buyers = examples::positive(&mut args, "--buyers")?,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(sale)
}

#[tokio::main]
async fn main() -> ExitCode {
    let sale = match parse_args() {
        Ok(sale) => sale,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let etcd = match Etcd::from_env_or_start() {
        Ok(etcd) => etcd,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "flash sale on etcd: {} units; {} instances x {} buyers",
        sale.stock, sale.clients, sale.buyers
    );
    println!("etcd: {}", etcd.describe());
    let url = etcd.url().to_owned();
    let runs = async {
        lock_runtime::init(Config::new(url.as_str())).await?;
        let unlocked = run(sale, &etcd, false).await?;
        let locked = run(sale, &etcd, true).await?;
        Ok::<_, ShopError>((unlocked, locked))
    }
    .await;
    let (unlocked, locked) = match runs {
        Ok(runs) => runs,
        Err(e) => {
            eprintln!("the demo failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (what, report) in [("no lock", &unlocked), ("locked", &locked)] {
        println!(
            "{what:>8}: sold {:>5} of {} (left {:>4}) in {:>8.1?}, {:>8.0} deductions/s{}",
            report.sold,
            sale.stock,
            report.left,
            report.took,
            per_second(report.sold, report.took),
            if report.sold > sale.stock {
                "  OVERSOLD"
            } else {
                ""
            }
        );
    }
    if locked.sold == sale.stock && locked.left == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("FAILED: the locked run did not sell exactly the stock");
        ExitCode::FAILURE
    }
}
