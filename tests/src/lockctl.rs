//! What `lockctl` shows, checked the same way on every engine: running it
//! as a process ([`Lockctl`]) and reading what it printed.

use std::process::{Output, Stdio};
use std::time::Duration;

use lock_runtime::LockClient;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Generous bound on one line of output (it asserts no speed).
const WITHIN: Duration = Duration::from_secs(20);

/// The `lockctl` binary a test drives (`env!("CARGO_BIN_EXE_lockctl")`,
/// which only a test target knows).
#[derive(Clone, Copy)]
pub struct Lockctl(pub &'static str);

impl Lockctl {
    /// `lockctl` with no URL from the environment (`REDIS_URL`,
    /// `LOCK_URL` removed), killed when dropped.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(self.0);
        cmd.env_remove("REDIS_URL")
            .env_remove("LOCK_URL")
            .kill_on_drop(true);
        cmd
    }

    /// Runs lockctl with `args` (stdin closed) and waits for it.
    pub async fn run(&self, args: &[&str]) -> Output {
        run_with(self.command(), args).await
    }
}

/// Runs `cmd` (a [`Lockctl::command`] with more set up) with `args`
/// (stdin closed) and waits for it.
pub async fn run_with(mut cmd: Command, args: &[&str]) -> Output {
    tokio::time::timeout(WITHIN, cmd.args(args).stdin(Stdio::null()).output())
        .await
        .expect("lockctl finished")
        .expect("lockctl ran")
}

/// What lockctl printed on stdout.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What lockctl printed on stderr.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON lockctl printed; panics with its stderr when it failed.
pub fn json(out: &Output) -> Value {
    assert!(out.status.success(), "lockctl failed: {}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("lockctl printed JSON")
}

/// `lockctl --url <url> watch stock:7` (`lockctl` is the command to run)
/// prints the lock free, then an acquire by `client` naming its holder,
/// then the release.
pub async fn watch_prints_an_acquire_and_a_release(
    mut lockctl: Command,
    url: &str,
    client: &LockClient,
) {
    let mut child = lockctl
        .args(["--url", url, "watch", "stock:7"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut until = async |what: &str| -> String {
        loop {
            let line = tokio::time::timeout(WITHIN, lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("watch never printed {what:?}"))
                .unwrap()
                .unwrap_or_else(|| panic!("watch ended before {what:?}"));
            if line.contains(what) {
                return line;
            }
        }
    };
    until("stock:7: free").await;

    let guard = client.lock("stock:7").acquire().await.unwrap();
    let acquired = until("acquired").await;
    assert!(acquired.contains(guard.holder_id()), "{acquired}");
    let holder = guard.holder_id().to_owned();
    guard.release().await.unwrap();
    let released = until("released").await;
    assert!(released.contains(&holder), "{released}");
    child.kill().await.unwrap();
}
