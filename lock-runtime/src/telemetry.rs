//! Metrics through the `metrics` facade (feature `metrics`; the names and
//! labels of DESIGN §3). Without the feature every function here is an
//! empty inline function and every type is zero-sized: nothing is counted,
//! stored or called.
//!
//! | name | type | labels | what |
//! | --- | --- | --- | --- |
//! | `lock_acquire_seconds` | histogram | `kind`, `outcome` | time to acquire; `outcome` is `acquired`, `timeout` (busy for the whole wait, or a `try_acquire` that found it busy) or `error` |
//! | `lock_held_seconds` | histogram | `kind` | time from acquisition to release (or drop) of each hold |
//! | `lock_lost_total` | counter | `kind` | holds lost before release (re-entries of one hold count once) |
//! | `lock_renewals_total` | counter | | leases renewed: watchdog renewals and `extend` |
//! | `lock_replica_sync_skipped_total` | counter | | acquisitions that did not wait for a replica (`ReplicaSync::Auto`) because the lock's master had replicas attached but none healthy (not online, or no acknowledgement within 2 s) |
//! | `lock_held` | gauge | `kind` | holds this process has now |
//! | `lock_waiters` | gauge | `kind` | callers of this process waiting for a lock now |
//!
//! `kind` is `reentrant`, `fair`, `read`, `write`, `multi`, `quorum` or
//! `semaphore` (one permit of a semaphore, counted as a lock is): a
//! multi or quorum lock records one `lock_acquire_seconds` sample per
//! acquisition, and each of its holds counts in the other metrics under its
//! kind. Lock names are never labels (their number is unbounded).

use std::time::Duration;

#[cfg(feature = "metrics")]
use tokio::time::Instant;

/// Describes the metrics (unit, help text) to the installed recorder, once
/// per process: exporters print it (`# HELP` in Prometheus).
pub(crate) fn describe() {
    #[cfg(feature = "metrics")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            use metrics::Unit;
            metrics::describe_histogram!(
                "lock_acquire_seconds",
                Unit::Seconds,
                "Time to acquire a lock, by kind and outcome (acquired, timeout, error)"
            );
            metrics::describe_histogram!(
                "lock_held_seconds",
                Unit::Seconds,
                "Time from acquisition to release of each hold"
            );
            metrics::describe_counter!(
                "lock_lost_total",
                "Holds whose lease was lost before release"
            );
            metrics::describe_counter!("lock_renewals_total", "Leases renewed");
            metrics::describe_counter!(
                "lock_replica_sync_skipped_total",
                "Acquisitions that did not wait for a replica: the master had replicas, none healthy"
            );
            metrics::describe_gauge!("lock_held", "Holds this process has now");
            metrics::describe_gauge!("lock_waiters", "Callers of this process waiting for a lock");
        });
    }
}

/// The keys of a metric labelled `kind`, one per kind in [`KINDS`]'s
/// order (and `$label` `$value` after it): made at compile time, their
/// hashes too, so that a sample builds, allocates and hashes no key.
#[cfg(feature = "metrics")]
macro_rules! by_kind {
    ($name:literal $(, $label:literal => $value:literal)?) => {
        [
            by_kind!(@one $name, "reentrant" $(, $label => $value)?),
            by_kind!(@one $name, "fair" $(, $label => $value)?),
            by_kind!(@one $name, "read" $(, $label => $value)?),
            by_kind!(@one $name, "write" $(, $label => $value)?),
            by_kind!(@one $name, "multi" $(, $label => $value)?),
            by_kind!(@one $name, "quorum" $(, $label => $value)?),
            by_kind!(@one $name, "semaphore" $(, $label => $value)?),
        ]
    };
    (@one $name:literal, $kind:literal $(, $label:literal => $value:literal)?) => {{
        static LABELS: &[metrics::Label] = &[
            metrics::Label::from_static_parts("kind", $kind),
            $(metrics::Label::from_static_parts($label, $value))?
        ];
        metrics::Key::from_static_parts($name, LABELS)
    }};
}

/// The `kind` labels, in the order of the keys [`by_kind!`] makes.
#[cfg(feature = "metrics")]
const KINDS: [&str; 7] = [
    "reentrant",
    "fair",
    "read",
    "write",
    "multi",
    "quorum",
    "semaphore",
];

/// The `outcome` labels ([`outcome`]), in the order of
/// [`ACQUIRE_SECONDS`].
#[cfg(feature = "metrics")]
const OUTCOMES: [&str; 3] = ["acquired", "timeout", "error"];

#[cfg(feature = "metrics")]
static ACQUIRE_SECONDS: [[metrics::Key; 7]; 3] = [
    by_kind!("lock_acquire_seconds", "outcome" => "acquired"),
    by_kind!("lock_acquire_seconds", "outcome" => "timeout"),
    by_kind!("lock_acquire_seconds", "outcome" => "error"),
];
#[cfg(feature = "metrics")]
static HELD_SECONDS: [metrics::Key; 7] = by_kind!("lock_held_seconds");
#[cfg(feature = "metrics")]
static LOST_TOTAL: [metrics::Key; 7] = by_kind!("lock_lost_total");
#[cfg(feature = "metrics")]
static HELD: [metrics::Key; 7] = by_kind!("lock_held");
#[cfg(feature = "metrics")]
static WAITERS: [metrics::Key; 7] = by_kind!("lock_waiters");

/// What the `metrics` macros say of a metric of this crate (its target and
/// level).
#[cfg(feature = "metrics")]
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// The key of `kind` among `keys` (made by [`by_kind!`]).
#[cfg(feature = "metrics")]
fn key_of<'k>(keys: &'k [metrics::Key; 7], kind: &str) -> &'k metrics::Key {
    // Every kind is one of KINDS; anything else would count as the first.
    let at = KINDS.iter().position(|k| *k == kind);
    debug_assert!(at.is_some(), "a metric kind without keys: {kind}");
    let at = at.unwrap_or(0);
    &keys[at]
}

#[cfg(feature = "metrics")]
fn gauge(keys: &[metrics::Key; 7], kind: &str) -> metrics::Gauge {
    metrics::with_recorder(|r| r.register_gauge(key_of(keys, kind), &METADATA))
}

#[cfg(feature = "metrics")]
fn counter(keys: &[metrics::Key; 7], kind: &str) -> metrics::Counter {
    metrics::with_recorder(|r| r.register_counter(key_of(keys, kind), &METADATA))
}

#[cfg(feature = "metrics")]
fn histogram(keys: &[metrics::Key; 7], kind: &str) -> metrics::Histogram {
    metrics::with_recorder(|r| r.register_histogram(key_of(keys, kind), &METADATA))
}

/// An acquisition's outcome label.
pub(crate) fn outcome<T>(result: &Result<T, crate::error::LockError>) -> &'static str {
    match result {
        Ok(_) => "acquired",
        Err(crate::error::LockError::Timeout { .. }) => "timeout",
        Err(_) => "error",
    }
}

/// Records an acquisition's outcome under `kind` (`None`: a part of a multi
/// or quorum lock, which records its own), timed from `started`.
#[inline]
pub(crate) fn record_acquired<T>(
    kind: Option<&'static str>,
    started: tokio::time::Instant,
    result: &Result<T, crate::error::LockError>,
) {
    if let Some(kind) = kind {
        acquired(kind, outcome(result), started.elapsed());
    }
}

/// Records one acquisition of `kind` with `outcome` that took `took`.
pub(crate) fn acquired(kind: &'static str, outcome: &'static str, took: Duration) {
    #[cfg(feature = "metrics")]
    {
        let at = OUTCOMES.iter().position(|o| *o == outcome);
        debug_assert!(at.is_some(), "an outcome without keys: {outcome}");
        let at = at.unwrap_or(2);
        histogram(&ACQUIRE_SECONDS[at], kind).record(took.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, outcome, took);
}

/// Counts one hold of `kind` lost.
#[inline]
pub(crate) fn lost(kind: &'static str) {
    #[cfg(feature = "metrics")]
    counter(&LOST_TOTAL, kind).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = kind;
}

/// Counts `n` leases renewed.
#[inline]
pub(crate) fn renewed(n: u64) {
    #[cfg(feature = "metrics")]
    if n > 0 {
        metrics::counter!("lock_renewals_total").increment(n);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = n;
}

/// Counts one acquisition that did not wait for a replica (Auto mode): its
/// master had replicas attached, none of them healthy.
#[cfg(feature = "redis")]
#[inline]
pub(crate) fn replica_sync_skipped() {
    #[cfg(feature = "metrics")]
    metrics::counter!("lock_replica_sync_skipped_total").increment(1);
}

/// One hold, in `lock_held` while it lives; its life goes to
/// `lock_held_seconds` when dropped.
pub(crate) struct HeldMetric {
    #[cfg(feature = "metrics")]
    kind: &'static str,
    #[cfg(feature = "metrics")]
    since: Instant,
}

impl HeldMetric {
    #[inline]
    pub(crate) fn start(kind: &'static str) -> HeldMetric {
        #[cfg(feature = "metrics")]
        {
            gauge(&HELD, kind).increment(1.0);
            HeldMetric {
                kind,
                since: Instant::now(),
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = kind;
            HeldMetric {}
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for HeldMetric {
    fn drop(&mut self) {
        gauge(&HELD, self.kind).decrement(1.0);
        histogram(&HELD_SECONDS, self.kind).record(self.since.elapsed().as_secs_f64());
    }
}

/// One waiting caller, in `lock_waiters` while it lives.
pub(crate) struct WaiterMetric {
    #[cfg(feature = "metrics")]
    kind: &'static str,
}

impl WaiterMetric {
    #[inline]
    pub(crate) fn start(kind: &'static str) -> WaiterMetric {
        #[cfg(feature = "metrics")]
        {
            gauge(&WAITERS, kind).increment(1.0);
            WaiterMetric { kind }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = kind;
            WaiterMetric {}
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for WaiterMetric {
    fn drop(&mut self) {
        gauge(&WAITERS, self.kind).decrement(1.0);
    }
}
