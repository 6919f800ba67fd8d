//! The throwaway servers of this workspace, for the tests, the demos and
//! the benchmarks alike: real `redis-server` ([`Redis`]), `etcd`
//! ([`etcd`]: a member or a cluster), ZooKeeper ([`zookeeper`]: standalone
//! or an ensemble), PostgreSQL ([`postgres`]) and MariaDB ([`mariadb`])
//! processes on free loopback ports (never 6379, 2379, 2181, 5432 or 3306,
//! where this machine may run its own), started by their owner and stopped
//! when it drops them, or when its process ends however it ends: each runs
//! under a small `sh` keeper that stops it once the owner's end of the
//! keeper's stdin closes.
//!
//! `start()` panics with what went wrong (a test's failure); `try_start()`
//! returns it (a demo's error message). `tools/setup.sh` installs every
//! server.

pub mod etcd;
pub mod mariadb;
pub mod postgres;
pub mod sql_server;
pub mod start;
pub mod zookeeper;

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` (no persistence unless asked) on a free loopback port.
/// Stopped when dropped, and also when its owner's process dies without
/// dropping it (a `static` server, a panic with `panic = "abort"`, a kill):
/// the server runs under a small `sh` keeper that stops it as soon as the
/// owner's end of its stdin pipe closes.
pub struct Redis {
    process: Option<Child>,
    port: u16,
    args: Vec<String>,
}

impl Redis {
    /// Starts a fresh server on a free loopback port and waits until it
    /// answers `PING`. Panics when no server will start.
    pub fn start() -> Redis {
        Redis::start_with(&[])
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments
    /// (e.g. `["--maxmemory", "10mb"]`).
    pub fn start_with(args: &[&str]) -> Redis {
        Redis::try_start_with(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`start_with`](Self::start_with), or why no server started.
    pub fn try_start_with(args: &[&str]) -> Result<Redis, String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        for _ in 0..5 {
            let port = free_port();
            if let Some(process) = spawn_on(port, &args) {
                return Ok(Redis {
                    process: Some(process),
                    port,
                    args,
                });
            }
        }
        // Asked only once no server started: a start spawns no extra process.
        match Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(
                    "`redis-server` is not installed (Debian/Ubuntu: `sudo apt-get \
                            install redis-server`, macOS: `brew install redis`; or run \
                            tools/setup.sh)"
                        .into(),
                );
            }
            Err(e) => return Err(format!("cannot run redis-server: {e}")),
        }
        Err("redis-server is installed but did not start on a free loopback port".into())
    }

    /// A server that persists every write before answering it
    /// (`--appendonly yes --appendfsync always`) in `dir`, so that a
    /// [`crash`](Self::crash) and [`restart`](Self::restart) keep all data,
    /// and that accepts `DEBUG` from loopback.
    pub fn start_persistent(dir: &std::path::Path) -> Redis {
        let dir = dir.to_string_lossy();
        Redis::start_with(&[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            &dir,
            "--enable-debug-command",
            "local",
        ])
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server and waits until it is gone (its data is lost:
    /// nothing is persisted).
    pub fn stop(&mut self) {
        if let Some(mut keeper) = self.process.take() {
            // Closing the keeper's stdin makes it stop the server.
            drop(keeper.stdin.take());
            let _ = keeper.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(process) = spawn_on(self.port, &self.args) {
                self.process = Some(process);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("could not restart redis-server on port {}", self.port);
    }

    /// Kills the server with SIGKILL (no shutdown, no final save) and waits
    /// until it is gone. [`restart`](Self::restart) brings it back.
    pub fn crash(&mut self) {
        let Some(mut keeper) = self.process.take() else {
            return;
        };
        if let Some(pid) = server_pid(self.port) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        // The keeper returns once its server is gone.
        drop(keeper.stdin.take());
        let _ = keeper.wait();
    }

    /// Whether the server is running.
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A loopback port nobody listens on right now (the system picks it among
/// its ephemeral ports, so never a service's default port).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Runs `redis-server` under a keeper shell: the keeper stops the server when
/// its stdin reaches end of file, i.e. when we close it or when we die.
pub fn keep(server_args: &[String]) -> std::io::Result<Child> {
    const KEEPER: &str =
        r#"redis-server "$@" & server=$!; read _ignored; kill $server 2>/dev/null; wait $server"#;
    Command::new("sh")
        .arg("-c")
        .arg(KEEPER)
        .arg("sh")
        .args(server_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// Arguments every Redis server shares: `port` on loopback, no
/// persistence, working directory `dir`, logging to `logfile` (`""`: none).
pub fn server_args(port: u16, dir: &std::path::Path, logfile: &str) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &dir.to_string_lossy(),
        "--logfile",
        logfile,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect()
}

/// Starts `redis-server` on `port` under its keeper and waits until it
/// answers; `None` when it exited (most likely someone took the port
/// meanwhile) or never answered.
fn spawn_on(port: u16, extra: &[String]) -> Option<Child> {
    let mut args = server_args(port, &std::env::temp_dir(), "");
    args.extend(extra.iter().cloned());
    let mut keeper = keep(&args).ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = keeper.try_wait() {
            return None;
        }
        if ping(port) {
            return Some(keeper);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(keeper.stdin.take());
    let _ = keeper.wait();
    None
}

/// The first line of the server on `port`'s answer to the inline command
/// `command` (with a bulk reply, the whole of it): no client library for
/// a probe.
fn ask(port: u16, command: &str) -> Option<String> {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut conn =
        std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    conn.write_all(format!("{command}\r\n").as_bytes()).ok()?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&answer);
        // A status or error line, or a bulk string read whole.
        let whole = match text.strip_prefix('$') {
            Some(rest) => rest.split_once("\r\n").is_some_and(|(len, body)| {
                len.parse::<usize>().is_ok_and(|len| body.len() >= len + 2)
            }),
            None => text.ends_with("\r\n"),
        };
        if whole {
            break;
        }
    }
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// Whether a Redis server on `port` answers `PING` (or is up and wants a
/// password first).
fn ping(port: u16) -> bool {
    ask(port, "PING").is_some_and(|a| a.starts_with("+PONG") || a.starts_with("-NOAUTH"))
}

/// The process id of the server on `port` (`INFO server`).
fn server_pid(port: u16) -> Option<u32> {
    let info = ask(port, "INFO server")?;
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// A fresh, empty directory for one test's server files (AOF, RDB, logs),
/// under the system's temp dir, unique to this process and `tag`.
pub fn scratch_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lock-runtime-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// A throwaway certificate authority and a server certificate it signed
/// for `127.0.0.1` (PEM files in a test's directory, made by `openssl`), for
/// TLS test servers.
pub struct Certificates {
    /// The authority's certificate: what a client trusts.
    pub ca: std::path::PathBuf,
    /// The server's certificate.
    pub cert: std::path::PathBuf,
    /// The server's key.
    pub key: std::path::PathBuf,
}

/// Makes [`Certificates`] in `dir`.
pub fn certificates(dir: &std::path::Path) -> Certificates {
    let file = |name: &str| dir.join(name);
    let openssl = |args: &[&str]| {
        let made = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .expect("openssl runs");
        assert!(
            made.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&made.stderr)
        );
    };
    std::fs::write(
        file("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("the test directory is writable");
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "key.pem",
        "-out",
        "server.csr",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "server.ext",
        "-out",
        "cert.pem",
    ]);
    Certificates {
        ca: file("ca.pem"),
        cert: file("cert.pem"),
        key: file("key.pem"),
    }
}
