//! Segmented stock: the count of one hot item split over the segments of a
//! [`SegmentedLock`], each segment's count written only under its lock.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::try_join_all;
use tokio::sync::Notify;

#[cfg(feature = "redis")]
use crate::client::LockClient;
use crate::error::LockError;
use crate::lock::segmented::{
    SegmentBuilder, SegmentGuard, SegmentedLock, SegmentsGuard, segment_name,
};

/// What a [`SegmentStore`] fails with: any error of the user's storage.
pub type StoreError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Which segment's count a [`SegmentStore`] call is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentKey<'a> {
    /// The inventory's name (its segmented lock's name), e.g. `stock:42`.
    pub inventory: &'a str,
    /// The segment, `0..n`.
    pub segment: usize,
}

impl SegmentKey<'_> {
    /// The name of this segment's lock, `{inventory:seg:segment}`: also a
    /// good prefix for the segment's own keys, which then share its slot.
    pub fn lock_name(&self) -> String {
        segment_name(self.inventory, self.segment)
    }
}

/// Where the counts of an [`Inventory`]'s segments live. Implement it to keep
/// stock in your own storage; [`RedisSegmentStore`] ships.
///
/// The inventory calls [`set`](Self::set) only while it holds the segment's
/// lock, with that hold's fencing token: a store that remembers the highest
/// token per segment and refuses older ones (e.g. `UPDATE ... WHERE token <
/// $1`) also stays correct when a holder loses its lease without noticing.
///
/// Implementations can use `async fn` for both methods.
pub trait SegmentStore: Send + Sync {
    /// The segment's count; `0` when it was never set. `token` is the fencing
    /// token of the segment's hold when the read is made under its lock, and
    /// `None` for the lock-free read of a sold-out check (see
    /// [`Inventory::deduct`]).
    fn get(
        &self,
        at: SegmentKey<'_>,
        token: Option<u64>,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Sets the segment's count, under its lock whose fencing token is `token`.
    fn set(
        &self,
        at: SegmentKey<'_>,
        count: u64,
        token: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Keeps each segment's count in Redis at `{inventory:seg:i}:count` (a plain
/// string, next to the segment's lock in the same cluster slot), through the
/// lock client's own connection.
///
/// It runs plain `GET` and `SET` and ignores the fencing token: the locks are
/// what keeps the counts correct.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[derive(Debug, Clone)]
pub struct RedisSegmentStore {
    client: LockClient,
}

#[cfg(feature = "redis")]
impl RedisSegmentStore {
    /// A store on `client`'s connection.
    pub fn new(client: &LockClient) -> RedisSegmentStore {
        RedisSegmentStore {
            client: client.clone(),
        }
    }

    /// The Redis key of a segment's count: `{inventory:seg:i}:count`.
    pub fn count_key(at: SegmentKey<'_>) -> String {
        format!("{}:count", at.lock_name())
    }

    async fn run<T: redis::FromRedisValue + Send + 'static>(
        &self,
        command: redis::Cmd,
    ) -> Result<T, StoreError> {
        let mut conn = (self
            .client
            .redis("RedisSegmentStore")
            .map_err(StoreError::from)?)
        .conn
        .clone();
        let answer = self
            .client
            .on_background(async move { command.query_async(&mut conn).await })
            .await?;
        Ok(answer?)
    }
}

#[cfg(feature = "redis")]
impl SegmentStore for RedisSegmentStore {
    async fn get(&self, at: SegmentKey<'_>, _token: Option<u64>) -> Result<u64, StoreError> {
        let mut get = redis::cmd("GET");
        get.arg(Self::count_key(at));
        let count: Option<u64> = self.run(get).await?;
        Ok(count.unwrap_or(0))
    }

    async fn set(&self, at: SegmentKey<'_>, count: u64, _token: u64) -> Result<(), StoreError> {
        let mut set = redis::cmd("SET");
        set.arg(Self::count_key(at)).arg(count);
        self.run::<()>(set).await
    }
}

/// How often a buyer re-reads the segments after the one they pointed it to
/// was emptied under it, before it merges them all.
const RETRIES: usize = 3;

/// Why a stock operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InventoryError {
    /// Fewer units are left than were asked for; nothing was deducted.
    #[error("insufficient stock: {requested} requested, {available} available")]
    Insufficient {
        /// The quantity asked for.
        requested: u64,
        /// The units left when the deduction was refused.
        available: u64,
    },
    /// A segment's lock could not be taken or was lost.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The [`SegmentStore`] failed.
    #[error("segment store: {0}")]
    Store(StoreError),
}

/// A successful deduction: which segments gave how many units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deduction {
    quantity: u64,
    taken: Vec<(usize, u64)>,
    merged: bool,
}

impl Deduction {
    /// The units deducted (the quantity asked for).
    pub fn quantity(&self) -> u64 {
        self.quantity
    }

    /// `(segment, units)` for every segment that gave units.
    pub fn taken(&self) -> &[(usize, u64)] {
        &self.taken
    }

    /// Whether it ran under every segment's lock (no single segment had enough).
    pub fn merged(&self) -> bool {
        self.merged
    }
}

/// The stock of one hot item split over the segments of a [`SegmentedLock`]:
/// up to `n` buyers deduct at once, each under one segment's lock.
///
/// ```no_run
/// # #[cfg(feature = "redis")]
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use lock_runtime::{Config, Inventory, InventoryError, LockClient, RedisSegmentStore};
///
/// let client = LockClient::connect(Config::new("redis://127.0.0.1:6379")).await?;
/// let stock = Inventory::new(client.segmented_lock("stock:42", 10), RedisSegmentStore::new(&client));
/// stock.restock(1000).await?;
/// match stock.deduct(3).await {
///     Ok(deduction) => println!("sold 3 from {:?}", deduction.taken()),
///     Err(InventoryError::Insufficient { available, .. }) => println!("only {available} left"),
///     Err(e) => return Err(e.into()),
/// }
/// # Ok(()) }
/// ```
pub struct Inventory<S> {
    lock: SegmentedLock,
    store: S,
    wait: Option<Duration>,
    /// Segments last seen empty by this inventory: a hint (never trusted for
    /// a sale or a refusal) that steers buyers to segments with stock.
    empty: Vec<AtomicBool>,
    /// Woken when a segment is seen empty: buyers queued for a segment stop
    /// waiting once every segment looks empty, and check for sold-out.
    emptied: Notify,
    /// Lock-free reads of every segment, shared: buyers that ask while one
    /// runs take the result of the next one to start (see [`Self::scan`]).
    scans: tokio::sync::Mutex<Scan>,
    /// Scans started so far.
    scans_started: AtomicU64,
}

/// The last lock-free read of every segment.
#[derive(Default)]
struct Scan {
    /// Which scan it was (1 = the first), 0 for none yet.
    number: u64,
    counts: Vec<u64>,
}

impl<S: SegmentStore> Inventory<S> {
    /// The stock guarded by `lock`, one count per segment kept in `store`.
    pub fn new(lock: SegmentedLock, store: S) -> Inventory<S> {
        let empty = (0..lock.segments())
            .map(|_| AtomicBool::new(false))
            .collect();
        Inventory {
            lock,
            store,
            wait: None,
            empty,
            emptied: Notify::new(),
            scans: tokio::sync::Mutex::new(Scan::default()),
            scans_started: AtomicU64::new(0),
        }
    }

    /// Longest time each lock acquisition may wait (left out: until
    /// acquired); then the operation fails with [`LockError::Timeout`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// The segmented lock.
    pub fn lock(&self) -> &SegmentedLock {
        &self.lock
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Remembers what a read or write saw in `segment`.
    fn note(&self, segment: usize, count: u64) {
        if let Some(empty) = self.empty.get(segment) {
            empty.store(count == 0, Ordering::Relaxed);
            if count == 0 {
                self.emptied.notify_waiters();
            }
        }
    }

    fn seen_empty(&self, segment: usize) -> bool {
        self.empty
            .get(segment)
            .is_some_and(|empty| empty.load(Ordering::Relaxed))
    }

    fn all_seen_empty(&self) -> bool {
        (0..self.empty.len()).all(|i| self.seen_empty(i))
    }

    /// Acquires a segment, unless `emptied` (a test of the hints) holds
    /// first: then `None`, holding nothing (dropping an acquire leaves
    /// nothing behind). Buyers queued for a segment stop queueing when
    /// another buyer of this inventory empties it.
    async fn acquire_unless(
        &self,
        builder: SegmentBuilder,
        emptied: impl Fn() -> bool,
    ) -> Result<Option<SegmentGuard>, InventoryError> {
        let until_emptied = async {
            loop {
                let notified = self.emptied.notified();
                let mut notified = std::pin::pin!(notified);
                // Registered before the test: a notification cannot slip between.
                notified.as_mut().enable();
                if emptied() {
                    return;
                }
                notified.await;
            }
        };
        tokio::select! {
            guard = builder.acquire() => Ok(Some(guard?)),
            () = until_emptied => Ok(None),
        }
    }

    /// Deducts under `guard` when its segment has enough; `None` (the
    /// segment released) when there is no guard, the segment was seen empty
    /// while we waited for it (no read needed), or it is short.
    async fn try_segment(
        &self,
        guard: Option<SegmentGuard>,
        quantity: u64,
    ) -> Result<Option<Deduction>, InventoryError> {
        match guard {
            None => Ok(None),
            Some(guard) if self.seen_empty(guard.segment()) => {
                guard.release().await?;
                Ok(None)
            }
            Some(guard) => self.deduct_from(guard, quantity).await,
        }
    }

    /// Every segment's count, read without locks by a scan that started
    /// after this call did: a buyer that finds a scan running waits for it,
    /// then takes the result of the next one, which it or another waiting
    /// buyer runs. A flood of sold-out buyers then costs a few scans.
    async fn scan(&self) -> Result<Vec<u64>, InventoryError> {
        let asked = self.scans_started.load(Ordering::Acquire);
        let mut last = self.scans.lock().await;
        if last.number > asked {
            return Ok(last.counts.clone());
        }
        let number = self.scans_started.fetch_add(1, Ordering::AcqRel) + 1;
        let reads = (0..self.lock.segments()).map(|i| self.store.get(self.key(i), None));
        let counts = try_join_all(reads).await.map_err(InventoryError::Store)?;
        for (segment, &count) in counts.iter().enumerate() {
            self.note(segment, count);
        }
        *last = Scan {
            number,
            counts: counts.clone(),
        };
        Ok(counts)
    }

    fn key(&self, segment: usize) -> SegmentKey<'_> {
        SegmentKey {
            inventory: self.lock.name(),
            segment,
        }
    }

    async fn all(&self) -> Result<SegmentsGuard, LockError> {
        let all = self.lock.all();
        match self.wait {
            Some(wait) => all.wait(wait).acquire().await,
            None => all.acquire().await,
        }
    }

    /// Sets the stock to `total`, spread evenly over the segments (the first
    /// `total % n` get one more), under every segment's lock.
    pub async fn restock(&self, total: u64) -> Result<(), InventoryError> {
        let all = self.all().await?;
        let n = all.segments().len() as u64;
        let writes = all.segments().iter().map(|g| {
            let i = g.segment() as u64;
            let count = total / n + u64::from(i < total % n);
            self.note(g.segment(), count);
            self.store.set(self.key(g.segment()), count, g.token())
        });
        try_join_all(writes).await.map_err(InventoryError::Store)?;
        all.release().await?;
        Ok(())
    }

    /// Every segment's count, read under all their locks (buyers wait
    /// meanwhile): a consistent snapshot.
    pub async fn counts(&self) -> Result<Vec<u64>, InventoryError> {
        let all = self.all().await?;
        let counts = self.read_locked(&all).await?;
        all.release().await?;
        Ok(counts)
    }

    /// The units left: the sum of [`counts`](Self::counts).
    pub async fn total(&self) -> Result<u64, InventoryError> {
        Ok(self.counts().await?.iter().sum())
    }

    async fn read_locked(&self, all: &SegmentsGuard) -> Result<Vec<u64>, InventoryError> {
        let reads = all
            .segments()
            .iter()
            .map(|g| self.store.get(self.key(g.segment()), Some(g.token())));
        try_join_all(reads).await.map_err(InventoryError::Store)
    }

    /// Deducts `quantity` units; never more than there are.
    ///
    /// 1. Under one segment's lock (a free segment first), if that segment
    ///    has enough.
    /// 2. Else, with that lock released, it reads every segment without
    ///    locks (buyers asking at once share one such read). A sum short of
    ///    `quantity` answers [`InventoryError::Insufficient`] at once: stock
    ///    only falls between restocks, so a sum read over time is at least
    ///    what is left at the end. (During a [`restock`](Self::restock) the
    ///    answer may count units from before it.) Else, when one segment
    ///    seemed to have enough, it retries under that segment's lock, and
    ///    reads again if another buyer emptied it first (a few times).
    /// 3. Else it merges: takes every segment's lock in ascending order (no
    ///    deadlock between merging buyers: nobody holds one segment while
    ///    waiting for all), reads them all, and deducts across them; a short
    ///    sum there is an exact `Insufficient`.
    ///
    /// Every write happens under the segment's lock with its fencing token.
    /// A store failing part-way through a merge may leave some units
    /// deducted without a sale (never a sale without its units).
    /// A lease lost before the release (the write may have happened without
    /// exclusion) returns `Err(InventoryError::Lock(LockError::Lost))`.
    pub async fn deduct(&self, quantity: u64) -> Result<Deduction, InventoryError> {
        // A lock that cannot be taken is an error, not "nothing in stock".
        self.lock.check()?;
        if quantity == 0 {
            return Ok(Deduction {
                quantity,
                taken: Vec::new(),
                merged: false,
            });
        }
        // Segments seen empty are skipped; when all look empty, go straight
        // to the sold-out check below.
        let skip: Vec<bool> = (0..self.empty.len()).map(|i| self.seen_empty(i)).collect();
        if !skip.iter().all(|&empty| empty) {
            let any = self.lock.any_except(skip);
            let any = match self.wait {
                Some(wait) => any.wait(wait),
                None => any,
            };
            let first = self.acquire_unless(any, || self.all_seen_empty()).await?;
            if let Some(deduction) = self.try_segment(first, quantity).await? {
                return Ok(deduction);
            }
        }

        // Another buyer can empty the segment the scan pointed at before we
        // get its lock: scan again (stock fell, so this ends), a few times.
        for _ in 0..RETRIES {
            let seen = self.scan().await?;
            let available: u64 = seen.iter().sum();
            if available < quantity {
                return Err(InventoryError::Insufficient {
                    requested: quantity,
                    available,
                });
            }
            let richest = (0..seen.len()).max_by_key(|&i| seen[i]);
            let Some(i) = richest.filter(|&i| seen[i] >= quantity) else {
                // Enough in all, not in one: merge.
                break;
            };
            let one = self.lock.segment(i);
            let one = match self.wait {
                Some(wait) => one.wait(wait),
                None => one,
            };
            let guard = self.acquire_unless(one, || self.seen_empty(i)).await?;
            if let Some(deduction) = self.try_segment(guard, quantity).await? {
                return Ok(deduction);
            }
        }
        self.merge(quantity).await
    }

    /// Deducts from the held segment if it has enough; `None` (segment
    /// released) if not.
    async fn deduct_from(
        &self,
        guard: SegmentGuard,
        quantity: u64,
    ) -> Result<Option<Deduction>, InventoryError> {
        let segment = guard.segment();
        let have = self
            .store
            .get(self.key(segment), Some(guard.token()))
            .await
            .map_err(InventoryError::Store)?;
        self.note(segment, have);
        if have < quantity {
            guard.release().await?;
            return Ok(None);
        }
        if guard.is_lost() {
            return Err(LockError::Lost {
                name: guard.name().to_owned(),
            }
            .into());
        }
        self.store
            .set(self.key(segment), have - quantity, guard.token())
            .await
            .map_err(InventoryError::Store)?;
        self.note(segment, have - quantity);
        guard.release().await?;
        Ok(Some(Deduction {
            quantity,
            taken: vec![(segment, quantity)],
            merged: false,
        }))
    }

    async fn merge(&self, quantity: u64) -> Result<Deduction, InventoryError> {
        let all = self.all().await?;
        let counts = self.read_locked(&all).await?;
        for (segment, &count) in counts.iter().enumerate() {
            self.note(segment, count);
        }
        let available: u64 = counts.iter().sum();
        if available < quantity {
            all.release().await?;
            return Err(InventoryError::Insufficient {
                requested: quantity,
                available,
            });
        }
        // Largest segments first: keeps the segments even, so later buyers
        // find enough in one.
        let mut order: Vec<usize> = (0..counts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(counts[i]));
        let mut left = quantity;
        let mut taken = Vec::new();
        for i in order {
            if left == 0 {
                break;
            }
            let take = counts[i].min(left);
            if take > 0 {
                taken.push((i, take));
                left -= take;
            }
        }
        taken.sort_unstable();
        if all.is_lost() {
            return Err(LockError::Lost {
                name: self.lock.name().to_owned(),
            }
            .into());
        }
        let guards = all.segments();
        let writes = taken.iter().map(|&(i, take)| {
            self.store
                .set(self.key(i), counts[i] - take, guards[i].token())
        });
        try_join_all(writes).await.map_err(InventoryError::Store)?;
        for &(i, take) in &taken {
            self.note(i, counts[i] - take);
        }
        all.release().await?;
        Ok(Deduction {
            quantity,
            taken,
            merged: true,
        })
    }
}

impl<S> fmt::Debug for Inventory<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inventory")
            .field("lock", &self.lock)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}
