//! Real MariaDB servers on loopback, started and stopped by the tests
//! ([`MariaDb`]), plus the `mariadb` CLI as a second client independent of
//! the engine under test ([`MariaDb::sql`], [`MariaDb::sql_as`]), the way
//! the etcd tests use `etcdctl`. Never the machine's 3306 (a system service
//! may run there): every port is a free one, and every program runs with
//! `--no-defaults`, so that the system's `/etc/mysql` (its socket, port,
//! data directory) is never read.
//!
//! The servers are Debian's `mariadb-server` package: `mariadb-install-db`
//! runs once per test process, into a template data directory that every
//! server copies, and makes there (with `--extra-file`):
//!
//! - the database `locks` (`utf8mb4`);
//! - `app`@`%` (password `secret`) with all privileges on `locks`;
//! - `reader`@`%` (password `secret`) with `SELECT`, `INSERT`, `UPDATE` and
//!   `DELETE` on `locks`, but no `CREATE` (nor `CREATE TEMPORARY TABLES`):
//!   a role without `CREATE`;
//! - `root` without a password (`--auth-root-authentication-method=normal`),
//!   which [`MariaDb::sql`] uses over the server's unix socket (in its temp
//!   directory).
//!
//! The server's time zone is [`TIME_ZONE`], `+05:45`
//! (`--default-time-zone`), and its process's `TZ` is `Asia/Kathmandu`
//! (the same offset, so `@@system_time_zone` is `+0545`): neither UTC nor
//! a whole number of hours off it, so that a slip between local time and UTC
//! shows in the tests. Durability is relaxed
//! (`innodb_flush_log_at_trx_commit=0`, no doublewrite, no binary log): a
//! server keeps its data across [`MariaDb::stop`] and [`MariaDb::restart`]
//! (a clean shutdown), not across a crash of the machine.
//!
//! As root, `mariadbd` runs with `--user=root` (it refuses to run as root
//! without it), so that its files stay the test process's.
//!
//! Every server is a [`SqlServer`] (see [`crate::sql_server`] for what all
//! the SQL servers share) and runs under a small `sh` keeper (like
//! [`crate::Redis`] and [`crate::etcd`]) that shuts it down (`SIGTERM`: a clean shutdown;
//! `SIGKILL` if it is still there 30 s later) as soon as the test process's
//! end of the keeper's stdin closes: when the harness stops it, and also
//! when the test process dies without dropping it. Each server's data,
//! socket, pid file and log live in a fresh directory under the system's
//! temp dir, removed on drop. The template is removed when the test process
//! ends (by a shell that waits for that the keeper's way); directories that
//! a killed test process left behind are removed when the next one builds
//! its template.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::sql_server::{self, Database, SqlServer};

/// The server's time zone, `@@global.time_zone` (`--default-time-zone`).
pub const TIME_ZONE: &str = "+05:45";

/// How far the server's local time is ahead of UTC, in seconds (5 h 45 min).
pub const UTC_OFFSET_SECONDS: i64 = 5 * 3600 + 45 * 60;

/// The `TZ` of the server's process: the same offset as [`TIME_ZONE`], all
/// year.
const PROCESS_TZ: &str = "Asia/Kathmandu";

/// The socket and pid file, in the server's directory.
const SOCKET: &str = "mysqld.sock";
const PID_FILE: &str = "mysqld.pid";

/// A MariaDB server owned by a test, on a free loopback port, with the
/// database `locks` and the users `app` and `reader` (see the
/// [module](self)). Shut down, and its directory removed, when dropped.
///
/// [`stop`](SqlServer::stop) is a clean shutdown (`SIGTERM`: it disconnects
/// every client, rolling back their open transactions); [`sql`](SqlServer::sql)
/// runs the `mariadb` CLI as `root` (`--batch --skip-column-names`: columns
/// separated by tabs, `NULL` for null, and `\t`, `\n`, `\\` escaped), and
/// [`sql_as`](SqlServer::sql_as)'s error for `reader`'s `CREATE TABLE` is
/// `ERROR 1142 (42000) … CREATE command denied to user 'reader'…`;
/// [`dir`](SqlServer::dir) holds `data`, the socket (`mysqld.sock`), the pid
/// file (`mysqld.pid`) and the log (`mariadb.log`).
pub type MariaDb = SqlServer<Maria>;

/// MariaDB's specifics for [`SqlServer`]: see the [module](self).
pub struct Maria;

impl Database for Maria {
    const NAME: &'static str = "MariaDB";
    const SERVER: &'static str = "mariadbd";
    const CLI: &'static str = "mariadb";
    const SUPERUSER: &'static str = "root";
    const SCHEME: &'static str = "mysql";
    const ENGINE: &'static str = "mysql";
    const UTC_NOW: &'static str = "UTC_TIMESTAMP(6)";
    /// 3306, and 33060 of MySQL's X protocol.
    const DEFAULT_PORTS: &'static [u16] = &[3306, 33060];
    const DIR_PREFIX: &'static str = "lock-tests-mariadb-";
    /// The server's output is its error log.
    const LOG: &'static str = "mariadb.log";
    const PID_FILE: &'static str = PID_FILE;
    const STOP_SIGNAL: &'static str = "TERM";
    const PROCESS_TZ: &'static str = PROCESS_TZ;

    fn installed() -> Result<(), String> {
        sql_server::found(&INSTALL, find_install).map(|_| ())
    }

    fn fill_template(dir: &Path) -> Result<PathBuf, String> {
        make_template(dir)
    }

    fn server_argv(dir: &Path, port: u16) -> Vec<OsString> {
        let install = install();
        // `--no-defaults` must come first.
        let mut argv = vec![
            install.server.clone().into_os_string(),
            "--no-defaults".into(),
        ];
        argv.extend(install.root.then(|| "--user=root".into()));
        argv.extend(
            [
                format!("--datadir={}", dir.join("data").display()),
                format!("--socket={}", dir.join(SOCKET).display()),
                format!("--pid-file={}", dir.join(PID_FILE).display()),
                format!("--tmpdir={}", dir.display()),
                format!("--port={port}"),
                "--bind-address=127.0.0.1".to_owned(),
            ]
            .map(OsString::from),
        );
        argv.extend(SERVER_OPTIONS.iter().map(OsString::from));
        // A test that asks for it (see `GENERAL_LOG`) has every statement
        // logged, from the next (re)start on.
        if dir.join(GENERAL_LOG).exists() {
            argv.push("--general-log=1".into());
            argv.push(format!("--general-log-file={}", dir.join(GENERAL_LOG).display()).into());
        }
        argv
    }

    /// `SELECT 1` as `root` on the server's own socket.
    fn ready(dir: &Path, _port: u16) -> bool {
        let socket = dir.join(SOCKET);
        if !socket.exists() {
            return false;
        }
        let mut cli = cli_command();
        cli.arg(format!("--socket={}", socket.display()))
            .arg("--user=root");
        sql_server::run_cli::<Maria>(cli, "SELECT 1").is_ok()
    }

    fn superuser_cli(dir: &Path, _port: u16) -> Command {
        let mut cli = cli_command();
        cli.arg(format!("--socket={}", dir.join(SOCKET).display()))
            .args(["--user=root", "--database=locks"]);
        cli
    }

    fn user_cli(port: u16, user: &str, password: &str) -> Command {
        let mut cli = cli_command();
        cli.args(["--protocol=TCP", "--host=127.0.0.1"])
            .arg(format!("--port={port}"))
            .arg(format!("--user={user}"))
            .arg(format!("--password={password}"))
            .arg("--database=locks");
        cli
    }
}

/// The general log's file in a server's directory: a test that makes it
/// (empty) and restarts the server has every statement logged there.
pub const GENERAL_LOG: &str = "general.log";

/// Server options shared by `mariadb-install-db` (which passes them to its
/// bootstrap server) and every server: small and fast, durability relaxed.
const SERVER_OPTIONS: &[&str] = &[
    "--skip-name-resolve",
    "--skip-log-bin",
    "--character-set-server=utf8mb4",
    "--default-time-zone=+05:45",
    "--innodb-buffer-pool-size=32M",
    "--innodb-log-file-size=8M",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
    // io_setup() fails once many servers (or other programs) have taken the
    // machine's AIO contexts (fs.aio-max-nr): synchronous I/O always works.
    "--innodb-use-native-aio=0",
    "--innodb-buffer-pool-dump-at-shutdown=0",
    "--innodb-buffer-pool-load-at-startup=0",
];

/// Run by `mariadb-install-db` after it has made the system tables
/// (`--extra-file`). Its bootstrap server runs without the grant tables
/// loaded, where `CREATE USER` fails: `FLUSH PRIVILEGES` loads them first.
const SETUP: &str = "
FLUSH PRIVILEGES;
CREATE DATABASE locks CHARACTER SET utf8mb4;
CREATE USER 'app'@'%' IDENTIFIED BY 'secret';
GRANT ALL PRIVILEGES ON locks.* TO 'app'@'%';
CREATE USER 'reader'@'%' IDENTIFIED BY 'secret';
GRANT SELECT, INSERT, UPDATE, DELETE ON locks.* TO 'reader'@'%';
";

/// This machine's MariaDB programs, found once.
struct Install {
    /// `mariadbd` (in `/usr/sbin`, which is not on every user's `PATH`).
    server: PathBuf,
    /// `mariadb-install-db`.
    install_db: PathBuf,
    /// The `mariadb` CLI.
    cli: PathBuf,
    /// Whether the tests run as root (the server then runs with
    /// `--user=root`).
    root: bool,
}

/// This machine's MariaDB, found once.
static INSTALL: OnceLock<Result<Install, String>> = OnceLock::new();

/// [`INSTALL`], which [`Database::installed`] found.
fn install() -> &'static Install {
    sql_server::found_once(&INSTALL, find_install)
}

fn find_install() -> Result<Install, String> {
    let missing = |what: &str| {
        format!("MariaDB's {what} not found (install the `mariadb-server` package: tools/setup.sh)")
    };
    Ok(Install {
        server: find_program(&["mariadbd", "mysqld"]).ok_or_else(|| missing("mariadbd"))?,
        install_db: find_program(&["mariadb-install-db", "mysql_install_db"])
            .ok_or_else(|| missing("mariadb-install-db"))?,
        cli: find_program(&["mariadb", "mysql"]).ok_or_else(|| missing("mariadb client"))?,
        root: sql_server::running_as_root(),
    })
}

/// The first of `names` on the `PATH` or in `/usr/sbin`, `/usr/bin`.
fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"].map(PathBuf::from))
        .collect();
    names
        .iter()
        .flat_map(|name| dirs.iter().map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// `mariadb-install-db` into `dir`/data, running [`SETUP`].
fn make_template(dir: &Path) -> Result<PathBuf, String> {
    let install = install();
    let setup = dir.join("setup.sql");
    let data = dir.join("data");
    std::fs::write(&setup, SETUP)
        .map_err(|e| format!("{}: {e}", setup.display()))
        .and_then(|()| {
            // `--no-defaults` must come first.
            let mut command = Command::new(&install.install_db);
            command
                .arg("--no-defaults")
                .arg(format!("--datadir={}", data.display()))
                .args(install.root.then_some("--user=root"))
                .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
                .arg(format!("--extra-file={}", setup.display()))
                .arg(format!("--tmpdir={}", dir.display()))
                .args(SERVER_OPTIONS)
                .env("TZ", PROCESS_TZ)
                .current_dir(dir)
                .stdin(Stdio::null());
            let out = command
                .output()
                .map_err(|e| format!("mariadb-install-db does not run: {e}"))?;
            if out.status.success() {
                Ok(data)
            } else {
                Err(format!(
                    "mariadb-install-db failed ({}):\n{}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        })
}

/// The `mariadb` CLI without option files or `MYSQL*` variables of the
/// environment: batch mode, no column names, a bounded connect.
fn cli_command() -> Command {
    let mut cli = Command::new(&install().cli);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("MYSQL") {
            cli.env_remove(key);
        }
    }
    // `--no-defaults` must come first.
    cli.args([
        "--no-defaults",
        "--batch",
        "--skip-column-names",
        "--connect-timeout=10",
    ]);
    cli
}
