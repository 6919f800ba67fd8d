//! Real PostgreSQL servers on loopback, started and stopped by the tests
//! ([`Postgres`]), plus `psql` as a second client independent of the engine
//! under test ([`Postgres::sql`], [`Postgres::sql_as`]), the way the etcd
//! tests use `etcdctl`. Never the machine's 5432 (a system service may run
//! there): every port is a free one, and the system's clusters, their
//! configuration and `/var/run/postgresql` are never used.
//!
//! The servers are Debian's `postgresql` package: `initdb` and `postgres`
//! from `/usr/lib/postgresql/<version>/bin` (the newest version installed;
//! `tools/setup.sh` installs it). `initdb` runs once per test process, into
//! a template directory that every server copies, with the roles and the
//! database already made:
//!
//! - the database `locks`, owned by `app` (password `secret`), who may create
//!   tables in its schema `public`;
//! - `reader` (password `secret`), who may connect to `locks` and use
//!   `public`, and read and write the tables (and use the sequences) `app`
//!   creates there, but may create neither tables nor temporary tables: a
//!   role without `CREATE`;
//! - the superuser `postgres`, without a password over the server's unix
//!   socket (in its temp directory), which [`Postgres::sql`] uses. Over TCP
//!   every role needs its password (`scram-sha-256`).
//!
//! The server's `timezone` (and its process's `TZ`) is [`TIME_ZONE`],
//! `Asia/Kathmandu` (UTC+05:45, no daylight saving): neither UTC nor a
//! whole number of hours off it, so that a slip between local time and UTC
//! shows in the tests. Durability is off (`fsync`, `synchronous_commit`,
//! `full_page_writes`): a server keeps its data across [`Postgres::stop`]
//! and [`Postgres::restart`] (a clean shutdown), not across a crash of the
//! machine.
//!
//! As root, `initdb` and `postgres` refuse to run: they then run as the
//! `postgres` system user (through `setpriv`, which `exec`s the server
//! itself, so that the keeper below signals the server and not a wrapper),
//! and each server's directory belongs to that user. Otherwise they run as
//! the current user.
//!
//! Every server is a [`SqlServer`] (see [`crate::sql_server`] for what all
//! the SQL servers share) and runs under a small `sh` keeper (like
//! [`crate::Redis`] and [`crate::etcd`]) that shuts it down (`SIGINT`: a fast shutdown, which
//! disconnects the clients and keeps the data; `SIGKILL` if it is still
//! there 30 s later) as soon as the test process's end of the keeper's stdin
//! closes: when the harness stops it, and also when the test process dies
//! without dropping it. Each server's data, socket and log live in a fresh
//! directory under the system's temp dir, removed on drop. The template is
//! removed when the test process ends (by a shell that waits for that the
//! keeper's way); directories that a killed test process left behind are
//! removed when the next one builds its template.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::sql_server::{self, Database, SqlServer};

/// The server's time zone (`timezone`, `log_timezone`, and its process's
/// `TZ`): UTC+05:45 all year.
pub const TIME_ZONE: &str = "Asia/Kathmandu";

/// How far [`TIME_ZONE`]'s local time is ahead of UTC, in seconds (5 h 45 min).
pub const UTC_OFFSET_SECONDS: i64 = 5 * 3600 + 45 * 60;

/// A PostgreSQL server owned by a test, on a free loopback port, with the
/// database `locks` and the roles `app` and `reader` (see the
/// [module](self)). Shut down, and its directory removed, when dropped.
///
/// [`stop`](SqlServer::stop) is a fast shutdown (`SIGINT`: it aborts open
/// transactions and disconnects every client); [`sql`](SqlServer::sql) runs
/// `psql` as `postgres` (unaligned, tuples only: columns separated by `|`;
/// `ON_ERROR_STOP`), and [`sql_as`](SqlServer::sql_as)'s error for
/// `reader`'s `CREATE TABLE` is `ERROR:  permission denied for schema
/// public`; [`dir`](SqlServer::dir) holds `data`, the unix socket
/// (`.s.PGSQL.<port>`) and the log (`postgres.log`).
pub type Postgres = SqlServer<Pg>;

/// PostgreSQL's specifics for [`SqlServer`]: see the [module](self).
pub struct Pg;

impl Database for Pg {
    const NAME: &'static str = "PostgreSQL";
    const SERVER: &'static str = "postgres";
    const CLI: &'static str = "psql";
    const SUPERUSER: &'static str = "postgres";
    const SCHEME: &'static str = "postgres";
    const ENGINE: &'static str = "postgres";
    const UTC_NOW: &'static str = "timezone('utc', clock_timestamp())";
    const DEFAULT_PORTS: &'static [u16] = &[5432];
    const DIR_PREFIX: &'static str = "lock-tests-postgres-";
    const LOG: &'static str = "postgres.log";
    const PID_FILE: &'static str = "data/postmaster.pid";
    const STOP_SIGNAL: &'static str = "INT";
    const PROCESS_TZ: &'static str = TIME_ZONE;

    fn installed() -> Result<(), String> {
        sql_server::found(&INSTALL, find_install).map(|_| ())
    }

    /// `initdb`, [`SETTINGS`], then one start to run [`SETUP`].
    fn fill_template(dir: &Path) -> Result<PathBuf, String> {
        make_template(dir)
    }

    /// Hands `dir` to the server's user (as root; otherwise it is ours
    /// already): the template's copy keeps its owner.
    fn prepare_dir(dir: &Path) -> Result<(), String> {
        give_to_server_user(dir)
    }

    fn server_argv(dir: &Path, port: u16) -> Vec<OsString> {
        let mut argv = server_argv("postgres");
        argv.extend(["-D".into(), dir.join("data").into_os_string()]);
        argv.extend(["-p".into(), port.to_string().into()]);
        argv.extend(["-k".into(), dir.as_os_str().to_owned()]);
        argv.extend(["-c", "listen_addresses=127.0.0.1"].map(OsString::from));
        argv
    }

    /// `pg_isready` on the server's own unix socket.
    fn ready(dir: &Path, port: u16) -> bool {
        Command::new(client_program("pg_isready"))
            .arg("-q")
            .arg("-h")
            .arg(dir)
            .args(["-p", &port.to_string(), "-U", "postgres", "-d", "postgres"])
            .args(["-t", "5"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn superuser_cli(dir: &Path, port: u16) -> Command {
        let mut psql = psql_command();
        psql.arg("-h")
            .arg(dir)
            .args(["-p", &port.to_string(), "-U", "postgres", "-d", "locks"]);
        psql
    }

    fn user_cli(port: u16, user: &str, password: &str) -> Command {
        let mut psql = psql_command();
        psql.args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-U", user, "-d", "locks"])
            .env("PGPASSWORD", password);
        psql
    }
}

/// The system user the server runs as when the tests run as root.
const SERVER_USER: &str = "postgres";

/// The settings every server shares, appended to the template's
/// `postgresql.conf`. The port and the socket directory are given on each
/// server's command line.
const SETTINGS: &str = "
# lock-tests: a throwaway server on loopback (tests/src/postgres.rs).
listen_addresses = '127.0.0.1'
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = minimal
max_wal_senders = 0
min_wal_size = 4MB
max_wal_size = 64MB
shared_buffers = 16MB
max_connections = 100
timezone = 'Asia/Kathmandu'
log_timezone = 'Asia/Kathmandu'
logging_collector = off
log_line_prefix = '%m [%p] '
";

/// Run once, by the superuser, on the template's server.
const SETUP: &str = r"
CREATE ROLE app LOGIN PASSWORD 'secret';
CREATE ROLE reader LOGIN PASSWORD 'secret';
CREATE DATABASE locks OWNER app;
\connect locks
REVOKE ALL ON DATABASE locks FROM PUBLIC;
GRANT CONNECT ON DATABASE locks TO reader;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO reader;
ALTER DEFAULT PRIVILEGES FOR ROLE app IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO reader;
ALTER DEFAULT PRIVILEGES FOR ROLE app IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO reader;
";

/// Where PostgreSQL is, and how its server programs are run.
struct Install {
    /// `/usr/lib/postgresql/<version>/bin`.
    bin: PathBuf,
    /// Whether the tests run as root (the server then runs as `postgres`).
    root: bool,
}

/// This machine's PostgreSQL, found once.
static INSTALL: OnceLock<Result<Install, String>> = OnceLock::new();

/// [`INSTALL`], which [`Database::installed`] found.
fn install() -> &'static Install {
    sql_server::found_once(&INSTALL, find_install)
}

/// The newest `/usr/lib/postgresql/<version>/bin` that holds both `initdb`
/// and `postgres` (Debian keeps them off the `PATH`), else `pg_config
/// --bindir`'s.
fn find_install() -> Result<Install, String> {
    let has_server = |bin: &Path| bin.join("initdb").is_file() && bin.join("postgres").is_file();
    let mut found: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(|n| n.parse().ok())
                .collect::<Option<Vec<u32>>>()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_server(bin))
        .collect();
    found.sort();
    let bin = match found.pop() {
        Some((_, bin)) => bin,
        None => Command::new("pg_config")
            .arg("--bindir")
            .stderr(Stdio::null())
            .output()
            .ok()
            .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
            .filter(|bin| has_server(bin))
            .ok_or(
                "PostgreSQL's initdb and postgres not found under /usr/lib/postgresql/*/bin \
                 (install the `postgresql` package: tools/setup.sh)",
            )?,
    };
    let root = sql_server::running_as_root();
    if root
        && !Command::new("id")
            .arg(SERVER_USER)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    {
        return Err(format!(
            "running as root, but there is no `{SERVER_USER}` user to run PostgreSQL as \
             (the `postgresql` package creates it)"
        ));
    }
    Ok(Install { bin, root })
}

/// The command line that runs `program` (from PostgreSQL's `bin`) as the
/// server's user: through `setpriv` as root, which then `exec`s it (no
/// process in between), else directly.
fn server_argv(program: &str) -> Vec<OsString> {
    let install = install();
    let mut argv: Vec<OsString> = Vec::new();
    if install.root {
        argv.extend(
            [
                "setpriv",
                "--reuid",
                SERVER_USER,
                "--regid",
                SERVER_USER,
                "--init-groups",
                "--",
            ]
            .map(OsString::from),
        );
    }
    argv.push(install.bin.join(program).into_os_string());
    argv
}

/// [`server_argv`] as a command.
fn server_command(program: &str) -> Command {
    let argv = server_argv(program);
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    command
}

/// Hands `dir` to the server's user (as root; otherwise it is ours already).
fn give_to_server_user(dir: &Path) -> Result<(), String> {
    if !install().root {
        return Ok(());
    }
    let out = Command::new("chown")
        .arg(format!("{SERVER_USER}:"))
        .arg(dir)
        .output()
        .map_err(|e| format!("chown: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "chown {SERVER_USER}: {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn make_template(dir: &Path) -> Result<PathBuf, String> {
    give_to_server_user(dir)?;
    let data = dir.join("data");
    let out = server_command("initdb")
        .arg("-D")
        .arg(&data)
        .args(["-U", "postgres", "-E", "UTF8", "--locale=C"])
        .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
        // 1 MB WAL segments instead of 16 MB: a smaller template, copied
        // faster for every server.
        .args(["--wal-segsize=1", "--no-sync"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("initdb does not run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.conf"))
        .and_then(|mut conf| conf.write_all(SETTINGS.as_bytes()))
        .map_err(|e| format!("postgresql.conf: {e}"))?;
    // One start, to make the roles and the database.
    let (keeper, port) = sql_server::start_in::<Pg>(dir)?;
    let mut psql = psql_command();
    psql.arg("-h")
        .arg(dir)
        .args(["-p", &port.to_string(), "-U", "postgres", "-d", "postgres"]);
    let setup = sql_server::run_cli::<Pg>(psql, SETUP);
    sql_server::shut_down::<Pg>(keeper, dir);
    setup.map_err(|e| format!("setting up roles and database: {e}"))?;
    let _ = std::fs::remove_file(dir.join(Pg::LOG));
    Ok(data)
}

/// A client program (`psql`, `pg_isready`) of the same version as the
/// server, else the one on the `PATH`.
fn client_program(name: &str) -> PathBuf {
    let path = install().bin.join(name);
    if path.is_file() {
        path
    } else {
        PathBuf::from(name)
    }
}

/// `psql` without `~/.psqlrc` or any `PG*` variable of the environment,
/// reading its script from stdin: unaligned, tuples only, quiet, stopping
/// at the first error.
fn psql_command() -> Command {
    let mut psql = Command::new(client_program("psql"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            psql.env_remove(key);
        }
    }
    psql.args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"])
        .env("PGCONNECT_TIMEOUT", "10");
    psql
}
