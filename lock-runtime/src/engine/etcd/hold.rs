//! A hold on etcd once taken: the record a client keeps of its key
//! (shared by a hold and its re-entries), and the guard's side of it:
//! loss, `extend`, release. Taking one is in `take`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use tokio::sync::OwnedMutexGuard;

use super::Etcd;
use super::layout;
use super::session::{Bound, Gone, Session, ttl_secs};
use super::watches::Note;
use crate::background::Background;
use crate::clock::valid_until;
use crate::error::LockError;
use crate::holder::Chain;
use crate::kept::Access;
pub(super) use crate::kept::lost;
use crate::kept::{Counted, Hold, give_back_retried};
use crate::request::{Request, backoff};

pub(super) use super::layout::KEPT;

/// How a record's key is kept alive.
pub(super) enum Lease {
    /// Bound to the client's session lease.
    Session {
        session: Arc<Session>,
        /// Bound once the record is made (see [`Record::bind`]).
        bound: OnceLock<Bound>,
    },
    /// A lease of its own, not kept alive: lost by the client's clock at
    /// `until`. `extend` moves the key to a new one.
    Fixed {
        id: AtomicI64,
        until: Mutex<Instant>,
    },
}

impl Lease {
    fn fixed_until(&self) -> Option<Instant> {
        match self {
            Lease::Session { .. } => None,
            Lease::Fixed { until, .. } => Some(*until.lock().unwrap_or_else(|p| p.into_inner())),
        }
    }
}

/// A client's one key for one name, shared by a hold and its re-entries.
/// The process queue's turn is kept until it is dropped, after the key is
/// gone.
pub(crate) struct Record {
    pub(super) etcd: Arc<Etcd>,
    /// Who the hold is, its chain's count, its loss, its turn and its
    /// downgrade.
    pub(crate) base: crate::kept::Base<Record>,
    pub(super) side: Access,
    pub(super) key: String,
    /// The key's value: the holder id (a permit's with its semaphore's
    /// bound, `layout::value`).
    pub(super) value: String,
    pub(super) create_revision: i64,
    pub(super) lease: Lease,
    /// The task watching the key's deletion.
    pub(super) watcher: OnceLock<tokio::task::AbortHandle>,
}

crate::kept::base_of!(Record);

impl Drop for Record {
    fn drop(&mut self) {
        if let Some(watcher) = self.watcher.get() {
            watcher.abort();
        }
        crate::kept::unlist(&self.etcd.records, &self.who);
    }
}

impl Gone for Record {
    fn gone(&self) {
        self.deleted.set();
        // Every later call on this record names the key's create revision:
        // this client's next acquisition of the name may go ahead.
        drop(self.turn.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}

impl Record {
    /// A fixed lease's record watches its key's deletion; a session's is
    /// bound to its session.
    fn start(self: &Arc<Record>) {
        match self.lease {
            Lease::Fixed { .. } => self.watch_deletion(),
            Lease::Session { .. } => self.bind(),
        }
    }

    /// Binds a session's record to its session (told when its key is gone).
    pub(super) fn bind(self: &Arc<Record>) {
        if let Lease::Session { session, bound } = &self.lease {
            let weak: std::sync::Weak<dyn Gone> = Arc::downgrade(self) as _;
            let _ = bound.set(session.bind(&self.key, weak));
        }
    }

    /// The fixed lease's id, if the key is on one.
    fn fixed_lease(&self) -> Option<i64> {
        match &self.lease {
            Lease::Session { .. } => None,
            Lease::Fixed { id, .. } => Some(id.load(Ordering::Acquire)),
        }
    }

    pub(super) fn is_lost(&self) -> bool {
        if self.deleted.is_set() {
            return true;
        }
        match &self.lease {
            Lease::Session { session, .. } => session.is_lost(),
            Lease::Fixed { until, .. } => {
                Instant::now() >= *until.lock().unwrap_or_else(|p| p.into_inner())
            }
        }
    }

    fn remaining(&self) -> Duration {
        if self.deleted.is_set() {
            return Duration::ZERO;
        }
        match &self.lease {
            Lease::Session { session, .. } => session.remaining(),
            Lease::Fixed { until, .. } => until
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .saturating_duration_since(Instant::now()),
        }
    }

    async fn lost(&self) {
        let gone = crate::kept::gone_or_ended(&self.deleted, || self.lease.fixed_until());
        match &self.lease {
            Lease::Session { session, .. } => {
                tokio::select! {
                    () = session.lost() => {}
                    () = gone => {}
                }
            }
            Lease::Fixed { .. } => gone.await,
        }
    }

    /// The compare that holds while the key is this record's.
    fn ours(&self) -> Compare {
        Compare::create_revision(self.key.as_str(), CompareOp::Equal, self.create_revision)
    }

    /// Watches the key's deletion from a task of the client's runtime,
    /// looking again whenever the watch breaks: for a key on a fixed lease
    /// (a session's keys are checked by its keep-alive rounds).
    pub(super) fn watch_deletion(self: &Arc<Record>) {
        let record = Arc::downgrade(self);
        let etcd = self.etcd.clone();
        let (key, mut from) = (self.key.clone(), self.create_revision + 1);
        let task = etcd.runtime.clone().spawn(async move {
            let mut tries = 0;
            loop {
                let mut watch = etcd.watches.watch(key.as_bytes(), from);
                let mut note = watch.next().await;
                while note == Note::Created {
                    note = watch.next().await;
                }
                if matches!(note, Note::Deleted(_)) {
                    break;
                }
                tries += 1;
                tokio::time::sleep(backoff(tries)).await;
                // Broken: is the key still ours, and from when to watch?
                let Some(alive) = record.upgrade() else {
                    return;
                };
                let mut kv = etcd.client().kv_client();
                match etcd.call(kv.get(key.as_str(), None)).await {
                    Ok(found) => {
                        let ours = found
                            .kvs()
                            .first()
                            .is_some_and(|kv| kv.create_revision() == alive.create_revision);
                        if !ours {
                            break;
                        }
                        from = found.header().map_or(from, |h| h.revision() + 1);
                    }
                    Err(_) => continue,
                }
            }
            if let Some(record) = record.upgrade() {
                record.gone();
            }
        });
        let _ = self.watcher.set(task.abort_handle());
    }
}

/// A hold on etcd: the record it shares with its chain, and its own token.
pub(crate) type EtcdHold = Hold<Record>;

impl crate::kept::Record for Record {
    crate::kept::record_fields!(client | r | r.etcd, by inherent, in order by give_back_key);

    async fn give_back_once(self: Arc<Self>, keep: Option<Instant>) -> Result<bool, LockError> {
        give_back_once(&self, keep).await
    }

    fn may_outlive(&self) -> bool {
        !Record::is_lost(self)
    }
}

/// A re-entry of `record`'s hold: its key bumped (a put that keeps it, its
/// lease and its create revision) for a token of its own; [`LockError::Lost`]
/// when the key is gone.
pub(super) async fn reenter(
    alive: Arc<Background>,
    record: Arc<Record>,
    chain: Chain,
    request: &Request,
) -> Result<EtcdHold, LockError> {
    let counted = Counted::count(record, Access::from(request.kind), chain)?;
    let record = counted.record().clone();
    let etcd = record.etcd.clone();
    let sent = Instant::now();
    let bump = Txn::new().when([record.ours()]).and_then([TxnOp::put(
        record.key.as_str(),
        record.value.as_str(),
        Some(PutOptions::new().with_ignore_lease()),
    )]);
    let answer = etcd.kv(|mut kv| async move { kv.txn(bump).await }).await?;
    if !answer.succeeded() {
        record.gone();
        return Err(lost(&record.who.name));
    }
    let token = revision(answer.header());
    Ok(counted.hold(alive, token, sent, request))
}

pub(super) fn revision(header: Option<&etcd_client::ResponseHeader>) -> u64 {
    header.map_or(0, |h| u64::try_from(h.revision()).unwrap_or(0))
}

impl EtcdHold {
    /// Moves the key to a new lease of TTL `lease` (a put keeps its create
    /// revision), then lets the old lease go. A fixed lease only; one that
    /// already lasts at least that long is left as it is (a lease never
    /// shrinks).
    pub(crate) async fn extend(&mut self, lease: Duration) -> Result<(), LockError> {
        let record = self.record().clone();
        let name = record.who.name.clone();
        let Lease::Fixed { id, until } = &record.lease else {
            return Err(LockError::Config(format!(
                "lock `{name}`: extend is for fixed leases (acquired with .lease(..)); the \
                 session's keep-alive renews this guard's lease until release"
            )));
        };
        if record.is_lost() {
            return Err(lost(&name));
        }
        let current = *until.lock().unwrap_or_else(|p| p.into_inner());
        if valid_until(Instant::now(), lease) <= current {
            return Ok(());
        }
        let runtime = record.etcd.runtime.clone();
        let moving = record.clone();
        let moved = crate::background::run(&runtime, async move {
            let record = moving;
            let etcd = &record.etcd;
            let sent = Instant::now();
            let mut leases = etcd.client().lease_client();
            let granted = etcd.call(leases.grant(ttl_secs(lease), None)).await?;
            let put = Txn::new().when([record.ours()]).and_then([TxnOp::put(
                record.key.as_str(),
                record.value.as_str(),
                Some(PutOptions::new().with_lease(granted.id())),
            )]);
            let mut kv = etcd.client().kv_client();
            let answer = etcd.call(kv.txn(put)).await?;
            if !answer.succeeded() {
                let _ = etcd.call(leases.revoke(granted.id())).await;
                return Ok(None);
            }
            let ttl = Duration::from_secs(granted.ttl().max(1) as u64);
            Ok::<_, LockError>(Some((granted.id(), valid_until(sent, ttl))))
        })
        .await??;
        let Some((new_id, new_until)) = moved else {
            record.gone();
            return Err(lost(&name));
        };
        let old = id.swap(new_id, Ordering::AcqRel);
        {
            let mut until = until.lock().unwrap_or_else(|p| p.into_inner());
            *until = (*until).max(new_until);
        }
        let etcd = record.etcd.clone();
        etcd.runtime.clone().spawn(async move {
            let mut leases = etcd.client().lease_client();
            let _ = etcd.call(leases.revoke(old)).await;
        });
        crate::telemetry::renewed(1);
        Ok(())
    }
}

/// Whether the give-back of `write`'s key waits for the reads taken under
/// it (see [`Downgrade`]): a key that keeps readers out was made between
/// the write's and a holding read's. If so, the last read gives it back.
async fn waits_for_reads(write: Arc<Record>) -> Result<bool, LockError> {
    let reads = write.downgrade.holding_reads();
    let Some(last) = reads.iter().map(|r| r.create_revision).max() else {
        return Ok(false);
    };
    let etcd = &write.etcd;
    let mut between = false;
    for (start, end) in layout::blockers(Access::Read, &write.who.name) {
        // Keys, not a count: etcd counts a range before it filters it by
        // create revision.
        let options = GetOptions::new()
            .with_range(end)
            .with_keys_only()
            .with_limit(1)
            .with_min_create_revision(write.create_revision + 1)
            .with_max_create_revision(last - 1);
        let found = etcd
            .kv(|mut kv| async move { kv.get(start, Some(options)).await })
            .await?;
        between |= !found.kvs().is_empty();
    }
    Ok(between && write.downgrade.defer())
}

/// Deletes `record`'s key, or keeps it until `keep` on a lease that ends
/// then; whether the key was still this record's. Retries a call whose
/// answer was lost (each is idempotent: it names the record's create
/// revision); a retry that finds the key gone counts as given back (the
/// lost call most likely deleted it). When the tries run out, the error is
/// returned and the key is given back in the background, the record (and
/// its turn in the process queue) kept until then: a key on the session's
/// lease would otherwise be kept alive for good.
async fn give_back_key(record: Arc<Record>, keep: Option<Instant>) -> Result<bool, LockError> {
    // A plain delete that was sent counts as the first try: a later try
    // that finds the key gone finds what it most likely deleted.
    let tries = match give_back_plain(&record, keep).await {
        Plain::Released(released) => return released,
        Plain::Unanswered => 1,
        Plain::Careful => 0,
    };
    give_back_retried(record, keep, tries).await
}

/// The common release, as etcd's own recipe makes it: a plain delete of a
/// mutex key on the session's lease (etcd does a txn's compare in a read
/// transaction of its own: a compare-and-delete costs it about a third
/// more, measured). Safe while this record holds the client's turn at the
/// name: the key `<name>/<lease>` is this client's alone, and no other of
/// its acquisitions can make it again until the turn passes on, which is
/// only once the delete's answer is in. A delete whose answer is not seen
/// (an error, a timeout, a caller who left) retires the session before the
/// turn passes on: the client's next keys are on a new lease, so a late
/// copy of the delete can only find a key of the old one. When its delete
/// fails, the careful path takes over.
async fn give_back_plain(record: &Record, keep: Option<Instant>) -> Plain {
    if record.side != Access::Mutex || keep.is_some_and(|k| k > Instant::now()) {
        return Plain::Careful;
    }
    let Lease::Session { session, .. } = &record.lease else {
        return Plain::Careful;
    };
    // None when the key is known gone (its turn passed on already).
    let Some(turn) = record.turn.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return Plain::Careful;
    };
    let unanswered = Unanswered(Some((session.clone(), turn)));
    let etcd = &record.etcd;
    let mut kv = etcd.here().client.kv_client();
    match etcd.call(kv.delete(record.key.as_str(), None)).await {
        Ok(answer) => {
            unanswered.answered();
            Plain::Released(Ok(answer.deleted() > 0))
        }
        Err(_) => Plain::Unanswered,
    }
}

/// What [`give_back_plain`] did.
enum Plain {
    /// Not such a release: the careful path gives it back.
    Careful,
    /// Given back (whether the key was still there), or not.
    Released(Result<bool, LockError>),
    /// The delete was sent, its answer not seen (the session is retired).
    Unanswered,
}

/// The session and turn of a plain delete whose answer is not in yet:
/// dropped armed, it retires the session, then passes the turn on.
struct Unanswered(Option<(Arc<Session>, OwnedMutexGuard<()>)>);

impl Unanswered {
    /// The answer is in: the turn passes on, the session stays.
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some((session, turn)) = self.0.take() {
            session.retire();
            drop(turn);
        }
    }
}

/// One give-back of `record`'s key (see [`give_back_key`]).
async fn give_back_once(record: &Record, keep: Option<Instant>) -> Result<bool, LockError> {
    let etcd = &record.etcd;
    let here = etcd.here();
    let (mut kv, mut leases) = (here.client.kv_client(), here.client.lease_client());
    let kept = keep.map(|k| k.saturating_duration_since(Instant::now()));
    let answer = match kept {
        Some(left) if !left.is_zero() => {
            let granted = etcd.call(leases.grant(ttl_secs(left), None)).await?;
            // Marked kept: `inspect` shows a holder with no holds left.
            let put = Txn::new().when([record.ours()]).and_then([TxnOp::put(
                record.key.as_str(),
                [record.value.as_str(), KEPT].concat(),
                Some(PutOptions::new().with_lease(granted.id())),
            )]);
            etcd.call(kv.txn(put)).await?
        }
        _ => {
            let delete = Txn::new()
                .when([record.ours()])
                .and_then([TxnOp::delete(record.key.as_str(), None)]);
            etcd.call(kv.txn(delete)).await?
        }
    };
    if let Some(id) = record.fixed_lease() {
        let _ = etcd.call(leases.revoke(id)).await;
    }
    Ok(answer.succeeded())
}

crate::engine::seam::hold_by_inherent!(impl [] for EtcdHold);
