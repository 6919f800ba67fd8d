//! An acquisition on an engine whose store keeps one record per client and
//! name ([`acquire`]): its turn in the process, a re-entry in the scope of
//! its own hold ([`in_scope`]), then tries in the store ([`Taking`],
//! [`take_hold`]) until taken or out of time ([`try_again`]).

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use tokio::sync::OwnedMutexGuard;

use super::hold::Hold;
use super::record::{Record, lost};
use super::turns::{Kind, Records, Turns};
use super::undo::{Pending, Undo};
use crate::background::Background;
use crate::error::{LockError, transient};
use crate::holder::{self, Chain};
use crate::request::{Options, Target, backoff, check_options, pause_within, timed_out};

/// How an acquisition in the scope of this client's own hold of the name
/// goes on.
pub(crate) enum InScope<R> {
    /// A re-entry of the hold.
    Reenter(Arc<R>),
    /// A read under this client's write: a record of its own, taken at
    /// once (see [`Downgrade`]).
    Under(Arc<R>),
}

/// How an acquisition of `name` asking for `asked`, in the scope of
/// `holder`'s hold of it, goes on; [`LockError::Lost`] when that hold's
/// record is gone.
pub(crate) fn in_scope<R: Record>(
    records: &Records<R>,
    name: &str,
    holder: String,
    asked: Kind,
) -> Result<InScope<R>, LockError> {
    let record = records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(name.to_owned(), holder))
        .cloned();
    // Upgraded with the map unlocked: dropping a last `Arc` of a record
    // locks the map.
    let Some(record) = record.and_then(|r| r.upgrade()) else {
        return Err(lost(name));
    };
    if !(record.kind() == Kind::Write && asked == Kind::Read) {
        return Ok(InScope::Reenter(record));
    }
    if record.holds() == 0 {
        return Err(lost(name));
    }
    Ok(InScope::Under(record))
}

/// Lists a new `record` in the client's `records` (and, for a read under
/// this client's write, under that write).
pub(crate) fn list<R: Record>(records: &Records<R>, record: &Arc<R>, under: Option<&Arc<R>>) {
    if let Some(write) = under {
        write.downgrade().add(record);
    }
    records.lock().unwrap_or_else(|p| p.into_inner()).insert(
        (record.name().to_owned(), record.holder().to_owned()),
        Arc::downgrade(record),
    );
}

/// Takes a record that goes out of the client's `records` (its `Drop`,
/// which gives up its `name` and `holder` id, left empty, as the key: no
/// copy).
pub(crate) fn unlist<R>(records: &Records<R>, name: &mut String, holder: &mut String) {
    let key = (std::mem::take(name), std::mem::take(holder));
    let mut records = records.lock().unwrap_or_else(|p| p.into_inner());
    // One look-up; a record listed since under the same key stays.
    if let std::collections::hash_map::Entry::Occupied(listed) = records.entry(key)
        && listed.get().strong_count() == 0
    {
        listed.remove();
    }
}

/// Who takes a hold, and on which side: what each try of an acquisition
/// knows.
pub(crate) struct How<'a, R, S> {
    #[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
    pub(crate) side: S,
    pub(crate) holder: &'a str,
    /// The holder number (the part of the holder id after the client's).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) number: u64,
    pub(crate) deadline: Option<Instant>,
    /// A read's: this client's write hold whose scope it is taken in.
    pub(crate) under: Option<&'a Arc<R>>,
}

/// A hold taken in the store: its token, when the call that confirmed it
/// was sent, and what else the engine learnt.
pub(crate) struct Taken<X> {
    pub(crate) token: u64,
    pub(crate) sent: Instant,
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) more: X,
}

/// An engine whose acquisitions [`take_hold`] drives: what each try does
/// in its store, and the record a hold taken gets.
pub(crate) trait Taking: Send + Sync + Sized + 'static {
    type Record: Record;
    /// Which kind of contender an acquisition is, in the store's terms.
    type Side: Copy + Send + Sync + 'static;
    type Made: Undo;
    type More: Send;
    /// The engine's name, for the log.
    const ENGINE: &'static str;
    /// The client's id.
    fn id(&self) -> &str;
    /// The client's queues, per name.
    fn turns(&self) -> &Turns;
    /// The client's records, per lock name and holder id.
    fn records(&self) -> &Records<Self::Record>;
    /// The side `target` takes (a name the store refuses is an error).
    fn side(target: &Target) -> Result<Self::Side, LockError>;
    fn kind(side: Self::Side) -> Kind;
    /// A re-entry of `record`'s hold.
    fn reenter<'a>(
        alive: Arc<Background>,
        record: Arc<Self::Record>,
        side: Self::Side,
        chain: Chain,
        options: &'a Options,
        metric: &'static str,
    ) -> impl Future<Output = Result<Hold<Self::Record>, LockError>> + Send + 'a;
    /// Nothing made yet, by `holder`.
    fn made(self: &Arc<Self>, holder: &str) -> Self::Made;
    /// One try at the hold.
    fn take<'a>(
        self: &'a Arc<Self>,
        target: &'a Target,
        options: &'a Options,
        how: &'a How<'a, Self::Record, Self::Side>,
        made: &'a mut Self::Made,
    ) -> impl Future<Output = Result<Taken<Self::More>, LockError>> + Send + 'a;
    /// The record of the hold `taken` (what `made` made), listed in the
    /// client's records and started (bound to what keeps it, or timed),
    /// keeping `turn` until it goes; [`LockError::Lost`] when what was
    /// made is gone.
    fn record(
        self: &Arc<Self>,
        name: &str,
        options: &Options,
        how: &How<'_, Self::Record, Self::Side>,
        taken: &Taken<Self::More>,
        made: &mut Self::Made,
        turn: Option<OwnedMutexGuard<()>>,
    ) -> Result<Arc<Self::Record>, LockError>;
}

/// The accessors of [`Taking`] that read the client's shared parts (`id`,
/// `turns`, `records`), reached by `client`, and a side's kind: written
/// once for every engine.
macro_rules! taking_fields {
    (client |$me:ident| $client:expr) => {
        fn id(&self) -> &str {
            let $me = self;
            &$client.id
        }

        fn turns(&self) -> &$crate::kept::Turns {
            let $me = self;
            &$client.turns
        }

        fn records(&self) -> &$crate::kept::Records<Self::Record> {
            let $me = self;
            &$client.records
        }

        fn kind(side: Self::Side) -> $crate::kept::Kind {
            side.kind()
        }
    };
}
pub(crate) use taking_fields;

/// The count `inspect` shows for holder `id` of lock `name`: its record's
/// live holds when it is this client's, 0 when its hold is kept only by a
/// `hold_at_least` minimum, else 1 (another client's).
pub(crate) fn holds_of<R: Record>(records: &Records<R>, name: &str, id: &str, kept: bool) -> u64 {
    let record = records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(name.to_owned(), id.to_owned()))
        .cloned();
    // Upgraded with the map unlocked: dropping a last `Arc` of a record
    // locks the map.
    match record.and_then(|r| r.upgrade()) {
        _ if kept => 0,
        Some(r) => r.holds().max(1) as u64,
        None => 1,
    }
}

/// An acquisition on a [`Taking`] engine once the options are checked and
/// its turn is in: a re-entry when the caller runs in the scope of this
/// client's hold, else tries in the store (the undo of what they made
/// when the acquisition fails or is dropped) until the hold is taken.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments twice (see the comment inside)"
)]
pub(crate) fn take_hold<S: Taking>(
    alive: Arc<Background>,
    store: Arc<S>,
    target: &Target,
    options: Options,
    queued: Queued,
) -> impl Future<Output = Result<Hold<S::Record>, LockError>> + Send + '_ {
    // An async block, not an async fn: a head waits in it, and an async
    // fn keeps its arguments twice (as they came and as moved).
    async move {
        let Queued {
            reentry,
            turn,
            deadline,
        } = queued;
        let mut under = None;
        let side = S::side(target)?;
        let name = target.name();
        let metric = options.metric.unwrap_or(target.kind());
        if let Some((holder, chain)) = reentry {
            match in_scope(store.records(), name, holder, S::kind(side))? {
                InScope::Reenter(record) => {
                    return S::reenter(alive, record, side, chain, &options, metric).await;
                }
                InScope::Under(write) => under = Some(write),
            }
        }
        let number = options.number.unwrap_or_else(crate::holder::fresh_number);
        let holder = crate::holder::id(store.id(), number);
        let _waiting = crate::telemetry::WaiterMetric::start(metric);
        let mut pending = Pending::new(alive.clone(), turn, store.made(&holder));
        let how = How {
            side,
            holder: &holder,
            number,
            deadline,
            under: under.as_ref(),
        };
        let mut tries = 0;
        let taken = loop {
            tries += 1;
            match store.take(target, &options, &how, &mut pending.made).await {
                Ok(taken) => break taken,
                Err(e) => {
                    if let Err(e) = try_again(e, tries, deadline, target, &options, S::ENGINE).await
                    {
                        pending.give_up().await;
                        return Err(e);
                    }
                }
            }
        };
        let turn = pending.turn.take();
        let record = store.record(name, &options, &how, &taken, &mut pending.made, turn)?;
        Ok(Hold::new(
            alive,
            record,
            taken.token,
            taken.sent,
            &options,
            metric,
        ))
    }
}

/// After try `tries` of an acquisition failed with `e`: `Ok` once it
/// paused to try again (a fault that may heal, within the wait), else the
/// error to return. One attempt reports its fault as it is; a wait that
/// ran out on faults that may heal was a wait that ran out.
pub(crate) async fn try_again(
    e: LockError,
    tries: u32,
    deadline: Option<Instant>,
    target: &Target,
    options: &Options,
    store: &'static str,
) -> Result<(), LockError> {
    if transient(&e) && deadline.is_none_or(|d| Instant::now() < d) {
        if tries == 1 && deadline.is_none() {
            tracing::warn!(lock = target.name(), error = %e, store, "an attempt failed; waiting without a deadline, so trying again with backoff until the store answers");
        }
        pause_within(deadline, backoff(tries)).await;
        return Ok(());
    }
    let waited = options.wait != Some(Duration::ZERO);
    Err(if transient(&e) && waited {
        timed_out(target, options)
    } else {
        e
    })
}

/// What [`acquire`] knows when it stops queueing in the process.
pub(crate) struct Queued {
    /// The holder id and chain of this client's hold, when the caller runs
    /// in its scope.
    pub(crate) reentry: Option<(String, holder::Chain)>,
    /// The turn at a mutex record, when it is one.
    pub(crate) turn: Option<OwnedMutexGuard<()>>,
    pub(crate) deadline: Option<Instant>,
}

/// Takes a hold of `target` on `engine`: a re-entry when the caller runs
/// in the scope of this client's hold of it, else a new holder that
/// queues in the process (a mutex), then in the store ([`take_hold`]). A queued waiter carries this future and
/// the queue's only: the rest is boxed once it has its turn.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments twice (see the comment inside)"
)]
pub(crate) fn acquire<E: Taking>(
    alive: Arc<Background>,
    engine: Arc<E>,
    target: Target,
    options: Options,
) -> impl Future<Output = Result<Hold<E::Record>, LockError>> + Send {
    // An async block, not an async fn: what it takes is kept once, not
    // twice (its arguments and their moved copies).
    async move {
        check_options(&target, &options)?;
        let started = Instant::now();
        let deadline = options.wait.and_then(|w| started.checked_add(w));
        // A plain lock's record is one per client and name: this client's
        // turn first (a re-entry has the turn already: its scope's hold
        // keeps it). A name the store refuses is refused once it has its
        // turn, which no one holds. A fair waiter has a record of its own,
        // so that the store's line keeps arrival order across this
        // client's tasks as across clients (issue 34), as do a read-write
        // lock's.
        let mutex = matches!(target, Target::Reentrant { .. })
            && holder::in_scope(engine.id(), target.name()).is_none();
        let queued = if mutex {
            engine
                .turns()
                .turn(&target, &options, deadline)
                .await
                .map(Some)
        } else {
            Ok(None)
        };
        let result = match queued {
            Ok(turn) => {
                // Looked up again, not kept while queued (the same task's
                // scope: the same answer).
                let reentry = match mutex {
                    true => None,
                    false => holder::in_scope(engine.id(), target.name()),
                };
                let queued = Queued {
                    reentry,
                    turn,
                    deadline,
                };
                Box::pin(take_hold(alive, engine, &target, options, queued)).await
            }
            Err(e) => Err(e),
        };
        let kind = options.metric.is_none().then(|| target.kind());
        crate::telemetry::record_acquired(kind, started, &result);
        result
    }
}
