//! What one acquisition asks for, whatever the engine, resolved once by
//! its builder ([`Request`]: which lock, of which [`Kind`], waiting how
//! long, with which [`Lease`]), and the shared rules of its wait (the
//! backoff between tries, the error of a wait that ran out).
//!
//! Below the engines and the acquire loop, which both read it.

use std::time::Duration;
use tokio::time::Instant;

use crate::config::Config;
use crate::error::LockError;

/// Which lock of Redisson's family an acquisition is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Redisson's `RLock`.
    Reentrant,
    /// Redisson's `RFairLock`.
    Fair,
    /// The read side of Redisson's `RReadWriteLock`.
    Read,
    /// The write side of Redisson's `RReadWriteLock`.
    Write,
    /// One permit of a semaphore of this many permits (DESIGN §11): taken
    /// while fewer than that many permits of the name are held.
    Semaphore(u32),
}

impl Kind {
    /// Its name in metrics, spans and `inspect`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Reentrant => "reentrant",
            Kind::Fair => "fair",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Semaphore(_) => "semaphore",
        }
    }
}

/// How long a hold's lease is, decided once per acquisition: the
/// builder's fixed lease, or the client's watchdog timeout renewed by the
/// watchdog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    /// The lease's length.
    pub(crate) length: Duration,
    /// Whether the watchdog renews it (no fixed lease was asked for).
    pub(crate) renewed: bool,
}

impl Lease {
    /// The fixed lease, when the acquisition asked for one.
    pub(crate) fn fixed(self) -> Option<Duration> {
        (!self.renewed).then_some(self.length)
    }
}

/// One acquisition, resolved once by its builder and passed down by
/// reference: the lock's name and kind, the wait, the lease decided once,
/// the holder number, the label it is counted under, and the minimum it
/// is kept taken.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) name: String,
    pub(crate) kind: Kind,
    /// `None`: wait until acquired. `Duration::ZERO`: one attempt.
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Lease,
    /// Keep the lock taken at least this long after it was acquired, even
    /// when released sooner (`hold_at_least`).
    pub(crate) hold_at_least: Option<Duration>,
    /// The holder number of a new hold (a multi lock's parts share one);
    /// `None`: a fresh one. Ignored when the scope re-enters.
    pub(crate) number: Option<u64>,
    /// The `kind` label its metrics carry: the lock's own, or the whole's
    /// (`"multi"`, `"quorum"`) for a part of a lock of several.
    pub(crate) metric: &'static str,
    /// Whether the acquisition records its own outcome (a part's whole
    /// records it instead).
    pub(crate) recorded: bool,
    /// When the wait ends (`None`: never), set as the acquisition starts
    /// ([`start`](Self::start)).
    pub(crate) deadline: Option<Instant>,
}

impl Request {
    /// An acquisition of lock `name` of `kind` on a client of `config`:
    /// waiting until acquired, its lease kept by the watchdog.
    pub(crate) fn new(name: String, kind: Kind, config: &Config) -> Request {
        Request {
            name,
            kind,
            wait: None,
            lease: Lease {
                length: config.watchdog_timeout,
                renewed: true,
            },
            hold_at_least: None,
            number: None,
            metric: kind.label(),
            recorded: true,
            deadline: None,
        }
    }

    /// With the wait and the fixed lease (`None`: the watchdog's) a
    /// builder of several locks was given.
    pub(crate) fn asking(mut self, wait: Option<Duration>, lease: Option<Duration>) -> Request {
        self.wait = wait;
        if let Some(lease) = lease {
            self.fixed_lease(lease);
        }
        self
    }

    /// A fixed lease: the lock expires after it unless released first.
    pub(crate) fn fixed_lease(&mut self, lease: Duration) {
        self.lease = Lease {
            length: lease,
            renewed: false,
        };
    }

    /// A part of a lock of several, counted under `metric` (which records
    /// the whole's outcome), held by holder `number` (`None`: a fresh one).
    pub(crate) fn part_of(mut self, metric: &'static str, number: Option<u64>) -> Request {
        self.metric = metric;
        self.recorded = false;
        self.number = number;
        self
    }

    /// Whether it is one attempt (a zero wait).
    #[cfg_attr(not(turns), allow(dead_code))]
    pub(crate) fn once(&self) -> bool {
        self.wait == Some(Duration::ZERO)
    }

    /// Starts the acquisition now: its deadline is set (a deadline the
    /// clock cannot represent is none). Returns when it started.
    pub(crate) fn start(&mut self) -> Instant {
        let started = Instant::now();
        self.deadline = self.wait.and_then(|w| started.checked_add(w));
        started
    }

    /// The error of its wait that ran out.
    pub(crate) fn timed_out(&self) -> LockError {
        LockError::Timeout {
            name: self.name.clone(),
            waited: self.wait.unwrap_or_default(),
        }
    }

    /// What is checked before anything is sent: the name, the lease and
    /// the minimum.
    pub(crate) fn check(&self) -> Result<(), LockError> {
        check_name(&self.name)?;
        if self.kind == Kind::Semaphore(0) {
            return Err(LockError::Config(format!(
                "semaphore `{}` of 0 permits: nobody could ever hold it; give at least 1",
                self.name
            )));
        }
        crate::config::check_lease(self.lease.fixed())?;
        let Some(minimum) = self.hold_at_least else {
            return Ok(());
        };
        crate::config::check_duration("hold_at_least", minimum)?;
        if matches!(self.kind, Kind::Read | Kind::Write) {
            return Err(LockError::Config(format!(
                "lock `{}`: hold_at_least is for reentrant and fair locks and semaphores, not \
                 read-write locks",
                self.name
            )));
        }
        if let Some(lease) = self.lease.fixed()
            && minimum > lease
        {
            return Err(LockError::Config(format!(
                "lock `{}`: hold_at_least ({minimum:?}) is longer than the fixed lease \
                 ({lease:?}), which ends the hold first; make the lease at least as long, \
                 or leave it out (the watchdog then keeps the lock until the minimum)",
                self.name
            )));
        }
        Ok(())
    }
}

/// The pause before the `n`-th retry in a row that has no lease to sleep
/// by (a fair lock between holders, a fault that may heal): 5 ms, doubling
/// up to 1 s.
pub(crate) fn backoff(n: u32) -> Duration {
    Duration::from_millis(5u64 << n.saturating_sub(1).min(8)).min(Duration::from_secs(1))
}

/// Sleeps for `pause`, or until `deadline` if that is sooner.
pub(crate) async fn pause_within(deadline: Option<tokio::time::Instant>, pause: Duration) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.min(tokio::time::Instant::now() + pause)).await,
        None => tokio::time::sleep(pause).await,
    }
}

/// `$wait` (a future's expression), or the error of a wait that ran out at
/// `$deadline`. What is ready is taken first, however late; a waiter
/// without a deadline carries no room for a timer (it is boxed). A macro,
/// not a fn: a future passed to a fn is kept twice in its caller's state
/// (as passed, and as polled), and a waiter carries that state.
#[cfg_attr(not(turns), allow(unused_macros))]
macro_rules! within {
    ($wait:expr, $deadline:expr, $request:expr) => {
        match $deadline {
            None => Ok($wait.await),
            Some(deadline) => {
                let expired = Box::pin(tokio::time::sleep_until(deadline));
                tokio::select! {
                    biased;
                    ready = $wait => Ok(ready),
                    () = expired => Err($crate::request::Request::timed_out($request)),
                }
            }
        }
    };
}
#[cfg_attr(not(turns), allow(unused_imports))]
pub(crate) use within;

/// Whether `text` matches `pattern` (`*`: any run, `?`: any one byte).
#[cfg_attr(not(turns), allow(dead_code))]
pub(crate) fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match (pattern.split_first(), text.split_first()) {
        (None, None) => true,
        (Some((b'*', rest)), _) => {
            glob(rest, text) || text.split_first().is_some_and(|(_, t)| glob(pattern, t))
        }
        (Some((b'?', rest)), Some((_, t))) => glob(rest, t),
        (Some((p, rest)), Some((c, t))) if p == c => glob(rest, t),
        _ => false,
    }
}

/// Rejects names that cannot be a lock.
pub(crate) fn check_name(name: &str) -> Result<(), LockError> {
    if name.is_empty() {
        return Err(LockError::BadName {
            name: name.to_owned(),
            reason: "a lock name must not be empty",
        });
    }
    if name.len() > 64 * 1024 {
        return Err(LockError::BadName {
            name: format!("{}...", name.chars().take(32).collect::<String>()),
            reason: "a lock name must be at most 64 KiB",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_names_are_rejected() {
        assert!(matches!(check_name(""), Err(LockError::BadName { .. })));
        assert!(check_name("x").is_ok());
    }
}
