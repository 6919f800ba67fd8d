//! The ZooKeeper engine (DESIGN §9): locks in the layout of Curator's
//! recipes (`InterProcessMutex`, `InterProcessReadWriteLock`), so Java
//! services on Curator and this crate exclude each other on the same
//! names.
//!
//! # Layout
//!
//! Lock `name` is the node `<root>/<name>` (the root is the URL's path,
//! `/locks` by default); its contenders are `EPHEMERAL_SEQUENTIAL`
//! children `_c_<uuid>-lock-<seq>` (read-write: `__READ__`, `__WRIT__`),
//! whose data is the holder id (Curator writes the host's address). The
//! holder is the lowest sequence (readers: every reader before the first
//! writer); a waiter watches the one contender before it that keeps it
//! out: no herd, no polling. Every lock is FIFO (`fair_lock` is the same
//! lock). Missing parents are made as container nodes, which the server
//! deletes once they are empty (Curator does the same).
//!
//! - **Session.** The client's contenders live on its session (see
//!   `session`): the watchdog is the session's heartbeat, and a hold is
//!   lost, by the client's own clock, at the last answered call's send
//!   time plus the session timeout ([`Config::watchdog_timeout`], as the
//!   server granted it), before the server can expire the session; an
//!   expired session is lost at once.
//! - **Fencing token.** A zxid from which the hold is its holder's: for a
//!   contender alone at its create, the zxid of the create's transaction
//!   (the create goes with an empty write to the lock's node, whose answer
//!   counts the node's children: alone, no read is needed); else the lock
//!   node's `pzxid` read once the hold is first in line (it is at least
//!   the deletion that let it in), or, for a reader (readers let in
//!   together would share it) and a re-entry, the zxid of a write to its
//!   own node. A lock node whose ACL refuses writes gets the create and a
//!   read of its children instead, one round trip more. Holds of one name follow each other in zxid order, so
//!   tokens strictly increase per name.
//! - **`lease(d)`** is enforced by the holder: its node is given back at
//!   `d` (the guard counts as lost then). A holder that dies is bounded by
//!   the session timeout instead: its node goes when the server expires
//!   its session.
//! - **One node per client and name.** A client's mutex acquisitions of
//!   one name queue in the process (FIFO); only the head has a node. A
//!   re-entry writes no second node (it is counted in the process).
//! - **Loss.** The session's (above); a node deleted by someone else
//!   (`force_unlock`, `zkCli.sh delete`), which the session's next
//!   heartbeat finds (it lists the session's nodes); and a fixed lease's
//!   end.
//! - **Cancellation.** A dropped or failed acquisition deletes its node; a
//!   create whose answer was lost is found again by its `_c_<uuid>` prefix
//!   (Curator's "protected" mode) and deleted.
//!
//! # Semaphores
//!
//! Semaphore `name` (DESIGN §11) is Curator's `InterProcessSemaphoreV2` at
//! the same node `<root>/<name>` (see `layout` and `permit`): a mutex
//! `locks` (an `InterProcessMutex`, `_c_<uuid>-lock-<seq>` children) and
//! `leases`, whose `EPHEMERAL_SEQUENTIAL` children `_c_<uuid>-lease-<seq>`
//! are the permits (data as a lock's contender's). Curator's semaphores
//! and ours count the same leases under the same mutex, so they share the
//! bound.
//!
//! - **Taking a permit.** The mutex first, then a lease; the permit is in
//!   once the leases number at most its N (each acquisition its own: a
//!   client on a larger N gets in where a smaller one waits). Meanwhile the
//!   acquisition keeps the mutex and waits on a watch of the leases (woken
//!   by any change, no polling); every other acquisition, ours or Curator's,
//!   queues in the mutex, in arrival order. The mutex goes once the permit
//!   is in, before the guard is handed out, as Curator releases it. The
//!   first round trip sends the mutex's node and the lease together; a
//!   lease made before the mutex was ours is deleted at once (it can only
//!   make others count more).
//! - **Each permit a hold.** One lease per permit, no process queue; a
//!   re-entry in its scope writes its lease (a token of its own). Lease,
//!   watchdog, loss, release and `hold_at_least` are a lock's (above).
//! - **Fencing token.** The lease's `czxid`: leases are made one at a time
//!   under the mutex, so tokens rise with every permit of the name.
//! - **`try_acquire`** finds no permit while another acquisition holds the
//!   mutex (as Curator's zero wait).
//! - **`inspect`** lists the leases as holders, each with its token and
//!   term, but the lease of ours that waits for room (its holder id is the
//!   mutex's holder's); a Curator client's waiting lease looks held and
//!   counts as a holder. The queue is the mutex's line. **`force_unlock`**
//!   deletes the leases `inspect` lists: the waiter in the mutex gets in,
//!   then the next ones.
//! - **One kind per name.** A lock's contenders at the name refuse a
//!   permit, and leases refuse a lock, with [`LockError::WrongType`]: each
//!   try reads the other's nodes after making its own, so of two made at
//!   once at least one sees the other.
//! - **Cancellation.** A dropped or failed acquisition deletes its lease
//!   and its mutex node (found by their protected prefixes when an answer
//!   was lost).
//!
//! Quorum locks and replica sync are [`LockError::Unsupported`]: ZooKeeper
//! writes through a quorum already.
//!
//! Needs ZooKeeper 3.6 or newer (the heartbeat lists the session's nodes
//! with `getEphemerals`). A limit of the loss clock: the heartbeat is a
//! read, which a follower answers itself; a follower cut off from the
//! leader keeps answering for up to its `syncLimit` ticks while the
//! leader may expire the session, so on an ensemble the clock is only as
//! safe as `syncLimit × tickTime` is short beside the session timeout
//! (ZooKeeper's own clients share this limit). Fence at the resource.

mod hold;
mod layout;
mod ops;
mod permit;
mod session;
mod take;
mod turn;
mod undo;

use std::sync::{Arc, Mutex};
use tokio::time::Instant;

use tokio::runtime::Handle;
use zookeeper_client as zk;

pub(crate) use hold::ZkHold;
pub(crate) use ops::{force_unlock, inspect, locks};

crate::engine::seam::engine_by_parts!(
    Zk, name "zookeeper", hold ZkHold,
    connect Zk::connect,
    acquire |zk, alive, request| crate::kept::acquire(alive, zk, request),
    renewed |zk| zk.renewed(),
    inspect inspect, locks locks, force_unlock force_unlock,
    semaphores true,
);

use crate::config::Config;
use crate::error::LockError;
use crate::own::OwnHolds;

/// The engine's name in errors and metrics.
pub(crate) const ENGINE: &str = "zookeeper";

/// The root under which locks live when the URL names none.
pub(crate) const DEFAULT_ROOT: &str = "/locks";

/// What the tasks of a client on ZooKeeper share.
pub(crate) struct Zk {
    /// Random per client: the first half of every holder id.
    pub(crate) id: String,
    pub(crate) config: Config,
    pub(crate) runtime: Handle,
    /// The node under which every lock's node is (`/locks`).
    root: String,
    sessions: session::Sessions,
    /// Per caller runtime (multi-thread ones), a session of its own (see
    /// [`Zk::session`]).
    near: crate::near::Near<Arc<session::Session>>,
    /// Per name, the turns of its mutex acquisitions (FIFO).
    turns: crate::kept::Turns,
    /// Per lock name and holder id, its record (for re-entries; a multi
    /// lock's holds share one holder id over several names).
    records: crate::kept::Records<hold::Record>,
    /// This client's live guards, for `inspect`.
    pub(crate) own: OwnHolds,
}

impl Zk {
    /// Connects to the ensemble of `config`'s URL on the client's
    /// `runtime`: the first session (which proves it answers).
    pub(crate) async fn connect(config: Config, runtime: Handle) -> Result<Arc<Zk>, LockError> {
        let site = Site::parse(&config)?;
        if config.replica_sync == crate::config::ReplicaSync::Always {
            return Err(crate::engine::seam::unsupported(
                ENGINE,
                "replica sync (ZooKeeper writes through a quorum: a granted hold is on a quorum \
                 already)",
            ));
        }
        let handle = runtime.clone();
        crate::background::run(&runtime, async move {
            let sessions =
                session::Sessions::new(site.connect.clone(), site.root.clone(), site.auth, &config);
            let zk = Arc::new(Zk {
                id: uuid::Uuid::new_v4().to_string(),
                root: site.root,
                sessions,
                near: crate::near::Near::new(handle.id()),
                runtime: handle,
                turns: crate::kept::Turns::default(),
                records: Mutex::default(),
                own: OwnHolds::default(),
                config,
            });
            zk.sessions.get().await.map_err(|e| {
                LockError::unreached(
                    ENGINE,
                    site.connect.clone(),
                    zk.config.origin(),
                    e.to_string(),
                )
            })?;
            Ok(zk)
        })
        .await?
    }

    /// A fresh id for a create's protected prefix (`_c_<id>-`), shaped as
    /// Curator's (a UUID): the client's random half and a number this
    /// process never gave before, so unique without a random draw (no
    /// system call per create).
    fn protected_id(&self) -> String {
        let random = uuid::Uuid::parse_str(&self.id).map_or(0, |id| id.as_u64_pair().0);
        uuid::Uuid::from_u64_pair(random, crate::holder::fresh_number()).to_string()
    }

    /// The node of lock `name`.
    pub(crate) fn lock_path(&self, name: &str) -> String {
        format!("{}/{name}", self.root)
    }

    /// How many holds the session's heartbeat keeps.
    pub(crate) fn renewed(&self) -> usize {
        self.sessions.holds()
    }

    /// The session for an acquisition made on the caller's runtime: that
    /// runtime's own session when it is a multi-thread runtime and its
    /// session is ready (see below), else the client's, made when there is
    /// none (on the client's runtime, where its tasks then live).
    ///
    /// A session's connection is driven by tasks of the runtime it was made
    /// on: through the client's session, every call wakes the client's
    /// thread twice (an uncontended pair was 0.70x the floor's rate, 0.85x
    /// with a session of the caller's runtime). Only a multi-thread runtime
    /// gets one: its workers drive it whatever its callers do, whereas a
    /// current-thread runtime runs only inside `block_on`, and a session
    /// not driven expires with its holds. A runtime shut down while one of
    /// its holds is kept takes its session with it: the hold is lost, by
    /// its clock; its release, or its guard's drop, deletes the node
    /// through the client's own session (any session may), else it goes
    /// when the server expires the session.
    async fn session(self: &Arc<Zk>) -> Result<Arc<session::Session>, LockError> {
        let multi = Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi {
            let near = self.near.here(|| {
                let zk = self.clone();
                async move { zk.sessions.open().await }
            });
            match near {
                Some((_, session)) if !session.is_lost() => return Ok(session),
                Some((id, _)) => self.near.forget(id),
                None => {}
            }
        }
        if let Some(session) = self.sessions.live() {
            return Ok(session);
        }
        let zk = self.clone();
        self.runtime
            .spawn(async move { zk.sessions.get().await })
            .await
            .map_err(|_| LockError::Shutdown)?
    }

    /// Runs one call of `session` within the response timeout (no answer
    /// in time is [`zk::Error::Timeout`]); an answer, a refusal included,
    /// confirms the session (its heartbeat counts from the send).
    async fn call<T>(
        &self,
        session: &session::Session,
        call: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, zk::Error> {
        let sent = Instant::now();
        let answer = tokio::time::timeout(self.config.response_timeout, call)
            .await
            .unwrap_or(Err(zk::Error::Timeout));
        if answer.is_ok() || answer.as_ref().is_err_and(is_refusal) {
            session.confirm(sent);
        }
        answer
    }
}

/// Whether `e` is the server's answer to a call (it refused it), not a
/// call that went unanswered.
fn is_refusal(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::NoNode
            | zk::Error::NodeExists
            | zk::Error::BadVersion
            | zk::Error::NotEmpty
            | zk::Error::NoAuth
            | zk::Error::InvalidAcl
            | zk::Error::NoChildrenForEphemerals
    )
}

/// The connect string, root and credentials a `zk://` URL names.
struct Site {
    connect: String,
    root: String,
    auth: Option<(String, String)>,
}

impl Site {
    /// `zk://[user:password@]host:port[,host:port...][/root]`; the root is
    /// `/locks` when the URL has no path. [`Config::username`] and
    /// [`Config::password`] override the URL's credentials (ZooKeeper's
    /// `digest` scheme).
    fn parse(config: &Config) -> Result<Site, LockError> {
        let url = config.url();
        let bad = |why: &str| {
            LockError::Config(format!(
                "invalid ZooKeeper URL {:?}: {why}",
                crate::config::redact(url)
            ))
        };
        let rest = url
            .strip_prefix("zk://")
            .ok_or_else(|| bad("the scheme must be zk://"))?;
        if rest.contains(['?', '#']) {
            return Err(bad("a ZooKeeper URL has no query or fragment"));
        }
        let (authority, root) = match rest.find('/') {
            Some(at) => (&rest[..at], rest[at..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let root = if root.is_empty() { DEFAULT_ROOT } else { root };
        if root
            .split('/')
            .skip(1)
            .any(|part| part.is_empty() || part == "." || part == ".." || part == "zookeeper")
        {
            return Err(bad(&format!(
                "{root:?} is not a node path (no empty, `.` or `..` parts, not under /zookeeper)"
            )));
        }
        if root.chars().any(layout::refused) {
            return Err(bad(&format!(
                "{root:?} has a character ZooKeeper refuses in a path (control characters, \
                 U+E000-U+F8FF, U+FFF0-U+FFFF and every character past U+FFFF)"
            )));
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let mut auth = userinfo.map(|userinfo| match userinfo.split_once(':') {
            Some((user, password)) => (user.to_owned(), password.to_owned()),
            None => (userinfo.to_owned(), String::new()),
        });
        match config.credentials() {
            (Some(name), password) => {
                auth = Some((name.to_owned(), password.unwrap_or_default().to_owned()));
            }
            (None, Some(password)) => {
                let name = auth.as_ref().map(|(n, _)| n.clone()).unwrap_or_default();
                auth = Some((name, password.to_owned()));
            }
            (None, None) => {}
        }
        if hosts.is_empty() {
            return Err(bad("no host:port"));
        }
        for host in hosts.split(',') {
            let port = host.rsplit_once(':').map(|(_, port)| port);
            match port {
                Some(port) if port.parse::<u16>().is_ok_and(|p| p != 0) => {}
                _ => return Err(bad(&format!("{host:?} is not host:port"))),
            }
        }
        Ok(Site {
            connect: hosts.to_owned(),
            root: root.to_owned(),
            auth,
        })
    }
}

/// A ZooKeeper error as a [`LockError`], saying whether it may heal: all
/// but the server's refusals (a lost or stalled connection, an expired
/// session: the next try makes a new one).
pub(crate) fn store_error(e: zk::Error) -> LockError {
    // The other way round would be shorter, and wrong: the client library
    // fails a call on a stalled or reset link with errors of its own
    // (`Custom`), not only `ConnectionLoss`.
    let permanent = matches!(
        e,
        zk::Error::NoNode
            | zk::Error::NodeExists
            | zk::Error::BadVersion
            | zk::Error::NotEmpty
            | zk::Error::NoAuth
            | zk::Error::InvalidAcl
            | zk::Error::NoChildrenForEphemerals
            | zk::Error::BadArguments(_)
            | zk::Error::Unimplemented
            | zk::Error::AuthFailed
            | zk::Error::QuotaExceeded
    );
    LockError::Store {
        engine: ENGINE,
        message: e.to_string(),
        transient: !permanent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Site, LockError> {
        Site::parse(&Config::new(url))
    }

    #[test]
    fn urls_name_hosts_root_and_credentials() {
        let t = parse("zk://10.0.0.1:2181,10.0.0.2:2181/locks/shop").unwrap();
        assert_eq!(t.connect, "10.0.0.1:2181,10.0.0.2:2181");
        assert_eq!(t.root, "/locks/shop");
        assert!(t.auth.is_none());
        let t = parse("zk://u:p@h:1").unwrap();
        assert_eq!(
            (t.root.as_str(), t.auth),
            ("/locks", Some(("u".into(), "p".into())))
        );
        assert_eq!(parse("zk://h:1/").unwrap().root, "/locks");
        for bad in [
            "zk://h/locks",
            "zk://h:0",
            "zk://h:1//x",
            "zk://h:1/a/../b",
            "zk://",
            "zk://h:1?x",
        ] {
            assert!(matches!(parse(bad), Err(LockError::Config(_))), "{bad}");
        }
    }
}
