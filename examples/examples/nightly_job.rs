//! A scheduled job that must run once per slot, however many service
//! instances fire it: the ShedLock pattern with `#[distributed_lock]`.
//!
//! Every instance has its own lock client and its own timer, and the timers
//! drift (by 0, 10 and 120 ms here). Each instance fires the report for each
//! slot; the one that takes the lock runs it, the others skip
//! (`on_busy = "skip"`). The report itself takes 30 ms, so an instance whose
//! timer is 120 ms late would find the lock free again and run the slot a
//! second time: `hold_at_least` keeps the lock for a minimum after the body
//! returns, so the late instances skip too.
//!
//! ```text
//! cargo run --release -p examples --example nightly_job
//! cargo run --release -p examples --example nightly_job -- --instances 5 --slots 8
//! ```
//!
//! It runs the schedule twice, with and without `hold_at_least`, and prints
//! which instance ran each slot. Uses `REDIS_URL` when set; otherwise starts
//! a throwaway `redis-server` on a free loopback port. Exits non-zero when a
//! slot did not run exactly once with `hold_at_least`.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lock_runtime::{Config, LockClient, LockError, distributed_lock};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use tokio::task::JoinSet;

/// How late each instance's timer fires, by instance (repeating).
const DRIFTS_MS: [u64; 3] = [0, 10, 120];

/// Time between two slots of the schedule.
const PERIOD: Duration = Duration::from_millis(400);

/// How long one report takes.
const REPORT: Duration = Duration::from_millis(30);

/// Where the run records who ran what: one list per slot, in Redis (the
/// instances stand for separate processes).
struct Ledger {
    conn: MultiplexedConnection,
    /// Unique to this run of the example, so runs never mix.
    run: String,
}

impl Ledger {
    fn key(&self, schedule: &str, slot: u64) -> String {
        format!("nightly_job_ran:{}:{schedule}:{slot}", self.run)
    }

    async fn ran(&self, schedule: &str, slot: u64, instance: usize) -> Result<(), JobError> {
        let () = self
            .conn
            .clone()
            .rpush(self.key(schedule, slot), instance)
            .await?;
        Ok(())
    }

    /// The instances that ran `slot`, in order; the record is deleted.
    async fn take(&self, schedule: &str, slot: u64) -> Result<Vec<usize>, JobError> {
        let mut conn = self.conn.clone();
        let key = self.key(schedule, slot);
        let ran: Vec<usize> = conn.lrange(&key, 0, -1).await?;
        let () = conn.del(&key).await?;
        Ok(ran)
    }
}

/// What can go wrong in a report: the lock, or the ledger's Redis.
#[derive(Debug)]
enum JobError {
    Lock(LockError),
    Redis(redis::RedisError),
}

impl From<LockError> for JobError {
    fn from(e: LockError) -> Self {
        JobError::Lock(e)
    }
}

impl From<redis::RedisError> for JobError {
    fn from(e: redis::RedisError) -> Self {
        JobError::Redis(e)
    }
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobError::Lock(e) => write!(f, "lock: {e}"),
            JobError::Redis(e) => write!(f, "redis: {e}"),
        }
    }
}

/// The job as a service writes it: run once per slot, skip when another
/// instance has it, and keep it at least 2 s (far more than any drift).
#[distributed_lock(
    key = "nightly_job:<ledger.run>:report:<slot>",
    on_busy = "skip",
    hold_at_least = "2s",
    client = locks
)]
async fn report(
    locks: &LockClient,
    ledger: &Ledger,
    slot: u64,
    instance: usize,
) -> Result<(), JobError> {
    write_report(ledger, "held", slot, instance).await
}

/// The same job without `hold_at_least`: a late timer finds the lock free.
#[distributed_lock(key = "nightly_job:<ledger.run>:naive:<slot>", on_busy = "skip", client = locks)]
async fn naive_report(
    locks: &LockClient,
    ledger: &Ledger,
    slot: u64,
    instance: usize,
) -> Result<(), JobError> {
    write_report(ledger, "naive", slot, instance).await
}

/// The report itself: records who ran it, then takes [`REPORT`].
async fn write_report(
    ledger: &Ledger,
    schedule: &str,
    slot: u64,
    instance: usize,
) -> Result<(), JobError> {
    ledger.ran(schedule, slot, instance).await?;
    tokio::time::sleep(REPORT).await;
    Ok(())
}

#[derive(Clone, Copy)]
struct Schedule {
    instances: usize,
    slots: u64,
}

/// Runs the schedule on `instances` instances (tasks, each with its own lock
/// client), firing slot `s` at `start + s * PERIOD + drift`. With `held`,
/// the job keeps its lock for `hold_at_least`.
async fn run(
    schedule: Schedule,
    url: &str,
    ledger: &std::sync::Arc<Ledger>,
    held: bool,
) -> Result<(), JobError> {
    let start = Instant::now() + Duration::from_millis(50);
    let mut instances = JoinSet::new();
    for instance in 1..=schedule.instances {
        let locks = LockClient::connect(Config::new(url)).await?;
        let ledger = ledger.clone();
        instances.spawn(async move {
            for slot in 0..schedule.slots {
                // The drift moves round the instances, so different ones win.
                let drift = DRIFTS_MS[(instance + slot as usize) % DRIFTS_MS.len()];
                let due = start + PERIOD * slot as u32 + Duration::from_millis(drift);
                tokio::time::sleep_until(due.into()).await;
                if held {
                    report(&locks, &ledger, slot, instance).await?;
                } else {
                    naive_report(&locks, &ledger, slot, instance).await?;
                }
            }
            Ok::<_, JobError>(())
        });
    }
    while let Some(done) = instances.join_next().await {
        done.expect("an instance panicked")?;
    }
    Ok(())
}

fn names(ran: &[usize]) -> String {
    match ran {
        [] => "nobody".to_owned(),
        [one] => format!("instance {one}"),
        many => {
            let list: Vec<String> = many.iter().map(usize::to_string).collect();
            format!("instances {} (x{})", list.join(", "), many.len())
        }
    }
}

const USAGE: &str = "usage: nightly_job [--instances N] [--slots N]
  --instances N  service instances, each with its own lock client and timer (default 3)
  --slots N      slots in the schedule, one every 400 ms (default 6)";

fn parse_args() -> Result<Schedule, String> {
    let mut schedule = Schedule {
        instances: 3,
        slots: 6,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| examples::positive::<u64>(&mut args, name);
        match arg.as_str() {
            "--instances" => schedule.instances = value("--instances")? as usize,
            "--slots" => schedule.slots = value("--slots")?,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(schedule)
}

#[tokio::main]
async fn main() -> ExitCode {
    let (schedule, redis) = match examples::start(parse_args, USAGE) {
        Ok(started) => started,
        Err(code) => return code,
    };
    let drifts: Vec<String> = (1..=schedule.instances)
        .map(|i| format!("{} ms", DRIFTS_MS[i % DRIFTS_MS.len()]))
        .collect();
    println!(
        "nightly job: {} instances, timers late by {} (rotating), {} slots every {} ms, \
         a {} ms report",
        schedule.instances,
        drifts.join(", "),
        schedule.slots,
        PERIOD.as_millis(),
        REPORT.as_millis()
    );
    println!("redis: {}", redis.describe());
    let url = redis.url();
    let outcome = async {
        let client = redis::Client::open(url)?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let ledger = std::sync::Arc::new(Ledger {
            conn: client.get_multiplexed_async_connection().await?,
            run: format!("{}-{nanos}", std::process::id()),
        });
        run(schedule, url, &ledger, true).await?;
        run(schedule, url, &ledger, false).await?;
        let mut rows = Vec::new();
        for slot in 0..schedule.slots {
            rows.push((
                slot,
                ledger.take("held", slot).await?,
                ledger.take("naive", slot).await?,
            ));
        }
        Ok::<_, JobError>(rows)
    }
    .await;
    let rows = match outcome {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("nightly job failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!();
    let (slot, held, naive) = ("slot", "hold_at_least = \"2s\"", "on_busy = \"skip\" alone");
    println!("{slot:<6}{held:<36}{naive}");
    for (slot, held, naive) in &rows {
        println!("{slot:<6}{:<36}{}", names(held), names(naive));
    }
    let once = rows.iter().filter(|(_, held, _)| held.len() == 1).count();
    let twice = rows.iter().filter(|(_, _, naive)| naive.len() > 1).count();
    println!();
    println!(
        "with hold_at_least: {once} of {} slots ran exactly once",
        rows.len()
    );
    println!(
        "without: {twice} of {} slots ran more than once (a late timer found the lock free)",
        rows.len()
    );
    if once == rows.len() {
        ExitCode::SUCCESS
    } else {
        eprintln!("a slot did not run exactly once with hold_at_least");
        ExitCode::FAILURE
    }
}
