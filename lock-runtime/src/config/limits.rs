//! The limits every duration is held to: what a lease, a wait or a
//! timeout may be, refused with a typed error, never a panic.

use std::time::Duration;

use crate::error::LockError;

/// The longest duration accepted for a lease, a wait deadline's arithmetic
/// or any [`Config`](crate::Config) timeout: 100 years. Redis keeps expiries in
/// milliseconds and scripts compute with Lua numbers (exact to 2^53), and
/// `Instant` arithmetic must not overflow; 100 years is far inside all three.
/// Longer values are refused with [`LockError::Config`], never a panic.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Refuses a duration longer than [`MAX_DURATION`].
pub(crate) fn check_duration(what: &str, value: Duration) -> Result<(), LockError> {
    if value > MAX_DURATION {
        return Err(LockError::Config(format!(
            "{what} {value:?} is longer than the longest supported duration (100 years)"
        )));
    }
    Ok(())
}

/// A duration in whole milliseconds, for Redis (at least 1; callers checked
/// it against [`MAX_DURATION`], so it fits).
#[cfg(feature = "redis")]
pub(crate) fn millis(value: Duration) -> u64 {
    u64::try_from(value.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Checks a lease asked for: longer than zero, at most [`crate::MAX_DURATION`].
pub(crate) fn check_lease(lease: Option<Duration>) -> Result<(), LockError> {
    match lease {
        Some(lease) if lease.is_zero() => {
            Err(LockError::Config("a lease must be longer than zero".into()))
        }
        Some(lease) => check_duration("lease", lease),
        None => Ok(()),
    }
}
