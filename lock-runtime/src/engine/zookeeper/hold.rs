//! A hold on ZooKeeper once taken: the record a client keeps of its node
//! (shared by a hold and its re-entries), and the guard's side of it:
//! loss, `extend`, release. Taking one is in `take`.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use zookeeper_client as zk;

use super::layout::{self, Contender, Term, contenders};
use super::session::{Bound, Gone, Session};
use super::{Zk, store_error};
use crate::background::Background;
use crate::clock::valid_until;
use crate::error::LockError;
use crate::holder::Chain;
use crate::kept::Access;
pub(super) use crate::kept::lost;
use crate::kept::{Counted, Hold, give_back_retried};
use crate::request::Request;

/// A client's one node for one name, shared by a hold and its re-entries.
/// The process queue's turn is kept until it is dropped, after the node
/// is gone.
pub(crate) struct Record {
    pub(super) zk: Arc<Zk>,
    /// Who the hold is, its chain's count, its loss, its turn and its
    /// downgrade.
    pub(crate) base: crate::kept::Base<Record>,
    pub(super) side: Access,
    /// The node's path.
    pub(super) path: String,
    /// The session the node is on.
    pub(super) session: Arc<Session>,
    /// The node bound to its session, whose heartbeat finds it gone.
    pub(super) bound: OnceLock<Bound>,
    /// A fixed lease's end, by the client's clock: the node is given back
    /// then.
    pub(super) fixed: Option<Mutex<Instant>>,
    /// The task that ends a fixed lease.
    pub(super) timer: OnceLock<tokio::task::AbortHandle>,
}

crate::kept::base_of!(Record);

impl Drop for Record {
    fn drop(&mut self) {
        if let Some(timer) = self.timer.get() {
            timer.abort();
        }
        // A backstop: a record that goes with its node still there (a
        // give-back that failed, a re-entry dropped mid-way) deletes it.
        // The request is sent as it is made; its answer is not awaited.
        if !self.deleted.is_set() && !self.session.client.state().is_terminated() {
            drop(self.session.client.delete(&self.path, None));
        }
        crate::kept::unlist(&self.zk.records, &self.who);
    }
}

impl Gone for Record {
    /// The node is known gone: the hold is lost, and this client's next
    /// acquisition of the name may go ahead.
    fn gone(&self) {
        self.deleted.set();
        drop(self.turn.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}

impl Record {
    /// The node's data for this record now (see [`Term`]).
    fn data(&self) -> Vec<u8> {
        let term = match self.fixed_until() {
            Some(until) => Term::Until(wall(until)),
            None => Term::Session(self.session.timeout()),
        };
        layout::data(&self.who.holder, term)
    }

    fn fixed_until(&self) -> Option<Instant> {
        self.fixed
            .as_ref()
            .map(|until| *until.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub(super) fn is_lost(&self) -> bool {
        self.deleted.is_set()
            || self.session.is_lost()
            || self
                .fixed_until()
                .is_some_and(|until| Instant::now() >= until)
    }

    fn remaining(&self) -> Duration {
        if self.deleted.is_set() {
            return Duration::ZERO;
        }
        let session = self.session.remaining();
        match self.fixed_until() {
            Some(until) => session.min(until.saturating_duration_since(Instant::now())),
            None => session,
        }
    }

    async fn lost(&self) {
        tokio::select! {
            () = self.session.lost() => {}
            () = crate::kept::gone_or_ended(&self.deleted, || self.fixed_until()) => {}
        }
    }

    /// Binds the node to its session (whose heartbeat finds it gone) and,
    /// with a fixed lease, gives it back from a task of the client's
    /// runtime when the lease ends (unless `extend` moved the end).
    pub(super) fn start(self: &Arc<Record>) {
        let weak: std::sync::Weak<dyn Gone> = Arc::downgrade(self) as _;
        let renewed = self.fixed.is_none();
        let _ = self.bound.set(self.session.bind(&self.path, weak, renewed));
        if self.fixed.is_none() {
            return;
        }
        let record = Arc::downgrade(self);
        let runtime = self.zk.runtime.clone();
        let timer = runtime.spawn(async move {
            loop {
                let Some(until) = record.upgrade().and_then(|r| r.fixed_until()) else {
                    return;
                };
                tokio::time::sleep_until(until).await;
                let Some(alive) = record.upgrade() else {
                    return;
                };
                if alive.fixed_until().is_some_and(|u| Instant::now() >= u) {
                    // Lost now (by the clock); given back as a release
                    // gives back, trying again on a fault.
                    if give_back_now(alive).await.is_err() {
                        tracing::warn!("a lock node whose fixed lease ended is not deleted yet");
                    }
                    return;
                }
            }
        });
        let _ = self.timer.set(timer.abort_handle());
    }
}

/// A hold on ZooKeeper: the record it shares with its chain, and its own
/// token.
pub(crate) type ZkHold = Hold<Record>;

impl crate::kept::Record for Record {
    crate::kept::record_fields!(client | r | r.zk, by inherent, in order by give_back_node);

    async fn give_back_once(self: Arc<Self>, _keep: Option<Instant>) -> Result<bool, LockError> {
        give_back_once(&self).await
    }

    fn may_outlive(&self) -> bool {
        !self.session.is_lost()
    }
}

/// A re-entry of `record`'s hold: a write to its node (which keeps it)
/// for a token of its own; [`LockError::Lost`] when the node is gone.
pub(super) async fn reenter(
    alive: Arc<Background>,
    record: Arc<Record>,
    chain: Chain,
    request: &Request,
) -> Result<ZkHold, LockError> {
    let counted = Counted::count(record, Access::from(request.kind), chain)?;
    let record = counted.record().clone();
    let sent = Instant::now();
    let session = &record.session;
    let data = record.data();
    let written = record
        .zk
        .call(session, session.client.set_data(&record.path, &data, None))
        .await;
    let stat = match written {
        Ok(stat) => stat,
        Err(zk::Error::NoNode) => {
            record.gone();
            return Err(lost(&record.who.name));
        }
        Err(e) => return Err(store_error(e)),
    };
    let token = u64::try_from(stat.mzxid).unwrap_or(0);
    Ok(counted.hold(alive, token, sent, request))
}

/// `at` by the wall clock.
fn wall(at: Instant) -> SystemTime {
    let now = Instant::now();
    match at.checked_duration_since(now) {
        Some(ahead) => SystemTime::now() + ahead,
        None => SystemTime::now() - now.duration_since(at),
    }
}

impl ZkHold {
    /// Moves a fixed lease's end to `lease` from now (the holder enforces
    /// it: no call); one that already lasts at least that long is left as
    /// it is (a lease never shrinks). The session still bounds it.
    pub(crate) async fn extend(&mut self, lease: Duration) -> Result<(), LockError> {
        let record = self.record().clone();
        let name = &record.who.name;
        let Some(until) = &record.fixed else {
            return Err(LockError::Config(format!(
                "lock `{name}`: extend is for fixed leases (acquired with .lease(..)); the \
                 session's heartbeat keeps this guard's hold until release"
            )));
        };
        if record.is_lost() {
            return Err(lost(name));
        }
        {
            // Checked again under the lock: a lease that ran out meanwhile
            // is not brought back (its node is being given back).
            let mut until = until.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            if now >= *until {
                return Err(lost(name));
            }
            *until = (*until).max(valid_until(now, lease));
        }
        // The node says the new end, for every client's `inspect`.
        let runtime = record.zk.runtime.clone();
        let writing = record.clone();
        let written = crate::background::run(&runtime, async move {
            let record = writing;
            let session = &record.session;
            let data = record.data();
            record
                .zk
                .call(session, session.client.set_data(&record.path, &data, None))
                .await
        })
        .await?;
        match written {
            Ok(_) => {}
            Err(zk::Error::NoNode) => {
                record.gone();
                return Err(lost(name));
            }
            Err(e) => return Err(store_error(e)),
        }
        crate::telemetry::renewed(1);
        Ok(())
    }
}

/// Whether the give-back of `write`'s node waits for the reads taken
/// under it (see [`Downgrade`]): a contender that keeps readers out came
/// between the write and a holding read. If so, the last read gives it
/// back.
async fn waits_for_reads(write: Arc<Record>) -> Result<bool, LockError> {
    let sequence = |path: &str| {
        Contender::of(path.rsplit('/').next().unwrap_or(path)).map_or(0, |c| c.sequence)
    };
    let reads = write.downgrade.holding_reads();
    let Some(last) = reads.iter().map(|r| sequence(&r.path)).max() else {
        return Ok(false);
    };
    let first = sequence(&write.path);
    let (zk, session) = (&write.zk, &write.session);
    let lock = zk.lock_path(&write.who.name);
    let children = zk
        .call(session, session.client.list_children(&lock))
        .await
        .map_err(store_error)?;
    let between = contenders(&children)
        .iter()
        .any(|c| c.side != Access::Read && c.sequence > first && c.sequence < last);
    Ok(between && write.downgrade.defer())
}

/// Deletes `record`'s node, or keeps it until `keep` (then deletes it from
/// the client's runtime); whether the node was still there. Retries a
/// call whose answer was lost; a retry that finds the node gone counts as
/// given back (the lost call most likely deleted it). When the tries run
/// out, the error is returned and the node is given back in the
/// background while the session lives. A session that is over took its
/// nodes with it.
async fn give_back_node(record: Arc<Record>, keep: Option<Instant>) -> Result<bool, LockError> {
    if let Some(keep) = keep.filter(|k| *k > Instant::now()) {
        if let Some(bound) = record.bound.get() {
            bound.released();
        }
        // Marked kept, for every client's `inspect`: a holder with no
        // holds left, until the minimum ends.
        let session = &record.session;
        let data = layout::data(&record.who.holder, Term::Kept(wall(keep)));
        // The mark is for `inspect` only: whatever its answer, the node is
        // given back when the minimum ends.
        let there = match record
            .zk
            .call(session, session.client.set_data(&record.path, &data, None))
            .await
        {
            Err(zk::Error::NoNode) => false,
            _ => !record.deleted.is_set(),
        };
        let runtime = record.zk.runtime.clone();
        runtime.spawn(async move {
            tokio::time::sleep_until(keep).await;
            let _ = give_back_now(record).await;
        });
        return Ok(there);
    }
    give_back_now(record).await
}

/// [`give_back_node`] with no minimum to keep.
async fn give_back_now(record: Arc<Record>) -> Result<bool, LockError> {
    give_back_retried(record, None, 0).await
}

/// One delete of `record`'s node: whether it was there. Then the turn
/// passes on.
async fn give_back_once(record: &Record) -> Result<bool, LockError> {
    let session = &record.session;
    let zk = &record.zk;
    if session.client.state().is_terminated() {
        record.gone();
        return Ok(false);
    }
    let deleted = zk
        .call(session, session.client.delete(&record.path, None))
        .await;
    let there = match deleted {
        Ok(()) => true,
        Err(zk::Error::NoNode) => false,
        // The hold's session cannot (the runtime that drove it shut down,
        // or its link is down): any session may delete a node, and the
        // client's own tries, so the lock need not wait for the server to
        // expire the other.
        Err(e) => match zk.sessions.live().filter(|own| !Arc::ptr_eq(own, session)) {
            Some(own) => match zk.call(&own, own.client.delete(&record.path, None)).await {
                Ok(()) => true,
                Err(zk::Error::NoNode) => false,
                Err(_) if session.is_lost() => false,
                Err(e) => return Err(store_error(e)),
            },
            // A session lost by the clock takes its nodes with it when the
            // server expires it (the client library may not know yet).
            None if session.is_lost() || matches!(e, zk::Error::ClientClosed) => false,
            None => return Err(store_error(e)),
        },
    };
    record.gone();
    Ok(there)
}

crate::engine::seam::hold_by_inherent!(impl [] for ZkHold);
