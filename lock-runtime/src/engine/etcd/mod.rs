//! The etcd engine (DESIGN §9): locks in the layout of etcd's own lock
//! recipe (Go's `concurrency.Mutex`, `etcdctl lock`), so Go services and
//! this crate exclude each other on the same names.
//!
//! # Layout
//!
//! A contender for lock `name` is the key `<name>/<lease id in lowercase
//! hex>`, bound to that lease; its value is the holder id
//! (`<client id>:<n>`; `etcdctl` writes an empty one). The holder is the
//! key with the lowest create revision under `<name>/`: every lock is FIFO
//! by arrival (`fair_lock` is the same lock). A waiter watches the deletion
//! of the key just before its own, on the client's one watch stream: no
//! herd, no polling.
//!
//! - **Leases.** Without a fixed `lease`, keys are bound to the client's
//!   session lease (TTL [`Config::watchdog_timeout`], kept alive every third
//!   of it on one keep-alive stream for all of the client's holds). With
//!   `lease(d)`, a hold has a lease of its own with TTL `d` (rounded up to
//!   whole seconds, raised by the server to its minimum) that is not kept
//!   alive: the server deletes the key when it runs out.
//! - **Fencing token.** A revision from which the hold is its holder's
//!   (the create revision when the lock was free, the deletion that let it
//!   in, or the read that found it first): holds of one name follow each
//!   other in revision order, so tokens strictly increase per name, and a
//!   re-entry bumps its key (a put) for a token of its own.
//! - **One record per client and name.** A client's acquisitions of one
//!   name queue in the process (FIFO) and only the head has a key in etcd;
//!   a re-entry writes no second key (it is counted in the process).
//! - **Loss**, by the guard's own clock: the last keep-alive answer's send
//!   time plus the TTL (less the safety margin), or the fixed lease's end;
//!   and at once when the key is deleted (`force_unlock`, an operator's
//!   `etcdctl del`), which the hold watches for.
//! - **Handoff.** A waiter reads the last key before its own and watches
//!   its deletion. When that key was the only one before it, the deletion
//!   event is its turn, with no read after it (keys are only ever made
//!   after ours): the token is the deletion's revision. Otherwise it reads
//!   again and watches the next. A waiter's key deleted by hand meanwhile
//!   is found by the session's next round (the hold reports the loss).
//! - **Release.** A mutex key on the session's lease is given back with a
//!   plain delete, as etcd's recipe does (a compare-and-delete txn costs
//!   etcd about a third more), while the record holds the client's turn
//!   at the name: no other acquisition of the client can make the key
//!   `<name>/<lease>` again until the delete's answer is in. A delete
//!   whose answer is not seen retires the session first: the client's next
//!   keys are on a new lease, out of reach of a late copy of the delete.
//!   Other releases compare the key's create revision.
//! - **Near clients.** Acquire and release calls go through a client of
//!   the caller's runtime (`crate::near`), so a call wakes no other
//!   thread; watches, the session and undoing stay on the client's own.
//! - **Cancellation.** A create whose answer was lost is found again by its
//!   key (the lease id names it) and deleted; a dropped waiter's key is
//!   deleted before its turn in the process queue passes on. A create that
//!   lands after its acquisition gave up (its answer lost on the way) is a
//!   key on the session's lease that no hold or acquisition of the client
//!   knows: the session's next round deletes it.
//!
//! - **Semaphores** (DESIGN §11). A permit is a fair waiter's key,
//!   `<name>/<lease hex>-<n>`, valued `<holder id> permits <N>`: it holds
//!   once fewer than its N keys were created before it, every one a
//!   permit's (`layout`'s docs say why that is Curator's bound). A waiting
//!   permit watches the name's prefix for the deletion of any key created
//!   before its own (one watch on the client's one stream; the deletion of
//!   a later key wakes nobody), then reads the keys before it again; let
//!   in by a deletion, it bumps its key for a token of its own. The token
//!   is a revision from which the permit is held, so tokens rise across
//!   every permit of the name. `etcdctl lock` sees a permit's key as a
//!   contender, and a permit sees any key that is no permit's as a holder:
//!   one kind per name.
//!
//! Quorum locks and replica sync are [`LockError::Unsupported`]: etcd is a
//! quorum already, and its writes are linearizable.

mod hold;
mod layout;
mod ops;
mod session;
mod take;
mod undo;
mod watches;

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, KvClient};
use tokio::runtime::Handle;

pub(crate) use hold::EtcdHold;
pub(crate) use ops::{force_unlock, inspect, locks};

crate::engine::seam::engine_by_parts!(
    Etcd, name "etcd", hold EtcdHold,
    connect Etcd::connect,
    acquire |etcd, alive, request| crate::kept::acquire(alive, etcd, request),
    renewed |etcd| etcd.renewed(),
    inspect inspect, locks locks, force_unlock force_unlock,
    semaphores true,
);

use crate::config::Config;
use crate::error::LockError;
use crate::own::OwnHolds;

/// The engine's name in errors and metrics.
pub(crate) const ENGINE: &str = "etcd";

/// What the tasks of a client on etcd share.
pub(crate) struct Etcd {
    /// Random per client: the first half of every holder id.
    pub(crate) id: String,
    pub(crate) config: Config,
    pub(crate) runtime: Handle,
    client: Arc<Client>,
    /// How a near client is made: the endpoints and options of `client`.
    connect: (Vec<String>, ConnectOptions),
    /// Per caller runtime, a client of its own (see `crate::near`).
    near: crate::near::Near<Arc<Client>>,
    sessions: session::Sessions,
    watches: watches::Watches,
    /// Per name, the turns of its mutex acquisitions (FIFO).
    turns: crate::kept::Turns,
    /// Per lock name and holder id, its record (for re-entries; a multi
    /// lock's holds share one holder id over several names).
    records: crate::kept::Records<hold::Record>,
    /// This client's live guards, for `inspect`.
    pub(crate) own: OwnHolds,
}

impl Etcd {
    /// Connects to the endpoints of `config`'s URL on the client's
    /// `runtime`, and grants the session lease (which proves the cluster
    /// answers).
    pub(crate) async fn connect(config: Config, runtime: Handle) -> Result<Arc<Etcd>, LockError> {
        let site = Site::parse(&config)?;
        if config.replica_sync == crate::config::ReplicaSync::Always {
            return Err(crate::engine::seam::unsupported(
                ENGINE,
                "replica sync (etcd's writes are linearizable: a granted hold is on a quorum already)",
            ));
        }
        let handle = runtime.clone();
        crate::background::run(&runtime, async move {
            // A member cut off from the others refuses, and ends the watch
            // stream, instead of serving stale reads and never sending an
            // event; a token of `user:password@` is fetched again when it
            // expires.
            let mut options = ConnectOptions::new()
                .with_require_leader(true)
                .with_auto_token_refresh(true)
                .with_connect_timeout(config.connect_timeout)
                .with_keep_alive(Duration::from_secs(10), config.response_timeout);
            if let Some((user, password)) = &site.user {
                options = options.with_user(user.clone(), password.clone());
            }
            // The system's certificate store: where an operator puts the
            // cluster's CA (`SSL_CERT_FILE` and `SSL_CERT_DIR` are honoured).
            #[cfg(feature = "tls")]
            if site.tls {
                options = options.with_tls(etcd_client::TlsOptions::new().with_native_roots());
            }
            let connect = Client::connect(site.endpoints.clone(), Some(options.clone()));
            let client = match tokio::time::timeout(config.connect_timeout, connect).await {
                Ok(Ok(client)) => client,
                Ok(Err(e)) => return Err(site.connect_error(&config, &e.to_string())),
                Err(_) => return Err(site.connect_error(&config, "no answer in time")),
            };
            let sessions = session::Sessions::new(client.clone(), &config);
            let etcd = Arc::new(Etcd {
                id: uuid::Uuid::new_v4().to_string(),
                watches: watches::Watches::start(client.clone()),
                client: Arc::new(client),
                connect: (site.endpoints.clone(), options),
                near: crate::near::Near::new(handle.id()),
                sessions,
                runtime: handle,
                turns: crate::kept::Turns::default(),
                records: Mutex::default(),
                own: OwnHolds::default(),
                config,
            });
            // The first session now: a cluster that does not answer fails
            // the connect, not the first acquisition.
            if let Err(e) = tokio::time::timeout(etcd.config.connect_timeout, etcd.sessions.get())
                .await
                .unwrap_or_else(|_| Err(timeout_error()))
            {
                return Err(site.connect_error(&etcd.config, &e.to_string()));
            }
            Ok(etcd)
        })
        .await?
    }

    /// The engine's own client of the etcd API.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The client for a call made in a caller's task: its runtime's near
    /// client when one is ready (marked [`Here::near`]), else the engine's
    /// own.
    pub(crate) fn here(&self) -> Here {
        let connect_timeout = self.config.connect_timeout;
        let near = self.near.here(|| {
            let (endpoints, options) = self.connect.clone();
            async move {
                match tokio::time::timeout(
                    connect_timeout,
                    Client::connect(endpoints, Some(options)),
                )
                .await
                {
                    Ok(made) => made.map(Arc::new).map_err(|e| e.to_string()),
                    Err(_) => Err("no answer in time".to_owned()),
                }
            }
        });
        match near {
            Some((_, client)) => Here { client, near: true },
            None => Here {
                client: self.client.clone(),
                near: false,
            },
        }
    }

    /// Tells this client's records of lock `name` whose keys (a key and
    /// its create revision) it deleted itself that they are gone: their
    /// guards count as lost at once, not at the keep-alive's next round
    /// (issue 34).
    pub(crate) fn deleted(&self, name: &str, keys: &[(&[u8], i64)]) {
        use session::Gone as _;
        for record in crate::kept::records_of(&self.records, name) {
            if keys.iter().any(|(key, created)| {
                *key == record.key.as_bytes() && *created == record.create_revision
            }) {
                record.gone();
            }
        }
    }

    /// The live session's sweep of `key` as if its last listing had shown
    /// it on the session's lease (for a test: see
    /// `LockClient::__sweep_as_listed`). Whether it deleted the key.
    pub(crate) async fn sweep_as_listed(&self, key: &str) -> bool {
        match self.sessions.live() {
            Some(session) => {
                session
                    .sweep(&self.client, self.config.response_timeout, key.as_bytes())
                    .await
            }
            None => false,
        }
    }

    /// How many holds the session's keep-alive keeps.
    pub(crate) fn renewed(&self) -> usize {
        self.sessions.holds()
    }

    /// Runs one etcd call within the response timeout. Boxed, with its
    /// timer: the client's request futures are large (a few hundred bytes
    /// to kilobytes each), and a future that awaits several would carry
    /// the largest for as long as it lives, a waiter's included.
    fn call<'a, T: 'a>(
        &self,
        call: impl Future<Output = Result<T, etcd_client::Error>> + 'a,
    ) -> Pin<Box<impl Future<Output = Result<T, LockError>> + 'a>> {
        let timeout = self.config.response_timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, call).await {
                Ok(answer) => answer.map_err(store_error),
                Err(_) => Err(timeout_error()),
            }
        })
    }

    /// [`Etcd::call`] of `request`, made with a KV client of the caller's
    /// runtime ([`Etcd::here`]) that the boxed call owns.
    fn kv<'a, T: 'a, R>(
        &self,
        request: impl FnOnce(KvClient) -> R,
    ) -> Pin<Box<impl Future<Output = Result<T, LockError>> + 'a>>
    where
        R: Future<Output = Result<T, etcd_client::Error>> + 'a,
    {
        self.call(request(self.here().client.kv_client()))
    }
}

/// A client for one call (see [`Etcd::here`]).
pub(crate) struct Here {
    /// Shared: a client of the etcd API is a few kilobytes, and a
    /// waiter's future would carry it.
    pub(crate) client: Arc<Client>,
    /// A near client: a call on it that is finished for a caller who left
    /// fails at once (see [`Here::unless_left`]).
    pub(crate) near: bool,
}

impl Here {
    /// `call`, made on this client. On a near client polled by a task that
    /// finishes it for a caller who left, its answer is still awaited, for
    /// `within` at most, then counts as lost: nothing need drive the
    /// caller's runtime ever again, but while that runtime runs (a future
    /// dropped by a `timeout` or `select!` on a multi-thread runtime), the
    /// request is on its way, and an undo sent before its answer could
    /// reach etcd first and leave the key it makes behind (issue 34).
    pub(crate) async fn unless_left<T>(
        near: bool,
        within: Duration,
        call: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, etcd_client::Error> {
        if !near || !crate::background::finishing_for_one_who_left() {
            return call.await;
        }
        tokio::time::timeout(within, call)
            .await
            .unwrap_or_else(|_| {
                Err(etcd_client::Error::IoError(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the call left its runtime's near client and had no answer in time; its \
                     answer counts as lost",
                )))
            })
    }
}

/// The endpoints, credentials and transport an `etcd://` URL names.
struct Site {
    endpoints: Vec<String>,
    user: Option<(String, String)>,
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    tls: bool,
}

impl Site {
    /// `etcd://[user:password@]host:port[,host:port...][/]` (`etcds://` for
    /// TLS, with the `tls` feature). [`Config::username`] and
    /// [`Config::password`] override the URL's.
    fn parse(config: &Config) -> Result<Site, LockError> {
        let url = config.url();
        let bad = |why: &str| {
            LockError::Config(format!(
                "invalid etcd URL {:?}: {why}",
                crate::config::redact(url)
            ))
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("the scheme is missing"))?;
        let tls = scheme == "etcds";
        if tls && !cfg!(feature = "tls") {
            return Err(bad("etcds:// needs lock-runtime's `tls` feature"));
        }
        let rest = rest.trim_end_matches('/');
        if rest.contains(['/', '?', '#']) {
            return Err(bad(
                "an etcd URL names endpoints only (no path, query or fragment)",
            ));
        }
        let (userinfo, hosts) = match rest.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, rest),
        };
        let mut user = userinfo.map(|userinfo| match userinfo.split_once(':') {
            Some((user, password)) => (user.to_owned(), password.to_owned()),
            None => (userinfo.to_owned(), String::new()),
        });
        if let (Some(name), password) = config.credentials() {
            user = Some((name.to_owned(), password.unwrap_or_default().to_owned()));
        } else if let (None, Some(password)) = config.credentials() {
            let name = user.as_ref().map(|(n, _)| n.clone()).unwrap_or_default();
            user = Some((name, password.to_owned()));
        }
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            let port = host.rsplit_once(':').map(|(_, port)| port);
            match port {
                Some(port) if port.parse::<u16>().is_ok_and(|p| p != 0) => {}
                _ => return Err(bad(&format!("{host:?} is not host:port"))),
            }
            let scheme = if tls { "https" } else { "http" };
            endpoints.push(format!("{scheme}://{host}"));
        }
        Ok(Site {
            endpoints,
            user,
            tls,
        })
    }

    /// A connect failure, naming the endpoints and where they came from.
    fn connect_error(&self, config: &Config, reason: &str) -> LockError {
        LockError::unreached(ENGINE, self.endpoints.join(","), config.origin(), reason)
    }
}

/// An etcd error as a [`LockError`], saying whether it may heal (a lost
/// connection, no leader for the moment, a request that timed out).
fn store_error(e: etcd_client::Error) -> LockError {
    use etcd_client::Error;
    let transient = match &e {
        // gRPC's DEADLINE_EXCEEDED, ABORTED and UNAVAILABLE (a leader
        // election, a member going away), by number; and any status the
        // client library made of a failure on its side, which it gives a
        // source (a member stopped mid-call comes back as UNKNOWN
        // "transport error", a broken pipe beneath it): a status the server
        // sent has none.
        Error::GRpcStatus(status) => {
            matches!(i32::from(status.code()), 4 | 10 | 14)
                || std::error::Error::source(status).is_some()
                || not_applied(status.message())
        }
        Error::TransportError(_)
        | Error::IoError(_)
        | Error::WatchError(_)
        | Error::LeaseKeepAliveError(_) => true,
        _ => false,
    };
    LockError::Store {
        engine: ENGINE,
        message: e.to_string(),
        transient,
    }
}

/// Whether etcd's message says the request was not applied and may be
/// sent again, under a status that does not say so itself: a proposal
/// raft dropped (UNKNOWN, during a leader transfer: issue 34 saw it once
/// in five `move-leader`s), or a server too busy to take it
/// (RESOURCE_EXHAUSTED, as "database space exceeded" also is, which is
/// not transient).
fn not_applied(message: &str) -> bool {
    message.contains("raft proposal dropped") || message.contains("too many requests")
}

/// No answer within the response timeout.
fn timeout_error() -> LockError {
    LockError::Store {
        engine: ENGINE,
        message: "no answer within the response timeout".into(),
        transient: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::transient;

    fn grpc(status: tonic::Status) -> LockError {
        store_error(etcd_client::Error::GRpcStatus(status))
    }

    /// A member stopped mid-call fails the call with UNKNOWN "transport
    /// error" over a broken pipe: a waiter with no deadline must try
    /// again, not give up. A status the server sent keeps its meaning.
    #[test]
    fn a_failure_on_the_clients_side_may_heal_a_status_the_server_sent_keeps_its_meaning() {
        let broken = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "stream closed because of a broken pipe",
        )));
        assert_eq!(broken.code(), tonic::Code::Unknown);
        assert!(transient(&grpc(broken)));
        assert!(transient(&grpc(tonic::Status::unavailable(
            "etcdserver: leader changed"
        ))));
        assert!(!transient(&grpc(tonic::Status::invalid_argument(
            "etcdserver: key is not provided"
        ))));
        assert!(!transient(&grpc(tonic::Status::unknown(
            "an error the server sent"
        ))));
    }

    /// A proposal dropped by raft during a leader transfer was never
    /// applied: the acquisition tries again within its wait (issue 34),
    /// as it does for a busy server; a full database is not transient.
    #[test]
    fn a_dropped_proposal_was_not_applied_and_may_be_sent_again() {
        assert!(transient(&grpc(tonic::Status::unknown(
            "raft proposal dropped"
        ))));
        assert!(transient(&grpc(tonic::Status::resource_exhausted(
            "etcdserver: too many requests"
        ))));
        assert!(!transient(&grpc(tonic::Status::resource_exhausted(
            "etcdserver: mvcc: database space exceeded"
        ))));
    }
}
