//! An engine's record of one client's hold of one name ([`Record`]),
//! shared by the hold and its re-entries: how it learns that the store lost
//! it ([`Deleted`]), and which re-entries of it are let in
//! ([`may_reenter`], [`Downgrade`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use super::turns::Access;
use crate::error::LockError;
use crate::holder::Who;
use crate::own::OwnHolds;

/// An engine's record of one client's hold of one name, shared by a hold
/// and its re-entries: what the shared [`Hold`] needs of it.
pub(crate) trait Record: Send + Sync + Sized + 'static {
    /// Who the hold is: the lock's name and the holder id.
    fn who(&self) -> &Arc<Who>;
    /// The lock's name.
    fn name(&self) -> &str {
        &self.who().name
    }
    /// The holder id (`<client id>:<n>`).
    fn holder(&self) -> &str {
        &self.who().holder
    }
    /// The client's id.
    fn client_id(&self) -> &str;
    /// The client's list of its own holds.
    fn own(&self) -> &OwnHolds;
    /// The client's runtime: background work on the record runs there.
    fn runtime(&self) -> &tokio::runtime::Handle;
    /// What the record holds.
    fn access(&self) -> Access;
    /// A read's write, or a write's reads.
    fn downgrade(&self) -> &Downgrade<Self>;
    /// Live holds of the chain (a hold and its re-entries).
    fn count(&self) -> &AtomicUsize;
    /// Whether the hold counts as lost (by the client's clock, or known
    /// gone from the store).
    fn is_lost(&self) -> bool;
    /// How long the hold is sure to last.
    fn remaining(&self) -> Duration;
    /// Resolves once the hold is lost.
    fn lost(&self) -> impl Future<Output = ()> + Send + '_;
    /// Gives the record back once its chain's last hold is released,
    /// keeping it taken until `keep` (a `hold_at_least` minimum): whether
    /// it was still this client's.
    fn give_back(
        self: Arc<Self>,
        keep: Option<Instant>,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'static;
    /// One try at deleting the record (or keeping it until `keep`): whether
    /// it was still there. [`give_back_retried`] tries it again.
    fn give_back_once(
        self: Arc<Self>,
        keep: Option<Instant>,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'static;
    /// Starts what a new record needs once listed: what tells it of its
    /// loss, and its renewals.
    fn start(self: &Arc<Self>);
    /// Whether the store may still keep the record alive, so a give-back
    /// that failed is worth trying on in the background.
    fn may_outlive(&self) -> bool;
    /// How many holds of the chain are live.
    fn holds(&self) -> usize {
        self.count().load(Ordering::Acquire)
    }
}

/// What every engine's record keeps of its hold beside the store's own
/// (its key, node, row or entry): who the hold is, how many holds its
/// chain has, whether the store is known to have lost it, the client's
/// turn at the name, and its downgrade. A record derefs to it
/// ([`base_of!`]), as a record that extends it: `record.holds` reads as
/// a field of the record's own.
pub(crate) struct Base<R> {
    /// Who the hold is: the lock's name and the holder id.
    pub(crate) who: Arc<Who>,
    /// Live holds of the chain (a hold and its re-entries).
    pub(crate) holds: AtomicUsize,
    /// Whether the store is known to have lost the record.
    pub(crate) deleted: Deleted,
    /// The client's turn at the name: passed on when the record goes.
    pub(crate) turn: Mutex<Option<OwnedMutexGuard<()>>>,
    /// A read's write, or a write's reads.
    pub(crate) downgrade: Downgrade<R>,
}

impl<R: Record> Base<R> {
    /// A new hold's (one live hold) by `who`, holding the client's `turn`
    /// at the name, taken under `under` when it is a read under a write.
    pub(crate) fn new(
        who: &Arc<Who>,
        turn: Option<OwnedMutexGuard<()>>,
        under: Option<&Arc<R>>,
    ) -> Base<R> {
        Base {
            who: who.clone(),
            holds: AtomicUsize::new(1),
            deleted: Deleted::default(),
            turn: Mutex::new(turn),
            downgrade: Downgrade::new(under.cloned()),
        }
    }
}

/// An engine's record derefs to its field `base`, a [`Base`] of it.
macro_rules! base_of {
    ($record:ty $(, for <$($param:ident: $bound:path),+>)?) => {
        impl$(<$($param: $bound),+>)? std::ops::Deref for $record {
            type Target = $crate::kept::Base<$record>;

            fn deref(&self) -> &Self::Target {
                &self.base
            }
        }
    };
}
pub(crate) use base_of;

/// The accessors of [`Record`] that read an engine's record's own fields
/// (`side`, and its [`Base`]'s `who`, `downgrade`, `holds`) and its client's (`id`, `own`,
/// `runtime`), reached by `client`: written once for every engine's
/// record. With `, by inherent`, also the methods a record has of its own
/// under the same names (`is_lost`, `remaining`, `lost`, `start`) and its module's
/// `give_back(record, keep)`; with `, in order by own`, a give-back in its
/// downgrade's order ([`give_back_in_order`]) by its module's
/// `waits_for_reads(record)` and `own(record, keep)`.
macro_rules! record_fields {
    (client |$me:ident| $client:expr, by inherent, in order by $own:path) => {
        $crate::kept::record_fields!(@inherent client |$me| $client);
        $crate::kept::record_fields!(@give_back |record, keep| {
            $crate::kept::give_back_in_order(record, keep, waits_for_reads, $own)
        });
    };
    (client |$me:ident| $client:expr, by inherent) => {
        $crate::kept::record_fields!(@inherent client |$me| $client);
        $crate::kept::record_fields!(@give_back |record, keep| give_back(record, keep));
    };
    (@give_back |$record:ident, $keep:ident| $body:expr) => {
        fn give_back(
            self: std::sync::Arc<Self>,
            $keep: Option<tokio::time::Instant>,
        ) -> impl std::future::Future<Output = Result<bool, $crate::error::LockError>>
               + Send
               + 'static {
            let $record = self;
            $body
        }
    };
    (@inherent client |$me:ident| $client:expr) => {
        $crate::kept::record_fields!(client |$me| $client);

        fn is_lost(&self) -> bool {
            Self::is_lost(self)
        }

        fn remaining(&self) -> std::time::Duration {
            Self::remaining(self)
        }

        fn lost(&self) -> impl std::future::Future<Output = ()> + Send + '_ {
            Self::lost(self)
        }

        fn start(self: &std::sync::Arc<Self>) {
            Self::start(self)
        }
    };
    (client |$me:ident| $client:expr) => {
        fn who(&self) -> &std::sync::Arc<$crate::holder::Who> {
            &self.base.who
        }

        fn client_id(&self) -> &str {
            let $me = self;
            &$client.id
        }

        fn own(&self) -> &$crate::own::OwnHolds {
            let $me = self;
            &$client.own
        }

        fn runtime(&self) -> &tokio::runtime::Handle {
            let $me = self;
            &$client.runtime
        }

        fn access(&self) -> $crate::kept::Access {
            $crate::kept::Access::from(self.side)
        }

        fn downgrade(&self) -> &$crate::kept::Downgrade<Self> {
            &self.base.downgrade
        }

        fn count(&self) -> &std::sync::atomic::AtomicUsize {
            &self.base.holds
        }
    };
}
pub(crate) use record_fields;

/// Whether a record is known gone from the store (deleted by someone
/// else, taken over, or given back), and the wake-up of those who wait to
/// learn it ([`gone_or_ended`]). A flag and a `Notify` kept in the record:
/// a `watch` channel cost an allocation per hold and woke eight lists of
/// waiters at every release (as it was set, and again as it was dropped).
#[derive(Debug, Default)]
pub(crate) struct Deleted {
    known: AtomicBool,
    told: tokio::sync::Notify,
}

impl Deleted {
    /// The record is known gone: whoever waits in [`gone_or_ended`] learns
    /// it.
    pub(crate) fn set(&self) {
        if !self.known.swap(true, Ordering::AcqRel) {
            self.told.notify_waiters();
        }
    }

    /// Whether the record is known gone.
    pub(crate) fn is_set(&self) -> bool {
        self.known.load(Ordering::Acquire)
    }

    /// Resolves once the record is known gone.
    async fn known(&self) {
        // Made before the look: a `set` after the look wakes it (a
        // `Notified` counts `notify_waiters` calls from when it is made).
        let told = self.told.notified();
        if self.is_set() {
            return;
        }
        told.await;
    }
}

/// Resolves once `deleted` says the record is gone from the store, or once
/// the end `until` gives has passed (read again after each sleep, as an
/// `extend` moves it; `None`: no end of its own).
pub(crate) async fn gone_or_ended(deleted: &Deleted, until: impl Fn() -> Option<Instant>) {
    let gone = deleted.known();
    let ended = async {
        loop {
            match until() {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
            if until().is_some_and(|at| Instant::now() >= at) {
                return;
            }
        }
    };
    tokio::select! {
        () = gone => {}
        () = ended => {}
    }
}

/// The error of a hold known lost.
pub(crate) fn lost(name: &str) -> LockError {
    LockError::Lost {
        name: name.to_owned(),
    }
}

/// Whether a re-entry asking `asked` in the scope of a record of lock
/// `name` held as `held` joins it (`Ok(None)`), joins the write that read
/// was taken under (`Ok(Some(write))`, while that write holds; see
/// [`Downgrade`]), or is refused. A read in a write's scope is no
/// re-entry: the engine takes it as a record of its own.
pub(crate) fn may_reenter<R: Record>(
    name: &str,
    held: Access,
    asked: Access,
    downgrade: &Downgrade<R>,
) -> Result<Option<Arc<R>>, LockError> {
    let refused = |reason: String| {
        Err(LockError::NotHeld {
            name: name.to_owned(),
            reason,
        })
    };
    match (held, asked) {
        (Access::Mutex, Access::Mutex)
        | (Access::Read, Access::Read)
        | (Access::Write, Access::Write) => Ok(None),
        (Access::Read, Access::Write) if downgrade.over.as_ref().is_some_and(|w| w.holds() > 0) => {
            Ok(downgrade.over.clone())
        }
        (Access::Write, Access::Read) => {
            refused("a read under a write is taken as a record of its own".into())
        }
        (Access::Read, Access::Write) => refused(
            "this scope holds it for reading; a reader cannot take the write lock (release the \
             read hold first)"
                .into(),
        ),
        (held, asked) => refused(format!(
            "this scope holds it as a {held:?} lock, not as a {asked:?} lock (one name, one kind)"
        )),
    }
}

/// A read taken in the scope of this client's own write hold of the name
/// (a downgrade) has a record of its own, taken at once (the write keeps
/// everyone else out), so that once the write is given back the read is a
/// read hold that other readers share (issue 34). The write's record goes
/// when it is given back, unless a contender that keeps readers out (a
/// writer or a mutex) came between the write's and a live read's: that
/// one would get the lock while the read holds, so the write's record
/// stays until the last read under it is given back. What the engines'
/// records `R` share of that.
pub(crate) struct Downgrade<R> {
    /// On a read's record: the write it was taken under.
    pub(crate) over: Option<Arc<R>>,
    /// On a write's record: the reads taken under it.
    under: Mutex<Vec<Weak<R>>>,
    /// On a write's record: its give-back waits for the reads under it.
    #[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
    deferred: std::sync::atomic::AtomicBool,
}

impl<R: Record> Downgrade<R> {
    /// A record's, taken under `over` when it is a read under a write.
    pub(crate) fn new(over: Option<Arc<R>>) -> Downgrade<R> {
        Downgrade {
            over,
            under: Mutex::default(),
            deferred: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// On a write's record: `read` was taken under it.
    pub(crate) fn add(&self, read: &Arc<R>) {
        self.under
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(read));
    }

    /// On a write's record: whether a read under it still holds (without
    /// collecting them, as [`holding_reads`](Self::holding_reads) does).
    pub(crate) fn holds_reads(&self) -> bool {
        // Read outside the lock, as `holding_reads` does: a read's count is
        // not asked under it.
        let under = self.under.lock().unwrap_or_else(|p| p.into_inner()).clone();
        under
            .iter()
            .filter_map(Weak::upgrade)
            .any(|r| r.holds() > 0)
    }

    /// On a write's record: the reads under it that still hold.
    #[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
    pub(crate) fn holding_reads(&self) -> Vec<Arc<R>> {
        let under = self.under.lock().unwrap_or_else(|p| p.into_inner()).clone();
        under
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|r| r.holds() > 0)
            .collect()
    }

    /// On a write's record, being given back, with a contender between it
    /// and a holding read: whether its give-back now waits for the reads
    /// (false when the last of them went meanwhile).
    #[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
    pub(crate) fn defer(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.deferred.store(true, Ordering::Release);
        // A read given back meanwhile did not see it deferred: then the
        // write is given back now after all (whoever takes the mark back).
        self.holds_reads() || !self.deferred.swap(false, Ordering::AcqRel)
    }

    /// On a write's record, after a read under it was given back: whether
    /// the write is to be given back now (it waited for the reads, and
    /// none holds any more).
    #[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
    pub(crate) fn take_deferred(&self) -> bool {
        use std::sync::atomic::Ordering;
        !self.holds_reads() && self.deferred.swap(false, Ordering::AcqRel)
    }
}

/// A give-back in its downgrade's order, for a store whose contenders
/// queue by age (etcd's keys, ZooKeeper's nodes; see [`Downgrade`]): a
/// write whose give-back waits for the reads under it (`waits_for_reads`
/// says so, and marks it) is left to the last of them, and answers
/// whether it still counts as held; else the record is given back by
/// `own` (kept until `keep`). Then a read under such a write, the last to
/// go, gives that write back.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(crate) async fn give_back_in_order<R, W, G>(
    record: Arc<R>,
    keep: Option<Instant>,
    waits_for_reads: impl FnOnce(Arc<R>) -> W,
    own: impl Fn(Arc<R>, Option<Instant>) -> G,
) -> Result<bool, LockError>
where
    R: Record,
    W: Future<Output = Result<bool, LockError>>,
    G: Future<Output = Result<bool, LockError>>,
{
    if record.access() == Access::Write
        && keep.is_none_or(|k| k <= Instant::now())
        && waits_for_reads(record.clone()).await?
    {
        return Ok(!record.is_lost());
    }
    let over = record.downgrade().over.clone();
    let released = own(record, keep).await;
    if let Some(write) = over
        && write.downgrade().take_deferred()
        && let Err(e) = own(write, None).await
    {
        tracing::warn!(error = %e, "the give-back of a write kept for the reads under it failed");
    }
    released
}
