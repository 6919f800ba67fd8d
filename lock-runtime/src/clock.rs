//! The loss clock every engine keeps: a hold counts as held until its
//! lease, counted from the send time of the call that last confirmed it
//! and less a safety margin, runs out by this client's clock (DESIGN §5).
//!
//! Every instant the shared layers and the engines keep is tokio's
//! ([`tokio::time::Instant`]), never the system's: under
//! `tokio::time::pause()` (a test's virtual time, DESIGN §12) a lease, a
//! wait's deadline and the watchdog's rounds follow the test's clock. With
//! tokio's `test-util` feature off (a service's build) it reads the same
//! monotonic clock as `std::time::Instant`, at the same cost.

use std::time::Duration;
use tokio::time::Instant;

use tokio::sync::watch;

/// Whether a hold still counts as held, by the client's clock.
#[cfg_attr(not(any(feature = "redis", feature = "etcd")), allow(dead_code))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Validity {
    /// The watchdog found the hold gone (or a renewal came back too late).
    pub(crate) lost: bool,
    /// The hold counts as lost from this instant unless renewed first.
    pub(crate) until: Instant,
}

#[cfg_attr(not(any(feature = "redis", feature = "etcd")), allow(dead_code))]
impl Validity {
    pub(crate) fn is_lost(&self) -> bool {
        self.lost || Instant::now() >= self.until
    }
}

/// The safety margin taken off a lease by the client's clock: 1% of the lease
/// plus 2 ms (the clock-drift allowance of the Redlock description). The
/// lease is counted from before the call that confirmed it, so the server
/// (which starts counting later) always expires the key after the client
/// counts the hold lost.
pub(crate) fn margin(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// When a hold confirmed by a call sent at `sent` for `lease` stops counting.
pub(crate) fn valid_until(sent: Instant, lease: Duration) -> Instant {
    let left = lease.saturating_sub(margin(lease));
    sent.checked_add(left).unwrap_or(sent)
}

/// Resolves when `validity` counts as lost: marked lost, its time run out,
/// or its sender gone (nobody keeps the hold any more).
#[cfg_attr(not(any(feature = "redis", feature = "etcd")), allow(dead_code))]
pub(crate) async fn until_lost(mut validity: watch::Receiver<Validity>) {
    loop {
        let now = *validity.borrow_and_update();
        if now.is_lost() {
            return;
        }
        tokio::select! {
            changed = validity.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep_until(now.until) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_is_one_percent_and_two_milliseconds() {
        assert_eq!(margin(Duration::from_secs(10)), Duration::from_millis(102));
        let sent = Instant::now();
        assert_eq!(
            valid_until(sent, Duration::from_secs(10)),
            sent + Duration::from_millis(9_898)
        );
        // A lease shorter than the margin is lost at once, never in the past.
        assert_eq!(valid_until(sent, Duration::from_millis(1)), sent);
    }
}
