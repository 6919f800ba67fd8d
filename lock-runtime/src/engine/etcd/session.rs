//! The client's session: one etcd lease that every hold without a fixed
//! `lease` is bound to, kept alive every third of its TTL on one
//! keep-alive stream. A session whose lease is gone (it expired while the
//! client could not reach etcd) stays lost; the next acquisition grants a
//! new one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::Client;
use tokio::sync::watch;

use super::{ENGINE, store_error, timeout_error};
use crate::watchdog::{Validity, valid_until};
use crate::{Config, LockError};

/// One lease kept alive.
pub(crate) struct Session {
    /// The lease id (the key of a hold on it is `<name>/<id in hex>`).
    pub(crate) lease: i64,
    /// Until when it counts as live, by this client's clock.
    validity: watch::Receiver<Validity>,
    /// Holds bound to it (for `renewed_locks`).
    holds: Arc<AtomicUsize>,
}

impl Session {
    /// Whether the lease counts as lost.
    pub(crate) fn is_lost(&self) -> bool {
        self.validity.borrow().is_lost()
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
        let mut validity = self.validity.clone();
        loop {
            let now = *validity.borrow_and_update();
            if now.is_lost() {
                return;
            }
            tokio::select! {
                changed = validity.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep_until(now.until.into()) => {}
            }
        }
    }

    /// Counts a hold bound to this session until the returned value drops.
    pub(crate) fn bind(&self) -> Bound {
        self.holds.fetch_add(1, Ordering::Relaxed);
        Bound(self.holds.clone())
    }
}

/// A hold bound to a session (see [`Session::bind`]).
pub(crate) struct Bound(Arc<AtomicUsize>);

impl Drop for Bound {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
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

    fn live(&self) -> Option<Arc<Session>> {
        let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        current.as_ref().filter(|s| !s.is_lost()).cloned()
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
        let session = Arc::new(Session {
            lease: granted.id(),
            validity,
            holds: self.holds.clone(),
        });
        tokio::spawn(keep_alive(
            self.client.clone(),
            granted.id(),
            ttl,
            self.response_timeout,
            validity_in,
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
) {
    let period = ttl / 3;
    let mut pause = Duration::ZERO;
    loop {
        tokio::time::sleep(pause).await;
        if validity.is_closed() {
            // The client is gone: let the lease go with it.
            let mut leases = client.lease_client();
            let _ = tokio::time::timeout(response_timeout, leases.revoke(lease)).await;
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
                validity.send_modify(|v| v.lost = true);
                return;
            }
            _ => continue,
        };
        // Opening the stream renewed the lease once.
        validity.send_modify(|v| v.until = v.until.max(valid_until(sent, ttl)));
        loop {
            tokio::time::sleep(period).await;
            if validity.is_closed() {
                break;
            }
            let sent = Instant::now();
            if keeper.keep_alive().await.is_err() {
                break;
            }
            match tokio::time::timeout(response_timeout, answers.message()).await {
                Ok(Ok(Some(answer))) if answer.ttl() > 0 => {
                    let ttl = Duration::from_secs(answer.ttl() as u64);
                    validity.send_modify(|v| v.until = v.until.max(valid_until(sent, ttl)));
                }
                Ok(Ok(Some(_))) => {
                    validity.send_modify(|v| v.lost = true);
                    return;
                }
                _ => break,
            }
        }
    }
}
