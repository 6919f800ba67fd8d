//! What a hold on each kind of lock is in Redis: its keys, its local
//! queue and channel, and the scripts that take it and give it back.

use super::{Attempt, Keep, Released, Try, Unlock, Which, answer, fair};
use crate::engine::redis::Core;
use crate::engine::redis::conn::Conn;
use crate::engine::redis::keys;
use crate::engine::redis::scripts::Eval;
use crate::engine::redis::watchdog::RenewKind;
use crate::error::LockError;
use crate::request::{Kind, Request};

/// What a hold on each kind of lock is in Redis.
impl Request {
    /// Waiters of the same local queue take turns contending in Redis.
    pub(crate) fn local_queue(&self, holder: &str) -> String {
        match self.kind {
            // The Redis queue orders fair waiters (each joins it at its first
            // attempt) and unlock wakes only its head: a local queue could
            // only disagree with that order, so each fair waiter is alone.
            Kind::Fair => ["fair:", &self.name, ":", holder].concat(),
            kind => [kind.label(), ":", &self.name].concat(),
        }
    }

    /// The channel whose messages mean "try again now".
    pub(crate) fn channel(&self, holder: &str) -> String {
        let name = &self.name;
        match self.kind {
            Kind::Reentrant => keys::lock_channel(name),
            Kind::Semaphore(_) => keys::semaphore_channel(name),
            Kind::Fair => keys::fair_waiter_channel(name, holder),
            Kind::Read | Kind::Write => keys::rw_channel(name),
        }
    }

    pub(crate) fn renew_kind(&self) -> RenewKind {
        match self.kind {
            Kind::Reentrant | Kind::Fair => RenewKind::Hash,
            Kind::Semaphore(_) => RenewKind::Permits,
            Kind::Read | Kind::Write => RenewKind::ReadWrite,
        }
    }

    /// One acquire script call on `conn`, then replica sync when it took the
    /// lock (on the same connection: `WAIT` counts that connection's writes).
    ///
    /// The layouts' acquire scripts share the shape of their calls: the
    /// layout's keys (the lock's first), then the attempt's latch; ARGV the lease and the holder, the layout's own
    /// arguments, then whether it re-enters. A failed fair try queues the
    /// holder (first time) or keeps its place (later).
    pub(crate) async fn attempt(
        &self,
        core: &Core,
        conn: &Conn,
        how: &Try,
    ) -> Result<Attempt, LockError> {
        let scripts = &crate::engine::redis::scripts::SCRIPTS;
        let name = self.name.as_str();
        core.conn.check_slot_name(name)?;
        let token = keys::token_key(name);
        let holds = keys::holds_key(name);
        let args = |call: &mut Eval| {
            call.arg(how.lease_ms()).arg(&how.holder);
            match self.kind {
                Kind::Fair => {
                    call.arg(fair::wait_ms(core))
                        .arg(core.conn.publish_command());
                }
                Kind::Semaphore(permits) => {
                    call.arg(permits);
                }
                Kind::Reentrant | Kind::Read | Kind::Write => {}
            }
            call.arg(how.reenter_arg());
        };
        let (latch, record) = (&how.latch(name), how.reenter);
        let call = match self.kind {
            Kind::Semaphore(_) => {
                let keys = [name, &token, &holds];
                scripts
                    .semaphore_acquire
                    .call(conn, &keys, latch, record, args)
            }
            Kind::Reentrant => {
                let keys = [name, &token, &holds];
                scripts
                    .reentrant_acquire
                    .call(conn, &keys, latch, record, args)
            }
            Kind::Fair => {
                let keys = [
                    name,
                    &keys::fair_queue(name),
                    &keys::fair_timeouts(name),
                    &token,
                    &keys::lock_channel(name),
                    &holds,
                ];
                scripts.fair_acquire.call(conn, &keys, latch, record, args)
            }
            // A read hold's own lease key, named by the holder.
            Kind::Read => {
                let keys = [
                    name,
                    &token,
                    &keys::rw_timeout_prefix(name, &how.holder),
                    &holds,
                ];
                scripts
                    .rw_read_acquire
                    .call(conn, &keys, latch, record, args)
            }
            Kind::Write => {
                let keys = [name, &token, &keys::tagged(name), &holds];
                scripts
                    .rw_write_acquire
                    .call(conn, &keys, latch, record, args)
            }
        };
        let reply = call
            .invoke(conn)
            .await
            .map_err(|e| LockError::from_redis(name, e))?;
        let attempt = answer(name, reply)?;
        if let Attempt::Acquired { .. } = attempt {
            // A hold no replica confirmed could vanish in a failover: the
            // error makes the caller reconcile the attempt, which gives the
            // hold back (see [`needs_reconcile`]).
            conn.sync_replicas(name).await?;
        }
        Ok(attempt)
    }

    /// One unlock script call on `conn` for the hold `which` of `holder`:
    /// 1 freed, 0 still held (re-entries; or that hold was given back
    /// before, by a copy of this call), -1 not held. A last hold of a reentrant
    /// or fair lock leaves the lock taken as `keep` says (`hold_at_least`):
    /// it expires then, and nobody is woken. Read and write holds (acquire
    /// refuses the option for them) ignore `keep`.
    ///
    /// The layouts' unlock scripts share the shape of their calls: the
    /// layout's keys (the lock's first), then the unlock latch of `request`
    /// (which makes a retried call idempotent); ARGV the holder, the latch's
    /// TTL and the publish command, then the layout's own arguments. What a
    /// freed lock wakes: a reentrant lock's waiters (its channel), a fair
    /// lock's head (its own channel), every waiting reader and writer after
    /// the write lock or a holder's last read hold.
    pub(crate) async fn unlock(
        &self,
        core: &Core,
        conn: &Conn,
        holder: &str,
        request: Unlock<'_>,
        which: Which,
        keep: Keep,
    ) -> Result<Released, LockError> {
        let scripts = &crate::engine::redis::scripts::SCRIPTS;
        let name = self.name.as_str();
        let latch = keys::unlock_latch(name, request.id);
        // Last: the record of re-entered holds (see `Which`).
        let holds = keys::holds_key(name);
        let (script, keys): (_, &[&str]) = match self.kind {
            Kind::Semaphore(_) => (
                &scripts.semaphore_unlock,
                &[name, &keys::semaphore_channel(name), &latch, &holds],
            ),
            Kind::Reentrant => (
                &scripts.unlock,
                &[name, &keys::lock_channel(name), &latch, &holds],
            ),
            Kind::Fair => (
                &scripts.fair_unlock,
                &[
                    name,
                    &keys::fair_queue(name),
                    &keys::fair_timeouts(name),
                    &keys::lock_channel(name),
                    &latch,
                    &holds,
                ],
            ),
            // A read hold's own lease key: found by the holder.
            Kind::Read => (
                &scripts.rw_read_unlock,
                &[
                    name,
                    &keys::rw_channel(name),
                    &keys::rw_timeout_prefix(name, holder),
                    &keys::tagged(name),
                    &latch,
                    &holds,
                ],
            ),
            Kind::Write => (
                &scripts.rw_write_unlock,
                &[
                    name,
                    &keys::rw_channel(name),
                    &keys::tagged(name),
                    &latch,
                    &holds,
                ],
            ),
        };
        let mut call = Eval::with_keys(script, keys);
        call.arg(holder)
            .arg(crate::config::millis(core.config.unlock_latch_ttl()))
            .arg(core.conn.publish_command())
            .arg(which.arg(self.kind));
        let within_lease = if keep.within_lease { "1" } else { "0" };
        match self.kind {
            // The message "0": it wakes one waiter. The minimum's arguments
            // only when there is one (each argument costs Redis time).
            Kind::Reentrant => {
                call.arg("0").arg(request.first_arg(conn));
                if keep.ms > 0 {
                    call.arg(keep.ms).arg(within_lease);
                }
                &mut call
            }
            Kind::Fair | Kind::Semaphore(_) => call.arg(keep.ms).arg(within_lease),
            Kind::Read | Kind::Write => &mut call,
        };
        call.invoke(conn)
            .await
            .map(Released::from_code)
            .map_err(|e| LockError::from_redis(name, e))
    }

    /// Clean-up when a waiter gives up (timeout or cancellation) without the lock.
    pub(crate) fn give_up(&self, core: &Core, holder: &str) -> Option<fair::GiveUp> {
        match self.kind {
            // A fair waiter leaves the queue.
            Kind::Fair => Some(fair::GiveUp::new(core, &self.name, holder)),
            Kind::Reentrant | Kind::Read | Kind::Write | Kind::Semaphore(_) => None,
        }
    }
}
