//! Semaphores against locks, on every engine (DESIGN §11, issue 51), side
//! by side in one run: each engine's throwaway server (or the memory
//! store) is started here, and every lock call runs in a spawned task.
//!
//! Rows, per engine:
//!
//! 1. **pair**: uncontended acquire + release, one task; a lock's pair
//!    (`client.lock(name)`) and a permit's (`client.semaphore(name, 5)`)
//!    take turns inside each round; the ratio is the median of the rounds'
//!    (lock time / permit time: 1.0 is as fast as a lock; the goal is at
//!    least 0.7).
//! 2. **handoff**: from the start of `release()` to the instant another
//!    client's waiter returns, p50, for a lock and for a permit of a
//!    semaphore of 2 whose two permits are held (the goal: the permit's at
//!    most 1.5x the lock's).
//! 3. **64 on 8**: 64 tasks on two clients loop acquire + release on one
//!    semaphore of 8 for a few seconds: permits per second, and the least
//!    and most any task got (no task starves: the least is above 0).
//!
//! `cargo run --release -p benches --example semaphore_bench [-- --rounds 5
//! --pairs 200 --handoffs 30 --seconds 5 --engines redis,etcd,...]`

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use examples::{MariaDb, Postgres, Redis, ZooKeeper, median, per_second, percentile};
use lock_runtime::{Config, LockClient, LockError};

type BenchError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Copy)]
struct Args {
    rounds: usize,
    pairs: usize,
    handoffs: usize,
    seconds: u64,
}

fn parse() -> Result<(Args, Vec<String>), String> {
    let mut args = Args {
        rounds: 5,
        pairs: 200,
        handoffs: 30,
        seconds: 5,
    };
    let mut engines: Vec<String> = ["memory", "redis", "etcd", "zookeeper", "postgres", "mysql"]
        .map(str::to_owned)
        .to_vec();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--rounds" => args.rounds = value()?.parse().map_err(|e| format!("{e}"))?,
            "--pairs" => args.pairs = value()?.parse().map_err(|e| format!("{e}"))?,
            "--handoffs" => args.handoffs = value()?.parse().map_err(|e| format!("{e}"))?,
            "--seconds" => args.seconds = value()?.parse().map_err(|e| format!("{e}"))?,
            "--engines" => engines = value()?.split(',').map(str::to_owned).collect(),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok((args, engines))
}

/// `pairs` acquire + release of `kind`'s builder on `name`, in a spawned
/// task: how long they took.
async fn pairs(
    client: &LockClient,
    permits: Option<u32>,
    name: &str,
    pairs: usize,
) -> Result<Duration, BenchError> {
    let (client, name) = (client.clone(), name.to_owned());
    tokio::spawn(async move {
        let started = Instant::now();
        for _ in 0..pairs {
            let builder = match permits {
                Some(n) => client.semaphore(&name, n),
                None => client.lock(&name),
            };
            builder.acquire().await?.release().await?;
        }
        Ok::<_, LockError>(started.elapsed())
    })
    .await?
    .map_err(Into::into)
}

/// One handoff: `holder` holds `held` permits (or the lock), a waiter of
/// `waiter` waits; from the start of one release to the waiter's return.
async fn handoff(
    holder: &LockClient,
    waiter: &LockClient,
    permits: Option<u32>,
    name: &str,
) -> Result<Duration, BenchError> {
    let builder = |client: &LockClient| match permits {
        Some(n) => client.semaphore(name, n),
        None => client.lock(name),
    };
    let mut held = Vec::new();
    for _ in 0..permits.unwrap_or(1) {
        held.push(builder(holder).acquire().await?);
    }
    let waiting = {
        let builder = builder(waiter).wait(Duration::from_secs(30));
        tokio::spawn(async move {
            let guard = builder.acquire().await?;
            let at = Instant::now();
            guard.release().await?;
            Ok::<_, LockError>(at)
        })
    };
    // The waiter has made its try and waits (a benchmark's pause, not a
    // test's synchronisation).
    tokio::time::sleep(Duration::from_millis(50)).await;
    let released = Instant::now();
    held.pop().expect("a hold").release().await?;
    let got = waiting.await??;
    for rest in held {
        rest.release().await?;
    }
    Ok(got.saturating_duration_since(released))
}

/// 64 tasks on two clients on one semaphore of 8 for `seconds`: permits
/// per second, and each task's count.
async fn many_on_few(
    clients: [&LockClient; 2],
    name: &str,
    seconds: u64,
) -> Result<(f64, Vec<u64>), BenchError> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..64 {
        let client = clients[i % 2].clone();
        let (stop, name) = (stop.clone(), name.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut got = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let permit = client
                    .semaphore(&name, 8)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await?;
                got += 1;
                tokio::task::yield_now().await;
                permit.release().await?;
            }
            Ok::<_, LockError>(got)
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut counts = Vec::new();
    for task in tasks {
        counts.push(task.await??);
    }
    let elapsed = started.elapsed();
    Ok((per_second(counts.iter().sum(), elapsed), counts))
}

/// The three rows on the store of `url`.
async fn rows(engine: &str, url: &str, args: Args) -> Result<(), BenchError> {
    let connect = || async { LockClient::connect(Config::new(url)).await };
    let (a, b) = (connect().await?, connect().await?);
    match a.semaphore("bench-probe", 1).try_acquire().await {
        Ok(Some(permit)) => permit.release().await?,
        Ok(None) => return Err("the probe semaphore is busy".into()),
        Err(LockError::Unsupported { .. }) => {
            println!("{engine:<10} no semaphores in this build");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    }
    // Warm both paths.
    pairs(&a, None, "bench-pair-lock", 20).await?;
    pairs(&a, Some(5), "bench-pair-permit", 20).await?;
    let mut ratios = Vec::new();
    let (mut lock_total, mut permit_total) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..args.rounds {
        let lock = pairs(&a, None, "bench-pair-lock", args.pairs).await?;
        let permit = pairs(&a, Some(5), "bench-pair-permit", args.pairs).await?;
        ratios.push(lock.as_secs_f64() / permit.as_secs_f64());
        lock_total += lock;
        permit_total += permit;
    }
    let n = (args.rounds * args.pairs) as u32;
    println!(
        "{engine:<10} 1. pair      lock {:>8.1} us  permit {:>8.1} us  permit/lock speed {:.2}x (goal >= 0.7)",
        (lock_total / n).as_secs_f64() * 1e6,
        (permit_total / n).as_secs_f64() * 1e6,
        median(&ratios)
    );
    let (mut locks, mut permits) = (Vec::new(), Vec::new());
    for _ in 0..args.handoffs {
        locks.push(handoff(&a, &b, None, "bench-handoff-lock").await?);
        permits.push(handoff(&a, &b, Some(2), "bench-handoff-permit").await?);
    }
    let (lock, permit) = (percentile(&mut locks, 50.0), percentile(&mut permits, 50.0));
    println!(
        "{engine:<10} 2. handoff   lock p50 {:>8.2} ms  permit p50 {:>8.2} ms  permit/lock {:.2}x (goal <= 1.5)",
        lock.as_secs_f64() * 1e3,
        permit.as_secs_f64() * 1e3,
        permit.as_secs_f64() / lock.as_secs_f64()
    );
    let (rate, counts) = many_on_few([&a, &b], "bench-64-on-8", args.seconds).await?;
    let (least, most) = (
        counts.iter().min().copied().unwrap_or(0),
        counts.iter().max().copied().unwrap_or(0),
    );
    println!(
        "{engine:<10} 3. 64 on 8   {rate:>9.0} permits/s  least/most per task {least}/{most} ({:.2})",
        least as f64 / most.max(1) as f64
    );
    Ok(())
}

fn main() -> ExitCode {
    let (args, engines) = match parse() {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("semaphore_bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    for engine in engines {
        // Each engine's server lives for its rows only.
        let result: Result<(), BenchError> = match engine.as_str() {
            "memory" => runtime.block_on(rows("memory", "memory://bench", args)),
            "redis" => Redis::start_local()
                .map_err(|e| e.0.into())
                .and_then(|s| runtime.block_on(rows("redis", s.url(), args))),
            "etcd" => examples::Etcd::start_local()
                .map_err(|e| e.0.into())
                .and_then(|s| runtime.block_on(rows("etcd", s.url(), args))),
            "zookeeper" => ZooKeeper::start_local()
                .map_err(|e| e.0.into())
                .and_then(|s| runtime.block_on(rows("zookeeper", s.url(), args))),
            "postgres" => Postgres::start_local()
                .map_err(|e| e.0.into())
                .and_then(|s| runtime.block_on(rows("postgres", s.url(), args))),
            "mysql" => MariaDb::start_local()
                .map_err(|e| e.0.into())
                .and_then(|s| runtime.block_on(rows("mysql", s.url(), args))),
            other => Err(format!("unknown engine {other}").into()),
        };
        if let Err(e) = result {
            eprintln!("semaphore_bench: {engine}: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
