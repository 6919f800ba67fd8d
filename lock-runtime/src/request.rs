//! What one acquisition asks for, whatever the engine: which lock
//! ([`Target`]), with which options ([`Options`]), and the shared rules of
//! its wait (the backoff between tries, the error of a wait that ran out).
//!
//! Below the engines and the acquire loop, which both read it.

use std::time::Duration;

use crate::error::LockError;

/// What one hold is on: the kind of lock and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// Redisson's `RLock`.
    Reentrant { name: String },
    /// Redisson's `RFairLock`.
    Fair { name: String },
    /// The read side of Redisson's `RReadWriteLock`.
    Read { name: String },
    /// The write side of Redisson's `RReadWriteLock`.
    Write { name: String },
}

impl Target {
    pub(crate) fn name(&self) -> &str {
        match self {
            Target::Reentrant { name }
            | Target::Fair { name }
            | Target::Read { name }
            | Target::Write { name } => name,
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Target::Reentrant { .. } => "reentrant",
            Target::Fair { .. } => "fair",
            Target::Read { .. } => "read",
            Target::Write { .. } => "write",
        }
    }
}

/// Options of one acquisition, shared by every kind's builder.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    /// The holder number of a new hold (a multi lock's parts share one);
    /// `None`: a fresh one. Ignored when the scope re-enters.
    pub(crate) number: Option<u64>,
    /// The `kind` label of a part of a multi or quorum lock (`"multi"`,
    /// `"quorum"`), which records its own acquisition; `None`: the lock's
    /// own kind, and the acquisition is recorded here.
    pub(crate) metric: Option<&'static str>,
    /// Keep the lock taken at least this long after it was acquired, even
    /// when released sooner (`hold_at_least`).
    pub(crate) hold_at_least: Option<Duration>,
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

/// The error of a wait that ran out.
pub(crate) fn timed_out(target: &Target, options: &Options) -> LockError {
    LockError::Timeout {
        name: target.name().to_owned(),
        waited: options.wait.unwrap_or_default(),
    }
}

/// `$wait` (a future's expression), or the error of a wait that ran out at
/// `$deadline`. What is ready is taken first, however late; a waiter
/// without a deadline carries no room for a timer (it is boxed). A macro,
/// not a fn: a future passed to a fn is kept twice in its caller's state
/// (as passed, and as polled), and a waiter carries that state.
#[cfg_attr(not(turns), allow(unused_macros))]
macro_rules! within {
    ($wait:expr, $deadline:expr, $target:expr, $options:expr) => {
        match $deadline {
            None => Ok($wait.await),
            Some(deadline) => {
                let expired = Box::pin(tokio::time::sleep_until(deadline));
                tokio::select! {
                    biased;
                    ready = $wait => Ok(ready),
                    () = expired => Err($crate::request::timed_out($target, $options)),
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

/// What an acquisition's options are checked for before anything is sent.
pub(crate) fn check_options(target: &Target, options: &Options) -> Result<(), LockError> {
    check_name(target.name())?;
    crate::config::check_lease(options.lease)?;
    let Some(minimum) = options.hold_at_least else {
        return Ok(());
    };
    crate::config::check_duration("hold_at_least", minimum)?;
    if matches!(target, Target::Read { .. } | Target::Write { .. }) {
        return Err(LockError::Config(format!(
            "lock `{}`: hold_at_least is for reentrant and fair locks, not read-write locks",
            target.name()
        )));
    }
    if let Some(lease) = options.lease
        && minimum > lease
    {
        return Err(LockError::Config(format!(
            "lock `{}`: hold_at_least ({minimum:?}) is longer than the fixed lease \
             ({lease:?}), which ends the hold first; make the lease at least as long, \
             or leave it out (the watchdog then keeps the lock until the minimum)",
            target.name()
        )));
    }
    Ok(())
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
