//! The watchdog: one task per client keeps every lock held without a fixed
//! lease alive.
//!
//! Each tick (a third of `watchdog_timeout`) renews all registered holds in
//! batched script calls, one per lock layout (and, on a cluster, per slot). A
//! hold the server no longer has is dropped from the registry and its guards
//! are told the lease was lost.
//! Each hold also has a validity by the client's own clock: the send time of
//! its last confirmed acquire or renewal, plus the lease, minus a safety
//! margin ([`margin`]). Past it the hold counts as lost even if no answer
//! came back (a stalled link), before the server could expire the key and
//! give the lock to someone else; a renewal confirmed after that point does
//! not revive it. Guards unregister before their unlock script runs, so a
//! released guard is never renewed again.

use std::collections::HashMap;

/// The live holds, looked up on every acquire and release: hashed fast.
type Entries = foldhash::HashMap<HoldKey, Entry>;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};
use std::time::Duration;
use tokio::time::Instant;

use tokio::sync::watch;
use tracing::Instrument;

use crate::clock::{Validity, valid_until};
use crate::engine::redis::conn::Conn;
use crate::engine::redis::scripts::SCRIPTS;

/// How a hold is renewed: which script and which keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RenewKind {
    /// A HASH whose field is the holder (reentrant and fair locks).
    Hash,
    /// A read-write lock: the holder's read-hold keys and the HASH.
    ReadWrite,
    /// A semaphore's permit: the holder's member of the permits ZSET.
    Permits,
}

/// One renewable hold: a holder's hold on one lock.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct HoldKey {
    pub(crate) kind: RenewKind,
    pub(crate) name: String,
    pub(crate) holder: String,
}

struct Entry {
    /// The hold's `kind` label for `lock_lost_total`.
    metric: &'static str,
    /// Guards sharing this hold (re-entries in one call chain).
    guards: usize,
    /// Tells a new registration of the same key from an old one.
    epoch: u64,
    validity: watch::Sender<Validity>,
}

impl Entry {
    fn mark_lost(&self) {
        crate::telemetry::lost(self.metric);
        self.validity.send_modify(|v| v.lost = true);
    }
}

/// A guard's registration; give it back with [`Watchdog::unregister`].
#[derive(Debug)]
pub(crate) struct Registration {
    key: HoldKey,
    epoch: u64,
}

#[derive(Default)]
pub(crate) struct Watchdog {
    entries: Mutex<Entries>,
    epochs: AtomicU64,
}

/// Most locks renewed by one script call.
const BATCH: usize = 500;

impl Watchdog {
    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts renewing `key`, just acquired (or re-entered) by a call sent at
    /// `sent` for `lease`. The receiver follows the hold's validity. A
    /// re-entry joins its holder's entry, unless that entry already counts
    /// as lost: then the new hold gets an entry of its own, and the old
    /// guards stay lost.
    pub(crate) fn register(
        &self,
        key: HoldKey,
        sent: Instant,
        lease: Duration,
        metric: &'static str,
    ) -> (Registration, watch::Receiver<Validity>) {
        use std::collections::hash_map::Entry as Slot;
        let until = valid_until(sent, lease);
        let fresh = || Entry {
            metric,
            guards: 0,
            epoch: self.epochs.fetch_add(1, Ordering::Relaxed),
            validity: watch::channel(Validity { lost: false, until }).0,
        };
        let mut entries = self.entries();
        let entry = match entries.entry(key.clone()) {
            Slot::Occupied(slot) if !slot.get().validity.borrow().is_lost() => slot.into_mut(),
            Slot::Occupied(mut slot) => {
                slot.insert(fresh());
                slot.into_mut()
            }
            Slot::Vacant(slot) => slot.insert(fresh()),
        };
        entry.guards += 1;
        entry.validity.send_if_modified(|v| {
            let later = until > v.until;
            v.until = v.until.max(until);
            later
        });
        let registration = Registration {
            key,
            epoch: entry.epoch,
        };
        (registration, entry.validity.subscribe())
    }

    /// Stops renewing for this guard (the hold stays renewed while other
    /// re-entries of the same holder share it).
    pub(crate) fn unregister(&self, registration: &Registration) {
        let mut entries = self.entries();
        if let Some(entry) = entries.get_mut(&registration.key)
            && entry.epoch == registration.epoch
        {
            entry.guards -= 1;
            if entry.guards == 0 {
                entries.remove(&registration.key);
            }
        }
    }

    /// The holds of lock `name` being renewed now (with their epochs).
    pub(crate) fn holds_of(&self, name: &str) -> Vec<(HoldKey, u64)> {
        self.entries()
            .iter()
            .filter(|(key, _)| key.name == name)
            .map(|(key, entry)| (key.clone(), entry.epoch))
            .collect()
    }

    /// These holds were deleted by this client (`force_unlock`): lost now,
    /// not at the next renewal (issue 34). A hold registered since (a new
    /// epoch) is left alone.
    pub(crate) fn deleted(&self, holds: &[(HoldKey, u64)]) {
        let mut entries = self.entries();
        for (key, epoch) in holds {
            if entries.get(key).is_some_and(|e| e.epoch == *epoch) {
                tracing::warn!(lock = %key.name, holder = %key.holder, "lease lost: this client force-unlocked the lock");
                if let Some(entry) = entries.remove(key) {
                    entry.mark_lost();
                }
            }
        }
    }

    /// Number of holds being renewed.
    pub(crate) fn len(&self) -> usize {
        self.entries().len()
    }

    fn snapshot(&self) -> HashMap<RenewKind, Vec<(HoldKey, u64)>> {
        let mut by_kind: HashMap<RenewKind, Vec<(HoldKey, u64)>> = HashMap::new();
        for (key, entry) in self.entries().iter() {
            by_kind
                .entry(key.kind)
                .or_default()
                .push((key.clone(), entry.epoch));
        }
        by_kind
    }

    /// Applies one batch's answers, `renewed[i]` for `batch[i]`, from calls
    /// sent at `sent`. A renewal that comes back after its hold's validity
    /// ran out does not revive it: its guards may already have acted on the
    /// loss.
    fn settle(&self, batch: &[(HoldKey, u64)], renewed: &[bool], sent: Instant, lease: Duration) {
        let until = valid_until(sent, lease);
        let mut entries = self.entries();
        crate::telemetry::renewed(renewed.iter().filter(|&&ok| ok).count() as u64);
        for ((key, epoch), &ok) in batch.iter().zip(renewed) {
            let Some(entry) = entries.get_mut(key) else {
                continue;
            };
            if entry.epoch != *epoch {
                continue;
            }
            if !ok {
                tracing::warn!(lock = %key.name, holder = %key.holder, "lease lost: the lock is no longer held");
            } else if entry.validity.borrow().is_lost() {
                tracing::warn!(lock = %key.name, holder = %key.holder, "lease lost: the renewal was confirmed too late");
            } else {
                entry.validity.send_if_modified(|v| {
                    let later = until > v.until;
                    v.until = v.until.max(until);
                    later
                });
                continue;
            }
            entry.mark_lost();
            entries.remove(key);
        }
    }

    /// After a failed renewal: holds whose validity ran out are lost for
    /// certain (their guards already count them lost); stop renewing them.
    fn expire(&self, batch: &[(HoldKey, u64)]) {
        let mut entries = self.entries();
        for (key, epoch) in batch {
            let Some(entry) = entries.get(key) else {
                continue;
            };
            if entry.epoch == *epoch && entry.validity.borrow().is_lost() {
                tracing::warn!(lock = %key.name, holder = %key.holder, "lease lost: no renewal reached Redis in time");
                entry.mark_lost();
                entries.remove(key);
            }
        }
    }
}

/// Starts the client's watchdog task on the current (background) runtime:
/// every `period` it renews the holds of `registry` for `lease` through
/// `conn`. It ends when the registry (the client) is gone.
pub(crate) fn spawn(registry: Weak<Watchdog>, conn: Conn, lease: Duration, period: Duration) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(registry) = registry.upgrade() else {
                break;
            };
            if registry.len() > 0 {
                tick(&registry, &conn, lease)
                    .instrument(tracing::debug_span!("renew"))
                    .await;
            }
        }
    });
}

async fn tick(registry: &Watchdog, conn: &Conn, lease: Duration) {
    let mut batches = Vec::new();
    for (kind, holds) in registry.snapshot() {
        for group in by_slot(conn, holds) {
            for batch in group.chunks(BATCH) {
                batches.push((kind, batch.to_vec()));
            }
        }
    }
    // All at once: a slow node (a cluster shard in failover) does not hold up
    // the renewals of the others.
    let renewals = batches.iter().map(|(kind, batch)| async move {
        // The lease counts from before the call: an answer that arrives
        // late must not stretch it.
        let sent = Instant::now();
        match renew(conn, *kind, batch, lease).await {
            Ok(renewed) => registry.settle(batch, &renewed, sent, lease),
            Err(e) => {
                tracing::warn!(error = %e, locks = batch.len(), "renewal failed");
                registry.expire(batch);
            }
        }
    });
    futures_util::future::join_all(renewals).await;
}

/// On a cluster one script call may only touch keys of one slot, so holds
/// are renewed per slot (a lock's derived keys share its slot); elsewhere
/// they stay one group.
fn by_slot(conn: &Conn, holds: Vec<(HoldKey, u64)>) -> Vec<Vec<(HoldKey, u64)>> {
    if !conn.is_cluster() {
        return vec![holds];
    }
    let mut groups: HashMap<u16, Vec<(HoldKey, u64)>> = HashMap::new();
    for hold in holds {
        groups
            .entry(crate::engine::redis::conn::slot(&hold.0.name))
            .or_default()
            .push(hold);
    }
    groups.into_values().collect()
}

/// Renews one hold for `lease` (a guard extending its fixed lease): whether
/// the holder still held it.
pub(crate) async fn renew_one(
    conn: &Conn,
    key: &HoldKey,
    lease: Duration,
) -> Result<bool, redis::RedisError> {
    let renewed = renew(conn, key.kind, &[(key.clone(), 0)], lease).await?;
    Ok(renewed.first().copied().unwrap_or(false))
}

/// Renews one batch of holds of one layout; one script call.
async fn renew(
    conn: &Conn,
    kind: RenewKind,
    batch: &[(HoldKey, u64)],
    lease: Duration,
) -> Result<Vec<bool>, redis::RedisError> {
    let mut conn = conn.clone();
    match kind {
        // The same keys and arguments: the hold's key and its record of
        // re-entered holds, per holder.
        RenewKind::Hash | RenewKind::Permits => {
            let script = match kind {
                RenewKind::Permits => &SCRIPTS.semaphore_renew,
                _ => &SCRIPTS.renew,
            };
            let mut call = script.prepare_invoke();
            call.arg(crate::config::millis(lease));
            for (key, _) in batch {
                call.key(&key.name)
                    .key(crate::engine::redis::keys::holds_key(&key.name))
                    .arg(&key.holder);
            }
            let answers: Vec<i64> = call.invoke_async(&mut conn).await?;
            Ok(answers.into_iter().map(|a| a == 1).collect())
        }
        RenewKind::ReadWrite => {
            let mut call = SCRIPTS.rw_renew.prepare_invoke();
            call.arg(crate::config::millis(lease));
            for (key, _) in batch {
                call.key(&key.name)
                    .key(crate::engine::redis::keys::rw_timeout_prefix(
                        &key.name,
                        &key.holder,
                    ))
                    .key(crate::engine::redis::keys::holds_key(&key.name))
                    .arg(&key.holder);
            }
            let answers: Vec<i64> = call.invoke_async(&mut conn).await?;
            Ok(answers.into_iter().map(|a| a == 1).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> HoldKey {
        HoldKey {
            kind: RenewKind::Hash,
            name: "x".into(),
            holder: "c:1".into(),
        }
    }

    #[test]
    fn a_confirmation_after_the_deadline_does_not_revive_a_hold() {
        let dog = Watchdog::default();
        let long_ago = Instant::now() - Duration::from_secs(10);
        let (registration, validity) =
            dog.register(key(), long_ago, Duration::from_secs(1), "reentrant");
        assert!(validity.borrow().is_lost(), "lost by the clock");
        dog.settle(
            &[(key(), registration.epoch)],
            &[true],
            Instant::now(),
            Duration::from_secs(1),
        );
        assert!(
            validity.borrow().lost,
            "a late renewal marks it lost for good"
        );
        assert_eq!(dog.len(), 0, "and stops renewing it");
    }

    #[test]
    fn a_renewal_in_time_moves_the_deadline_and_a_reentry_never_shortens_it() {
        let dog = Watchdog::default();
        let now = Instant::now();
        let (registration, validity) =
            dog.register(key(), now, Duration::from_secs(30), "reentrant");
        let first = validity.borrow().until;
        // A re-entry confirmed earlier (a shorter promise) keeps the later deadline.
        let (again, _) = dog.register(
            key(),
            now - Duration::from_secs(5),
            Duration::from_secs(30),
            "reentrant",
        );
        assert_eq!(again.epoch, registration.epoch, "one entry per holder");
        assert_eq!(validity.borrow().until, first);
        let later = now + Duration::from_secs(1);
        dog.settle(
            &[(key(), registration.epoch)],
            &[true],
            later,
            Duration::from_secs(30),
        );
        assert!(validity.borrow().until > first);
        assert!(!validity.borrow().is_lost());
    }

    #[test]
    fn a_new_hold_never_joins_an_entry_that_counts_as_lost() {
        let dog = Watchdog::default();
        let long_ago = Instant::now() - Duration::from_secs(10);
        let (old, old_validity) =
            dog.register(key(), long_ago, Duration::from_secs(1), "reentrant");
        let (new, new_validity) =
            dog.register(key(), Instant::now(), Duration::from_secs(30), "reentrant");
        assert_ne!(old.epoch, new.epoch);
        assert!(old_validity.borrow().is_lost());
        assert!(!new_validity.borrow().is_lost());
        // The old guard's unregistering leaves the new entry alone.
        dog.unregister(&old);
        assert_eq!(dog.len(), 1);
    }
}
