//! The client's ZooKeeper session: what keeps its contenders' nodes
//! (ephemeral: they go with it), its heartbeat, and the loss clock of the
//! holds on it.
//!
//! The client library pings the server while the session is idle; this
//! module adds a call of its own every third of the session timeout and
//! counts the session valid until the send time of the last answered one
//! plus the negotiated timeout, less the safety margin: the server, which
//! counts from later, expires the session after that. An expired or closed
//! session is lost at once. A lost session stays lost: the client's next
//! acquisitions make a new one, and the old one closes when its last hold
//! lets it go.
//!
//! That call lists the session's ephemeral nodes under the root (one call
//! for all of them): a hold whose node is missing from it was deleted by
//! someone else (`force_unlock`), and is told so, as a Redis hold learns
//! it at its next renewal. No watch per hold: a watch costs a call each.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::time::Instant;

use tokio::sync::watch;
use zookeeper_client as zk;

use super::{ENGINE, store_error};
use crate::clock::valid_until;
use crate::config::Config;
use crate::error::LockError;

/// One ZooKeeper session of a client.
pub(crate) struct Session {
    pub(crate) client: zk::Client,
    /// The timeout the server granted.
    timeout: Duration,
    /// When the last answered call was sent.
    confirmed: Mutex<Instant>,
    /// Expired, closed, or run out by the clock.
    lost: watch::Sender<bool>,
    /// The nodes of the holds on this session, by path: when each was
    /// bound, and whom to tell when it is found gone.
    bound: Mutex<HashMap<String, Binding>>,
}

/// A hold's node bound to the session.
struct Binding {
    /// When it was bound: a listing sent before may not show it yet.
    at: Instant,
    hold: Weak<dyn Gone>,
    /// Kept by the heartbeat alone (no fixed lease): counted as renewed.
    renewed: bool,
}

/// A hold told that its node is gone.
pub(crate) trait Gone: Send + Sync {
    fn gone(&self);
}

impl Session {
    /// Whether the session counts as lost by this client's clock.
    pub(crate) fn is_lost(&self) -> bool {
        if *self.lost.borrow() {
            return true;
        }
        if Instant::now() >= self.until() {
            self.lost.send_replace(true);
            return true;
        }
        false
    }

    fn until(&self) -> Instant {
        let confirmed = *self.confirmed.lock().unwrap_or_else(|p| p.into_inner());
        valid_until(confirmed, self.timeout)
    }

    /// The session timeout the server granted.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How long the session counts as valid from now.
    pub(crate) fn remaining(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.until().saturating_duration_since(Instant::now())
    }

    /// A call sent at `sent` was answered: the session lives until then
    /// plus its timeout at least.
    pub(crate) fn confirm(&self, sent: Instant) {
        let mut confirmed = self.confirmed.lock().unwrap_or_else(|p| p.into_inner());
        if sent > *confirmed {
            *confirmed = sent;
        }
    }

    /// Resolves once the session is lost (see [`is_lost`](Self::is_lost)).
    pub(crate) async fn lost(&self) {
        let mut lost = self.lost.subscribe();
        loop {
            if self.is_lost() {
                return;
            }
            let until = self.until();
            tokio::select! {
                changed = lost.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Binds a hold's node at `path` to the session, until the returned
    /// mark drops: the heartbeat tells `hold` when the node is gone. A hold
    /// with no fixed lease is `renewed` by the heartbeat alone.
    pub(crate) fn bind(
        self: &Arc<Session>,
        path: &str,
        hold: Weak<dyn Gone>,
        renewed: bool,
    ) -> Bound {
        let mut bound = self.bound.lock().unwrap_or_else(|p| p.into_inner());
        let at = Instant::now();
        bound.insert(path.to_owned(), Binding { at, hold, renewed });
        Bound {
            session: Arc::downgrade(self),
            path: path.to_owned(),
        }
    }

    /// How many holds the heartbeat alone keeps.
    fn holds(&self) -> usize {
        let bound = self.bound.lock().unwrap_or_else(|p| p.into_inner());
        bound.values().filter(|b| b.renewed).count()
    }

    /// Tells the holds bound before `sent` whose nodes are not among
    /// `present` (the session's ephemeral nodes as a call sent then saw
    /// them) that they are gone.
    fn check(&self, sent: Instant, present: &HashSet<String>) {
        let missing: Vec<Weak<dyn Gone>> = self
            .bound
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(path, b)| b.at < sent && !present.contains(*path))
            .map(|(_, b)| b.hold.clone())
            .collect();
        // Told with the map unlocked: a hold may unbind meanwhile.
        for hold in missing.iter().filter_map(Weak::upgrade) {
            hold.gone();
        }
    }

    /// Marks the session lost: the client's next acquisitions make a new
    /// one.
    pub(crate) fn retire(&self) {
        self.lost.send_replace(true);
    }
}

/// A hold's node bound to its session (see [`Session::bind`]).
pub(crate) struct Bound {
    session: Weak<Session>,
    path: String,
}

impl Bound {
    /// The hold was released but its node is kept (a `hold_at_least`
    /// minimum): still bound (its loss is still found), no longer counted
    /// as renewed (issue 34: a released guard is never counted renewed).
    pub(crate) fn released(&self) {
        if let Some(session) = self.session.upgrade() {
            let mut bound = session.bound.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(binding) = bound.get_mut(&self.path) {
                binding.renewed = false;
            }
        }
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Some(session) = self.session.upgrade() {
            let mut bound = session.bound.lock().unwrap_or_else(|p| p.into_inner());
            bound.remove(&self.path);
        }
    }
}

/// A client's sessions: the live one, made again when lost.
pub(crate) struct Sessions {
    connect: String,
    /// The root under which the client's nodes are.
    root: String,
    auth: Option<(String, String)>,
    config: Config,
    current: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// The live session, readable without waiting.
    live: Mutex<Option<Arc<Session>>>,
    /// Every session made, the caller runtimes' included (for the count of
    /// holds they keep).
    all: Mutex<Vec<Weak<Session>>>,
}

impl Sessions {
    pub(crate) fn new(
        connect: String,
        root: String,
        auth: Option<(String, String)>,
        config: &Config,
    ) -> Sessions {
        Sessions {
            connect,
            root,
            auth,
            config: config.clone(),
            current: tokio::sync::Mutex::new(None),
            live: Mutex::new(None),
            all: Mutex::default(),
        }
    }

    /// The live session, if there is one now.
    pub(crate) fn live(&self) -> Option<Arc<Session>> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.as_ref().filter(|s| !s.is_lost()).cloned()
    }

    /// The live session, made when there is none (on the caller's runtime:
    /// call it on the client's, where the session's tasks then live).
    pub(crate) async fn get(&self) -> Result<Arc<Session>, LockError> {
        if let Some(session) = self.live() {
            return Ok(session);
        }
        let mut current = self.current.lock().await;
        if let Some(session) = current.as_ref().filter(|s| !s.is_lost()) {
            return Ok(session.clone());
        }
        let session = self.open().await?;
        *current = Some(session.clone());
        *self.live.lock().unwrap_or_else(|p| p.into_inner()) = Some(session.clone());
        Ok(session)
    }

    /// How many holds the sessions' heartbeats keep.
    pub(crate) fn holds(&self) -> usize {
        let mut all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|s| s.strong_count() > 0);
        all.iter()
            .filter_map(Weak::upgrade)
            .map(|session| session.holds())
            .sum()
    }

    /// Connects a new session on the current runtime, which drives it, and
    /// starts its heartbeat and state watch there.
    pub(crate) async fn open(&self) -> Result<Arc<Session>, LockError> {
        let mut connector = zk::Client::connector()
            .with_session_timeout(self.config.watchdog_timeout)
            .with_connection_timeout(self.config.connect_timeout);
        if let Some((user, password)) = &self.auth {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let sent = Instant::now();
        let connected = tokio::time::timeout(
            self.config.connect_timeout,
            connector.connect(&self.connect),
        )
        .await;
        let client = match connected {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(store_error(e)),
            Err(_) => {
                return Err(LockError::Store {
                    engine: ENGINE,
                    message: format!("no session with ZooKeeper at {} in time", self.connect),
                    transient: true,
                });
            }
        };
        let session = Arc::new(Session {
            timeout: client.session_timeout(),
            client,
            confirmed: Mutex::new(sent),
            lost: watch::channel(false).0,
            bound: Mutex::default(),
        });
        tokio::spawn(heartbeat(
            Arc::downgrade(&session),
            self.root.clone(),
            self.config.response_timeout,
        ));
        tokio::spawn(watch_state(Arc::downgrade(&session)));
        let mut all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        all.push(Arc::downgrade(&session));
        drop(all);
        Ok(session)
    }
}

/// Every third of the session timeout, a call whose answer confirms the
/// session and shows which of its holds' nodes are gone (see the module
/// docs), while the session lives and is not lost; then [`reap`].
async fn heartbeat(session: Weak<Session>, root: String, response_timeout: Duration) {
    loop {
        let (client, every) = match session.upgrade() {
            Some(s) if !s.is_lost() => (s.client.clone(), s.timeout / 3),
            Some(_) => break,
            None => return,
        };
        let sent = Instant::now();
        let listed = tokio::time::timeout(response_timeout, client.list_ephemerals(&root)).await;
        drop(client);
        if let Ok(Ok(present)) = listed
            && let Some(session) = session.upgrade()
        {
            session.confirm(sent);
            let renewed = session.holds();
            if renewed > 0 {
                crate::telemetry::renewed(renewed as u64);
            }
            session.check(sent, &present.into_iter().collect());
        }
        tokio::time::sleep_until(sent + every).await;
    }
    reap(session, root, response_timeout).await;
}

/// Deletes the nodes of a session lost by the clock. Its holds are lost
/// already, but the server may still keep the session (the link came back
/// before it expired it, and the client library pings it again): its
/// nodes would block their locks for as long as it lives. Tries until
/// they are gone, the session ends, or nothing refers to it any more (it
/// closes then, and the server deletes them).
async fn reap(session: Weak<Session>, root: String, response_timeout: Duration) {
    for tries in 1.. {
        let Some(client) = session.upgrade().map(|s| s.client.clone()) else {
            return;
        };
        if client.state().is_terminated() {
            return;
        }
        let reaped = tokio::time::timeout(response_timeout, async {
            let nodes = client.list_ephemerals(&root).await?;
            for node in &nodes {
                match client.delete(node, None).await {
                    Ok(()) | Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok::<_, zk::Error>(())
        })
        .await;
        if let Ok(Ok(())) = reaped {
            return;
        }
        drop(client);
        tokio::time::sleep(crate::request::backoff(tries)).await;
    }
}

/// Marks the session lost when the server expires or closes it.
async fn watch_state(session: Weak<Session>) {
    let Some(mut state) = session.upgrade().map(|s| s.client.state_watcher()) else {
        return;
    };
    loop {
        let now = state.changed().await;
        if now.is_terminated() {
            if let Some(session) = session.upgrade() {
                session.retire();
            }
            return;
        }
        if session.strong_count() == 0 {
            return;
        }
    }
}
