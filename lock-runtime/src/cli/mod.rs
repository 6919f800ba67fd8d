//! `lockctl`, the operator's command line (feature `cli`):
//!
//! ```text
//! cargo install --path lock-runtime --features cli
//! lockctl [--url URL | --sentinel URL,.. --master NAME | --cluster URL,..] COMMAND
//!
//! lockctl inspect stock:42 [--json]     who holds it, how often, lease left, fair queue
//! lockctl list ['stock:*'] [--json]     every held lock (SCAN; every master of a cluster)
//! lockctl watch stock:42                a live view: each acquire, release and wake-up
//! lockctl force-unlock stock:42 [--yes] free it, wake every waiter (asks first)
//! lockctl schema                        the SQL engines' table, as a statement to run
//! ```
//!
//! `--url` (any engine: `redis://`, `etcd://` with the `etcd` feature,
//! `zk://` with the `zookeeper` feature, `postgres://` with the `postgres`
//! feature, `mysql://` with the `mysql` feature)
//! defaults to `$LOCK_URL`, else `$REDIS_URL`, else `redis://127.0.0.1:6379`.
//! Passwords in URLs are never printed. `inspect --json` prints one object:
//! `{"name", "held"}` and, when held, `"kind"` (`"reentrant"`, `"fair"`,
//! `"read_write"`), `"mode"` (`"read"`/`"write"`, else null), `"holders"`
//! (`[{"id", "count", "write"}]`), `"ttl_ms"` (null: no expiry) and
//! `"queue"` (fair waiters' ids, head first). `list --json` prints an array
//! of such objects. On an error the exit status is 1 and stderr has one
//! line saying why; usage errors exit with 2.
//!
//! `watch` polls the lock (every `--interval-ms`, default 100) and listens
//! to its unlock channels, printing a line per change: a holder that
//! appears or goes, a re-entry, a waiter joining or leaving the fair queue,
//! an unlock message. A hold shorter than the interval that frees the lock
//! shows as its unlock message; one handed straight to the next holder
//! (no message) shows as the change of holder.

mod render;
mod watch;

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::client::LockClient;
use crate::config::Config;
use crate::error::LockError;

#[derive(Parser, Debug)]
#[command(
    name = "lockctl",
    version,
    about = "Inspect, list, watch and force-unlock distributed locks on Redis (Redisson's layout), etcd (etcdctl's) and ZooKeeper (Curator's)"
)]
struct Cli {
    #[command(flatten)]
    connection: Connection,
    #[command(subcommand)]
    command: Command,
}

/// Where the locks are.
#[derive(Args, Debug)]
struct Connection {
    /// The store (redis://, etcd://, zk://, postgres://, mysql://) [default: $LOCK_URL, else $REDIS_URL, else redis://127.0.0.1:6379]
    #[arg(long, value_name = "URL", conflicts_with_all = ["sentinel", "cluster"])]
    url: Option<String>,
    /// Sentinels to ask for the master, comma-separated (with --master)
    #[arg(
        long,
        value_name = "URL,..",
        value_delimiter = ',',
        requires = "master",
        conflicts_with = "cluster"
    )]
    sentinel: Vec<String>,
    /// The master's name known to the sentinels
    #[arg(long, value_name = "NAME", requires = "sentinel")]
    master: Option<String>,
    /// Seed nodes of a Redis Cluster, comma-separated
    #[arg(long, value_name = "URL,..", value_delimiter = ',')]
    cluster: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Who holds a lock: kind, holders and counts, lease left, fair queue
    Inspect {
        /// The lock's name (its Redis key)
        name: String,
        /// One JSON object instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Every held lock whose name matches PATTERN (SCAN; every master of a cluster)
    List {
        /// A glob-style pattern, as Redis SCAN MATCH takes
        #[arg(default_value = "*")]
        pattern: String,
        /// A JSON array instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Follow a lock live: each acquire, release, re-entry and wake-up (Ctrl-C ends)
    Watch {
        /// The lock's name
        name: String,
        /// How often to read the lock, in milliseconds
        #[arg(long, value_name = "MS", default_value_t = 100)]
        interval_ms: u64,
    },
    /// Print the statement that makes the URL's lock table (SQL engines; nothing is connected to)
    Schema,
    /// Free a lock whatever its kind and wake every waiter; its holder loses it
    ForceUnlock {
        /// The lock's name
        name: String,
        /// Do not ask for confirmation
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// lockctl's entry point: parses the arguments, runs the command, and
/// returns the exit status (0 done, 1 failed, 2 bad usage).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start a runtime: {e}")),
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(Failure::Lock(e)) => fail(&e.to_string()),
        Err(Failure::Refused(why)) => fail(&why),
        // The reader went away (`lockctl list | head`): nothing more to say.
        Err(Failure::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Output(e)) => fail(&format!("cannot write the output: {e}")),
    }
}

/// One line on stderr, exit status 1.
fn fail(why: &str) -> ExitCode {
    let line = why.replace('\n', " ");
    eprintln!("lockctl: error: {line}");
    ExitCode::FAILURE
}

enum Failure {
    Lock(LockError),
    Refused(String),
    Output(std::io::Error),
}

impl From<LockError> for Failure {
    fn from(e: LockError) -> Self {
        Failure::Lock(e)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Output(e)
    }
}

impl Connection {
    fn config(&self) -> Result<Config, LockError> {
        if !self.cluster.is_empty() || self.master.is_some() {
            return self.redis_topology();
        }
        let config = match &self.url {
            Some(url) => Config::new(url.clone()),
            None => Config::from_env(),
        };
        if crate::engine::Store::of(&config).is_ok_and(|store| store.in_process()) {
            let scheme = config
                .url()
                .split_once("://")
                .map_or("", |(scheme, _)| scheme);
            return Err(LockError::Config(format!(
                "lockctl cannot reach a {scheme}:// store: its locks live only in the process \
                 whose clients name it (a test's); inspect them there (LockClient::inspect), or \
                 give lockctl the URL of a store with a server"
            )));
        }
        Ok(config)
    }

    /// `--cluster`, or `--sentinel` with `--master`.
    #[cfg(feature = "redis")]
    fn redis_topology(&self) -> Result<Config, LockError> {
        Ok(match &self.master {
            Some(master) if self.cluster.is_empty() => {
                Config::sentinel(self.sentinel.clone(), master.clone())
            }
            _ => Config::cluster(self.cluster.clone()),
        })
    }

    /// `--cluster` and `--sentinel` are Redis's.
    #[cfg(not(feature = "redis"))]
    fn redis_topology(&self) -> Result<Config, LockError> {
        Err(LockError::Config(
            "--sentinel and --cluster need lock-runtime's `redis` feature (a default feature)"
                .into(),
        ))
    }
}

async fn run(cli: Cli) -> Result<ExitCode, Failure> {
    let mut out = std::io::stdout().lock();
    if let Command::Schema = cli.command {
        writeln!(out, "{}", crate::engine::schema(&cli.connection.config()?)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let client = LockClient::connect(cli.connection.config()?).await?;
    match cli.command {
        Command::Schema => {}
        Command::Inspect { name, json } => {
            let info = client.inspect(&name).await?;
            if json {
                writeln!(out, "{}", render::info_json(&name, info.as_ref()))?;
            } else {
                write!(out, "{}", render::info_text(&name, info.as_ref()))?;
            }
        }
        Command::List { pattern, json } => {
            let locks = client.locks(&pattern).await?;
            if json {
                writeln!(out, "{}", render::list_json(&locks))?;
            } else {
                write!(out, "{}", render::list_text(&locks))?;
            }
        }
        Command::Watch { name, interval_ms } => {
            let interval = Duration::from_millis(interval_ms.max(1));
            watch::watch(&client, &name, interval, &mut out).await?;
        }
        Command::ForceUnlock { name, yes } => {
            let Some(info) = client.inspect(&name).await? else {
                writeln!(out, "{name}: not locked; nothing to do")?;
                return Ok(ExitCode::SUCCESS);
            };
            if !yes {
                write!(out, "{}", render::info_text(&name, Some(&info)))?;
                write!(
                    out,
                    "Force-unlock {name}? Its holder loses the lock and every waiter is woken. [y/N] "
                )?;
                out.flush()?;
                let mut answer = String::new();
                std::io::stdin().lock().read_line(&mut answer)?;
                if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES") {
                    return Err(Failure::Refused(format!(
                        "not confirmed; {name} left as it is (--yes skips the question)"
                    )));
                }
            }
            if client.force_unlock(&name).await? {
                writeln!(out, "{name}: force-unlocked; every waiter was woken")?;
            } else {
                writeln!(out, "{name}: was freed meanwhile; nothing to do")?;
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
