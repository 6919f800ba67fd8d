//! Shared helpers of the demos and the benchmarks (the `benches` crate):
//! finding a Redis server to run against (`REDIS_URL`, or a throwaway
//! local `redis-server`), an etcd or a ZooKeeper, a PostgreSQL or a
//! MariaDB (`LOCK_URL`, or a throwaway one), the store a demo runs on and
//! the values it keeps there ([`store`]), and small statistics for the
//! reports.

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
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The Redis server an example runs against. When the example started it
/// itself, dropping this stops it (and so does the example's exit, however it
/// ends: see [`Redis::start_local`]).
pub struct Redis {
    url: String,
    started: Option<Child>,
}

/// Why no Redis server is available; its `Display` says what to do.
#[derive(Debug)]
pub struct NoRedis(String);

impl fmt::Display for NoRedis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoRedis {}

impl Redis {
    /// The server named by `REDIS_URL` when it is set; otherwise a throwaway
    /// `redis-server` started on a free loopback port.
    pub fn from_env_or_start() -> Result<Redis, NoRedis> {
        match std::env::var("REDIS_URL") {
            Ok(url) if !url.trim().is_empty() => Ok(Redis { url, started: None }),
            _ => Redis::start_local(),
        }
    }

    /// Starts a throwaway `redis-server` (no persistence) on a free loopback
    /// port, never 6379. It runs under a small `sh` keeper that stops it when
    /// our end of the keeper's stdin closes: on drop, and also when the
    /// example exits without dropping it (`process::exit`, a panic, Ctrl-C).
    pub fn start_local() -> Result<Redis, NoRedis> {
        match Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(NoRedis(
                    "no Redis server: REDIS_URL is not set and `redis-server` is not installed.\n\
                     Install it (Debian/Ubuntu: `sudo apt-get install redis-server`, \
                     macOS: `brew install redis`) or set REDIS_URL=redis://host:port."
                        .into(),
                ));
            }
            Err(e) => return Err(NoRedis(format!("cannot run redis-server: {e}"))),
        }
        for _ in 0..5 {
            let port = free_port()?;
            if let Some(keeper) = spawn_on(port)? {
                return Ok(Redis {
                    url: format!("redis://127.0.0.1:{port}"),
                    started: Some(keeper),
                });
            }
        }
        Err(NoRedis(
            "redis-server is installed but did not start on a free loopback port".into(),
        ))
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether this process started the server (so nobody else uses it).
    pub fn started_here(&self) -> bool {
        self.started.is_some()
    }

    /// Where the server comes from, for the report (never prints a password).
    pub fn describe(&self) -> String {
        match &self.started {
            Some(_) => format!("throwaway redis-server at {}", self.url),
            None => "the server at REDIS_URL".to_owned(),
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(mut keeper) = self.started.take() {
            // Closing the keeper's stdin makes it stop the server.
            drop(keeper.stdin.take());
            let _ = keeper.wait();
        }
    }
}

/// A loopback port nobody listens on right now, other than 6379, 5432,
/// 3306 and 33060 (real servers' ports we must never touch).
fn free_port() -> Result<u16, NoRedis> {
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| NoRedis(format!("no free loopback port: {e}")))?;
        if ![6379, 5432, 3306, 33060].contains(&port) {
            return Ok(port);
        }
    }
}

/// Starts `redis-server` on `port` under its keeper and waits until it answers
/// `PING`. `None` when it exited (most likely someone took the port meanwhile).
fn spawn_on(port: u16) -> Result<Option<Child>, NoRedis> {
    // The keeper starts the server, waits for end of file on stdin, then stops it.
    const KEEPER: &str =
        r#"redis-server "$@" & server=$!; read _ignored; kill $server 2>/dev/null; wait $server"#;
    let dir = std::env::temp_dir();
    let mut keeper = Command::new("sh")
        .arg("-c")
        .arg(KEEPER)
        .arg("sh")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--logfile", ""])
        .arg("--dir")
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| NoRedis(format!("cannot start redis-server: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = keeper.try_wait() {
            return Ok(None);
        }
        if ping(port) {
            return Ok(Some(keeper));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(keeper.stdin.take());
    let _ = keeper.wait();
    Ok(None)
}

/// Whether a Redis server on `port` answers `PING` (in Redis' inline
/// command form: no client library needed for one probe).
fn ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut conn) = std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200))
    else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
    let mut answer = [0u8; 7];
    conn.write_all(b"PING\r\n").is_ok()
        && conn.read_exact(&mut answer).is_ok()
        && &answer == b"+PONG\r\n"
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
    server: impl FnOnce(&A) -> Result<S, NoRedis>,
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

/// The etcd server an example runs against: `LOCK_URL` when it names one
/// (`etcd://...`), otherwise a throwaway single-member `etcd` on free
/// loopback ports (never 2379/2380), stopped with the example.
pub struct Etcd {
    url: String,
    started: Option<Started>,
}

impl Etcd {
    /// `LOCK_URL` when it is an `etcd://` URL; otherwise a throwaway
    /// server (see [`Etcd`]).
    pub fn from_env_or_start() -> Result<Etcd, NoRedis> {
        match std::env::var("LOCK_URL") {
            Ok(url) if url.starts_with("etcd://") || url.starts_with("etcds://") => {
                Ok(Etcd { url, started: None })
            }
            _ => Etcd::start_local(),
        }
    }

    /// Starts a throwaway `etcd` with its data in a fresh temporary
    /// directory, under a keeper that stops it when our end of its stdin
    /// closes (on drop, or however the example exits).
    pub fn start_local() -> Result<Etcd, NoRedis> {
        const KEEPER: &str =
            r#"etcd "$@" & server=$!; read _ignored; kill $server 2>/dev/null; wait $server"#;
        for attempt in 0..5 {
            let (client, peer) = (free_port()?, free_port()?);
            let dir = std::env::temp_dir().join(format!(
                "lock-example-etcd-{}-{attempt}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            let client_url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let keeper = Command::new("sh")
                .arg("-c")
                .arg(KEEPER)
                .arg("sh")
                .args(["--name", "example", "--data-dir"])
                .arg(&dir)
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("example={peer_url}")])
                .args([
                    "--logger",
                    "zap",
                    "--log-outputs",
                    "stderr",
                    "--log-level",
                    "error",
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let mut keeper = match keeper {
                Ok(keeper) => keeper,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(NoRedis("no etcd: LOCK_URL names none and `etcd` is not installed (Debian/Ubuntu: `sudo apt-get install etcd-server`; or run tools/setup.sh)".into()));
                }
                Err(e) => return Err(NoRedis(format!("cannot start etcd: {e}"))),
            };
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = keeper.try_wait() {
                    break;
                }
                let healthy = Command::new("etcdctl")
                    .args(["--endpoints", &client_url, "endpoint", "health"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if healthy {
                    return Ok(Etcd {
                        url: format!("etcd://127.0.0.1:{client}"),
                        started: Some(Started { keeper, dir }),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            drop(keeper.stdin.take());
            let _ = keeper.wait();
            let _ = std::fs::remove_dir_all(&dir);
        }
        Err(NoRedis(
            "etcd is installed but did not start on free loopback ports".into(),
        ))
    }

    /// The server's URL (`etcd://127.0.0.1:port`).
    pub fn url(&self) -> &str {
        &self.url
    }

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

    /// Where the server comes from, for the report.
    pub fn describe(&self) -> String {
        match &self.started {
            Some(_) => format!("throwaway etcd at {}", self.url),
            None => "the etcd at LOCK_URL".to_owned(),
        }
    }
}

/// The ZooKeeper server an example runs against: `LOCK_URL` when it names
/// one (`zk://...`), otherwise a throwaway standalone server (the system's
/// `zookeeper` package, run from its jars) on a free loopback port (never
/// 2181), stopped with the example.
pub struct ZooKeeper {
    url: String,
    started: Option<Started>,
}

/// The jars a standalone server runs from (Debian's `zookeeper` package;
/// their manifests name the rest).
const ZOOKEEPER_JARS: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:\
                              /usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar";

impl ZooKeeper {
    /// `LOCK_URL` when it is a `zk://` URL; otherwise a throwaway server
    /// (see [`ZooKeeper`]).
    pub fn from_env_or_start() -> Result<ZooKeeper, NoRedis> {
        match std::env::var("LOCK_URL") {
            Ok(url) if url.starts_with("zk://") => Ok(ZooKeeper { url, started: None }),
            _ => ZooKeeper::start_local(),
        }
    }

    /// Starts a throwaway standalone server with its data in a fresh
    /// temporary directory, under a keeper that stops it when our end of
    /// its stdin closes (on drop, or however the example exits).
    pub fn start_local() -> Result<ZooKeeper, NoRedis> {
        const KEEPER: &str =
            r#"java "$@" & server=$!; read _ignored; kill $server 2>/dev/null; wait $server"#;
        if !std::path::Path::new("/usr/share/java/zookeeper.jar").exists() {
            return Err(NoRedis("no ZooKeeper: LOCK_URL names none and the `zookeeper` package is not installed (Debian/Ubuntu: `sudo apt-get install zookeeper`; or run tools/setup.sh)".into()));
        }
        let jars: String = ZOOKEEPER_JARS.split_whitespace().collect();
        for attempt in 0..5 {
            let port = free_port()?;
            let dir = std::env::temp_dir()
                .join(format!("lock-example-zk-{}-{attempt}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("data"))
                .map_err(|e| NoRedis(format!("cannot make {}: {e}", dir.display())))?;
            let config = dir.join("zoo.cfg");
            let settings = format!(
                "tickTime=500\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
                 admin.enableServer=false\n4lw.commands.whitelist=ruok\nmaxClientCnxns=0\n\
                 minSessionTimeout=1000\nmaxSessionTimeout=60000\n",
                dir.join("data").display()
            );
            std::fs::write(&config, settings)
                .map_err(|e| NoRedis(format!("cannot write {}: {e}", config.display())))?;
            let keeper = Command::new("sh")
                .arg("-c")
                .arg(KEEPER)
                .arg("sh")
                .args(["-Xms64m", "-Xmx512m", "-cp", &jars])
                .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
                .arg(&config)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let mut keeper = match keeper {
                Ok(keeper) => keeper,
                Err(e) => {
                    return Err(NoRedis(format!(
                        "cannot start ZooKeeper (is java installed?): {e}"
                    )));
                }
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = keeper.try_wait() {
                    break;
                }
                if ruok(port) {
                    return Ok(ZooKeeper {
                        url: format!("zk://127.0.0.1:{port}/locks"),
                        started: Some(Started { keeper, dir }),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            drop(keeper.stdin.take());
            let _ = keeper.wait();
            let _ = std::fs::remove_dir_all(&dir);
        }
        Err(NoRedis(
            "ZooKeeper is installed but did not start on a free loopback port".into(),
        ))
    }

    /// The server's URL (`zk://127.0.0.1:port/locks`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The connect string (`127.0.0.1:port`), as ZooKeeper's own clients
    /// write it.
    pub fn connect_string(&self) -> String {
        let rest = self.url.trim_start_matches("zk://");
        let hosts = rest.split('/').next().unwrap_or_default();
        hosts.rsplit_once('@').map_or(hosts, |(_, h)| h).to_owned()
    }

    /// Where the server comes from, for the report.
    pub fn describe(&self) -> String {
        match &self.started {
            Some(_) => format!("throwaway ZooKeeper at {}", self.url),
            None => "the ZooKeeper at LOCK_URL".to_owned(),
        }
    }
}

/// Whether a ZooKeeper server on `port` answers `ruok` with `imok`.
fn ruok(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
    let mut answer = String::new();
    conn.write_all(b"ruok").is_ok() && conn.read_to_string(&mut answer).is_ok() && answer == "imok"
}

/// A throwaway server an example started: its keeper (which stops the
/// server once its stdin closes) and its directory, both gone when dropped.
struct Started {
    keeper: Child,
    dir: std::path::PathBuf,
}

impl Drop for Started {
    fn drop(&mut self) {
        drop(self.keeper.stdin.take());
        let _ = self.keeper.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The PostgreSQL server an example runs against: `LOCK_URL` when it names
/// one (`postgres://...` or `postgresql://...`), otherwise a throwaway
/// cluster on a free loopback port (never 5432), stopped with the example.
///
/// The throwaway cluster is the system's `postgresql` package, as the tests
/// start it (`tests/src/postgres.rs`): `initdb` and `postgres` from the
/// newest `/usr/lib/postgresql/<version>/bin`, its data, socket and log in
/// a fresh temporary directory; as root they run as the `postgres` user
/// (through `setpriv`, which `exec`s them, so the keeper signals the server
/// itself). Durability is off ([`PG_SETTINGS`]); the superuser `postgres`
/// connects over TCP with a password made for the run.
pub struct Postgres {
    url: String,
    started: Option<Started>,
}

/// The throwaway cluster's settings (appended to its `postgresql.conf`):
/// the tests' servers' durability (none: a benchmark's rows need not
/// survive a crash of the machine), and room for the benchmark's clients.
pub const PG_SETTINGS: &str = "
listen_addresses = '127.0.0.1'
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 64MB
max_connections = 100
logging_collector = off
";

impl Postgres {
    /// `LOCK_URL` when it is a `postgres://` (or `postgresql://`) URL;
    /// otherwise a throwaway server (see [`Postgres`]).
    pub fn from_env_or_start() -> Result<Postgres, NoRedis> {
        match std::env::var("LOCK_URL") {
            Ok(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(Postgres { url, started: None })
            }
            _ => Postgres::start_local(),
        }
    }

    /// Makes a cluster with `initdb` in a fresh temporary directory and
    /// starts it under a keeper that stops it (a fast shutdown) when our
    /// end of its stdin closes (on drop, or however the example exits).
    pub fn start_local() -> Result<Postgres, NoRedis> {
        const KEEPER: &str =
            r#""$@" & server=$!; read _ignored; kill -INT $server 2>/dev/null; wait $server"#;
        let bin = postgres_bin()?;
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
        // As root, initdb and postgres refuse to run: `postgres` runs them.
        let as_server = |program: &str| -> Vec<std::ffi::OsString> {
            let mut argv: Vec<std::ffi::OsString> = Vec::new();
            if root {
                let setpriv = ["setpriv", "--reuid", "postgres", "--regid", "postgres"];
                argv.extend(setpriv.map(Into::into));
                argv.extend(["--init-groups", "--"].map(Into::into));
            }
            argv.push(bin.join(program).into_os_string());
            argv
        };
        let dir = std::env::temp_dir().join(format!("lock-example-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cleanup = |e: String| {
            let _ = std::fs::remove_dir_all(&dir);
            NoRedis(e)
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| NoRedis(format!("cannot make {}: {e}", dir.display())))?;
        let password = format!(
            "bench{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        std::fs::write(dir.join("pw"), &password).map_err(|e| cleanup(format!("pw: {e}")))?;
        if root {
            let owned = Command::new("chown")
                .arg("postgres:")
                .arg(&dir)
                .status()
                .is_ok_and(|s| s.success());
            if !owned {
                return Err(cleanup(format!(
                    "cannot give {} to the `postgres` user (as root, PostgreSQL runs as it)",
                    dir.display()
                )));
            }
        }
        let initdb = as_server("initdb");
        let out = Command::new(&initdb[0])
            .args(&initdb[1..])
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"])
            .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
            .arg(format!("--pwfile={}", dir.join("pw").display()))
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| cleanup(format!("initdb does not run: {e}")))?;
        if !out.status.success() {
            return Err(cleanup(format!(
                "initdb failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("data").join("postgresql.conf"))
            .and_then(|mut conf| std::io::Write::write_all(&mut conf, PG_SETTINGS.as_bytes()))
            .map_err(|e| cleanup(format!("postgresql.conf: {e}")))?;
        for _ in 0..5 {
            let port = free_port()?;
            let keeper = Command::new("sh")
                .arg("-c")
                .arg(KEEPER)
                .arg("sh")
                .args(as_server("postgres"))
                .arg("-D")
                .arg(dir.join("data"))
                .args(["-p", &port.to_string(), "-k"])
                .arg(&dir)
                .current_dir(&dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let mut keeper = keeper.map_err(|e| cleanup(format!("cannot start postgres: {e}")))?;
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = keeper.try_wait() {
                    break;
                }
                let ready = Command::new(bin.join("pg_isready"))
                    .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if ready {
                    return Ok(Postgres {
                        url: format!("postgres://postgres:{password}@127.0.0.1:{port}/postgres"),
                        started: Some(Started {
                            keeper,
                            dir: dir.clone(),
                        }),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            drop(keeper.stdin.take());
            let _ = keeper.wait();
        }
        Err(cleanup(
            "PostgreSQL is installed but did not start on a free loopback port".into(),
        ))
    }

    /// The server's URL (`postgres://user:password@host:port/database`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where the server comes from, for the report (never the password).
    pub fn describe(&self) -> String {
        match &self.started {
            Some(_) => {
                let at = self.url.rsplit_once('@').map_or("", |(_, at)| at);
                format!("throwaway PostgreSQL at {at} (fsync off)")
            }
            None => "the PostgreSQL at LOCK_URL".to_owned(),
        }
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin` that holds `initdb` and
/// `postgres` (Debian keeps them off the `PATH`).
fn postgres_bin() -> Result<std::path::PathBuf, NoRedis> {
    let mut found: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry
                .file_name()
                .to_str()?
                .split('.')
                .next()?
                .parse()
                .ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").is_file() && bin.join("postgres").is_file())
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).ok_or_else(|| {
        NoRedis("no PostgreSQL: LOCK_URL names none and initdb/postgres are not under /usr/lib/postgresql/*/bin (Debian/Ubuntu: `sudo apt-get install postgresql`; or run tools/setup.sh)".into())
    })
}

/// The MySQL/MariaDB server an example runs against: `LOCK_URL` when it
/// names one (`mysql://...` or `mariadb://...`), otherwise a throwaway
/// MariaDB on a free loopback port (never 3306), stopped with the example.
///
/// The throwaway server is the system's `mariadb-server` package, as the
/// tests start it (`tests/src/mariadb.rs`): `mariadb-install-db` makes the
/// database `locks` and the user `bench` (a password made for the run) in
/// a fresh temporary directory, then `mariadbd --no-defaults` (the
/// system's `/etc/mysql` never read) serves it there, its socket and pid
/// file in that directory too; as root both run with `--user=root`.
/// Durability is relaxed ([`MARIADB_SETTINGS`]).
pub struct MariaDb {
    url: String,
    started: Option<Started>,
}

/// The throwaway server's options (its bootstrap's too): the tests'
/// servers' (durability relaxed, no binary log, small buffers).
pub const MARIADB_SETTINGS: &[&str] = &[
    "--skip-name-resolve",
    "--skip-log-bin",
    "--character-set-server=utf8mb4",
    "--innodb-buffer-pool-size=64M",
    "--innodb-log-file-size=16M",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
    "--innodb-use-native-aio=0",
    "--innodb-buffer-pool-dump-at-shutdown=0",
    "--innodb-buffer-pool-load-at-startup=0",
];

impl MariaDb {
    /// `LOCK_URL` when it is a `mysql://` (or `mariadb://`) URL; otherwise
    /// a throwaway server (see [`MariaDb`]).
    pub fn from_env_or_start() -> Result<MariaDb, NoRedis> {
        match std::env::var("LOCK_URL") {
            Ok(url) if url.starts_with("mysql://") || url.starts_with("mariadb://") => {
                Ok(MariaDb { url, started: None })
            }
            _ => MariaDb::start_local(),
        }
    }

    /// Makes a data directory with `mariadb-install-db` in a fresh
    /// temporary directory and starts `mariadbd` on it under a keeper that
    /// stops it (`SIGTERM`, a clean shutdown) when our end of its stdin
    /// closes (on drop, or however the example exits).
    pub fn start_local() -> Result<MariaDb, NoRedis> {
        const KEEPER: &str =
            r#""$@" & server=$!; read _ignored; kill $server 2>/dev/null; wait $server"#;
        let find = |names: &[&str]| {
            ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]
                .iter()
                .flat_map(|dir| names.iter().map(move |n| std::path::Path::new(dir).join(n)))
                .find(|path| path.is_file())
                .ok_or_else(|| NoRedis(format!("no MariaDB: LOCK_URL names none and `{}` is not installed (Debian/Ubuntu: `sudo apt-get install mariadb-server`; or run tools/setup.sh)", names[0])))
        };
        let (install_db, server) = (
            find(&["mariadb-install-db", "mysql_install_db"])?,
            find(&["mariadbd", "mysqld"])?,
        );
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
        let dir = std::env::temp_dir().join(format!("lock-example-mariadb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cleanup = |e: String| {
            let _ = std::fs::remove_dir_all(&dir);
            NoRedis(e)
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| NoRedis(format!("cannot make {}: {e}", dir.display())))?;
        let password = format!(
            "bench{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        // Its bootstrap runs without the grant tables loaded, where CREATE
        // USER fails: FLUSH PRIVILEGES loads them first.
        let setup = format!(
            "FLUSH PRIVILEGES;\nCREATE DATABASE locks CHARACTER SET utf8mb4;\n\
             CREATE USER 'bench'@'%' IDENTIFIED BY '{password}';\n\
             GRANT ALL PRIVILEGES ON locks.* TO 'bench'@'%';\n"
        );
        std::fs::write(dir.join("setup.sql"), setup).map_err(|e| cleanup(format!("setup: {e}")))?;
        let user = root.then_some("--user=root");
        let out = Command::new(&install_db)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .args(user)
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .arg(format!("--extra-file={}", dir.join("setup.sql").display()))
            .arg(format!("--tmpdir={}", dir.display()))
            .args(MARIADB_SETTINGS)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| cleanup(format!("mariadb-install-db does not run: {e}")))?;
        if !out.status.success() {
            return Err(cleanup(format!(
                "mariadb-install-db failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        for _ in 0..5 {
            let port = free_port()?;
            let keeper = Command::new("sh")
                .arg("-c")
                .arg(KEEPER)
                .arg("sh")
                .arg(&server)
                // `--no-defaults` must come first.
                .arg("--no-defaults")
                .args(user)
                .arg(format!("--datadir={}", dir.join("data").display()))
                .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
                .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
                .arg(format!("--tmpdir={}", dir.display()))
                .args([format!("--port={port}"), "--bind-address=127.0.0.1".into()])
                .args(MARIADB_SETTINGS)
                .current_dir(&dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let mut keeper = keeper.map_err(|e| cleanup(format!("cannot start mariadbd: {e}")))?;
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = keeper.try_wait() {
                    break;
                }
                if greets(port) {
                    return Ok(MariaDb {
                        url: format!("mysql://bench:{password}@127.0.0.1:{port}/locks"),
                        started: Some(Started {
                            keeper,
                            dir: dir.clone(),
                        }),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            drop(keeper.stdin.take());
            let _ = keeper.wait();
        }
        Err(cleanup(
            "MariaDB is installed but did not start on a free loopback port".into(),
        ))
    }

    /// The server's URL (`mysql://user:password@host:port/database`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where the server comes from, for the report (never the password).
    pub fn describe(&self) -> String {
        match &self.started {
            Some(_) => {
                let at = self.url.rsplit_once('@').map_or("", |(_, at)| at);
                format!("throwaway MariaDB at {at} (flush at commit off)")
            }
            None => "the MySQL/MariaDB at LOCK_URL".to_owned(),
        }
    }
}

/// Whether a MySQL server on `port` greets a connection (protocol 10):
/// it listens once it is ready.
fn greets(port: u16) -> bool {
    use std::io::Read;
    let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
    let mut head = [0u8; 5];
    conn.read_exact(&mut head).is_ok() && head[4] == 10
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
