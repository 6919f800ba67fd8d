//! Taking a hold on etcd: the process queue (mutex keys), the key made
//! on the session's lease, and the wait for the keys before it (a watch on
//! the last one that blocks it); the undoing of all that when the
//! acquisition fails or is dropped is `undo`'s.

use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, SortOrder, Txn, TxnOp, TxnOpResponse};
use tokio::sync::{OwnedMutexGuard, oneshot};

use super::hold::{Lease, Record, lost, reenter, revision};
use super::layout::{self, check_name, one_of};
use super::session::{Session, ttl_secs};
use super::undo::Made;
use super::watches::Note;
use super::{ENGINE, Etcd, Here};
use crate::clock::valid_until;
use crate::error::LockError;
use crate::holder::Who;
use crate::kept::Access;
use crate::kept::{Taking, listed};
use crate::request::{Kind, Request, backoff, pause_within, within};

/// A hold taken in etcd: its key's create revision beside the token.
type Taken = crate::kept::Taken<i64>;

impl Taking for Etcd {
    crate::kept::taking_fields!(client | e | e, take by module);

    type Record = Record;
    type Made = Made;
    type More = i64;
    const ENGINE: &'static str = ENGINE;

    fn check(request: &Request) -> Result<(), LockError> {
        check_name(&request.name)
    }

    fn made(self: &Arc<Self>, who: &Arc<Who>) -> Made {
        Made {
            etcd: self.clone(),
            session: None,
            key: None,
            fixed: None,
            answered: None,
            sent: false,
            who: who.clone(),
            value: who.holder.clone(),
        }
    }

    fn record(
        self: &Arc<Self>,
        request: &Request,
        who: &Arc<Who>,
        under: Option<&Arc<Record>>,
        taken: &Taken,
        made: &mut Made,
        turn: Option<OwnedMutexGuard<()>>,
    ) -> Result<Arc<Record>, LockError> {
        // The claim on the key is kept until the hold is bound to the session.
        let name = request.name.as_str();
        let (Some(session), Some(claim)) = (made.session.take(), made.key.take()) else {
            return Err(lost(name));
        };
        let lease = match made.fixed.take() {
            Some((id, until)) => Lease::Fixed {
                id: AtomicI64::new(id),
                until: Mutex::new(until),
            },
            None => Lease::Session {
                session,
                bound: OnceLock::new(),
            },
        };
        let record = Arc::new(Record {
            etcd: self.clone(),
            base: crate::kept::Base::new(who, turn, under),
            side: Access::from(request.kind),
            key: claim.key().to_owned(),
            value: std::mem::take(&mut made.value),
            create_revision: taken.more,
            lease,
            watcher: OnceLock::new(),
        });
        let record = listed(&self.records, record, under);
        drop(claim);
        Ok(record)
    }
}

/// One try at the hold: the key made on the session's lease (or found
/// again after a lost answer: the lease id names it), then, if keys came
/// before it, the wait for them to go; a fixed lease is granted once the
/// hold is taken (its time counts from then) and the key moved to it.
async fn take(
    etcd: &Arc<Etcd>,
    request: &Request,
    who: &Who,
    under: Option<&Arc<Record>>,
    pending: &mut Made,
) -> Result<Taken, LockError> {
    let (name, side) = (request.name.as_str(), Access::from(request.kind));
    let session = match pending.session.take().filter(|s| s.is_usable()) {
        Some(session) => session,
        None => match etcd.sessions.live() {
            Some(session) => session,
            None => {
                // On the client's runtime: a new session's keep-alive task
                // lives there.
                let sessions = etcd.clone();
                etcd.runtime
                    .spawn(async move { sessions.sessions.get().await })
                    .await
                    .map_err(|_| LockError::Shutdown)??
            }
        },
    };
    let number = who.number();
    let permits = match request.kind {
        Kind::Semaphore(permits) => Some(permits),
        _ => None,
    };
    // A fair waiter's key and a permit's are each one's own.
    let own = request.kind == Kind::Fair || permits.is_some();
    let key = layout::key(side, name, session.lease, number, own);
    let value = layout::value(&who.holder, request.kind);
    pending.value.clone_from(&value);
    pending.session = Some(session.clone());
    pending.key = Some(session.claim(key.clone()));
    let blockers = layout::blockers(side, name);
    // The first key of each range that keeps it out; a permit reads every
    // key of the name (which of them came before it, and whose they are).
    let firsts = || {
        blockers.iter().map(|range| {
            let (start, options) = match permits {
                Some(_) => (
                    range.0.clone(),
                    etcd_client::GetOptions::new()
                        .with_range(range.1.as_str())
                        .with_sort(etcd_client::SortTarget::Create, SortOrder::Ascend),
                ),
                None => one_of(range, SortOrder::Ascend, None),
            };
            TxnOp::get(start, Some(options))
        })
    };
    let create = Txn::new()
        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
        .and_then(
            std::iter::once(TxnOp::put(
                key.as_str(),
                value.as_str(),
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
    let mut sent = Instant::now();
    // If the caller leaves with the create in flight, its answer is still
    // awaited (on the client's runtime) before anything is undone.
    let (answer_in, answered) = oneshot::channel::<()>();
    pending.answered = Some(answered);
    let ours_before = std::mem::replace(&mut pending.sent, true);
    // Made in a block of its own: a future keeps room for a local that is
    // in scope across an await, moved out or not.
    let call = {
        let here = etcd.here();
        let mut kv = here.client.kv_client();
        let within = etcd.config.response_timeout;
        let call = async move {
            let answer = Here::unless_left(here.near, within, kv.txn(create)).await;
            drop(answer_in);
            answer
        };
        etcd.call(crate::background::finish_on_drop(
            &etcd.runtime,
            call,
            |_| async {},
        ))
    };
    // Only what is needed is kept of the answer: a waiter carries what is
    // in scope while it waits.
    let (mut token, found, first, keys) = {
        let answer = call.await?;
        let mut reads = reads(&answer);
        // The key found under its name: its create revision, and whether it
        // holds our value (our holder id).
        let found = (!answer.succeeded()).then(|| {
            reads.remove(0).first().map_or((0, false), |kv| {
                (kv.create_revision(), kv.value() == value.as_bytes())
            })
        });
        let first = reads
            .iter()
            .filter_map(|kvs| kvs.first())
            .map(KeyValue::create_revision)
            .min();
        // A permit's: every key of the name, its create revision and value.
        let keys: Vec<(i64, Vec<u8>)> = match permits {
            Some(_) => reads
                .iter()
                .flatten()
                .map(|kv| (kv.create_revision(), kv.value().to_vec()))
                .collect(),
            None => Vec::new(),
        };
        (revision(answer.header()), found, first, keys)
    };
    let create_revision = match found {
        None => i64::try_from(token).unwrap_or(i64::MAX),
        Some((found, mine)) if !ours_before || !mine => {
            // Not made by this acquisition: this client's earlier hold,
            // kept until its `hold_at_least` minimum or still being given
            // back, or a stray the session sweeps. Wait for it to go, then
            // try again.
            pending.sent = false;
            pending.key = None;
            wait_gone(etcd, request, key.as_bytes(), found).await?;
            return Err(LockError::Store {
                engine: ENGINE,
                message: format!("lock `{name}`: this client's earlier key went"),
                transient: true,
            });
        }
        // Made by an earlier try whose answer was lost.
        Some((found, _)) => found,
    };
    let blocked = match permits {
        Some(permits) => {
            let before: Vec<&[u8]> = keys
                .iter()
                .filter(|(created, _)| *created < create_revision)
                .map(|(_, value)| value.as_slice())
                .collect();
            !layout::admitted(before.into_iter(), permits)
        }
        None => first.is_some_and(|first| first < create_revision),
    };
    drop(keys);
    if let Some(write) = under {
        // Under this client's write: ours at once if the write's key is
        // still there now that ours is made (it keeps everyone else out).
        sent = Instant::now();
        let (there, at) = still_there(etcd, write.key.as_bytes(), write.create_revision).await?;
        if !there || write.is_lost() {
            return Err(lost(name));
        }
        token = at;
    } else if blocked {
        if request.once() {
            return Err(request.timed_out());
        }
        // Wait for every key before ours that keeps us out to go (for a
        // permit: for fewer than its bound before it).
        let turn = Turn {
            key: &key,
            session: &session,
            create_revision,
            blockers: &blockers,
        };
        let waited = match permits {
            Some(permits) => wait_for_permit(etcd, request, &turn, permits, &value).await?,
            None => wait_for_turn(etcd, request, &turn).await?,
        };
        match waited {
            Some(_) if side == Access::Read => {
                // Readers let in by one release would share the read's
                // revision: a write of its own gives each its token.
                sent = Instant::now();
                let bump = Txn::new()
                    .when([Compare::create_revision(
                        key.as_str(),
                        CompareOp::Equal,
                        create_revision,
                    )])
                    .and_then([TxnOp::put(
                        key.as_str(),
                        value.as_str(),
                        Some(PutOptions::new().with_ignore_lease()),
                    )]);
                let bumped = etcd.kv(|mut kv| async move { kv.txn(bump).await }).await?;
                if !bumped.succeeded() {
                    return Err(lost(name));
                }
                token = revision(bumped.header());
            }
            Some(confirmed) => {
                token = confirmed;
                sent = Instant::now();
            }
            None => {
                // Our key went while we waited (the session expired,
                // someone deleted it): try again, at the back of the line.
                pending.session = None;
                pending.key = None;
                return Err(LockError::Store {
                    engine: ENGINE,
                    message: format!("lock `{name}`: the waiter's key was deleted"),
                    transient: true,
                });
            }
        }
    }
    if let Some(lease) = request.lease.fixed() {
        sent = Instant::now();
        let ttl = ttl_secs(lease);
        let granted = etcd
            .call({
                let mut leases = etcd.here().client.lease_client();
                async move { leases.grant(ttl, None).await }
            })
            .await?;
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
                value.as_str(),
                Some(PutOptions::new().with_lease(granted.id())),
            )]);
        if !etcd
            .kv(|mut kv| async move { kv.txn(moved).await })
            .await?
            .succeeded()
        {
            return Err(lost(name));
        }
    }
    Ok(Taken {
        token,
        sent,
        more: create_revision,
    })
}

/// What a waiter waits for: its key, and the ranges whose earlier keys
/// keep it out.
struct Turn<'a> {
    key: &'a str,
    /// The session the key is on.
    session: &'a Session,
    create_revision: i64,
    blockers: &'a [(String, String)],
}

/// Waits until no key of the `blockers` ranges was created before ours:
/// each time, waits for the last one before it to go ([`wait_gone`]: no
/// herd). Returns the revision from which the hold is ours (the token), or
/// `None` when our key is gone.
///
/// A read finds our key there and the last key before it. When that key
/// was the only one before ours, its deletion is our turn, with no read
/// after it (keys are only ever made after ours, never before): the token
/// is the deletion's revision, and the handoff is the release and its
/// event. A key of ours deleted meanwhile is then found by the session's
/// next round (as a Redis hold learns it at its next renewal), unless the
/// session is lost, which this client's clock tells at once.
async fn wait_for_turn(
    etcd: &Etcd,
    request: &Request,
    turn: &Turn<'_>,
) -> Result<Option<u64>, LockError> {
    loop {
        let lasts: Vec<TxnOp> = turn
            .blockers
            .iter()
            .map(|range| {
                let (start, options) =
                    one_of(range, SortOrder::Descend, Some(turn.create_revision - 1));
                TxnOp::get(start, Some(options))
            })
            .collect();
        let ours = Compare::create_revision(turn.key, CompareOp::Equal, turn.create_revision);
        let read = Txn::new().when([ours]).and_then(lasts);
        // Per range, the last key before ours (its name and create
        // revision), and whether there are more; only these are kept while
        // it waits.
        let (found, at, lasts) = {
            let found = etcd.kv(|mut kv| async move { kv.txn(read).await }).await?;
            let lasts: Vec<(Vec<u8>, i64, bool)> = found
                .op_responses()
                .into_iter()
                .filter_map(|op| match op {
                    TxnOpResponse::Get(mut got) => {
                        let more = got.more();
                        let mut kvs = got.take_kvs().into_iter();
                        kvs.next()
                            .map(|kv| (kv.key().to_vec(), kv.create_revision(), more))
                    }
                    _ => None,
                })
                .collect();
            (found.succeeded(), revision(found.header()), lasts)
        };
        if !found {
            return Ok(None);
        }
        let alone = matches!(lasts.as_slice(), [(_, _, false)]);
        let Some((predecessor, predecessor_created, _)) =
            lasts.into_iter().max_by_key(|(_, created, _)| *created)
        else {
            return Ok(Some(at));
        };
        let gone_at = wait_gone(etcd, request, &predecessor, predecessor_created).await?;
        if alone && !turn.session.is_lost() {
            return Ok(Some(u64::try_from(gone_at).unwrap_or(0)));
        }
    }
}

/// Waits until fewer than `permits` keys of the name were created before
/// the permit's own, every one a permit's ([`layout::admitted`]): each
/// time, a watch from now on the deletion of any key created before ours
/// (one watch on the name's prefix, on the client's one stream; later
/// keys wake nobody), then the keys before ours read once it is in place.
/// Returns the revision of a write of our key (`value` put again) made
/// once it is let in, the permit's token: permits let in by one deletion
/// get one each. A waiter that one deletion may let in (the last read
/// found exactly `permits` keys before it) writes in the read's own txn:
/// the handoff costs one round trip after the event, as a lock's does.
/// `None` when our key is gone.
async fn wait_for_permit(
    etcd: &Etcd,
    request: &Request,
    turn: &Turn<'_>,
    permits: u32,
    value: &str,
) -> Result<Option<u64>, LockError> {
    let prefix = layout::prefix(&request.name);
    let mut broken = 0;
    // Whether one deletion before ours may let us in.
    let mut next = false;
    // One watch while it waits (made again only when it breaks): each
    // deletion before ours is one note, then one read.
    let mut watching = None;
    loop {
        let watch = match watching.as_mut() {
            Some(watch) => watch,
            None => {
                let mut watch = etcd
                    .watches
                    .watch_before(prefix.as_bytes(), turn.create_revision);
                if next_within(&mut watch, request).await? == Note::Broken {
                    broken += 1;
                    pause_within(request.deadline, backoff(broken)).await;
                    continue;
                }
                watching.insert(watch)
            }
        };
        let range = &turn.blockers[0];
        let before = etcd_client::GetOptions::new()
            .with_range(range.1.as_str())
            .with_max_create_revision(turn.create_revision - 1);
        let ours = || Compare::create_revision(turn.key, CompareOp::Equal, turn.create_revision);
        let bump = || {
            let options = PutOptions::new().with_ignore_lease();
            TxnOp::put(turn.key, value, Some(options))
        };
        let mut ops = vec![TxnOp::get(range.0.as_str(), Some(before))];
        if next {
            ops.push(bump());
        }
        let read = Txn::new().when([ours()]).and_then(ops);
        let (found, at, admitted, before) = {
            let answer = etcd.kv(|mut kv| async move { kv.txn(read).await }).await?;
            let keys = reads(&answer);
            let values: Vec<&[u8]> = keys.iter().flatten().map(KeyValue::value).collect();
            let before = values.len();
            let admitted = layout::admitted(values.into_iter(), permits);
            (
                answer.succeeded(),
                revision(answer.header()),
                admitted,
                before,
            )
        };
        if !found {
            return Ok(None);
        }
        if admitted && next {
            return Ok(Some(at));
        }
        if admitted {
            let bumped = Txn::new().when([ours()]).and_then([bump()]);
            let bumped = etcd
                .kv(|mut kv| async move { kv.txn(bumped).await })
                .await?;
            return match bumped.succeeded() {
                true => Ok(Some(revision(bumped.header()))),
                false => Ok(None),
            };
        }
        next = before == usize::try_from(permits).unwrap_or(usize::MAX);
        // A deletion before ours (or a broken watch: a new one): look again.
        if next_within(watch, request).await? == Note::Broken {
            watching = None;
            broken += 1;
            pause_within(request.deadline, backoff(broken)).await;
        }
    }
}

/// Waits, within the wait, until `key` (created at `create_revision`) is
/// gone: a watch from now (in step with etcd at once), and the key read
/// again once it is in place, in case it went just before. Returns a
/// revision at which it was gone (its deletion's, when the watch heard
/// it).
async fn wait_gone(
    etcd: &Etcd,
    request: &Request,
    key: &[u8],
    create_revision: i64,
) -> Result<i64, LockError> {
    let deadline = request.deadline;
    let mut broken = 0;
    loop {
        let mut watch = etcd.watches.watch(key, 0);
        let mut note = next_within(&mut watch, request).await?;
        if note == Note::Created {
            let (there, at) = still_there(etcd, key, create_revision).await?;
            if !there {
                return Ok(i64::try_from(at).unwrap_or(i64::MAX));
            }
            note = next_within(&mut watch, request).await?;
        }
        match note {
            Note::Deleted(revision) => return Ok(revision),
            _ => {
                broken += 1;
                let pause = backoff(broken);
                pause_within(deadline, pause).await;
            }
        }
    }
}

/// Whether `key` is there with its create revision (the same key, not
/// one made again), and the revision at which that was read.
async fn still_there(
    etcd: &Etcd,
    key: &[u8],
    create_revision: i64,
) -> Result<(bool, u64), LockError> {
    let key = key.to_vec();
    let found = etcd
        .kv(|mut kv| async move { kv.get(key, None).await })
        .await?;
    let there = found
        .kvs()
        .first()
        .is_some_and(|kv| kv.create_revision() == create_revision);
    Ok((there, revision(found.header())))
}

/// The next note of `watch`, or the error of a wait that ran out.
async fn next_within(
    watch: &mut super::watches::Watch,
    request: &Request,
) -> Result<Note, LockError> {
    within!(watch.next(), request.deadline, request)
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
