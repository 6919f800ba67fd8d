//! What the SQL test servers ([`crate::postgres`], [`crate::mariadb`]) share:
//! [`SqlServer`], a throwaway server owned by a test, generic over the
//! [`Database`] that contributes only its specifics (how to make the
//! template, the server's command line, how to probe readiness, how to run
//! its CLI, its URL scheme).
//!
//! Every server copies a template data directory, made once per test
//! process (and per database) into `<temp dir>/<prefix><pid>-template`, and
//! runs in a fresh directory `<temp dir>/<prefix><pid>-<n>` on a free
//! loopback port (never one of the database's default ports). It runs under
//! a small `sh` keeper (like [`crate::Redis`] and [`crate::etcd`]) that
//! sends it the database's stop signal (`SIGKILL` if it is still there 30 s
//! later) as soon as the test process's end of the keeper's stdin closes:
//! when the harness stops it, and also when the test process dies without
//! dropping it. A server's directory is removed on drop. The template is
//! removed when the test process ends (by a shell that waits for that the
//! keeper's way); directories that a killed test process left behind are
//! removed when the next one builds its template.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::start::{Outcome, free_ports, fresh_dir, log_tail, wait_for};

/// How long a start or a restart may take before the harness gives up
/// (generous: it bounds a wait on a loaded two-core machine, it asserts no
/// speed).
pub(crate) const READY_WITHIN: Duration = Duration::from_secs(60);

/// How long a shutdown may take before the harness kills the server itself:
/// a backstop, the keeper kills it after 30 s.
const STOP_WITHIN: Duration = Duration::from_secs(60);

/// Start-up attempts on fresh ports when the server exits at once (most
/// likely because a port picked as free was taken meanwhile).
const ATTEMPTS: usize = 5;

/// Runs `"$@"` (after the log file, `$1`, and the signal that stops it,
/// `$2`) in the background, and sends it that signal when its stdin reaches
/// end of file; `SIGKILL` if it is still there 30 s later (a signal that
/// arrives while the server is starting can go unheeded: `mariadbd` then
/// never shuts down, and `postgres` ignores `SIGINT` until it has set up its
/// handlers, as a background job of a non-interactive shell starts with
/// `SIGINT` ignored). The keeper itself ends when the server does, so its
/// exit tells that the server is gone. (A background job of a
/// non-interactive shell reads `/dev/null`, hence the stdin copy on fd 3.)
const KEEPER: &str = r#"log=$1; sig=$2; shift 2
exec 3<&0
"$@" >>"$log" 2>&1 3<&- &
pid=$!
{
    read _ignored <&3
    kill -$sig $pid
    n=0
    while kill -0 $pid && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
    kill -0 $pid && kill -9 $pid
} >/dev/null 2>&1 &
exec 3<&-
wait $pid"#;

/// What a database contributes to [`SqlServer`]: its names, files and
/// programs. Every server has the database `locks`, reachable over TCP as
/// `<SCHEME>://<user>:<password>@127.0.0.1:<port>/locks`.
pub trait Database: Send + Sync + 'static {
    /// The database's name in messages (`PostgreSQL`).
    const NAME: &'static str;
    /// The server program's name in messages (`postgres`).
    const SERVER: &'static str;
    /// The CLI's name in messages (`psql`).
    const CLI: &'static str;
    /// The superuser that [`SqlServer::sql`] runs as.
    const SUPERUSER: &'static str;
    /// The scheme of [`SqlServer::url`].
    const SCHEME: &'static str;
    /// The engine's name, as `LockClient::engine_name` gives it.
    const ENGINE: &'static str;
    /// The server's clock in UTC, as a statement reads it (the SQL
    /// engines write UTC times by the database's clock).
    const UTC_NOW: &'static str;
    /// The ports of the machine's own service, which a test server never
    /// uses.
    const DEFAULT_PORTS: &'static [u16];
    /// The prefix of every directory made under the temp dir:
    /// `<prefix><pid>-<n>` (and `-template`).
    const DIR_PREFIX: &'static str;
    /// The server's log, in its directory (the keeper appends the server's
    /// output to it).
    const LOG: &'static str;
    /// The server's pid file (its first line is the pid), relative to its
    /// directory.
    const PID_FILE: &'static str;
    /// The signal (for `kill -<signal>`) that shuts the server down.
    const STOP_SIGNAL: &'static str;
    /// The `TZ` of the server's process (and of the template's making).
    const PROCESS_TZ: &'static str;

    /// Panics with what is missing when the database is not installed.
    fn installed() -> Result<(), String>;

    /// Makes the template in the fresh, empty directory `dir`: returns its
    /// data directory (`dir`/data), which every server copies.
    fn fill_template(dir: &Path) -> Result<PathBuf, String>;

    /// Readies a server's fresh directory `dir` before the template is
    /// copied into it (e.g. hands it to the server's user).
    fn prepare_dir(_dir: &Path) -> Result<(), String> {
        Ok(())
    }

    /// The command line of the server on `dir`/data, listening on
    /// `127.0.0.1:<port>` and on a unix socket in `dir`.
    fn server_argv(dir: &Path, port: u16) -> Vec<OsString>;

    /// Whether the server in `dir` accepts connections (probed on its own
    /// unix socket: a server that failed to bind its port never does).
    fn ready(dir: &Path, port: u16) -> bool;

    /// The CLI, connected to the database `locks` as [`SUPERUSER`]
    /// (Self::SUPERUSER) over the unix socket of the server in `dir`,
    /// reading its script from stdin.
    fn superuser_cli(dir: &Path, port: u16) -> Command;

    /// The CLI, connected to the database `locks` as `user` with `password`
    /// over TCP (`127.0.0.1:<port>`), reading its script from stdin.
    fn user_cli(port: u16, user: &str, password: &str) -> Command;
}

/// A server of the database `D` owned by a test, on a free loopback port,
/// with the database `locks` and the users `app` and `reader` (see the
/// database's module). Shut down, and its directory removed, when dropped.
pub struct SqlServer<D: Database> {
    dir: PathBuf,
    port: u16,
    keeper: Option<Child>,
    database: PhantomData<D>,
}

impl<D: Database> SqlServer<D> {
    /// Starts a fresh server (a copy of this process's template) and waits
    /// until it accepts connections. Panics (failing the test) with the tail
    /// of its log when no server will start within 60 s, or when the
    /// database is not installed.
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`start`](Self::start), or why the server did not start (not
    /// installed, its template not made, or it did not answer: with the
    /// tail of its log).
    pub fn try_start() -> Result<Self, String> {
        let template = template::<D>()?;
        for attempt in 1..=ATTEMPTS {
            let dir = fresh_dir(D::DIR_PREFIX);
            if let Err(e) = copy_template::<D>(template, &dir) {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
            let port = free_ports(1, D::DEFAULT_PORTS)[0];
            match try_start::<D>(&dir, port, READY_WITHIN) {
                Ok(keeper) => {
                    return Ok(SqlServer {
                        dir,
                        port,
                        keeper: Some(keeper),
                        database: PhantomData,
                    });
                }
                Err(Outcome::Exited) if attempt < ATTEMPTS => {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                Err(outcome) => {
                    let log = log_tail(&dir.join(D::LOG));
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(format!(
                        "{} did not start ({outcome:?}); its log ends with:\n{log}",
                        D::SERVER
                    ));
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// The URL the engine under test connects with, as `app`:
    /// `<scheme>://app:secret@127.0.0.1:<port>/locks`.
    pub fn url(&self) -> String {
        self.url_at(self.port)
    }

    /// [`url`](Self::url) at another `port`: a proxy's in front of the
    /// server.
    pub fn url_at(&self, port: u16) -> String {
        url_to::<D>(port, "app", "secret")
    }

    /// `<scheme>://<user>:<password>@127.0.0.1:<port>/locks`, e.g. as
    /// `reader`, or with a wrong password. Both go into the URL as given
    /// (no percent-encoding).
    pub fn url_as(&self, user: &str, password: &str) -> String {
        url_to::<D>(self.port, user, password)
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the server is running (it was not stopped).
    pub fn is_running(&self) -> bool {
        self.keeper.is_some()
    }

    /// Shuts the server down with [`Database::STOP_SIGNAL`] (a shutdown
    /// that disconnects every client, rolling back their open transactions;
    /// see the database's module) and waits until it is gone. Its data
    /// stays: [`restart`](Self::restart) brings it back. Does nothing when
    /// it is stopped.
    pub fn stop(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            shut_down::<D>(keeper, &self.dir);
        }
    }

    /// Sends `signal` (`-KILL`, `-STOP`, `-CONT`) to the server's main
    /// process and every process it started (PostgreSQL's backends), as
    /// its pid file names it. A `-KILL` is a crash: [`restart`](Self::restart)
    /// brings it back.
    pub fn signal(&mut self, signal: &str) {
        let pid = std::fs::read_to_string(self.dir.join(D::PID_FILE)).unwrap_or_default();
        let pid = pid.lines().next().unwrap_or_default().trim().to_owned();
        assert!(!pid.is_empty(), "{} has no pid file", D::SERVER);
        // The children first: a stopped or killed parent's go on otherwise.
        let _ = Command::new("pkill").args([signal, "-P", &pid]).status();
        let _ = Command::new("kill").args([signal, &pid]).status();
        if signal == "-KILL"
            && let Some(mut keeper) = self.keeper.take()
        {
            // The keeper ends with its server.
            drop(keeper.stdin.take());
            let _ = keeper.wait();
        }
    }

    /// Stops the server if it runs, starts it again on the same port with
    /// its data, and waits until it accepts connections. Panics with the
    /// tail of its log when it will not within 60 s (retrying meanwhile
    /// while it exits at once, e.g. while its port is taken).
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let within = deadline.saturating_duration_since(Instant::now());
            match try_start::<D>(&self.dir, self.port, within) {
                Ok(keeper) => {
                    self.keeper = Some(keeper);
                    return;
                }
                Err(Outcome::Exited) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(outcome) => panic!(
                    "{} did not restart on port {} ({outcome:?}); its log ends with:\n{}",
                    D::SERVER,
                    self.port,
                    self.log_tail()
                ),
            }
        }
    }

    /// Runs `statement` (one or more SQL statements) in the database `locks`
    /// as the superuser, through the database's CLI over the server's unix
    /// socket, and returns its output: one line per row, no header, no
    /// final newline (`""` when no rows; the database's module says how
    /// columns are separated). Stops at the first error and panics with the
    /// CLI's error output.
    pub fn sql(&self, statement: &str) -> String {
        match run_cli::<D>(D::superuser_cli(&self.dir, self.port), statement) {
            Ok(rows) => rows,
            Err(e) => panic!(
                "{} as {} failed on {statement:?}: {e}",
                D::CLI,
                D::SUPERUSER
            ),
        }
    }

    /// [`sql`](Self::sql) from async code: the CLI runs on a blocking
    /// thread, not on the caller's runtime (whose tasks go on meanwhile).
    pub async fn sql_async(&self, statement: &str) -> String {
        let (cli, script) = (D::superuser_cli(&self.dir, self.port), statement.to_owned());
        tokio::task::spawn_blocking(move || run_cli::<D>(cli, &script))
            .await
            .expect("the CLI's thread")
            .unwrap_or_else(|e| {
                panic!(
                    "{} as {} failed on {statement:?}: {e}",
                    D::CLI,
                    D::SUPERUSER
                )
            })
    }

    /// Like [`sql`](Self::sql), connecting as `user` with `password` over TCP
    /// (`127.0.0.1:<port>`, as the engine under test does). Returns the CLI's
    /// error output when it cannot connect or a statement fails (e.g. for
    /// `reader`'s `CREATE TABLE`).
    pub fn sql_as(&self, user: &str, password: &str, statement: &str) -> Result<String, String> {
        run_cli::<D>(D::user_cli(self.port, user, password), statement)
    }

    /// A session of the CLI as the superuser, kept open: each
    /// [`send`](Session::send) runs as it arrives, within the session's
    /// transaction when one is open (e.g. a row inserted and not committed,
    /// which holds its key against other sessions). Dropping it ends the
    /// session, rolling back what it left open.
    pub fn session(&self) -> Session {
        let mut cli = D::superuser_cli(&self.dir, self.port);
        let mut child = cli
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not run: {e}", D::CLI));
        let stdin = child.stdin.take();
        Session { child, stdin }
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        log_tail(&self.dir.join(D::LOG))
    }

    /// The directory holding the server's data (`data`), socket and log
    /// (and, for MariaDB, its pid file).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `<scheme>://<user>:<password>@127.0.0.1:<port>/locks`: a server's
/// database `locks` at `port` (its own, or a proxy's in front of it).
fn url_to<D: Database>(port: u16, user: &str, password: &str) -> String {
    format!("{}://{user}:{password}@127.0.0.1:{port}/locks", D::SCHEME)
}

/// An open session of a server's CLI (see [`SqlServer::session`]).
pub struct Session {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
}

impl Session {
    /// Sends `statement` (ended by `;`) to the session, which runs it as it
    /// arrives. Panics when the session is gone.
    pub fn send(&mut self, statement: &str) {
        let stdin = self.stdin.as_mut().expect("the session is open");
        writeln!(stdin, "{statement}")
            .and_then(|()| stdin.flush())
            .expect("the session takes statements");
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // End of input: the CLI ends its session and exits.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

impl<D: Database> Drop for SqlServer<D> {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether this process runs as root (`id -u` is 0).
pub(crate) fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// What `find` gives, found once into `cell` (e.g. a database's
/// programs), or its error, on every call, when it found nothing.
pub(crate) fn found<T: Send + Sync>(
    cell: &'static OnceLock<Result<T, String>>,
    find: fn() -> Result<T, String>,
) -> Result<&'static T, String> {
    cell.get_or_init(find).as_ref().map_err(Clone::clone)
}

/// [`found`], once it was found ([`Database::installed`] said so).
pub(crate) fn found_once<T: Send + Sync>(
    cell: &'static OnceLock<Result<T, String>>,
    find: fn() -> Result<T, String>,
) -> &'static T {
    found(cell, find).unwrap_or_else(|e| panic!("{e}"))
}

/// Starts `D`'s server on `dir` under a keeper on `port` and waits at most
/// `within` until it is ready; shuts it down again when it is not.
pub(crate) fn try_start<D: Database>(
    dir: &Path,
    port: u16,
    within: Duration,
) -> Result<Child, Outcome> {
    let mut keeper = spawn::<D>(dir, port);
    match wait_for(
        within,
        || !matches!(keeper.try_wait(), Ok(None)),
        || D::ready(dir, port),
    ) {
        Outcome::Ready => Ok(keeper),
        outcome => {
            shut_down::<D>(keeper, dir);
            Err(outcome)
        }
    }
}

/// [`try_start`] on fresh ports, up to [`ATTEMPTS`] times while the server
/// exits at once (for a template's one start): the keeper and the port, or
/// why not, with the tail of the log.
pub(crate) fn start_in<D: Database>(dir: &Path) -> Result<(Child, u16), String> {
    let mut attempt = 1;
    loop {
        let port = free_ports(1, D::DEFAULT_PORTS)[0];
        match try_start::<D>(dir, port, READY_WITHIN) {
            Ok(keeper) => return Ok((keeper, port)),
            Err(Outcome::Exited) if attempt < ATTEMPTS => attempt += 1,
            Err(outcome) => {
                return Err(format!(
                    "the template's server did not start ({outcome:?}); its log ends with:\n{}",
                    log_tail(&dir.join(D::LOG))
                ));
            }
        }
    }
}

/// This process's template data directory for `D`, made on first use by
/// [`Database::fill_template`], or what went wrong when it cannot be made.
fn template<D: Database>() -> Result<&'static Path, String> {
    static TEMPLATES: Mutex<Templates> = Mutex::new(None);
    let cell: &'static TemplateCell = {
        let mut cells = TEMPLATES.lock().unwrap_or_else(|e| e.into_inner());
        cells
            .get_or_insert_with(HashMap::new)
            .entry(D::DIR_PREFIX)
            .or_insert_with(|| Box::leak(Box::default()))
    };
    match cell.get_or_init(|| {
        make_template::<D>().map(|data| {
            let remover = remove_at_exit(data.parent().expect("the template's directory"));
            Template {
                data,
                _remover: remover,
            }
        })
    }) {
        Ok(template) => Ok(&template.data),
        Err(e) => Err(format!("no {} template: {e}", D::NAME)),
    }
}

/// Each database's template (by [`Database::DIR_PREFIX`]), made once.
type Templates = Option<HashMap<&'static str, &'static TemplateCell>>;
type TemplateCell = OnceLock<Result<Template, String>>;

/// This process's template, and what removes it when the process ends.
struct Template {
    /// The data directory every server copies.
    data: PathBuf,
    /// See [`remove_at_exit`]: never waited for, its stdin is closed when
    /// this process ends.
    _remover: Option<Child>,
}

/// A shell that removes `dir` once its stdin reaches end of file, i.e. when
/// this process ends (a `static` is never dropped, so the template would
/// otherwise stay until the next test process removes it as stale).
fn remove_at_exit(dir: &Path) -> Option<Child> {
    Command::new("sh")
        .arg("-c")
        .arg(r#"read _ignored; rm -rf -- "$1""#)
        .arg("sh")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

fn make_template<D: Database>() -> Result<PathBuf, String> {
    D::installed()?;
    remove_stale_dirs::<D>();
    let dir =
        std::env::temp_dir().join(format!("{}{}-template", D::DIR_PREFIX, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let made = D::fill_template(&dir);
    if made.is_err() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    made
}

/// Copies the template's data directory into `dir`/data (`cp -a`: keeping
/// its owner), after [`Database::prepare_dir`].
fn copy_template<D: Database>(template: &Path, dir: &Path) -> Result<(), String> {
    D::prepare_dir(dir)?;
    let out = Command::new("cp")
        .arg("-a")
        .arg(template)
        .arg(dir.join("data"))
        .output()
        .map_err(|e| format!("cp: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "copying the {} template {} into {}: {}",
            D::NAME,
            template.display(),
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Starts the server on `dir` under a keeper, on `port`, logging to
/// `dir`/LOG.
fn spawn<D: Database>(dir: &Path, port: u16) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(KEEPER)
        .arg("sh")
        .arg(dir.join(D::LOG))
        .arg(D::STOP_SIGNAL)
        .args(D::server_argv(dir, port))
        .env("TZ", D::PROCESS_TZ)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sh runs")
}

/// Shuts down the server under `keeper` (whose directory is `dir`): closes
/// the keeper's stdin (the keeper kills the server if it is still there 30 s
/// later) and waits until the server is gone; after [`STOP_WITHIN`] kills
/// it (by its pid file) itself.
pub(crate) fn shut_down<D: Database>(mut keeper: Child, dir: &Path) {
    drop(keeper.stdin.take());
    if exits_within(&mut keeper, STOP_WITHIN) {
        return;
    }
    let pid = std::fs::read_to_string(dir.join(D::PID_FILE)).unwrap_or_default();
    let pid = pid.lines().next().unwrap_or_default().trim().to_owned();
    if !pid.is_empty() {
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
    }
    let _ = keeper.kill();
    let _ = keeper.wait();
}

/// Whether `child` ends within `within`.
fn exits_within(child: &mut Child, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if !matches!(child.try_wait(), Ok(None)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs the CLI `cli` with `script` on its stdin: its output without the
/// final newline, or what went wrong.
pub(crate) fn run_cli<D: Database>(cli: Command, script: &str) -> Result<String, String> {
    let out = feed(cli, script).map_err(|e| format!("{} does not run: {e}", D::CLI))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout)
            .trim_end_matches('\n')
            .to_owned())
    } else {
        Err(format!(
            "{} failed ({}): {}",
            D::CLI,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Runs `command` with `input` on its stdin (written from another thread,
/// so that a long output cannot block it) and collects its output.
fn feed(mut command: Command, input: &str) -> std::io::Result<Output> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_owned();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let out = child.wait_with_output();
    let _ = writer.join();
    out
}

/// Removes the directories (servers' and templates') of test processes that
/// have ended without removing them (killed before they dropped their
/// servers, or together with their template's remover).
fn remove_stale_dirs<D: Database>() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(D::DIR_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
