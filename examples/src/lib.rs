//! Shared helpers of the demos and the benchmarks (the `benches` crate):
//! finding a Redis server to run against (`REDIS_URL`, or a throwaway
//! local `redis-server`), an etcd or a ZooKeeper, a PostgreSQL or a
//! MariaDB (`LOCK_URL`, or a throwaway one: the servers of the workspace's
//! one harness, the `servers` crate, that the tests start too), the store
//! a demo runs on and the values it keeps there ([`store`]), and small
//! statistics for the reports.

#[cfg(not(any(
    feature = "redis",
    feature = "etcd",
    feature = "zookeeper",
    feature = "postgres",
    feature = "mysql"
)))]
compile_error!(
    "the examples need an engine feature: redis (the default), etcd, zookeeper, postgres, \
     mysql, or all"
);

pub mod store;
use std::fmt;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Why no server is available; its `Display` says what to do.
#[derive(Debug)]
pub struct NoServer(pub String);

impl fmt::Display for NoServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoServer {}

/// A throwaway server of the workspace's harness (the `servers` crate, the
/// tests' own servers): what a demo needs to know of it.
pub trait Throwaway: Sized {
    /// The server's name in a report (`"redis-server"`, `"etcd"`, ...).
    const NAME: &'static str;
    /// The environment variable that names a server of the user's instead.
    const ENV: &'static str;
    /// The URL schemes a server of that variable may have.
    const SCHEMES: &'static [&'static str];
    /// What the report adds of its settings (`" (fsync off)"`).
    const NOTE: &'static str = "";
    /// Starts one on a free loopback port, or says why not.
    fn start() -> Result<Self, String>;
    /// The URL a lock client connects with.
    fn url(&self) -> String;
}

impl Throwaway for servers::Redis {
    const NAME: &'static str = "redis-server";
    const ENV: &'static str = "REDIS_URL";
    const SCHEMES: &'static [&'static str] = &[""];
    fn start() -> Result<Self, String> {
        servers::Redis::try_start_with(&[])
    }
    fn url(&self) -> String {
        servers::Redis::url(self)
    }
}

impl Throwaway for servers::etcd::Etcd {
    const NAME: &'static str = "etcd";
    const ENV: &'static str = "LOCK_URL";
    const SCHEMES: &'static [&'static str] = &["etcd://", "etcds://"];
    fn start() -> Result<Self, String> {
        servers::etcd::Etcd::try_start()
    }
    fn url(&self) -> String {
        servers::etcd::Etcd::url(self)
    }
}

impl Throwaway for servers::zookeeper::ZooKeeper {
    const NAME: &'static str = "ZooKeeper";
    const ENV: &'static str = "LOCK_URL";
    const SCHEMES: &'static [&'static str] = &["zk://"];
    fn start() -> Result<Self, String> {
        servers::zookeeper::ZooKeeper::try_start()
    }
    fn url(&self) -> String {
        servers::zookeeper::ZooKeeper::url(self)
    }
}

impl Throwaway for servers::postgres::Postgres {
    const NAME: &'static str = "PostgreSQL";
    const ENV: &'static str = "LOCK_URL";
    const SCHEMES: &'static [&'static str] = &["postgres://", "postgresql://"];
    const NOTE: &'static str = " (fsync off)";
    fn start() -> Result<Self, String> {
        servers::postgres::Postgres::try_start()
    }
    fn url(&self) -> String {
        servers::postgres::Postgres::url(self)
    }
}

impl Throwaway for servers::mariadb::MariaDb {
    const NAME: &'static str = "MariaDB";
    const ENV: &'static str = "LOCK_URL";
    const SCHEMES: &'static [&'static str] = &["mysql://", "mariadb://"];
    const NOTE: &'static str = " (flush at commit off)";
    fn start() -> Result<Self, String> {
        servers::mariadb::MariaDb::try_start()
    }
    fn url(&self) -> String {
        servers::mariadb::MariaDb::url(self)
    }
}

/// The server an example runs against: the one its environment variable
/// names (`REDIS_URL` for Redis, `LOCK_URL` of the server's scheme for
/// the others), otherwise a throwaway one on a free loopback port (never a
/// server's default port), stopped when this is dropped, and also however
/// the example exits (`process::exit`, a panic, Ctrl-C: see `servers`).
pub struct Found<S> {
    url: String,
    started: Option<S>,
}

/// The Redis server an example runs against.
pub type Redis = Found<servers::Redis>;
/// The etcd server an example runs against.
pub type Etcd = Found<servers::etcd::Etcd>;
/// The ZooKeeper server an example runs against.
pub type ZooKeeper = Found<servers::zookeeper::ZooKeeper>;
/// The PostgreSQL server an example runs against (a throwaway one's
/// database `locks`, as its user `app`).
pub type Postgres = Found<servers::postgres::Postgres>;
/// The MySQL or MariaDB server an example runs against (a throwaway one's
/// database `locks`, as its user `app`).
pub type MariaDb = Found<servers::mariadb::MariaDb>;

impl<S: Throwaway> Found<S> {
    /// The server the environment names, else a throwaway one (see
    /// [`Found`]).
    pub fn from_env_or_start() -> Result<Self, NoServer> {
        match std::env::var(S::ENV) {
            Ok(url)
                if !url.trim().is_empty()
                    && S::SCHEMES.iter().any(|scheme| url.starts_with(scheme)) =>
            {
                Ok(Found { url, started: None })
            }
            _ => Self::start_local(),
        }
    }

    /// A throwaway server, whatever the environment says.
    pub fn start_local() -> Result<Self, NoServer> {
        let server = S::start()
            .map_err(|e| NoServer(format!("no {} ({} names none): {e}", S::NAME, S::ENV)))?;
        Ok(Found {
            url: server.url(),
            started: Some(server),
        })
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether this process started the server (so nobody else uses it).
    pub fn started_here(&self) -> bool {
        self.started.is_some()
    }

    /// Where the server comes from, for the report (never a password).
    pub fn describe(&self) -> String {
        match &self.started {
            Some(_) => {
                let at = self
                    .url
                    .rsplit_once('@')
                    .map_or(self.url.as_str(), |(_, at)| at);
                format!("throwaway {} at {at}{}", S::NAME, S::NOTE)
            }
            None => format!("the {} at {}", S::NAME, S::ENV),
        }
    }
}

impl Etcd {
    /// The first endpoint as etcd's own clients write it (`http://host:port`).
    pub fn endpoint(&self) -> String {
        let hosts = self.url.split_once("://").map_or("", |(_, rest)| rest);
        let first = hosts
            .split(',')
            .next()
            .unwrap_or_default()
            .trim_end_matches('/');
        let first = first.rsplit_once('@').map_or(first, |(_, host)| host);
        format!("http://{first}")
    }
}

impl ZooKeeper {
    /// The connect string (`127.0.0.1:port`), as ZooKeeper's own clients
    /// write it.
    pub fn connect_string(&self) -> String {
        let rest = self.url.trim_start_matches("zk://");
        let hosts = rest.split('/').next().unwrap_or_default();
        hosts.rsplit_once('@').map_or(hosts, |(_, h)| h).to_owned()
    }
}

/// The start of an example's `main`: its arguments and the Redis server to
/// run against. `parse` returns an empty error for `--help`: then the usage
/// is printed and the example ends successfully; any other error is printed
/// with the usage, and the example ends with the exit code returned here.
pub fn start<A>(
    parse: impl FnOnce() -> Result<A, String>,
    usage: &str,
) -> Result<(A, Redis), ExitCode> {
    start_with(parse, usage, |_| Redis::from_env_or_start())
}

/// [`start`] with another server than Redis: the one `server` finds or
/// starts for the arguments (its error is printed, and the example ends
/// with a failure).
pub fn start_with<A, S>(
    parse: impl FnOnce() -> Result<A, String>,
    usage: &str,
    server: impl FnOnce(&A) -> Result<S, NoServer>,
) -> Result<(A, S), ExitCode> {
    let args = match parse() {
        Ok(args) => args,
        Err(e) if e.is_empty() => {
            println!("{usage}");
            return Err(ExitCode::SUCCESS);
        }
        Err(e) => {
            eprintln!("{e}\n{usage}");
            return Err(ExitCode::from(2));
        }
    };
    match server(&args) {
        Ok(server) => Ok((args, server)),
        Err(e) => {
            eprintln!("{e}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// What a crowd of buyer tasks reported: each returns the units it bought
/// and the error that stopped it, if any.
#[derive(Debug, Default)]
pub struct Tally {
    /// Units bought in all.
    pub sold: u64,
    /// Buyers stopped by an error.
    pub errors: u64,
    /// The first of those errors.
    pub first_error: Option<String>,
}

impl Tally {
    /// Waits for every buyer and adds up their reports.
    pub async fn of<E: fmt::Display + 'static>(
        mut buyers: tokio::task::JoinSet<(u64, Option<E>)>,
    ) -> Tally {
        let mut tally = Tally::default();
        while let Some(joined) = buyers.join_next().await {
            let (bought, error) = joined.expect("a buyer task panicked");
            tally.sold += bought;
            if let Some(e) = error {
                tally.errors += 1;
                tally.first_error.get_or_insert_with(|| e.to_string());
            }
        }
        tally
    }
}

/// Operations per second for `ops` operations taking `elapsed`.
pub fn per_second(ops: u64, elapsed: Duration) -> f64 {
    ops as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
}

/// The `p`-th percentile (0..=100) of `samples`, nearest rank. Sorts them.
/// `Duration::ZERO` when there are none.
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// The median of `values` (0 when there are none).
pub fn median(values: &[f64]) -> f64 {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The value of the command-line flag `name`: the next argument, a number
/// above zero. The error says which flag and what was wrong.
pub fn positive<T>(args: &mut impl Iterator<Item = String>, name: &str) -> Result<T, String>
where
    T: std::str::FromStr + Default + PartialOrd,
{
    let v = args.next().ok_or(format!("{name} needs a value"))?;
    match v.parse::<T>() {
        Ok(n) if n > T::default() => Ok(n),
        _ => Err(format!("{name}: expected a positive number, got {v:?}")),
    }
}

/// The end of a drain row: awaits the `waiters`, then the `releases` that
/// let them in; how long the waiters took from `released`.
pub async fn drained<E, F>(
    released: Instant,
    waiters: Vec<tokio::task::JoinHandle<Result<(), E>>>,
    releases: Vec<tokio::task::JoinHandle<Result<(), F>>>,
) -> Result<Duration, E>
where
    E: From<F> + From<tokio::task::JoinError>,
{
    for waiter in waiters {
        waiter.await??;
    }
    let drained = released.elapsed();
    for release in releases {
        release.await??;
    }
    Ok(drained)
}

/// Spawns `n` tasks on the current runtime that each take and give back
/// lock `names[i % names.len()]` on `client` (the drain rows' waiters),
/// counting in `started` those that began.
pub fn spawn_waiters<E>(
    client: &lock_runtime::LockClient,
    names: &[String],
    n: usize,
    started: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<Result<(), E>>>
where
    E: From<lock_runtime::LockError> + Send + 'static,
{
    (0..n)
        .map(|w| {
            let name = names[w % names.len()].clone();
            let (client, started) = (client.clone(), started.clone());
            tokio::spawn(async move {
                started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                client.lock(name).acquire().await?.release().await?;
                Ok(())
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let mut samples: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        assert_eq!(percentile(&mut samples, 50.0), Duration::from_micros(50));
        assert_eq!(percentile(&mut samples, 99.0), Duration::from_micros(99));
        assert_eq!(percentile(&mut samples, 100.0), Duration::from_micros(100));
        assert_eq!(percentile(&mut [], 50.0), Duration::ZERO);
    }
}
