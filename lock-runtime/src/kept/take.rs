//! An acquisition on an engine whose store keeps one record per client and
//! name ([`acquire`]): its turn in the process, a re-entry in the scope of
//! its own hold ([`in_scope`]), then tries in the store ([`Taking`],
//! [`take_hold`]) until taken or out of time ([`try_again`]).

use std::sync::Arc;
use tokio::time::Instant;

use tokio::sync::OwnedMutexGuard;

use super::hold::Hold;
use super::record::{Record, lost};
use super::turns::{Access, Records, Turns};
use super::undo::{Pending, Undo};
use crate::background::Background;
use crate::error::{LockError, transient};
use crate::holder::{self, Chain, Who};
use crate::request::{Kind, Request, backoff, pause_within};

/// How an acquisition in the scope of this client's own hold of the name
/// goes on.
pub(crate) enum InScope<R> {
    /// A re-entry of the hold.
    Reenter(Arc<R>),
    /// A read under this client's write: a record of its own, taken at
    /// once (see [`Downgrade`]).
    Under(Arc<R>),
}

/// How an acquisition asking for `asked`, in the scope of the hold `who`,
/// goes on; [`LockError::Lost`] when that hold's record is gone.
pub(crate) fn in_scope<R: Record>(
    records: &Records<R>,
    who: &Arc<Who>,
    asked: Access,
) -> Result<InScope<R>, LockError> {
    let record = records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(who)
        .cloned();
    // Upgraded with the map unlocked: dropping a last `Arc` of a record
    // locks the map.
    let Some(record) = record.and_then(|r| r.upgrade()) else {
        return Err(lost(&who.name));
    };
    if !(record.access() == Access::Write && asked == Access::Read) {
        return Ok(InScope::Reenter(record));
    }
    if record.holds() == 0 {
        return Err(lost(&who.name));
    }
    Ok(InScope::Under(record))
}

/// Lists a new `record` in the client's `records` (and, for a read under
/// this client's write, under that write), and starts it
/// ([`Record::start`]).
pub(crate) fn listed<R: Record>(
    records: &Records<R>,
    record: Arc<R>,
    under: Option<&Arc<R>>,
) -> Arc<R> {
    if let Some(write) = under {
        write.downgrade().add(&record);
    }
    records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(record.who().clone(), Arc::downgrade(&record));
    record.start();
    record
}

/// Takes the record of hold `who` out of the client's `records` (its
/// `Drop`).
pub(crate) fn unlist<R>(records: &Records<R>, who: &Arc<Who>) {
    let key = who.clone();
    let mut records = records.lock().unwrap_or_else(|p| p.into_inner());
    // One look-up; a record listed since under the same key stays.
    if let std::collections::hash_map::Entry::Occupied(listed) = records.entry(key)
        && listed.get().strong_count() == 0
    {
        listed.remove();
    }
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
    /// Whether the store can keep lock `request.name` (a name it refuses
    /// is an error); what every store keeps by default.
    fn check(_request: &Request) -> Result<(), LockError> {
        Ok(())
    }
    /// A re-entry of `record`'s hold.
    fn reenter<'a>(
        alive: Arc<Background>,
        record: Arc<Self::Record>,
        chain: Chain,
        request: &'a Request,
    ) -> impl Future<Output = Result<Hold<Self::Record>, LockError>> + Send + 'a;
    /// Nothing made yet, for the hold `who`.
    fn made(self: &Arc<Self>, who: &Arc<Who>) -> Self::Made;
    /// One try at the hold `who` that `request` asks for; `under`: a
    /// read's, this client's write hold whose scope it is taken in.
    fn take<'a>(
        self: &'a Arc<Self>,
        request: &'a Request,
        who: &'a Arc<Who>,
        under: Option<&'a Arc<Self::Record>>,
        made: &'a mut Self::Made,
    ) -> impl Future<Output = Result<Taken<Self::More>, LockError>> + Send + 'a;
    /// The record of the hold `taken` (what `made` made), listed in the
    /// client's records and started (bound to what keeps it, or timed),
    /// keeping `turn` until it goes; [`LockError::Lost`] when what was
    /// made is gone.
    fn record(
        self: &Arc<Self>,
        request: &Request,
        who: &Arc<Who>,
        under: Option<&Arc<Self::Record>>,
        taken: &Taken<Self::More>,
        made: &mut Self::Made,
        turn: Option<OwnedMutexGuard<()>>,
    ) -> Result<Arc<Self::Record>, LockError>;
}

/// The accessors of [`Taking`] that read the client's shared parts (`id`,
/// `turns`, `records`), reached by `client`, and its `reenter` by the
/// engine module's own `reenter(alive, record, chain, request)`: written
/// once for every engine.
macro_rules! taking_fields {
    (client |$me:ident| $client:expr, take by module) => {
        $crate::kept::taking_fields!(client | $me | $client);

        fn take<'a>(
            self: &'a std::sync::Arc<Self>,
            request: &'a $crate::request::Request,
            who: &'a std::sync::Arc<$crate::holder::Who>,
            under: Option<&'a std::sync::Arc<Self::Record>>,
            made: &'a mut Self::Made,
        ) -> impl std::future::Future<
            Output = Result<$crate::kept::Taken<Self::More>, $crate::error::LockError>,
        > + Send
        + 'a {
            take(self, request, who, under, made)
        }
    };
    (client |$me:ident| $client:expr) => {
        fn reenter<'a>(
            alive: std::sync::Arc<$crate::background::Background>,
            record: std::sync::Arc<Self::Record>,
            chain: $crate::holder::Chain,
            request: &'a $crate::request::Request,
        ) -> impl std::future::Future<
            Output = Result<$crate::kept::Hold<Self::Record>, $crate::error::LockError>,
        > + Send
        + 'a {
            reenter(alive, record, chain, request)
        }

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
    };
}
pub(crate) use taking_fields;

/// The count `inspect` shows for holder `id` of lock `name`: its record's
/// live holds when it is this client's, 0 when its hold is kept only by a
/// `hold_at_least` minimum, else 1 (another client's).
pub(crate) fn holds_of<R: Record>(records: &Records<R>, name: &str, id: &str, kept: bool) -> u64 {
    let who = Who {
        name: name.to_owned(),
        holder: id.to_owned(),
    };
    let record = records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&who)
        .cloned();
    // Upgraded with the map unlocked: dropping a last `Arc` of a record
    // locks the map.
    match record.and_then(|r| r.upgrade()) {
        _ if kept => 0,
        Some(r) => r.holds().max(1) as u64,
        None => 1,
    }
}

/// An acquisition on a [`Taking`] engine once the request is checked and
/// its turn is in (`turn`, a mutex's): a re-entry when the caller runs in
/// the scope of this client's hold (`reentry`: its holder id and chain),
/// else tries in the store (the undo of what they made when the
/// acquisition fails or is dropped) until the hold is taken.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments twice (see the comment inside)"
)]
pub(crate) fn take_hold<S: Taking>(
    alive: Arc<Background>,
    store: Arc<S>,
    request: &Request,
    reentry: Option<(Arc<Who>, holder::Chain)>,
    turn: Option<OwnedMutexGuard<()>>,
) -> impl Future<Output = Result<Hold<S::Record>, LockError>> + Send + '_ {
    // An async block, not an async fn: a head waits in it, and an async
    // fn keeps its arguments twice (as they came and as moved).
    async move {
        let mut under = None;
        S::check(request)?;
        let name = request.name.as_str();
        if let Some((who, chain)) = reentry {
            match in_scope(store.records(), &who, Access::from(request.kind))? {
                InScope::Reenter(record) => {
                    return S::reenter(alive, record, chain, request).await;
                }
                InScope::Under(write) => under = Some(write),
            }
        }
        let who = Who::new(store.id(), name, request.number);
        let _waiting = crate::telemetry::WaiterMetric::start(request.metric);
        let mut pending = Pending::new(alive.clone(), turn, store.made(&who));
        let under = under.as_ref();
        let mut tries = 0;
        let taken = loop {
            tries += 1;
            match store.take(request, &who, under, &mut pending.made).await {
                Ok(taken) => break taken,
                Err(e) => {
                    if let Err(e) = try_again(e, tries, request, S::ENGINE).await {
                        pending.give_up().await;
                        return Err(e);
                    }
                }
            }
        };
        let turn = pending.turn.take();
        let record = store.record(request, &who, under, &taken, &mut pending.made, turn)?;
        Ok(Hold::new(alive, record, taken.token, taken.sent, request))
    }
}

/// After try `tries` of an acquisition failed with `e`: `Ok` once it
/// paused to try again (a fault that may heal, within the wait), else the
/// error to return. One attempt reports its fault as it is; a wait that
/// ran out on faults that may heal was a wait that ran out.
pub(crate) async fn try_again(
    e: LockError,
    tries: u32,
    request: &Request,
    store: &'static str,
) -> Result<(), LockError> {
    let deadline = request.deadline;
    if transient(&e) && deadline.is_none_or(|d| Instant::now() < d) {
        if tries == 1 && deadline.is_none() {
            tracing::warn!(lock = request.name, error = %e, store, "an attempt failed; waiting without a deadline, so trying again with backoff until the store answers");
        }
        pause_within(deadline, backoff(tries)).await;
        return Ok(());
    }
    Err(if transient(&e) && !request.once() {
        request.timed_out()
    } else {
        e
    })
}

/// Takes the hold `request` asks for on `engine`: a re-entry when the
/// caller runs in the scope of this client's hold of it, else a new holder
/// that queues in the process (a mutex), then in the store ([`take_hold`]).
/// A queued waiter carries this future and the queue's only: the rest is
/// boxed once it has its turn.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments twice (see the comment inside)"
)]
pub(crate) fn acquire<E: Taking>(
    alive: Arc<Background>,
    engine: Arc<E>,
    mut request: Request,
) -> impl Future<Output = Result<Hold<E::Record>, LockError>> + Send {
    // An async block, not an async fn: what it takes is kept once, not
    // twice (its arguments and their moved copies).
    async move {
        request.check()?;
        let started = request.start();
        // A plain lock's record is one per client and name: this client's
        // turn first (a re-entry has the turn already: its scope's hold
        // keeps it). A name the store refuses is refused once it has its
        // turn, which no one holds. A fair waiter has a record of its own,
        // so that the store's line keeps arrival order across this
        // client's tasks as across clients (issue 34), as do a read-write
        // lock's.
        let mutex = request.kind == Kind::Reentrant
            && holder::in_scope(engine.id(), &request.name).is_none();
        let queued = if mutex {
            engine.turns().turn(&request).await.map(Some)
        } else {
            Ok(None)
        };
        let result = match queued {
            Ok(turn) => {
                // Looked up again, not kept while queued (the same task's
                // scope: the same answer).
                let reentry = match mutex {
                    true => None,
                    false => holder::in_scope(engine.id(), &request.name),
                };
                Box::pin(take_hold(alive, engine, &request, reentry, turn)).await
            }
            Err(e) => Err(e),
        };
        let kind = request.recorded.then_some(request.metric);
        crate::telemetry::record_acquired(kind, started, &result);
        result
    }
}
