//! What starting any server shares: free ports, a fresh directory, the
//! wait for it to be ready, and the tail of its log for an error message.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How often a wait for a server probes it again.
pub const PROBE_EVERY: Duration = Duration::from_millis(50);

/// How a wait for a starting server ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    Ready,
    /// The process ended by itself.
    Exited,
    TimedOut,
}

/// Checks `ready` every [`PROBE_EVERY`] for at most `within`, giving up as
/// soon as `exited` holds. Blocks the thread: for start-up, before clients
/// exist.
pub(crate) fn wait_for(
    within: Duration,
    mut exited: impl FnMut() -> bool,
    mut ready: impl FnMut() -> bool,
) -> Outcome {
    let deadline = Instant::now() + within;
    loop {
        if exited() {
            return Outcome::Exited;
        }
        if ready() {
            return Outcome::Ready;
        }
        if Instant::now() >= deadline {
            return Outcome::TimedOut;
        }
        std::thread::sleep(PROBE_EVERY);
    }
}

/// `n` distinct free loopback ports, none of them among `defaults` (the
/// server's own default ports, which this machine's services may use).
pub fn free_ports(n: usize, defaults: &[u16]) -> Vec<u16> {
    let mut ports = Vec::with_capacity(n);
    while ports.len() < n {
        let port = crate::free_port();
        if !ports.contains(&port) && !defaults.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

/// A fresh, empty directory `<temp dir>/<prefix><pid>-<n>`, unique to this
/// process and call.
pub fn fresh_dir(prefix: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "{prefix}{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("a temporary directory {}: {e}", dir.display()));
    dir
}

/// The last 40 lines of a log file, for error messages.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
