//! Client configuration: the knobs of a client (its store's URL, its
//! timeouts, how leases behave); the checks on them (`check`); where the
//! Redis servers are (`address`); the limits every duration is held to
//! (`limits`).

use std::fmt;
use std::time::Duration;

mod address;
mod check;
mod limits;

pub(crate) use address::redact;
pub use limits::MAX_DURATION;
#[cfg(feature = "redis")]
pub(crate) use limits::millis;
pub(crate) use limits::{check_duration, check_lease};

/// How many calls one release makes at most (the first and its retries on
/// a lost connection); bounds how long a release can take.
pub(crate) const UNLOCK_TRIES: u32 = 3;

/// How to reach Redis and how locks behave. A builder: every knob has a
/// default, and `Config::new(url)` alone is a working configuration.
///
/// ```
/// use std::time::Duration;
/// use lock_runtime::Config;
///
/// let config = Config::new("redis://:secret@127.0.0.1:6380/2")
///     .watchdog_timeout(Duration::from_secs(10));
/// // Debug output never shows the password.
/// assert!(!format!("{config:?}").contains("secret"));
/// ```
#[derive(Clone)]
pub struct Config {
    url: String,
    /// Where `url` came from, for error messages: `Config::new`, `REDIS_URL`
    /// or the default.
    origin: &'static str,
    username: Option<String>,
    password: Option<String>,
    database: Option<i64>,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) fair_wait_timeout: Duration,
    pub(crate) poll_cap: Duration,
    pub(crate) topology: Topology,
    pub(crate) sharded_pubsub: Option<bool>,
    pub(crate) replica_sync: ReplicaSync,
    /// `None`: derived from the response timeout (see
    /// [`Config::replica_sync_timeout`]).
    replica_sync_timeout: Option<Duration>,
}

/// Where the servers are: the three topologies (Sentinel and Cluster with
/// the `redis` feature).
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One server, at `Config::url`.
    Standalone,
    /// The master that these sentinels know as `master`, followed across failovers.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
    /// A Redis Cluster, discovered from these seed nodes.
    Cluster { seeds: Vec<String> },
}

/// Whether an acquisition waits until a replica has it (Redis `WAIT`), so
/// that a failover right after the acquire does not silently lose the lock.
/// See [`Config::replica_sync`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReplicaSync {
    /// Wait for one replica when the lock's master has a healthy one; skip
    /// the wait when it has none. The default. A replica is healthy when the
    /// master's `INFO replication` shows it `online` with a `lag` (seconds
    /// since its last acknowledgement) of at most 2: a replica in its first
    /// sync, cut off by a partition (until `repl-timeout` detaches it) or
    /// stopped is not waited for, so its trouble does not stop locking. A
    /// wait skipped although the master has replicas attached is counted in
    /// `lock_replica_sync_skipped_total` (feature `metrics`), and logged
    /// (`warn`) once each time a master's replicas turn unhealthy. On a
    /// cluster, each shard is judged by its own master (asked for the
    /// shards whose replicas `CLUSTER NODES` lists). The answer is cached
    /// for a few seconds, and looked up again when a `WAIT` goes
    /// unacknowledged.
    #[default]
    Auto,
    /// Always wait for one replica; fail with
    /// [`LockError::NotReplicated`](crate::LockError::NotReplicated) when the
    /// master has none or none acknowledges in time (an unhealthy replica,
    /// too, makes every acquisition fail).
    Always,
    /// Never wait: an acquisition is confirmed by the master alone.
    Off,
}

/// The URL used when neither `init` nor `REDIS_URL` names one.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

impl Config {
    /// A configuration for the server at `url` (`redis://[user][:password@]host[:port][/db]`,
    /// or `rediss://` for TLS with the `tls` feature). The URL is checked when
    /// the client connects.
    pub fn new(url: impl Into<String>) -> Self {
        Config {
            url: url.into(),
            origin: "from Config",
            username: None,
            password: None,
            database: None,
            watchdog_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(5),
            fair_wait_timeout: Duration::from_millis(300_000),
            poll_cap: Duration::from_millis(100),
            topology: Topology::Standalone,
            sharded_pubsub: None,
            replica_sync: ReplicaSync::Auto,
            replica_sync_timeout: None,
        }
    }

    /// A configuration for the master that the given sentinels monitor under
    /// `master_name`: the client asks the sentinels where the master is, and
    /// asks them again whenever the master stops answering, so it follows
    /// failovers. The sentinel URLs carry the sentinels' own credentials, if
    /// any; [`username`](Self::username), [`password`](Self::password) and
    /// [`database`](Self::database) apply to the master. The master is
    /// reached with TLS when the sentinel URLs are `rediss://`.
    ///
    /// ```
    /// use lock_runtime::Config;
    ///
    /// let config = Config::sentinel(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "mymaster",
    /// )
    /// .password("master-secret");
    /// ```
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn sentinel<I, S>(sentinel_urls: I, master_name: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut config = Config::new(String::new());
        config.topology = Topology::Sentinel {
            sentinels: sentinel_urls.into_iter().map(Into::into).collect(),
            master: master_name.into(),
        };
        config
    }

    /// A configuration for a Redis Cluster: the client learns the other nodes
    /// and the slot map from any of the seed nodes, and follows resharding
    /// (`MOVED`/`ASK`) and failovers. All nodes share one set of credentials;
    /// a cluster has database 0 only.
    ///
    /// ```
    /// use lock_runtime::Config;
    ///
    /// let config = Config::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]);
    /// ```
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn cluster<I, S>(seed_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut config = Config::new(String::new());
        config.topology = Topology::Cluster {
            seeds: seed_urls.into_iter().map(Into::into).collect(),
        };
        config
    }

    /// The URL in `LOCK_URL` (any engine's scheme: `redis://`, `etcd://`,
    /// `zk://`, ...), else `REDIS_URL`, else [`DEFAULT_URL`].
    pub fn from_env() -> Self {
        if let Ok(url) = std::env::var("LOCK_URL") {
            return Config {
                origin: "from LOCK_URL",
                ..Config::new(url)
            };
        }
        match std::env::var("REDIS_URL") {
            Ok(url) => Config {
                origin: "from REDIS_URL",
                ..Config::new(url)
            },
            Err(_) => Config {
                origin: "the default; neither LOCK_URL nor REDIS_URL is set",
                ..Config::new(DEFAULT_URL)
            },
        }
    }

    /// The URL this configuration was made with (empty for
    /// [`sentinel`](Self::sentinel) and [`cluster`](Self::cluster)).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Where the URL came from (`from Config`, `from LOCK_URL`, ...).
    #[cfg_attr(not(turns), allow(dead_code))]
    pub(crate) fn origin(&self) -> &'static str {
        self.origin
    }

    /// The username and password set on the configuration, if any.
    #[cfg_attr(not(remote_turns), allow(dead_code))]
    pub(crate) fn credentials(&self) -> (Option<&str>, Option<&str>) {
        (self.username.as_deref(), self.password.as_deref())
    }

    /// The lease of locks taken without a fixed `lease` (Redisson's
    /// `lockWatchdogTimeout`). The watchdog renews them every third of it.
    /// Default 30 s. On etcd, the TTL of the client's session lease; on
    /// ZooKeeper, the session timeout asked for (the server grants one
    /// between its `minSessionTimeout` and `maxSessionTimeout`, 4 s and
    /// 40 s by default, and holds count by the one granted).
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// How long connecting (and each reconnect attempt) may take. Default 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one command may wait for its reply. Default 5 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long a fair-lock waiter may sit at the head of the queue without
    /// retrying before others evict it (Redisson's `threadWaitTime`).
    /// Default 300000 ms.
    pub fn fair_wait_timeout(mut self, timeout: Duration) -> Self {
        self.fair_wait_timeout = timeout;
        self
    }

    /// On an engine without notifications (MySQL/MariaDB), the longest
    /// pause between two looks of a waiting acquisition at a held lock: a
    /// release is noticed within about this, and each waiting name costs
    /// the server about one statement per this. Polling starts at a few
    /// milliseconds and doubles up to it, and never sleeps past the
    /// holder's lease or the caller's deadline. Default 100 ms. The other
    /// engines wake their waiters on release and ignore it.
    pub fn poll_cap(mut self, cap: Duration) -> Self {
        self.poll_cap = cap;
        self
    }

    /// Whether waiters listen with sharded pub/sub (`SSUBSCRIBE`, and unlock
    /// announces with `SPUBLISH`) instead of classic pub/sub. Sharded pub/sub
    /// keeps each unlock message on the shard that owns the lock instead of
    /// broadcasting it to every node.
    ///
    /// Default: sharded on a Redis Cluster whose servers support it (Redis 7
    /// or newer, as Redisson does by default), classic otherwise. Every
    /// client that locks the same names (Rust or Redisson) must use the same
    /// mode, or their waiters miss each other's unlock messages (and fall back
    /// to polling at the holder's lease). `true` outside a cluster, or on a
    /// cluster older than Redis 7, is a configuration error.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn sharded_pubsub(mut self, sharded: bool) -> Self {
        self.sharded_pubsub = Some(sharded);
        self
    }

    /// Whether an acquisition waits until a replica has the lock (Redis
    /// `WAIT` for one replica, up to [`replica_sync_timeout`](Self::replica_sync_timeout)).
    /// Default [`ReplicaSync::Auto`]: when the lock's master has a healthy replica.
    ///
    /// When no replica acknowledges in time, the acquisition is undone and
    /// fails with [`LockError::NotReplicated`](crate::LockError::NotReplicated).
    ///
    /// What replica sync does not cover, and can still be lost in a failover:
    /// the acknowledging replica may not be the one promoted (another replica,
    /// or a replica that lost its data on restart); replication is in memory,
    /// so a power loss of master and replica together loses it; renewals,
    /// re-entries and releases are not waited for (a promoted replica may have
    /// an older lease, which the watchdog extends at its next tick, or a lock
    /// already released, which then expires after its lease); and a reconnect
    /// between the acquire and its `WAIT` may confirm too early. Fencing tokens
    /// (`LockGuard::token`) are the defence that does not depend on Redis.
    ///
    /// Cost: `WAIT` holds up the client's connection to that master until a
    /// replica answers (normally well under a millisecond).
    pub fn replica_sync(mut self, mode: ReplicaSync) -> Self {
        self.replica_sync = mode;
        self
    }

    /// How long an acquisition waits for a replica to acknowledge it (see
    /// [`replica_sync`](Self::replica_sync)). Set, it must be longer than
    /// zero and shorter than the [`response_timeout`](Self::response_timeout)
    /// (the `WAIT` is one command and must answer within it).
    ///
    /// Default: a fifth of the response timeout, at most 1 s (1 s with the
    /// default 5 s response timeout, 200 ms with a 1 s one), so changing the
    /// response timeout alone always gives a valid configuration.
    pub fn replica_sync_timeout(mut self, timeout: Duration) -> Self {
        self.replica_sync_timeout = Some(timeout);
        self
    }

    /// The replica sync timeout in effect: the one set, or the default
    /// derived from the response timeout.
    pub(crate) fn replica_sync_wait(&self) -> Duration {
        self.replica_sync_timeout
            .unwrap_or_else(|| (self.response_timeout / 5).min(Duration::from_secs(1)))
    }

    /// ACL user name; overrides the one in the URL.
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// Password; overrides the one in the URL.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Database number; overrides the one in the URL.
    pub fn database(mut self, db: i64) -> Self {
        self.database = Some(db);
        self
    }

    /// How long an unlock's answer is kept for its retries (the unlock
    /// latch): a release makes at most `UNLOCK_TRIES` calls, each bounded by
    /// the response timeout, so the latch outlives them all with a second to
    /// spare, and no longer: every release leaves one latch key behind for
    /// this long.
    #[cfg(feature = "redis")]
    pub(crate) fn unlock_latch_ttl(&self) -> Duration {
        // Saturating: `check` bounds the timeout, this never panics regardless.
        self.response_timeout
            .saturating_mul(UNLOCK_TRIES)
            .saturating_add(Duration::from_secs(1))
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("Config");
        match &self.topology {
            Topology::Standalone if self.url.starts_with("memory://") => f
                .field("url", &self.redacted_url())
                .field("shared", &"in this process only (the memory engine)"),
            Topology::Standalone => f.field("url", &self.redacted_url()),
            Topology::Sentinel { sentinels, master } => f
                .field(
                    "sentinels",
                    &sentinels.iter().map(|u| redact(u)).collect::<Vec<_>>(),
                )
                .field("master", master),
            Topology::Cluster { seeds } => f.field(
                "cluster",
                &seeds.iter().map(|u| redact(u)).collect::<Vec<_>>(),
            ),
        };
        f.field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("database", &self.database)
            .field("watchdog_timeout", &self.watchdog_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("fair_wait_timeout", &self.fair_wait_timeout)
            .field("poll_cap", &self.poll_cap)
            .field("sharded_pubsub", &self.sharded_pubsub)
            .field("replica_sync", &self.replica_sync)
            .field("replica_sync_timeout", &self.replica_sync_wait())
            .finish()
    }
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::address::*;
    use super::*;
    use crate::error::LockError;
    use redis::ProtocolVersion;

    #[test]
    fn server_identity_tells_topologies_apart() {
        let one = Config::new("redis://127.0.0.1:7001/2").server_identity();
        assert_eq!(one, "127.0.0.1:7001/2");
        let a = Config::cluster(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002"]);
        let b = Config::cluster(["redis://127.0.0.1:7002", "redis://127.0.0.1:7001"]);
        let c = Config::cluster(["redis://127.0.0.1:8001"]);
        assert_eq!(
            a.server_identity(),
            b.server_identity(),
            "seed order does not matter"
        );
        assert_ne!(
            a.server_identity(),
            c.server_identity(),
            "two clusters differ"
        );
        let s1 = Config::sentinel(["redis://127.0.0.1:26379"], "one");
        let s2 = Config::sentinel(["redis://127.0.0.1:26379"], "two");
        assert_ne!(
            s1.server_identity(),
            s2.server_identity(),
            "two masters differ"
        );
        assert_ne!(s1.server_identity(), "");
    }

    #[test]
    fn debug_hides_passwords() {
        let c = Config::new("redis://alice:s3cret@localhost:6380/1").password("other");
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(!shown.contains("other"), "{shown}");
        assert!(shown.contains("alice"), "{shown}");
    }

    #[test]
    fn bad_url_is_a_config_error() {
        let err = Config::new("not a url").connection_info().unwrap_err();
        assert!(matches!(err, LockError::Config(_)), "{err:?}");
    }

    #[test]
    fn url_problems_are_named() {
        for (url, says) in [
            (
                "localhost:6379",
                "scheme is missing; write redis://localhost:6379",
            ),
            ("", "not a URL"),
            ("https://h:1", "https:// is not Redis's"),
            ("redis://h:0", "\"0\" is not a port"),
            ("redis://u:pw@h:70000/1", "\"70000\" is not a port"),
            ("redis://[::1]:x", "\"x\" is not a port"),
        ] {
            assert!(
                url_problem(url).is_some_and(|p| p.contains(says)),
                "{url}: {:?}",
                url_problem(url)
            );
        }
        for fine in [
            "redis://h",
            "redis://h:6379/2",
            "rediss://u:p@h:1",
            "redis://[::1]:6379",
            "unix:///tmp/r.sock",
        ] {
            assert_eq!(url_problem(fine), None, "{fine}");
        }
    }

    #[test]
    fn connect_errors_name_the_server_and_where_its_address_came_from() {
        let refused = || {
            LockError::Redis(redis::RedisError::from(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            )))
        };
        let default = Config {
            origin: "the default; REDIS_URL is not set",
            ..Config::new(DEFAULT_URL)
        };
        assert!(
            default.connect_error(refused()).to_string().starts_with(
                "cannot connect to redis at 127.0.0.1:6379 (the default; REDIS_URL is not set): connection refused"
            )
        );
        let cluster = Config::cluster(["redis://:pw@10.0.0.1:7000", "redis://10.0.0.2:7000"]);
        let text = cluster.connect_error(refused()).to_string();
        assert!(
            text.contains("cluster seeds 10.0.0.1:7000,10.0.0.2:7000 (from Config)"),
            "{text}"
        );
        assert!(!text.contains("pw"), "{text}");
        // Not a connection failure: passed through.
        let other = Config::new(DEFAULT_URL).connect_error(LockError::Config("x".into()));
        assert!(matches!(other, LockError::Config(_)));
    }

    #[test]
    fn sentinel_and_cluster_configs_are_checked_and_redacted() {
        let sentinel = Config::sentinel(["redis://:s3cret@10.0.0.1:26379"], "m").password("p4ss");
        let shown = format!("{sentinel:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("p4ss"),
            "{shown}"
        );
        assert!(
            shown.contains("10.0.0.1:26379") && shown.contains("\"m\""),
            "{shown}"
        );
        let (sentinels, master, settings) = sentinel.sentinel_setup().unwrap();
        assert_eq!((sentinels.len(), master.as_str()), (1, "m"));
        assert_eq!(
            settings.password(),
            Some("p4ss"),
            "the password is the master's"
        );
        assert_eq!(settings.protocol(), ProtocolVersion::RESP3);

        let cluster = Config::cluster(["redis://a:1", "redis://b:2"]).password("pw");
        assert!(cluster.check().is_ok());
        let seeds = cluster.cluster_seeds().unwrap();
        assert!(
            seeds
                .iter()
                .all(|s| s.redis_settings().password() == Some("pw"))
        );
        assert!(cluster.connection_info().is_err(), "no single URL");

        let bad = [
            Config::cluster(Vec::<String>::new()),
            Config::cluster(["redis://a:1"]).database(2),
            Config::sentinel(["redis://a:1"], ""),
            Config::new("redis://a:1").sharded_pubsub(true),
            Config::new("redis://a:1").replica_sync_timeout(Duration::from_secs(10)),
        ];
        for config in bad {
            assert!(
                matches!(config.check(), Err(LockError::Config(_))),
                "{config:?}"
            );
        }
        assert!(matches!(
            Config::cluster(["redis://a:1/3"]).cluster_seeds(),
            Err(LockError::Config(_))
        ));
        assert!(
            Config::new("redis://a:1")
                .replica_sync(ReplicaSync::Off)
                .replica_sync_timeout(Duration::ZERO)
                .check()
                .is_ok()
        );
    }

    #[test]
    fn url_parts_are_read_and_overridden() {
        let info = Config::new("redis://bob:pw@localhost:6390/3")
            .database(5)
            .connection_info()
            .unwrap();
        assert_eq!(info.redis_settings().db(), 5);
        assert_eq!(info.redis_settings().username(), Some("bob"));
        assert_eq!(info.redis_settings().password(), Some("pw"));
        assert_eq!(info.redis_settings().protocol(), ProtocolVersion::RESP3);
    }
}
