//! One guard's share of a record ([`Hold`]), re-entries counted on the
//! record ([`Counted`]), and the give-back of the record by its chain's
//! last release ([`give_back_retried`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

use super::record::{Record, lost, may_reenter};
use super::turns::Access;
use crate::background::Background;
use crate::error::{LockError, transient};
use crate::holder::{Chain, ScopedHold};
use crate::own::Listed;
use crate::request::{Request, backoff};
use crate::telemetry::HeldMetric;

/// A hold: the record it shares with its chain, and its own token.
pub(crate) struct Hold<R: Record> {
    /// Keeps the client's runtime running until the hold is given back.
    alive: Arc<Background>,
    record: Arc<R>,
    token: u64,
    _listed: Listed,
    metric: &'static str,
    _held: HeldMetric,
    /// `hold_at_least`: until when the lock stays taken.
    keep: Option<Instant>,
    chain: OnceLock<Chain>,
}

impl<R: Record> Hold<R> {
    /// A hold of `record` with `token`, confirmed by a call sent at `sent`,
    /// for `request`.
    pub(crate) fn new(
        alive: Arc<Background>,
        record: Arc<R>,
        token: u64,
        sent: Instant,
        request: &Request,
    ) -> Hold<R> {
        let listed = (record.own()).list(record.who().clone(), token, sent, request.lease.fixed());
        let metric = request.metric;
        let keep = request
            .hold_at_least
            .and_then(|minimum| Instant::now().checked_add(minimum));
        Hold {
            alive,
            record,
            token,
            _listed: listed,
            metric,
            _held: HeldMetric::start(metric),
            keep,
            chain: OnceLock::new(),
        }
    }

    /// The record the hold shares with its chain.
    pub(crate) fn record(&self) -> &Arc<R> {
        &self.record
    }

    pub(crate) fn name(&self) -> &str {
        self.record.name()
    }

    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    pub(crate) fn holder(&self) -> &str {
        self.record.holder()
    }

    pub(crate) fn runtime(&self) -> tokio::runtime::Handle {
        self.record.runtime().clone()
    }

    /// What the holds of this hold's call chain share (made on first use,
    /// holding this hold's minimum).
    fn chain(&self) -> &Chain {
        self.chain.get_or_init(|| Chain::keeping(self.keep))
    }

    pub(crate) fn scoped(&self) -> ScopedHold {
        ScopedHold {
            client: self.record.client_id().to_owned(),
            who: self.record.who().clone(),
            chain: self.chain().clone(),
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.record.is_lost()
    }

    pub(crate) fn remaining(&self) -> Duration {
        self.record.remaining()
    }

    pub(crate) async fn lost(&self) {
        self.record.lost().await;
    }

    /// Gives the hold back: the chain's last release gives the record back
    /// ([`Record::give_back`]); the others only count down.
    /// [`LockError::Lost`] when the hold counted as lost or the record was
    /// not this client's any more.
    pub(crate) async fn release(self) -> Result<(), LockError> {
        let was_lost = self.record.is_lost();
        let keep = self.chain.get().map_or(self.keep, Chain::kept_until);
        let Hold {
            alive,
            record,
            metric,
            _listed,
            ..
        } = self;
        drop(_listed);
        let name = record.name().to_owned();
        let last = record.count().fetch_sub(1, Ordering::AcqRel) == 1;
        let released = if last {
            // In the caller's task, with no thread hop: if the caller
            // leaves before it is done, it is done again on the client's
            // runtime (a give-back is idempotent), never finished on the
            // caller's, which may be gone.
            let mut resume = Resume(Some((record.clone(), keep)));
            let released = record.give_back(keep).await;
            resume.0 = None;
            released
        } else {
            Ok(true)
        };
        drop(alive);
        let result = match released {
            Ok(true) if !was_lost => Ok(()),
            Ok(_) => Err(lost(&name)),
            Err(e) => Err(e),
        };
        if matches!(result, Err(LockError::Lost { .. })) {
            crate::telemetry::lost(metric);
        }
        result
    }
}

/// A release whose caller left before it was done: done again on the
/// client's runtime when dropped armed.
struct Resume<R: Record>(Option<(Arc<R>, Option<Instant>)>);

impl<R: Record> Drop for Resume<R> {
    fn drop(&mut self) {
        if let Some((record, keep)) = self.0.take() {
            let runtime = record.runtime().clone();
            runtime.spawn(async move {
                if let Err(e) = record.give_back(keep).await {
                    tracing::warn!(error = %e, "the release of a hold whose caller left failed");
                }
            });
        }
    }
}

/// A re-entry of a record's hold, counted on the record: taken back when
/// dropped armed (the re-entry failed or was dropped), and then, if the
/// chain's other holds were given back meanwhile, the record is given back
/// (in the background: the caller has its error), keeping the chain's
/// minimum.
pub(crate) struct Counted<R: Record> {
    record: Arc<R>,
    chain: Chain,
    armed: bool,
}

impl<R: Record> Counted<R> {
    /// Counts a re-entry of `record` asking for `asked` in `chain`'s
    /// scope: of the write a read was taken under, when a read's scope
    /// asks for the write (see [`Downgrade`]). [`LockError::Lost`] when
    /// the hold is lost or its last release is under way.
    pub(crate) fn count(
        record: Arc<R>,
        asked: Access,
        chain: Chain,
    ) -> Result<Counted<R>, LockError> {
        let mut record = record;
        while let Some(write) =
            may_reenter(record.name(), record.access(), asked, record.downgrade())?
        {
            // A read under this chain's own write: the write re-entered.
            record = write;
        }
        if record.is_lost() {
            return Err(lost(record.name()));
        }
        // Counted first, never from 0: a last release under way meanwhile
        // has given the record back.
        let counted = record
            .count()
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then_some(n + 1)
            });
        if counted.is_err() {
            return Err(lost(record.name()));
        }
        Ok(Counted {
            record,
            chain,
            armed: true,
        })
    }

    /// The record re-entered.
    pub(crate) fn record(&self) -> &Arc<R> {
        &self.record
    }

    /// The re-entry's hold, with `token` confirmed by a call sent at
    /// `sent`.
    pub(crate) fn hold(
        mut self,
        alive: Arc<Background>,
        token: u64,
        sent: Instant,
        request: &Request,
    ) -> Hold<R> {
        self.armed = false;
        let held = Hold::new(alive, self.record.clone(), token, sent, request);
        let _ = held.chain.set(self.chain.clone());
        if let (Some(chain), Some(keep)) = (held.chain.get(), held.keep) {
            chain.keep_until(keep);
        }
        held
    }
}

impl<R: Record> Drop for Counted<R> {
    fn drop(&mut self) {
        if self.armed && self.record.count().fetch_sub(1, Ordering::AcqRel) == 1 {
            let (record, keep) = (self.record.clone(), self.chain.kept_until());
            let runtime = record.runtime().clone();
            runtime.spawn(async move {
                let _ = record.give_back(keep).await;
            });
        }
    }
}

/// Gives `record` back with [`Record::give_back_once`], trying again a
/// call whose answer was lost (each names the record, so it is
/// idempotent); a retry that finds the record gone counts as given back
/// (the lost call most likely deleted it). `tries` is how many were made
/// already. When the tries run out, the error is returned and the record
/// is given back in the background while the store may keep it alive.
pub(crate) async fn give_back_retried<R: Record>(
    record: Arc<R>,
    keep: Option<Instant>,
    mut tries: u32,
) -> Result<bool, LockError> {
    loop {
        tries += 1;
        match record.clone().give_back_once(keep).await {
            Err(e) if transient(&e) && tries < crate::config::UNLOCK_TRIES => {
                tokio::time::sleep(Duration::from_millis(50 * u64::from(tries))).await;
            }
            Err(e) if transient(&e) => {
                let runtime = record.runtime().clone();
                runtime.spawn(async move {
                    let mut tries = 0;
                    while record.may_outlive() {
                        tries += 1;
                        tokio::time::sleep(backoff(tries)).await;
                        match record.clone().give_back_once(keep).await {
                            Err(e) if transient(&e) => {}
                            _ => return,
                        }
                    }
                });
                return Err(e);
            }
            Ok(false) if tries > 1 => return Ok(true),
            result => return result,
        }
    }
}
