//! Taking a hold on etcd: the process queue (mutex keys), the key made
//! on the session's lease, the wait for the keys before it (a watch on the
//! last one that blocks it), and the undoing of all that when the
//! acquisition fails or is dropped.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, SortOrder, Txn, TxnOp, TxnOpResponse};
use tokio::sync::{OwnedMutexGuard, watch};

use super::hold::{EtcdHold, Lease, Record, lost, reenter, revision};
use super::layout::{Side, one_of};
use super::session::{Session, ttl_secs};
use super::watches::Note;
use super::{ENGINE, Etcd, transient};
use crate::holder;
use crate::request::{Options, Target, backoff, timed_out};
use crate::watchdog::valid_until;
use crate::{LockClient, LockError};

/// Takes a hold of `target` on etcd (see the module docs of [`super`]):
/// a re-entry when the caller runs in the scope of this client's hold of
/// it, else a new holder that queues in the process, then in etcd.
pub(crate) async fn acquire(
    client: LockClient,
    etcd: Arc<Etcd>,
    target: Target,
    options: Options,
    started: Instant,
) -> Result<EtcdHold, LockError> {
    let side = Side::of(&target)?;
    let name = target.name();
    let deadline = options.wait.and_then(|w| started.checked_add(w));
    let metric = options.metric.unwrap_or(target.kind());
    if let Some((holder, chain)) = holder::in_scope(&etcd.id, name) {
        let record = etcd
            .records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&holder)
            .and_then(std::sync::Weak::upgrade);
        let Some(record) = record else {
            return Err(lost(name));
        };
        return reenter(client, record, side, chain, &options, metric).await;
    }
    let number = options.number.unwrap_or_else(holder::fresh_number);
    let holder = holder::id(&etcd.id, number);
    // A mutex key is one per client and name: this client's turn first.
    let turn = match side {
        Side::Mutex => Some(turn(&etcd, &target, &options, deadline).await?),
        Side::Read | Side::Write => None,
    };
    let _waiting = crate::telemetry::WaiterMetric::start(metric);
    let mut pending = Pending {
        etcd: etcd.clone(),
        turn,
        session: None,
        key: None,
        fixed: None,
    };
    let mut tries = 0;
    let taken = loop {
        tries += 1;
        let how = How {
            side,
            holder: &holder,
            number,
            deadline,
        };
        match take(&etcd, &target, &options, &how, &mut pending).await {
            Ok(taken) => break taken,
            Err(e) if transient(&e) && deadline.is_none_or(|d| Instant::now() < d) => {
                if tries == 1 && deadline.is_none() {
                    tracing::warn!(lock = name, error = %e, "an attempt failed; waiting without a deadline, so trying again with backoff until etcd answers");
                }
                let pause = backoff(tries);
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.min(Instant::now() + pause).into()).await,
                    None => tokio::time::sleep(pause).await,
                }
            }
            Err(e) => {
                pending.give_up().await;
                return Err(if transient(&e) {
                    timed_out(&target, &options)
                } else {
                    e
                });
            }
        }
    };
    let turn = pending.turn.take();
    let (Some(session), Some(key)) = (pending.session.take(), pending.key.take()) else {
        return Err(lost(name));
    };
    let lease = match pending.fixed.take() {
        Some((id, until)) => Lease::Fixed {
            id,
            until: Mutex::new(until),
        },
        None => Lease::Session {
            _bound: session.bind(),
            session,
        },
    };
    let (deleted, _) = watch::channel(false);
    let record = Arc::new(Record {
        etcd: etcd.clone(),
        name: name.to_owned(),
        side,
        key,
        holder: holder.clone(),
        create_revision: taken.create_revision,
        lease,
        holds: AtomicUsize::new(1),
        deleted,
        watcher: OnceLock::new(),
        _turn: turn,
    });
    etcd.records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(holder, Arc::downgrade(&record));
    record.watch_deletion();
    Ok(EtcdHold::new(
        client,
        record,
        taken.token,
        taken.sent,
        &options,
        metric,
    ))
}

/// Waits, within the wait, for this client's turn at a mutex key of
/// `target` (FIFO); a zero wait takes it only if free.
async fn turn(
    etcd: &Etcd,
    target: &Target,
    options: &Options,
    deadline: Option<Instant>,
) -> Result<OwnedMutexGuard<()>, LockError> {
    let queue = etcd.queue(target.name());
    if options.wait == Some(Duration::ZERO) {
        return queue
            .try_lock_owned()
            .map_err(|_| timed_out(target, options));
    }
    match deadline {
        Some(d) => tokio::time::timeout_at(d.into(), queue.lock_owned())
            .await
            .map_err(|_| timed_out(target, options)),
        None => Ok(queue.lock_owned().await),
    }
}

/// Who takes the hold, and on which side.
struct How<'a> {
    side: Side,
    holder: &'a str,
    /// The holder number (a read-write key's own part).
    number: u64,
    deadline: Option<Instant>,
}

/// What an acquisition has made in etcd so far, undone when it fails or
/// is dropped (in a task of the client's runtime): its key deleted, its
/// fixed lease revoked, and only then the process queue's turn passed on.
struct Pending {
    etcd: Arc<Etcd>,
    turn: Option<OwnedMutexGuard<()>>,
    /// The session the key is bound to while it waits.
    session: Option<Arc<Session>>,
    /// The key, once a create may have been sent.
    key: Option<String>,
    /// The fixed lease the key was moved to, and when it counts as lost.
    fixed: Option<(i64, Instant)>,
}

impl Pending {
    /// Undoes what was made (see [`Pending`]), waiting for it.
    async fn give_up(&mut self) {
        let etcd = self.etcd.clone();
        let (key, fixed, turn) = (self.key.take(), self.fixed.take(), self.turn.take());
        let undone = etcd
            .runtime
            .clone()
            .spawn(async move { undo(&etcd, key, fixed, turn).await });
        let _ = undone.await;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.turn.is_none() && self.key.is_none() && self.fixed.is_none() {
            return;
        }
        let etcd = self.etcd.clone();
        let (key, fixed, turn) = (self.key.take(), self.fixed.take(), self.turn.take());
        self.etcd
            .runtime
            .spawn(async move { undo(&etcd, key, fixed, turn).await });
    }
}

/// Deletes `key` and revokes `fixed`, retrying what may heal for a while;
/// then drops the process queue's `turn`.
async fn undo(
    etcd: &Etcd,
    key: Option<String>,
    fixed: Option<(i64, Instant)>,
    turn: Option<OwnedMutexGuard<()>>,
) {
    for tries in 1..=crate::config::UNLOCK_TRIES {
        let mut kv = etcd.client().kv_client();
        let deleted = match &key {
            Some(key) => etcd.call(kv.delete(key.as_str(), None)).await.map(drop),
            None => Ok(()),
        };
        let revoked = match fixed {
            Some((id, _)) => {
                let mut leases = etcd.client().lease_client();
                etcd.call(leases.revoke(id)).await.map(drop)
            }
            None => Ok(()),
        };
        match deleted.and(revoked) {
            Err(e) if transient(&e) => {
                tokio::time::sleep(Duration::from_millis(50 * u64::from(tries))).await;
            }
            Err(e) => {
                tracing::warn!(key = ?key, error = %e, "could not delete an abandoned lock key");
                break;
            }
            Ok(()) => break,
        }
    }
    drop(turn);
}

/// A hold taken in etcd.
struct Taken {
    create_revision: i64,
    token: u64,
    /// When the call that confirmed it was sent.
    sent: Instant,
}

/// One try at the hold: the key made on the session's lease (or found
/// again after a lost answer: the lease id names it), then, if keys came
/// before it, the wait for them to go; a fixed lease is granted once the
/// hold is taken (its time counts from then) and the key moved to it.
async fn take(
    etcd: &Arc<Etcd>,
    target: &Target,
    options: &Options,
    how: &How<'_>,
    pending: &mut Pending,
) -> Result<Taken, LockError> {
    let name = target.name();
    let session = match pending.session.take() {
        Some(session) if !session.is_lost() => session,
        _ => {
            // On the client's runtime: a new session's keep-alive task
            // lives there.
            let sessions = etcd.clone();
            etcd.runtime
                .spawn(async move { sessions.sessions.get().await })
                .await
                .map_err(|_| LockError::Shutdown)??
        }
    };
    let number = itoa::Buffer::new().format(how.number).to_owned();
    let key = how.side.key(name, session.lease, &number);
    pending.session = Some(session.clone());
    pending.key = Some(key.clone());
    let blockers = how.side.blockers(name);
    let firsts = || {
        blockers.iter().map(|range| {
            let (start, options) = one_of(range, SortOrder::Ascend, None);
            TxnOp::get(start, Some(options))
        })
    };
    let create = Txn::new()
        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
        .and_then(
            std::iter::once(TxnOp::put(
                key.as_str(),
                how.holder,
                Some(PutOptions::new().with_lease(session.lease)),
            ))
            .chain(firsts())
            .collect::<Vec<_>>(),
        )
        .or_else(
            std::iter::once(TxnOp::get(key.as_str(), None))
                .chain(firsts())
                .collect::<Vec<_>>(),
        );
    let mut kv = etcd.client().kv_client();
    let mut sent = Instant::now();
    let answer = etcd.call(kv.txn(create)).await?;
    let mut token = revision(answer.header());
    let mut reads = reads(&answer);
    let create_revision = if answer.succeeded() {
        i64::try_from(token).unwrap_or(i64::MAX)
    } else {
        // Made by an earlier try whose answer was lost.
        let mine = reads.remove(0);
        mine.first().map_or(0, KeyValue::create_revision)
    };
    let blocked = reads
        .iter()
        .filter_map(|kvs| kvs.first())
        .any(|kv| kv.create_revision() < create_revision);
    if blocked {
        if options.wait == Some(Duration::ZERO) {
            return Err(timed_out(target, options));
        }
        // Wait for every key before ours that keeps us out to go.
        wait_for_turn(
            etcd,
            target,
            options,
            &blockers,
            create_revision,
            how.deadline,
        )
        .await?;
        let confirm = Txn::new().when([Compare::create_revision(
            key.as_str(),
            CompareOp::Equal,
            create_revision,
        )]);
        sent = Instant::now();
        let answer = etcd.call(kv.txn(confirm)).await?;
        if !answer.succeeded() {
            // Our key went while we waited (the session expired, someone
            // deleted it): try again, at the back of the line.
            pending.session = None;
            pending.key = None;
            return Err(LockError::Store {
                engine: ENGINE,
                message: format!("lock `{name}`: the waiter's key was deleted"),
                transient: true,
            });
        }
        token = revision(answer.header());
    }
    if let Some(lease) = options.lease {
        let mut leases = etcd.client().lease_client();
        sent = Instant::now();
        let granted = etcd.call(leases.grant(ttl_secs(lease), None)).await?;
        let ttl = Duration::from_secs(granted.ttl().max(1) as u64);
        pending.fixed = Some((granted.id(), valid_until(sent, ttl)));
        let moved = Txn::new()
            .when([Compare::create_revision(
                key.as_str(),
                CompareOp::Equal,
                create_revision,
            )])
            .and_then([TxnOp::put(
                key.as_str(),
                how.holder,
                Some(PutOptions::new().with_lease(granted.id())),
            )]);
        if !etcd.call(kv.txn(moved)).await?.succeeded() {
            return Err(lost(name));
        }
    }
    Ok(Taken {
        create_revision,
        token,
        sent,
    })
}

/// Waits until no key of the `blockers` ranges was created before
/// `create_revision`: each time, watches the deletion of the last one
/// before it (no herd), on the client's watch stream.
async fn wait_for_turn(
    etcd: &Etcd,
    target: &Target,
    options: &Options,
    blockers: &[(String, String)],
    create_revision: i64,
    deadline: Option<Instant>,
) -> Result<(), LockError> {
    let mut broken = 0;
    loop {
        let lasts: Vec<TxnOp> = blockers
            .iter()
            .map(|range| {
                let (start, options) = one_of(range, SortOrder::Descend, Some(create_revision - 1));
                TxnOp::get(start, Some(options))
            })
            .collect();
        let mut kv = etcd.client().kv_client();
        let found = etcd.call(kv.txn(Txn::new().and_then(lasts))).await?;
        let predecessor = reads(&found)
            .into_iter()
            .filter_map(|kvs| kvs.into_iter().next())
            .max_by_key(KeyValue::create_revision);
        let Some(predecessor) = predecessor else {
            return Ok(());
        };
        let from = found.header().map_or(0, |h| h.revision()) + 1;
        let mut watch = etcd
            .watches
            .watch(predecessor.key_str().unwrap_or_default(), from);
        let note = match deadline {
            Some(d) => tokio::time::timeout_at(d.into(), watch.next())
                .await
                .map_err(|_| timed_out(target, options))?,
            None => watch.next().await,
        };
        if note == Note::Broken {
            broken += 1;
            let pause = backoff(broken);
            match deadline {
                Some(d) => tokio::time::sleep_until(d.min(Instant::now() + pause).into()).await,
                None => tokio::time::sleep(pause).await,
            }
        }
    }
}

/// The answers of a txn's operations that read keys, in order.
fn reads(answer: &etcd_client::TxnResponse) -> Vec<Vec<KeyValue>> {
    answer
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(mut got) => Some(got.take_kvs()),
            _ => None,
        })
        .collect()
}
