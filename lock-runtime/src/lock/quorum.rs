//! The quorum lock (Redlock, Redisson's `RedissonRedLock`): one lock name on
//! N independent Redis masters, held while a majority of them hold it.
//!
//! One round: attempt the reentrant lock on every node at once, each attempt
//! bounded by the node timeout; count the grants; raise the fencing counters
//! of the granting nodes to the largest token (so that the guard's token
//! keeps increasing across rounds, see below); then check the time left. A
//! round that ends without a majority or without time left gives back every
//! grant, waits a short random time and, while `wait` lasts, tries again.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use futures_util::future::join_all;
use tracing::Instrument;

use crate::client::LockClient;
use crate::engine::redis::Core;
use crate::engine::redis::keys;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lock::acquire_hold;
use crate::request::{Kind, Request};

/// A lock held by a majority of independent Redis servers (the Redlock
/// algorithm): it survives the loss of a minority of them. Same builder
/// shape as [`LockBuilder`](crate::LockBuilder): [`wait`](Self::wait),
/// [`lease`](Self::lease), [`acquire`](Self::acquire),
/// [`try_acquire`](Self::try_acquire), plus
/// [`node_timeout`](Self::node_timeout).
///
/// ```no_run
/// # async fn demo(nodes: Vec<lock_runtime::LockClient>) -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
/// use lock_runtime::QuorumLock;
///
/// // One client per independent master (not replicas of one another).
/// let guard = QuorumLock::new("payout:7", &nodes).wait(Duration::from_secs(2)).acquire().await?;
/// // Pass guard.token() to the storage you write to (see "Safety" below).
/// guard.release().await?;
/// # Ok(()) }
/// ```
///
/// # Acquiring
///
/// - Each node gets the reentrant lock `name` (Redisson's layout, so a
///   `RedissonRedLock` over the same masters excludes it), attempted on all
///   nodes at once; an attempt that takes longer than the node timeout counts
///   as failed, and a grant that arrives after that is given back.
/// - Success needs `N/2 + 1` grants and time left: validity = lease −
///   elapsed − drift, drift = 1% of the lease + 2 ms. Without a fixed `lease`
///   the lease in this sum is the smallest `watchdog_timeout` of the clients.
/// - Otherwise every grant is given back, and the lock is tried again after
///   a short random pause while `wait` lasts (waiters of one process take
///   turns). When `wait` runs out the error is [`LockError::NoQuorum`],
///   which names every node that did not grant the lock and why (busy, timed
///   out, or its error) — also when the time ran out while acquiring.
/// - [`try_acquire`](Self::try_acquire) returns `Ok(None)` when the lock was
///   busy (the nodes that answered could have formed a majority), and the
///   `NoQuorum` error when too many nodes failed for any majority to form.
///
/// # Holding
///
/// Each client's watchdog renews its node's hold (or the fixed lease runs
/// out). The guard is lost when fewer than a majority of holds remain: with
/// 5 nodes and 4 grants, one more node may restart or become unreachable.
/// A fixed lease is reported lost at the end of its validity, before the
/// nodes' keys expire. Release gives back every hold and succeeds when no
/// more fail than the guard could lose.
///
/// # Safety
///
/// Redlock's exclusion rests on timing. A holder that pauses (a stop-the-world
/// pause, a swapped-out process, a long await on a starved runtime) past its
/// validity may still act after another holder took the lock; a clock that
/// jumps on a node (a manual change, not NTP slewing) can expire its key
/// early and let a second majority form. The lease and the validity only
/// shrink these windows. What closes them is the fencing token: pass
/// [`LockGuard::token`] to the storage you protect and have it refuse a
/// token lower than one it has seen.
///
/// Tokens are counted per node. The guard reports the largest token of the
/// granting nodes, and before it is returned the other granting nodes'
/// counters are raised to it. Any two majorities share a node, so the next
/// quorum acquisition of the name gets a larger token, whichever nodes
/// grant it. A node that loses its data (restart without persistence) may
/// count again from zero; that is harmless while the other nodes of a
/// majority remember.
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[derive(Clone)]
#[must_use = "a lock builder does nothing until acquired"]
pub struct QuorumLock {
    name: String,
    clients: Vec<LockClient>,
    wait: Option<Duration>,
    lease: Option<Duration>,
    node_timeout: Option<Duration>,
}

impl QuorumLock {
    /// The lock `name` on the servers of `clients`, one client per
    /// independent master.
    pub fn new(name: impl Into<String>, clients: &[LockClient]) -> Self {
        QuorumLock {
            name: name.into(),
            clients: clients.to_vec(),
            wait: None,
            lease: None,
            node_timeout: None,
        }
    }

    /// Longest time to wait for a majority; then
    /// `Err(LockError::NoQuorum)`. Left out: wait until acquired.
    /// `Duration::ZERO`: one round.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// A fixed lease on every node (else each client's watchdog renews it).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Longest time one node's attempt may take before it counts as failed.
    /// Default: a tenth of the lease, between 50 ms and 1 s. Keep it well
    /// under the lease: a slow node eats into the validity.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Acquires the lock on a majority of nodes, retrying as configured.
    /// Errors: `NoQuorum` when the wait ended without a majority, `Config`
    /// for no clients or two clients of one server, `BadName`.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        self.measured().await.map_err(|(e, _)| e)
    }

    /// One round: `Ok(None)` when the lock is held by someone else.
    pub async fn try_acquire(mut self) -> Result<Option<LockGuard>, LockError> {
        self.wait = Some(Duration::ZERO);
        match self.measured().await {
            Ok(guard) => Ok(Some(guard)),
            Err((_, true)) => Ok(None),
            Err((e, false)) => Err(e),
        }
    }

    /// The acquire loop. An error comes with whether only contention (not
    /// faults) kept the lock from a majority.
    /// [`run`](Self::run), recorded as one `quorum` acquisition (see
    /// `telemetry`): busy (no majority because others hold it) is a timeout.
    async fn measured(self) -> Result<LockGuard, (LockError, bool)> {
        let started = Instant::now();
        let result = self.run().await;
        let outcome = match &result {
            Ok(_) => "acquired",
            Err((_, true)) => "timeout",
            Err((_, false)) => "error",
        };
        crate::telemetry::acquired("quorum", outcome, started.elapsed());
        result
    }

    async fn run(self) -> Result<LockGuard, (LockError, bool)> {
        let refuse = |e| (e, false);
        crate::request::check_name(&self.name).map_err(refuse)?;
        crate::config::check_lease(self.lease).map_err(refuse)?;
        let nodes = self.nodes().map_err(refuse)?;
        let lease = match self.lease {
            Some(lease) => lease,
            None => nodes
                .iter()
                .map(|n| n.client.config().watchdog_timeout)
                .min()
                .unwrap_or_default(),
        };
        let node_timeout = self
            .node_timeout
            .unwrap_or((lease / 10).clamp(Duration::from_millis(50), Duration::from_secs(1)));
        let round = Round {
            name: &self.name,
            nodes: &nodes,
            fixed: self.lease,
            lease,
            node_timeout,
        };
        let deadline = self.wait.and_then(|w| Instant::now().checked_add(w));
        let span = tracing::debug_span!("acquire_quorum", lock = %self.name, nodes = nodes.len());
        async {
            // Waiters of this process take turns, so they do not split the votes.
            let core = nodes[0].core.clone();
            let mut ticket = None;
            loop {
                let failure = match round.run().await {
                    Ok(guard) => return Ok(guard),
                    Err(failure) => failure,
                };
                let give_up = |failure: Failure| {
                    let busy = failure.busy_only(round.needed());
                    (failure.into_error(&round), busy)
                };
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(give_up(failure));
                }
                tracing::debug!(acquired = failure.acquired, "no quorum; retrying");
                if ticket.is_none() {
                    let mut mine = core.local.ticket(format!("quorum:{}", self.name));
                    match deadline {
                        Some(d) => {
                            if tokio::time::timeout_at(d, mine.turn()).await.is_err() {
                                return Err(give_up(failure));
                            }
                        }
                        None => mine.turn().await,
                    }
                    ticket = Some(mine);
                }
                let mut pause = backoff();
                if let Some(d) = deadline {
                    pause = pause.min(d.saturating_duration_since(Instant::now()));
                }
                tokio::time::sleep(pause).await;
            }
        }
        .instrument(span)
        .await
    }

    /// The nodes, checked: at least one, no client or server twice.
    fn nodes(&self) -> Result<Vec<Node>, LockError> {
        if self.clients.is_empty() {
            return Err(LockError::Config(
                "a quorum lock needs at least one client".into(),
            ));
        }
        let nodes: Vec<Node> = self
            .clients
            .iter()
            .map(|client| {
                // Redlock is for independent Redis masters: etcd is a
                // quorum already.
                let core = client.redis("quorum locks (etcd is already a quorum)")?;
                Ok(Node {
                    server: client.config().server_identity(),
                    core: core.clone(),
                    client: client.clone(),
                })
            })
            .collect::<Result<_, LockError>>()?;
        for (i, a) in nodes.iter().enumerate() {
            for (j, b) in nodes.iter().enumerate().skip(i + 1) {
                // One client twice would re-enter its own hold and count twice.
                if a.client.id() == b.client.id() || a.server == b.server {
                    return Err(LockError::Config(format!(
                        "quorum lock `{}`: nodes {i} and {j} are the same server ({}); \
                         a quorum needs independent servers",
                        self.name, a.server
                    )));
                }
            }
        }
        Ok(nodes)
    }
}

impl fmt::Debug for QuorumLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuorumLock")
            .field("name", &self.name)
            .field("nodes", &self.clients.len())
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .field("node_timeout", &self.node_timeout)
            .finish()
    }
}

struct Node {
    client: LockClient,
    /// The client's Redis engine (a quorum is of Redis masters).
    core: Arc<Core>,
    /// `host:port/db`, for messages and the independence check.
    server: String,
}

/// What one node said in one round.
enum Outcome {
    /// Granted; the guard gives it back if dropped.
    Granted(LockGuard),
    /// Held by someone else.
    Busy,
    /// No answer within the node timeout.
    TimedOut,
    /// An error (unreachable, wrong type, ...).
    Failed(LockError),
}

/// Why a round did not end with the lock.
struct Failure {
    acquired: usize,
    /// Per node that did not grant: index and outcome (never `Granted`).
    refused: Vec<(usize, Outcome)>,
    /// Set when a majority granted but no validity was left.
    spent: Option<String>,
}

impl Failure {
    /// Whether only contention stood in the way: no time ran out, some node
    /// was busy, and the nodes that did answer could have formed a majority.
    fn busy_only(&self, needed: usize) -> bool {
        let faults = self
            .refused
            .iter()
            .filter(|(_, o)| !matches!(o, Outcome::Busy))
            .count();
        let total = self.acquired + self.refused.len();
        self.spent.is_none() && faults < self.refused.len() && total - faults >= needed
    }

    fn into_error(self, round: &Round<'_>) -> LockError {
        let mut reasons: Vec<String> = self.spent.into_iter().collect();
        for (i, outcome) in &self.refused {
            let what = match outcome {
                Outcome::Busy => "busy (held by another holder)".to_owned(),
                Outcome::TimedOut => format!("timed out after {:?}", round.node_timeout),
                Outcome::Failed(e) => format!("failed: {e}"),
                Outcome::Granted(_) => continue,
            };
            reasons.push(format!("node {i} ({}): {what}", round.nodes[*i].server));
        }
        LockError::NoQuorum {
            name: round.name.to_owned(),
            acquired: self.acquired,
            needed: round.needed(),
            failures: reasons.join("; "),
        }
    }
}

/// One attempt at a majority.
struct Round<'a> {
    name: &'a str,
    nodes: &'a [Node],
    /// The fixed lease asked for (`None`: each client's watchdog's).
    fixed: Option<Duration>,
    /// The lease the validity is counted against.
    lease: Duration,
    node_timeout: Duration,
}

impl Round<'_> {
    fn needed(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    async fn run(&self) -> Result<LockGuard, Failure> {
        let started = Instant::now();
        let attempts = self.nodes.iter().map(|node| async move {
            let config = node.client.config();
            let request = Request::new(self.name.to_owned(), Kind::Reentrant, config)
                .asking(Some(Duration::ZERO), self.fixed)
                .part_of("quorum", None);
            // A grant that lands after the timeout is undone by attempt_once.
            match tokio::time::timeout(
                self.node_timeout,
                acquire_hold(node.client.clone(), request),
            )
            .await
            {
                Ok(Ok(held)) => Outcome::Granted(LockGuard::single(held)),
                Ok(Err(LockError::Timeout { .. })) => Outcome::Busy,
                Ok(Err(e)) => Outcome::Failed(e),
                Err(_) => Outcome::TimedOut,
            }
        });
        let mut granted = Vec::new();
        let mut refused = Vec::new();
        for (i, outcome) in join_all(attempts).await.into_iter().enumerate() {
            match outcome {
                Outcome::Granted(guard) => granted.push((i, guard)),
                other => refused.push((i, other)),
            }
        }
        if granted.len() >= self.needed() {
            let (raised, failed) = self.raise_tokens(granted).await;
            granted = raised;
            refused.extend(failed);
            refused.sort_by_key(|(i, _)| *i);
        }
        let elapsed = started.elapsed();
        let drift = self.lease / 100 + Duration::from_millis(2);
        let validity = self
            .lease
            .checked_sub(elapsed + drift)
            .filter(|v| !v.is_zero());
        let mut spent = None;
        if granted.len() >= self.needed() {
            match validity {
                Some(validity) => {
                    let mut guard = LockGuard::group(self.name.to_owned(), 0, Vec::new());
                    let count = granted.len();
                    for (_, held) in granted {
                        guard.absorb(held);
                    }
                    guard.tolerate(count - self.needed());
                    guard.expire_by(started + self.lease - drift);
                    tracing::debug!(nodes = count, ?validity, token = guard.token(), "acquired");
                    return Ok(guard);
                }
                None => {
                    spent = Some(format!(
                        "the lease ran out while acquiring ({elapsed:?} elapsed + {drift:?} drift \
                         >= {:?} lease)",
                        self.lease
                    ));
                }
            }
        }
        let acquired = granted.len();
        self.give_back(granted).await;
        Err(Failure {
            acquired,
            refused,
            spent,
        })
    }

    /// Raises every granting node's token counter to the largest token, so
    /// that any later majority (which shares a node with this one) counts past
    /// it. A node where that fails is given back and counted as failed.
    async fn raise_tokens(
        &self,
        granted: Vec<(usize, LockGuard)>,
    ) -> (Vec<(usize, LockGuard)>, Vec<(usize, Outcome)>) {
        let top = granted.iter().map(|(_, g)| g.token()).max().unwrap_or(0);
        let raises = granted.into_iter().map(|(i, guard)| async move {
            let behind = top - guard.token();
            if behind == 0 {
                return (i, Ok(guard));
            }
            let client = &self.nodes[i].client;
            let mut conn = self.nodes[i].core.conn.clone();
            let key = keys::token_key(self.name);
            let name = self.name.to_owned();
            let raise = client.on_background(async move {
                redis::cmd("INCRBY")
                    .arg(key)
                    .arg(behind)
                    .query_async::<i64>(&mut conn)
                    .await
                    .map_err(|e| LockError::from_redis(&name, e))
            });
            match tokio::time::timeout(self.node_timeout, raise).await {
                Ok(Ok(Ok(_))) => (i, Ok(guard)),
                Ok(Ok(Err(e)) | Err(e)) => (i, Err((guard, Outcome::Failed(e)))),
                Err(_) => (i, Err((guard, Outcome::TimedOut))),
            }
        });
        let mut raised = Vec::new();
        let mut failed = Vec::new();
        let mut dropped = Vec::new();
        for (i, result) in join_all(raises).await {
            match result {
                Ok(guard) => raised.push((i, guard)),
                Err((guard, outcome)) => {
                    dropped.push((i, guard));
                    failed.push((i, outcome));
                }
            }
        }
        self.give_back(dropped).await;
        (raised, failed)
    }

    /// Releases the grants of a failed round, bounded by the node timeout
    /// (a release still under way then finishes in the background).
    async fn give_back(&self, granted: Vec<(usize, LockGuard)>) {
        if granted.is_empty() {
            return;
        }
        let releases = granted.into_iter().map(|(i, guard)| async move {
            if let Err(e) = guard.release().await {
                tracing::debug!(node = i, error = %e, "giving back a grant failed");
            }
        });
        let _ = tokio::time::timeout(self.node_timeout, join_all(releases)).await;
    }
}

/// A random pause between rounds (Redlock's answer to split votes): 10 to
/// 60 ms.
fn backoff() -> Duration {
    let random = uuid::Uuid::new_v4().as_u128() as u64;
    Duration::from_millis(10 + random % 50)
}
