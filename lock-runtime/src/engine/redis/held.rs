//! A hold on a Redis lock once taken: its lease (the watchdog's, or a
//! fixed one by the client's clock), `extend`, and its release (with the
//! retry and the handoff to a waiter of this client).

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use tokio::sync::watch;
use tracing::Instrument;

use super::Core;
use super::conn::connection_lost;
use super::hold::{Keep, Released, Unlock, Which};
use super::watchdog::{HoldKey, Registration};
use crate::background::{self, Background};
use crate::clock::{Validity, valid_until};
use crate::engine::redis::local::Handed;
use crate::error::LockError;
use crate::holder::{Chain, ScopedHold, Who};
use crate::own::Listed;
use crate::request::Request;
use crate::telemetry::HeldMetric;

/// How a hold's lease is kept.
enum Lease {
    /// Renewed by the client's watchdog until release.
    Watchdog {
        registration: Registration,
        validity: watch::Receiver<Validity>,
    },
    /// Fixed: counts as lost from `until` (the lease, less the safety margin,
    /// from before the acquire call).
    Fixed { until: Instant },
}

/// One hold on one Redis lock by one holder.
pub(crate) struct RedisHold {
    core: Arc<Core>,
    /// Keeps the client's runtime running until the hold is given back.
    _alive: Arc<Background>,
    /// The acquisition it answered: the lock's name and kind.
    lock: Request,
    /// Who the hold is: the lock's name and the holder id.
    who: Arc<Who>,
    token: u64,
    lease: Lease,
    /// In the client's list of live guards (see `inspect`) until dropped.
    _listed: Listed,
    /// The hold's `kind` label (see `telemetry`).
    metric: &'static str,
    /// In `lock_held` until dropped.
    _held: HeldMetric,
    /// `hold_at_least`: until when the lock stays taken (from the acquire's
    /// answer); a release before then leaves the lock taken until then.
    keep: Option<Instant>,
    /// What this hold shares with the other holds of its call chain on the
    /// lock (its re-entries, or the hold it re-entered): made when a scope
    /// first needs it, or given by the scope a re-entry was made in.
    chain: std::sync::OnceLock<Chain>,
    /// Which of its holder's holds this is (see [`Which`]).
    which: Which,
    /// How many local handoffs in a row led to this hold (0: taken by an
    /// acquire script; see `local::Handed::streak`).
    streak: u32,
}

impl RedisHold {
    /// Wraps a fresh acquisition of `lock` (`taken`, confirmed by a call
    /// sent at `taken.sent`); a watchdog lease is registered here.
    pub(crate) fn new(
        core: Arc<Core>,
        alive: Arc<Background>,
        lock: Request,
        taken: Handed,
    ) -> RedisHold {
        let (lease, metric) = (lock.lease.fixed(), lock.metric);
        let Handed {
            holder,
            token,
            sent,
            streak,
        } = taken;
        let which = Which::first(token);
        let who = Arc::new(Who {
            name: lock.name.clone(),
            holder,
        });
        let listed = core.own.list(who.clone(), token, sent, lease);
        let lease = match lease {
            Some(lease) => Lease::Fixed {
                until: valid_until(sent, lease),
            },
            None => {
                let (registration, validity) = core.watchdog.register(
                    HoldKey {
                        kind: lock.renew_kind(),
                        name: lock.name.clone(),
                        holder: who.holder.clone(),
                    },
                    sent,
                    core.config.watchdog_timeout,
                    metric,
                );
                Lease::Watchdog {
                    registration,
                    validity,
                }
            }
        };
        RedisHold {
            core,
            _alive: alive,
            lock,
            who,
            token,
            lease,
            _listed: listed,
            metric,
            _held: HeldMetric::start(metric),
            keep: None,
            chain: std::sync::OnceLock::new(),
            which,
            streak,
        }
    }

    /// This hold re-entered a hold of its call chain, whose scope gave
    /// `chain`.
    pub(crate) fn reentered(&mut self, chain: Chain) {
        self.which = Which::reentry(self.token);
        let _ = self.chain.set(chain);
    }

    /// Keeps the lock taken until `minimum` after `taken` when released
    /// sooner (`hold_at_least`), whichever hold of the call chain is given
    /// back last.
    pub(crate) fn hold_at_least(&mut self, taken: Instant, minimum: Duration) {
        let until = taken.checked_add(minimum);
        self.keep = until;
        if let (Some(chain), Some(until)) = (self.chain.get(), until) {
            chain.keep_until(until);
        }
    }

    /// What the holds of this hold's call chain share (made on first use,
    /// holding this hold's minimum).
    fn chain(&self) -> &Chain {
        self.chain.get_or_init(|| Chain::keeping(self.keep))
    }

    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    pub(crate) fn name(&self) -> &str {
        self.lock.name.as_str()
    }

    pub(crate) fn holder(&self) -> &str {
        &self.who.holder
    }

    pub(crate) fn runtime(&self) -> tokio::runtime::Handle {
        self.core.runtime.clone()
    }

    /// This hold as a scope sees it.
    pub(crate) fn scoped(&self) -> ScopedHold {
        ScopedHold {
            client: self.core.id.clone(),
            who: self.who.clone(),
            chain: self.chain().clone(),
        }
    }

    /// Reports a fixed lease lost no later than `at` (a quorum lock's
    /// validity ends before its nodes' keys expire). Watchdog leases keep
    /// their own loss signal.
    pub(crate) fn expire_by(&mut self, at: Instant) {
        if let Lease::Fixed { until } = &mut self.lease {
            *until = (*until).min(at);
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        match &self.lease {
            Lease::Watchdog { validity, .. } => validity.borrow().is_lost(),
            Lease::Fixed { until } => Instant::now() >= *until,
        }
    }

    /// The lease left by the client's clock: zero once lost.
    pub(crate) fn remaining(&self) -> Duration {
        let until = match &self.lease {
            Lease::Watchdog { validity, .. } => {
                let validity = *validity.borrow();
                if validity.lost {
                    return Duration::ZERO;
                }
                validity.until
            }
            Lease::Fixed { until } => *until,
        };
        until.saturating_duration_since(Instant::now())
    }

    /// Makes a fixed lease last at least `lease` from now (never shorter
    /// than it was: another hold of the holder may have been promised more).
    pub(crate) async fn extend(&mut self, lease: Duration) -> Result<(), LockError> {
        let name = self.lock.name.as_str().to_owned();
        let Lease::Fixed { until } = &mut self.lease else {
            return Err(LockError::Config(format!(
                "lock `{name}`: extend is for fixed leases (acquired with .lease(..)); the \
                 watchdog renews this guard's lease until release"
            )));
        };
        if Instant::now() >= *until {
            return Err(LockError::Lost { name });
        }
        let key = HoldKey {
            kind: self.lock.renew_kind(),
            name: name.clone(),
            holder: self.who.holder.clone(),
        };
        let core = self.core.clone();
        let sent = Instant::now();
        let runtime = core.runtime.clone();
        let renewed = background::run(&runtime, async move {
            super::watchdog::renew_one(&core.conn, &key, lease).await
        })
        .await?
        .map_err(|e| LockError::from_redis(&name, e))?;
        if !renewed {
            // Gone (expired, force-unlocked): lost for good.
            *until = Instant::now().min(*until);
            return Err(LockError::Lost { name });
        }
        *until = (*until).max(valid_until(sent, lease));
        crate::telemetry::renewed(1);
        Ok(())
    }

    pub(crate) async fn lost(&self) {
        match &self.lease {
            // The watchdog forgetting the hold counts as lost too.
            Lease::Watchdog { validity, .. } => crate::clock::until_lost(validity.clone()).await,
            Lease::Fixed { until } => tokio::time::sleep_until(*until).await,
        }
    }

    /// Gives the hold back. Completes even if the caller stops waiting: on a
    /// near connection the caller's task runs it and a task of its own
    /// finishes it if the caller leaves; otherwise it runs on the client's
    /// background runtime throughout. Retries a call that lost its connection
    /// with the same request id (the unlock latch makes that idempotent), on
    /// the client's own connection, which reconnects.
    ///
    /// Only this hold is given back (a read hold by its token). A hold that
    /// already counts as lost by the guard's clock is still given back if
    /// the server has it (so nothing stays held), but reports
    /// [`LockError::Lost`]: its body may have run without exclusion.
    pub(crate) async fn release(self) -> Result<(), LockError> {
        let was_lost = self.is_lost();
        let RedisHold {
            core,
            lock,
            who,
            lease,
            _listed: listed,
            keep,
            chain,
            which,
            streak,
            metric,
            ..
        } = self;
        // The chain's minimum (its holds' latest, this one's included),
        // whichever of them asked for it: the release that turns out to be
        // the chain's last applies it.
        let keep = chain.get().map_or(keep, Chain::kept_until);
        let fixed = matches!(lease, Lease::Fixed { .. });
        // A guard being released is no longer listed as live.
        drop(listed);
        // A loss the watchdog found was counted there; any other is counted
        // here. Read once unregistered: from then on the watchdog cannot
        // find this hold lost (and count it) any more.
        let mut counted = false;
        if let Lease::Watchdog {
            registration,
            validity,
        } = &lease
        {
            // Before the unlock: a released guard is never renewed again.
            core.watchdog.unregister(registration);
            counted = validity.borrow().lost;
        }
        let runtime = core.runtime.clone();
        let near = core.conn.near_here();
        let mut conn = near.clone().unwrap_or_else(|| core.conn.clone());
        let span = tracing::debug_span!("release", lock = lock.name.as_str());
        let work = async move {
            let request = crate::holder::call_id(&core.id);
            let mut tries = 0;
            loop {
                tries += 1;
                // The first call may hand the lock to a waiter of this
                // client. Retries (same request id) are plain unlocks: a
                // handoff's latch reads as released there, while a retried
                // handoff would name a holder other than the one it made.
                // From each try's time: a retry keeps no longer than the
                // minimum. A lock kept taken is not handed over either.
                let kept = Keep::left(keep, fixed);
                let sent = if tries == 1 {
                    Unlock::first(&request)
                } else {
                    Unlock::again(&request)
                };
                let unlocked = if tries == 1 && kept.ms == 0 {
                    crate::engine::redis::hold::handoff::unlock_or_hand_off(
                        &core,
                        &conn,
                        &lock,
                        &who.holder,
                        sent,
                        which,
                        streak,
                    )
                    .await
                } else {
                    lock.unlock(&core, &conn, &who.holder, sent, which, kept)
                        .await
                };
                match unlocked {
                    Ok(Released::NotHeld) => {
                        return Err(LockError::Lost {
                            name: lock.name.clone(),
                        });
                    }
                    Ok(_) if was_lost => {
                        return Err(LockError::Lost {
                            name: lock.name.clone(),
                        });
                    }
                    Ok(_) => return Ok(()),
                    Err(LockError::Redis(e))
                        if tries < crate::config::UNLOCK_TRIES && connection_lost(&e) =>
                    {
                        tracing::debug!(error = %e, "unlock failed; retrying");
                        // On the client's runtime: this call may be
                        // finished there for a caller who left, and a
                        // timer of the caller's runtime fires only while
                        // that runtime is driven.
                        let pause = Duration::from_millis(50 * u64::from(tries));
                        let _ = core.runtime.spawn(tokio::time::sleep(pause)).await;
                        conn = core.conn.clone();
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        .instrument(span);
        let result = if near.is_some() {
            // The caller's task runs it; if the caller leaves, the rest (the
            // same request id, so retries stay idempotent) runs on its own.
            background::finish_on_drop(&runtime, work, |_| async {}).await
        } else {
            background::run(&runtime, work)
                .await
                .and_then(|released| released)
        };
        if matches!(result, Err(LockError::Lost { .. })) && !counted {
            crate::telemetry::lost(metric);
        }
        result
    }
}

crate::engine::seam::hold_by_inherent!(impl [] for RedisHold);
