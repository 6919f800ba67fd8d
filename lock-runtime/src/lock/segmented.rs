//! Segmented locks: `n` reentrant locks standing for the `n` segments of one
//! hot resource (the stock of one SKU), so that `n` holders work at once.
//!
//! Segment `i` of the lock `name` is the reentrant lock `{name:seg:i}`: every
//! segment is its own hash tag, so in a cluster the segments spread over
//! slots (and nodes) instead of piling onto the one slot of `name`. Because
//! the segment name contains `{`, its derived keys (token counter, unlock
//! channel, latches) use it as it is and share the segment's slot.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lock::acquire_hold;
use crate::request::{Kind, Request};

/// Where the first "free segment" attempt starts: rotates over every
/// acquisition in the process, from a random start so that processes do not
/// all begin at segment 0.
static NEXT_START: LazyLock<AtomicUsize> = LazyLock::new(|| {
    let random = uuid::Uuid::new_v4().as_u128();
    AtomicUsize::new(random as usize)
});

/// How many tasks of this process hold or wait for each segment, per client
/// (`<client id> <segment name>`): [`SegmentedLock::any`] skips segments it
/// knows are taken instead of asking Redis, and waits where the fewest wait.
static CLAIMS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Default::default);

/// One task's interest in one segment, counted in [`CLAIMS`] while it lives.
#[derive(Debug)]
struct Claim {
    key: String,
}

impl Claim {
    fn new(client: &LockClient, segment_name: &str) -> Claim {
        let key = format!("{} {segment_name}", client.id());
        *claims().entry(key.clone()).or_default() += 1;
        Claim { key }
    }

    /// Claims of this client's tasks on the segment, right now.
    fn count(client: &LockClient, segment_name: &str) -> usize {
        let key = format!("{} {segment_name}", client.id());
        claims().get(&key).copied().unwrap_or(0)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claims = claims();
        if let Some(count) = claims.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                claims.remove(&self.key);
            }
        }
    }
}

fn claims() -> std::sync::MutexGuard<'static, HashMap<String, usize>> {
    CLAIMS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The lock name of segment `segment` of the segmented lock `name`:
/// `{name:seg:segment}`, its own cluster hash tag.
pub(crate) fn segment_name(name: &str, segment: usize) -> String {
    format!("{{{name}:seg:{segment}}}")
}

/// Which client a segmented lock acquires through.
#[derive(Debug, Clone)]
enum Source {
    Client(LockClient),
    /// A client found at the first acquire (the global client: see
    /// `global`, which makes such locks).
    Later(LaterClient),
}

/// Finds the client of a [`Source::Later`] lock.
pub(crate) type LaterClient =
    fn() -> Pin<Box<dyn Future<Output = Result<&'static LockClient, LockError>> + Send>>;

/// A lock split into `n` segments, each its own reentrant lock: `n` holders
/// proceed at once, one per segment. Made by
/// [`LockClient::segmented_lock`](crate::LockClient::segmented_lock),
/// [`SegmentedLock::global`], or declared once with
/// [`segmented_lock!`](crate::segmented_lock).
///
/// - [`any`](Self::any): one segment, a free one first.
/// - [`segment`](Self::segment): a given segment.
/// - [`all`](Self::all): every segment, in ascending order.
///
/// Segments are numbered `0..n`. Segment `i` is the reentrant lock named
/// `{name:seg:i}` (see [`segment_name`](Self::segment_name)), so every
/// segment has its own cluster hash tag. A `name` containing `{` or `}` is
/// refused with [`LockError::BadName`] at acquire time, and `n = 0` with
/// [`LockError::Config`].
///
/// Taking every segment always goes in ascending order, so two holders that
/// both want all of them never deadlock. Do not call [`all`](Self::all) while
/// holding a single segment outside that segment's
/// [`scope`](crate::LockGuard::scope): release it first (as
/// [`Inventory`](crate::Inventory) does before it merges), else the call
/// waits for the caller's own segment (and two such callers can each hold
/// the segment the other waits for). Inside the segment guard's scope,
/// `all` re-enters that segment.
#[derive(Debug, Clone)]
pub struct SegmentedLock {
    source: Source,
    name: String,
    segments: usize,
}

impl SegmentedLock {
    pub(crate) fn on_client(client: LockClient, name: String, segments: usize) -> SegmentedLock {
        SegmentedLock {
            source: Source::Client(client),
            name,
            segments,
        }
    }

    /// A segmented lock whose client `later` finds at the first acquire.
    pub(crate) fn on_later(name: String, segments: usize, later: LaterClient) -> SegmentedLock {
        SegmentedLock {
            source: Source::Later(later),
            name,
            segments,
        }
    }

    /// The lock's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of segments, `n`.
    pub fn segments(&self) -> usize {
        self.segments
    }

    /// The name of segment `segment`'s reentrant lock: `{name:seg:segment}`.
    pub fn segment_name(&self, segment: usize) -> String {
        segment_name(&self.name, segment)
    }

    /// One segment, a free one first: tries each segment once, starting from
    /// a segment that rotates with every call, and when all are busy waits
    /// for the one where the fewest of this client's tasks wait. Segments
    /// that this client's other tasks hold or wait for count as busy without
    /// a round trip.
    pub fn any(&self) -> SegmentBuilder {
        SegmentBuilder {
            lock: self.clone(),
            which: Which::Any { skip: Vec::new() },
            wait: None,
            lease: None,
        }
    }

    /// Like [`any`](Self::any), but not one of the segments with
    /// `skip[segment]` set (unless that is every segment).
    pub(crate) fn any_except(&self, skip: Vec<bool>) -> SegmentBuilder {
        SegmentBuilder {
            lock: self.clone(),
            which: Which::Any { skip },
            wait: None,
            lease: None,
        }
    }

    /// The given segment (`0..n`); another number fails with
    /// [`LockError::Config`] at acquire time.
    pub fn segment(&self, segment: usize) -> SegmentBuilder {
        SegmentBuilder {
            lock: self.clone(),
            which: Which::Given(segment),
            wait: None,
            lease: None,
        }
    }

    /// Every segment, taken one after another in ascending order.
    pub fn all(&self) -> AllSegmentsBuilder {
        AllSegmentsBuilder {
            lock: self.clone(),
            wait: None,
            lease: None,
        }
    }

    /// Checks the name and count, and finds the client.
    async fn resolve(&self) -> Result<LockClient, LockError> {
        self.check()?;
        match &self.source {
            Source::Client(client) => Ok(client.clone()),
            // Boxed: connecting is a deep future, needed once per process.
            Source::Later(later) => Ok(later().await?.clone()),
        }
    }

    /// Refuses a name or count that cannot make a segmented lock.
    pub(crate) fn check(&self) -> Result<(), LockError> {
        crate::request::check_name(&self.name)?;
        if self.name.contains(['{', '}']) {
            return Err(LockError::BadName {
                name: self.name.clone(),
                reason: "a segmented lock name must not contain `{` or `}`: \
                         each segment wraps the name in its own hash tag",
            });
        }
        if self.segments == 0 {
            return Err(LockError::Config(format!(
                "segmented lock `{}` needs at least one segment",
                self.name
            )));
        }
        Ok(())
    }

    fn check_segment(&self, segment: usize) -> Result<(), LockError> {
        if segment < self.segments {
            Ok(())
        } else {
            Err(LockError::Config(format!(
                "segmented lock `{}` has segments 0..{}, not {segment}",
                self.name, self.segments
            )))
        }
    }

    /// Takes segment `segment` on `client`, waiting `wait`, with the
    /// fixed `lease` (`None`: the watchdog's), as holder `number` (`None`:
    /// a fresh one).
    async fn take(
        &self,
        client: &LockClient,
        segment: usize,
        (wait, lease): (Option<Duration>, Option<Duration>),
        number: Option<u64>,
    ) -> Result<SegmentGuard, LockError> {
        let name = self.segment_name(segment);
        let claim = Claim::new(client, &name);
        let request = Request::new(name, Kind::Reentrant, client.config()).asking(wait, lease);
        let request = Request { number, ..request };
        let held = acquire_hold(client.clone(), request).await?;
        Ok(SegmentGuard {
            guard: LockGuard::single(held),
            segment,
            _claim: claim,
        })
    }

    /// The timeout error of the whole lock (not of the segment that was last
    /// waited for).
    fn timeout(&self, waited: Option<Duration>) -> LockError {
        LockError::Timeout {
            name: self.name.clone(),
            waited: waited.unwrap_or_default(),
        }
    }
}

#[derive(Debug, Clone)]
enum Which {
    /// A free segment first, among those not skipped (`skip[i]`).
    Any {
        skip: Vec<bool>,
    },
    Given(usize),
}

/// Builds the acquisition of one segment; the same `wait` and `lease` as
/// [`LockBuilder`](crate::LockBuilder).
#[derive(Debug, Clone)]
#[must_use = "a lock builder does nothing until acquired"]
pub struct SegmentBuilder {
    lock: SegmentedLock,
    which: Which,
    wait: Option<Duration>,
    lease: Option<Duration>,
}

impl SegmentBuilder {
    /// Longest time to wait for a segment; then `Err(LockError::Timeout)`
    /// naming the segmented lock. `Duration::ZERO`: one attempt per segment
    /// (for [`SegmentedLock::any`], segments this client's other tasks hold
    /// or wait for count as busy without an attempt).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// A fixed lease instead of the watchdog's renewal.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Acquires a segment, waiting as configured.
    pub async fn acquire(self) -> Result<SegmentGuard, LockError> {
        let SegmentBuilder {
            lock,
            which,
            wait,
            lease,
        } = self;
        let client = lock.resolve().await?;
        match which {
            Which::Given(segment) => {
                lock.check_segment(segment)?;
                lock.take(&client, segment, (wait, lease), None)
                    .await
                    .map_err(|e| rename_timeout(e, &lock, wait))
            }
            Which::Any { skip } => {
                let started = Instant::now();
                let n = lock.segments;
                let start = NEXT_START.fetch_add(1, Ordering::Relaxed) % n;
                let skipped = |segment: usize| skip.get(segment).copied().unwrap_or(false);
                let candidates: Vec<usize> = match (0..n).filter(|&i| !skipped(i)).count() {
                    // Skipping every segment would leave nothing to take.
                    0 => (0..n).map(|step| (start + step) % n).collect(),
                    _ => (0..n)
                        .map(|step| (start + step) % n)
                        .filter(|&i| !skipped(i))
                        .collect(),
                };
                // Segments this client's other tasks hold or wait for are
                // busy: not worth a round trip.
                let claimed = |segment| Claim::count(&client, &lock.segment_name(segment));
                for &segment in &candidates {
                    if claimed(segment) > 0 {
                        continue;
                    }
                    let once = (Some(Duration::ZERO), lease);
                    match lock.take(&client, segment, once, None).await {
                        Ok(guard) => return Ok(guard),
                        Err(LockError::Timeout { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                // All busy: wait for the one with the fewest of our tasks
                // waiting, the first from `start` on a tie, with what is left
                // of the wait.
                let rest = match wait {
                    None => None,
                    Some(wait) => match wait.checked_sub(started.elapsed()) {
                        Some(rest) if !rest.is_zero() => Some(rest),
                        _ => return Err(lock.timeout(Some(wait))),
                    },
                };
                // A segment the caller's scope holds would be re-entered:
                // never by accident, only when nothing else is left.
                let held_here = |segment| {
                    crate::holder::in_scope(client.id(), &lock.segment_name(segment)).is_some()
                };
                let shortest = candidates
                    .iter()
                    .copied()
                    .min_by_key(|&segment| (held_here(segment), claimed(segment)))
                    .unwrap_or(start);
                lock.take(&client, shortest, (rest, lease), None)
                    .await
                    .map_err(|e| rename_timeout(e, &lock, wait))
            }
        }
    }

    /// One attempt (per segment, for [`SegmentedLock::any`], see
    /// [`wait`](Self::wait)): `Ok(None)` when every segment asked for is busy.
    pub async fn try_acquire(mut self) -> Result<Option<SegmentGuard>, LockError> {
        self.wait = Some(Duration::ZERO);
        match self.acquire().await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

fn rename_timeout(e: LockError, lock: &SegmentedLock, wait: Option<Duration>) -> LockError {
    match e {
        LockError::Timeout { .. } => lock.timeout(wait),
        other => other,
    }
}

/// Builds the acquisition of every segment, in ascending order.
#[derive(Debug, Clone)]
#[must_use = "a lock builder does nothing until acquired"]
pub struct AllSegmentsBuilder {
    lock: SegmentedLock,
    wait: Option<Duration>,
    lease: Option<Duration>,
}

impl AllSegmentsBuilder {
    /// Longest time to wait for all segments together; then
    /// `Err(LockError::Timeout)`, with none of them held.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// A fixed lease (for each segment) instead of the watchdog's renewal.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Acquires every segment, `0` first. On failure the segments already
    /// taken are given back (in the background), as they are when the
    /// returned future is dropped half-way.
    pub async fn acquire(self) -> Result<SegmentsGuard, LockError> {
        let AllSegmentsBuilder { lock, wait, lease } = self;
        let client = lock.resolve().await?;
        // A deadline the clock cannot represent is no deadline.
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        let number = Some(crate::holder::fresh_number());
        let mut guards = Vec::with_capacity(lock.segments);
        for segment in 0..lock.segments {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            // Dropping `guards` on an error releases what was taken.
            let guard = lock
                .take(&client, segment, (left, lease), number)
                .await
                .map_err(|e| rename_timeout(e, &lock, wait))?;
            guards.push(guard);
        }
        Ok(SegmentsGuard {
            name: lock.name,
            guards,
        })
    }

    /// One attempt at each segment: `Ok(None)` (holding none) when any is busy.
    pub async fn try_acquire(mut self) -> Result<Option<SegmentsGuard>, LockError> {
        self.wait = Some(Duration::ZERO);
        match self.acquire().await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Proof of holding one segment of a [`SegmentedLock`]. Dropping it
/// releases the segment in the background, like a [`LockGuard`].
#[must_use = "dropping a guard releases the lock at once"]
#[derive(Debug)]
pub struct SegmentGuard {
    guard: LockGuard,
    segment: usize,
    _claim: Claim,
}

impl SegmentGuard {
    /// Which segment is held (`0..n`).
    pub fn segment(&self) -> usize {
        self.segment
    }

    /// The fencing token of this acquisition: strictly increasing per
    /// segment (each segment is its own lock with its own counter).
    pub fn token(&self) -> u64 {
        self.guard.token()
    }

    /// The segment's lock name, `{name:seg:i}`.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The guard of the segment's reentrant lock.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Whether the lease is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves when the lease is lost; never, while it holds.
    pub async fn lost(&self) {
        self.guard.lost().await
    }

    /// Releases the segment; `Err(LockError::Lost)` when the lease was lost.
    pub async fn release(self) -> Result<(), LockError> {
        self.guard.release().await
    }
}

/// Proof of holding every segment of a [`SegmentedLock`]. Dropping it
/// releases them all in the background.
#[must_use = "dropping a guard releases the lock at once"]
#[derive(Debug)]
pub struct SegmentsGuard {
    name: String,
    /// Ascending by segment, one per segment.
    guards: Vec<SegmentGuard>,
}

impl SegmentsGuard {
    /// The segmented lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The held segments' guards, segment `0` first.
    pub fn segments(&self) -> &[SegmentGuard] {
        &self.guards
    }

    /// The fencing token of segment `segment`, if it exists.
    pub fn token(&self, segment: usize) -> Option<u64> {
        self.guards.get(segment).map(SegmentGuard::token)
    }

    /// Whether the lease of any segment is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(SegmentGuard::is_lost)
    }

    /// Resolves when the lease of any segment is lost.
    pub async fn lost(&self) {
        if self.guards.is_empty() {
            return std::future::pending().await;
        }
        let losses = self.guards.iter().map(|g| Box::pin(g.lost()));
        futures_util::future::select_all(losses).await;
    }

    /// Releases every segment; the first error (e.g. `LockError::Lost`) if
    /// any lease was lost. Every segment is released either way.
    pub async fn release(self) -> Result<(), LockError> {
        first_error(self.guards.into_iter().map(SegmentGuard::release)).await
    }
}

/// Runs all `releases` to the end; the first error, if any.
async fn first_error(
    releases: impl Iterator<Item = impl Future<Output = Result<(), LockError>>>,
) -> Result<(), LockError> {
    let results = futures_util::future::join_all(releases).await;
    results.into_iter().collect()
}

/// The client's entry point to this module's locks.
impl LockClient {
    /// A lock split into `segments` reentrant locks (segment `i` is the lock
    /// `{name:seg:i}`, its own cluster hash tag): one holder per segment at a
    /// time, all segments taken in ascending order. See [`SegmentedLock`].
    pub fn segmented_lock(&self, name: impl Into<String>, segments: usize) -> SegmentedLock {
        SegmentedLock::on_client(self.clone(), name.into(), segments)
    }
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::*;
    use crate::engine::redis::keys;

    #[test]
    fn each_segment_is_its_own_hash_tag() {
        assert_eq!(segment_name("stock:42", 3), "{stock:42:seg:3}");
        assert_eq!(
            keys::token_key(&segment_name("stock:42", 3)),
            "redisson_lock_token:{stock:42:seg:3}"
        );
    }
}
