//! The client's session: one etcd lease that every hold without a fixed
//! `lease` is bound to, kept alive every third of its TTL on one
//! keep-alive stream. A session whose lease is gone (it expired while the
//! client could not reach etcd) stays lost; the next acquisition grants a
//! new one.
//!
//! Each round also reads which keys the lease still has (one call for all
//! of the client's holds): a hold whose key is gone (`force_unlock`, an
//! operator's `etcdctl del`) is told then, as a Redis hold learns it at
//! its next renewal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::time::Instant;

use etcd_client::{Client, Compare, CompareOp, LeaseTimeToLiveOptions, Txn, TxnOp};
use tokio::sync::watch;

use super::{ENGINE, store_error, timeout_error};
use crate::clock::{Validity, valid_until};
use crate::config::Config;
use crate::error::LockError;

/// One lease kept alive.
pub(crate) struct Session {
    /// The lease id (the key of a hold on it is `<name>/<id in hex>`).
    pub(crate) lease: i64,
    /// Until when it counts as live, by this client's clock.
    validity: watch::Receiver<Validity>,
    /// Holds bound to it (for `renewed_locks`).
    holds: Arc<AtomicUsize>,
    /// No new key is made on it (see [`Session::retire`]).
    retired: AtomicBool,
    /// The keys of its holds, each with when it was bound and the flag
    /// that tells its hold the key is gone.
    keys: Arc<Keys>,
}

/// The keys this client knows on a session's lease.
type Keys = Mutex<Known>;

#[derive(Default)]
pub(crate) struct Known {
    /// The keys of its holds, each with when it was bound and the hold
    /// told when the key is gone (see [`Session::bind`]).
    bound: HashMap<String, (Instant, Weak<dyn Gone>)>,
    /// Keys an acquisition may have made and not yet bound or deleted (see
    /// [`Session::claim`]), with how many claim each.
    claimed: HashMap<String, usize>,
}

impl Known {
    /// Whether `key` is a hold's or an acquisition's of this client.
    fn knows(&self, key: &[u8]) -> bool {
        std::str::from_utf8(key)
            .is_ok_and(|key| self.bound.contains_key(key) || self.claimed.contains_key(key))
    }
}

/// A hold told that its key is gone (deleted, or its lease lost).
pub(crate) trait Gone: Send + Sync {
    /// The key is gone: the hold is lost for good.
    fn gone(&self);
}

/// Tells every hold of `keys` that its key is gone.
fn all_gone(keys: &Keys) {
    let holds: Vec<_> = keys
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .bound
        .values()
        .filter_map(|(_, hold)| hold.upgrade())
        .collect();
    for hold in holds {
        hold.gone();
    }
}

impl Session {
    /// Whether the lease counts as lost.
    pub(crate) fn is_lost(&self) -> bool {
        self.validity.borrow().is_lost()
    }

    /// Makes no new key on this session: the client's next acquisitions
    /// take a new one. Its holds keep it, alive, until they are given back
    /// (then its lease is revoked). A release whose delete was not
    /// answered retires its session: a late copy of that delete can then
    /// only find a key of this lease, never a later acquisition's.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    /// Whether a new key may be made on this session.
    pub(crate) fn is_usable(&self) -> bool {
        !self.is_lost() && !self.retired.load(Ordering::Acquire)
    }

    /// The lease left by this client's clock.
    pub(crate) fn remaining(&self) -> Duration {
        let validity = *self.validity.borrow();
        if validity.lost {
            return Duration::ZERO;
        }
        validity.until.saturating_duration_since(Instant::now())
    }

    /// Resolves when the lease counts as lost.
    pub(crate) async fn lost(&self) {
        crate::clock::until_lost(self.validity.clone()).await;
    }

    /// Claims `key` for an acquisition that may make it on this lease,
    /// until the claim drops: held from before the create is sent until
    /// the key is bound to its hold, deleted, or known not to be the
    /// acquisition's. A key on the lease that no claim or hold knows (a
    /// create that landed after its acquisition gave up) is deleted at the
    /// session's next round.
    pub(crate) fn claim(&self, key: String) -> Claim {
        *self
            .keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .claimed
            .entry(key.clone())
            .or_default() += 1;
        Claim {
            keys: self.keys.clone(),
            key,
        }
    }

    /// Binds a hold's `key` to this session until the returned value
    /// drops: counted, and told when a round finds the key gone from the
    /// lease, or the lease lost.
    pub(crate) fn bind(&self, key: &str, hold: Weak<dyn Gone>) -> Bound {
        self.holds.fetch_add(1, Ordering::Relaxed);
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .bound
            .insert(key.to_owned(), (Instant::now(), hold.clone()));
        Bound {
            holds: self.holds.clone(),
            keys: self.keys.clone(),
            key: key.to_owned(),
            hold,
        }
    }
}

/// A hold bound to a session (see [`Session::bind`]).
pub(crate) struct Bound {
    holds: Arc<AtomicUsize>,
    keys: Arc<Keys>,
    key: String,
    /// Its hold: the key's entry is removed only while it is this hold's
    /// (a hold whose key was deleted lets the next acquisition of its name
    /// make and bind the key again while it lives on, lost).
    hold: Weak<dyn Gone>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        self.holds.fetch_sub(1, Ordering::Relaxed);
        let mut known = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if known
            .bound
            .get(&self.key)
            .is_some_and(|(_, hold)| Weak::ptr_eq(hold, &self.hold))
        {
            known.bound.remove(&self.key);
        }
    }
}

/// An acquisition's claim on a key of the session's lease that it may
/// have made (see [`Session::claim`]); the key's name.
pub(crate) struct Claim {
    keys: Arc<Keys>,
    key: String,
}

impl Claim {
    pub(crate) fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut known = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = known.claimed.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                known.claimed.remove(&self.key);
            }
        }
    }
}

/// The client's current session, made when first needed.
pub(crate) struct Sessions {
    client: Client,
    ttl: Duration,
    response_timeout: Duration,
    current: Mutex<Option<Arc<Session>>>,
    /// One grant at a time.
    granting: tokio::sync::Mutex<()>,
    holds: Arc<AtomicUsize>,
}

impl Sessions {
    pub(crate) fn new(client: Client, config: &Config) -> Sessions {
        Sessions {
            client,
            ttl: config.watchdog_timeout,
            response_timeout: config.response_timeout,
            current: Mutex::default(),
            granting: tokio::sync::Mutex::new(()),
            holds: Arc::default(),
        }
    }

    /// Holds bound to the client's sessions.
    pub(crate) fn holds(&self) -> usize {
        self.holds.load(Ordering::Relaxed)
    }

    /// The current session if it is live and not retired (no call made).
    pub(crate) fn live(&self) -> Option<Arc<Session>> {
        let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        current.as_ref().filter(|s| s.is_usable()).cloned()
    }

    /// The live session, granting a new lease when there is none. Runs on
    /// the client's runtime (the keep-alive task is spawned there).
    pub(crate) async fn get(&self) -> Result<Arc<Session>, LockError> {
        if let Some(session) = self.live() {
            return Ok(session);
        }
        let _granting = self.granting.lock().await;
        if let Some(session) = self.live() {
            return Ok(session);
        }
        let session = self.grant().await?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(session.clone());
        Ok(session)
    }

    async fn grant(&self) -> Result<Arc<Session>, LockError> {
        let mut lease = self.client.lease_client();
        let sent = Instant::now();
        let granted =
            tokio::time::timeout(self.response_timeout, lease.grant(ttl_secs(self.ttl), None))
                .await
                .map_err(|_| timeout_error())?
                .map_err(store_error)?;
        if !granted.error().is_empty() {
            return Err(LockError::Store {
                engine: ENGINE,
                message: format!("lease grant refused: {}", granted.error()),
                transient: false,
            });
        }
        // A TTL the server raised to its minimum is what counts.
        let ttl = Duration::from_secs(granted.ttl().max(1) as u64);
        let (validity_in, validity) = watch::channel(Validity {
            lost: false,
            until: valid_until(sent, ttl),
        });
        let keys = Arc::new(Keys::default());
        let session = Arc::new(Session {
            lease: granted.id(),
            validity,
            holds: self.holds.clone(),
            retired: AtomicBool::new(false),
            keys: keys.clone(),
        });
        tokio::spawn(keep_alive(
            self.client.clone(),
            granted.id(),
            ttl,
            self.response_timeout,
            validity_in,
            Arc::downgrade(&keys),
        ));
        Ok(session)
    }
}

/// A TTL in whole seconds, rounded up (etcd's unit), at least 1.
pub(crate) fn ttl_secs(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

/// Keeps `lease` alive every third of `ttl` until it is gone, moving its
/// validity forward with each answer (from the request's send time). A
/// broken stream is opened again; answers that do not come let the
/// validity run out by the clock. Ends when the lease is gone or nobody
/// reads the validity any more.
async fn keep_alive(
    client: Client,
    lease: i64,
    ttl: Duration,
    response_timeout: Duration,
    validity: watch::Sender<Validity>,
    keys: Weak<Keys>,
) {
    let period = ttl / 3;
    let mut pause = Duration::ZERO;
    // Once lost, always lost: the lease is let go (its keys with it) and
    // its holds are told, even if etcd would answer again.
    let end = |validity: &watch::Sender<Validity>| {
        validity.send_modify(|v| v.lost = true);
        if let Some(keys) = keys.upgrade() {
            all_gone(&keys);
        }
        let client = client.clone();
        async move {
            let mut leases = client.lease_client();
            let _ = tokio::time::timeout(response_timeout, leases.revoke(lease)).await;
        }
    };
    loop {
        tokio::time::sleep(pause).await;
        if validity.is_closed() || validity.borrow().is_lost() {
            // The client is gone, or the lease ran out by our clock.
            end(&validity).await;
            return;
        }
        pause = period.min(Duration::from_secs(1));
        let mut leases = client.lease_client();
        let sent = Instant::now();
        let opened = tokio::time::timeout(response_timeout, leases.keep_alive(lease)).await;
        let (mut keeper, mut answers) = match opened {
            Ok(Ok(stream)) => stream,
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => {
                // "lease not found": it expired.
                end(&validity).await;
                return;
            }
            _ => continue,
        };
        // Opening the stream renewed the lease once (unless it ran out by
        // our clock meanwhile).
        if validity.borrow().is_lost() {
            end(&validity).await;
            return;
        }
        validity.send_modify(|v| v.until = v.until.max(valid_until(sent, ttl)));
        loop {
            tokio::time::sleep(period).await;
            if validity.is_closed() || validity.borrow().is_lost() {
                break;
            }
            let sent = Instant::now();
            if keeper.keep_alive().await.is_err() {
                break;
            }
            match tokio::time::timeout(response_timeout, answers.message()).await {
                Ok(Ok(Some(answer))) if answer.ttl() > 0 => {
                    if validity.borrow().is_lost() {
                        break;
                    }
                    let ttl = Duration::from_secs(answer.ttl() as u64);
                    validity.send_modify(|v| v.until = v.until.max(valid_until(sent, ttl)));
                    // Every hold on the lease was renewed.
                    if let Some(keys) = keys.upgrade() {
                        let held = keys.lock().unwrap_or_else(|p| p.into_inner()).bound.len();
                        crate::telemetry::renewed(held as u64);
                    }
                    check_keys(&client, lease, response_timeout, &keys).await;
                }
                Ok(Ok(Some(_))) => {
                    end(&validity).await;
                    return;
                }
                _ => break,
            }
        }
    }
}

/// Tells every hold bound before this call whose key the lease no longer
/// has that it is gone, and deletes the keys on the lease that this client
/// does not know (see [`Session::claim`]). A failed call tells nothing
/// (the next round asks again).
async fn check_keys(client: &Client, lease: i64, response_timeout: Duration, keys: &Weak<Keys>) {
    let Some(keys) = keys.upgrade() else { return };
    let sent = Instant::now();
    let mut leases = client.lease_client();
    let asked = leases.time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys()));
    let Ok(Ok(answer)) = tokio::time::timeout(response_timeout, asked).await else {
        return;
    };
    let live: std::collections::HashSet<&[u8]> = answer.keys().iter().map(Vec::as_slice).collect();
    let (gone, strays): (Vec<_>, Vec<_>) = {
        let known = keys.lock().unwrap_or_else(|p| p.into_inner());
        let gone = known
            .bound
            .iter()
            .filter(|(key, (bound, _))| *bound < sent && !live.contains(key.as_bytes()))
            .filter_map(|(_, (_, hold))| hold.upgrade())
            .collect();
        let strays = live
            .iter()
            .filter(|key| !known.knows(key))
            .copied()
            .collect();
        (gone, strays)
    };
    for hold in gone {
        hold.gone();
    }
    for stray in strays {
        sweep(client, response_timeout, &keys, lease, stray).await;
    }
}

impl Session {
    /// [`sweep`] of `key` on this session's lease, as a keep-alive round
    /// whose listing showed it there would sweep it.
    pub(crate) async fn sweep(
        &self,
        client: &Client,
        response_timeout: Duration,
        key: &[u8],
    ) -> bool {
        sweep(client, response_timeout, &self.keys, self.lease, key).await
    }
}

/// Deletes `key`, found on the session's `lease` and known to no hold or
/// acquisition of this client, if that is still so once it is read: its
/// create revision and its lease name it. A key made again meanwhile is
/// not touched, nor one moved to another lease since the listing (a
/// fixed-lease hold's key, made on the session's lease and then moved to
/// its own: issue 34 saw healthy holds deleted so).
/// Whether it deleted it.
async fn sweep(
    client: &Client,
    response_timeout: Duration,
    keys: &Keys,
    lease: i64,
    key: &[u8],
) -> bool {
    let mut kv = client.kv_client();
    let Ok(Ok(found)) = tokio::time::timeout(response_timeout, kv.get(key, None)).await else {
        return false;
    };
    let Some(created) = found
        .kvs()
        .first()
        .filter(|kv| kv.lease() == lease)
        .map(|kv| kv.create_revision())
    else {
        return false;
    };
    if keys.lock().unwrap_or_else(|p| p.into_inner()).knows(key) {
        return false;
    }
    let delete = Txn::new()
        .when([
            Compare::create_revision(key, CompareOp::Equal, created),
            Compare::lease(key, CompareOp::Equal, lease),
        ])
        .and_then([TxnOp::delete(key, None)]);
    let deleted = matches!(
        tokio::time::timeout(response_timeout, kv.txn(delete)).await,
        Ok(Ok(answer)) if answer.succeeded()
    );
    if deleted {
        tracing::warn!(
            key = %String::from_utf8_lossy(key),
            "deleted a key of this client's session that no hold or acquisition knows (a create that landed after its acquisition gave up)"
        );
    }
    deleted
}
