//! Client configuration: where Redis is and how leases behave.

use std::fmt;
use std::time::Duration;

use redis::{IntoConnectionInfo, ProtocolVersion};

use crate::LockError;

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
    pub(crate) topology: Topology,
    pub(crate) sharded_pubsub: Option<bool>,
    pub(crate) replica_sync: ReplicaSync,
    /// `None`: derived from the response timeout (see
    /// [`Config::replica_sync_timeout`]).
    replica_sync_timeout: Option<Duration>,
}

/// Where the servers are: the three topologies.
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
    /// Always wait for one replica; fail with [`LockError::NotReplicated`]
    /// when the master has none or none acknowledges in time (an unhealthy
    /// replica, too, makes every acquisition fail).
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
    /// ...), else `REDIS_URL`, else [`DEFAULT_URL`].
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
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn origin(&self) -> &'static str {
        self.origin
    }

    /// The username and password set on the configuration, if any.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn credentials(&self) -> (Option<&str>, Option<&str>) {
        (self.username.as_deref(), self.password.as_deref())
    }

    /// A failure to reach the servers, as [`LockError::Connect`]: which
    /// servers (never a password), where their address came from, and why,
    /// in words. Errors of other kinds pass through.
    pub(crate) fn connect_error(&self, err: LockError) -> LockError {
        let LockError::Redis(e) = err else {
            return err;
        };
        let (server, origin) = match &self.topology {
            Topology::Standalone => {
                let server = parse_url(&self.url)
                    .map(|info| info.addr().to_string())
                    .unwrap_or_else(|_| redact(&self.url));
                (server, self.origin)
            }
            Topology::Sentinel { sentinels, master } => (
                format!("master {master:?} of sentinels {}", addresses(sentinels)),
                "from Config",
            ),
            Topology::Cluster { seeds } => {
                (format!("cluster seeds {}", addresses(seeds)), "from Config")
            }
        };
        LockError::Connect {
            server,
            origin,
            reason: connect_reason(&e, self.connect_timeout),
        }
    }

    /// The lease of locks taken without a fixed `lease` (Redisson's
    /// `lockWatchdogTimeout`). The watchdog renews them every third of it.
    /// Default 30 s.
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
    pub fn sharded_pubsub(mut self, sharded: bool) -> Self {
        self.sharded_pubsub = Some(sharded);
        self
    }

    /// Whether an acquisition waits until a replica has the lock (Redis
    /// `WAIT` for one replica, up to [`replica_sync_timeout`](Self::replica_sync_timeout)).
    /// Default [`ReplicaSync::Auto`]: when the lock's master has a healthy replica.
    ///
    /// When no replica acknowledges in time, the acquisition is undone and
    /// fails with [`LockError::NotReplicated`].
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

    /// The validated connection parameters, speaking RESP3 (pub/sub messages
    /// arrive as push frames on the one multiplexed connection).
    pub(crate) fn connection_info(&self) -> Result<redis::ConnectionInfo, LockError> {
        self.check()?;
        if self.topology != Topology::Standalone {
            return Err(LockError::Config(
                "a Sentinel or Cluster configuration has no single server URL".into(),
            ));
        }
        self.data_node_info(&self.url)
    }

    /// How long an unlock's answer is kept for its retries (the unlock
    /// latch): a release makes at most `UNLOCK_TRIES` calls, each bounded by
    /// the response timeout, so the latch outlives them all with a second to
    /// spare, and no longer: every release leaves one latch key behind for
    /// this long.
    pub(crate) fn unlock_latch_ttl(&self) -> Duration {
        // Saturating: `check` bounds the timeout, this never panics regardless.
        self.response_timeout
            .saturating_mul(UNLOCK_TRIES)
            .saturating_add(Duration::from_secs(1))
    }

    /// Which data set this configuration reaches, as a stable text: the
    /// first sort key of multi locks, and how they recognise one lock named
    /// twice. Standalone: `host:port/db`; Sentinel: the master's name, its
    /// sentinels and the db; Cluster: the seed nodes. Two configurations that
    /// spell the same servers differently (`localhost` and `127.0.0.1`) get
    /// different identities.
    pub(crate) fn server_identity(&self) -> String {
        let sorted = |urls: &[String]| {
            let mut urls = urls.to_vec();
            urls.sort();
            urls.join(",")
        };
        match &self.topology {
            Topology::Standalone => match self.connection_info() {
                Ok(info) => format!("{}/{}", info.addr(), info.redis_settings().db()),
                // Cannot happen for a connected client; the URL keeps the order stable.
                Err(_) => self.url.clone(),
            },
            Topology::Sentinel { sentinels, master } => format!(
                "sentinel:{master}@{}/{}",
                sorted(sentinels),
                self.database.unwrap_or(0)
            ),
            Topology::Cluster { seeds } => format!("cluster:{}", sorted(seeds)),
        }
    }

    /// Checks the knobs that do not depend on the topology.
    pub(crate) fn check(&self) -> Result<(), LockError> {
        for (knob, value) in [
            ("watchdog_timeout", self.watchdog_timeout),
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
            ("fair_wait_timeout", self.fair_wait_timeout),
            ("replica_sync_timeout", self.replica_sync_wait()),
        ] {
            check_duration(knob, value)?;
        }
        if self.watchdog_timeout < Duration::from_millis(30) {
            return Err(LockError::Config(format!(
                "watchdog_timeout {:?} is too short; use at least 30ms",
                self.watchdog_timeout
            )));
        }
        if let Some(timeout) = self.replica_sync_timeout
            && self.replica_sync != ReplicaSync::Off
            && (timeout.is_zero() || timeout >= self.response_timeout)
        {
            return Err(LockError::Config(format!(
                "replica_sync_timeout {timeout:?} must be longer than zero and shorter than \
                 response_timeout {:?} (or leave it out: the default is a fifth of the response \
                 timeout, at most 1s; or use ReplicaSync::Off)",
                self.response_timeout
            )));
        }
        match &self.topology {
            Topology::Standalone => {}
            Topology::Sentinel { sentinels, master } => {
                if sentinels.is_empty() {
                    return Err(LockError::Config(
                        "Config::sentinel needs at least one sentinel URL".into(),
                    ));
                }
                if master.is_empty() {
                    return Err(LockError::Config(
                        "Config::sentinel needs the master's name".into(),
                    ));
                }
            }
            Topology::Cluster { seeds } => {
                if seeds.is_empty() {
                    return Err(LockError::Config(
                        "Config::cluster needs at least one seed URL".into(),
                    ));
                }
                if self.database.is_some_and(|db| db != 0) {
                    return Err(LockError::Config(
                        "a Redis Cluster has database 0 only".into(),
                    ));
                }
            }
        }
        if self.sharded_pubsub == Some(true) && !matches!(self.topology, Topology::Cluster { .. }) {
            return Err(LockError::Config(
                "sharded pub/sub is for Redis Cluster; standalone and Sentinel use classic pub/sub"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The seed nodes of a cluster, validated, with the credential overrides.
    pub(crate) fn cluster_seeds(&self) -> Result<Vec<redis::ConnectionInfo>, LockError> {
        let Topology::Cluster { seeds } = &self.topology else {
            return Err(LockError::Config("not a cluster configuration".into()));
        };
        let infos = seeds
            .iter()
            .map(|url| self.data_node_info(url))
            .collect::<Result<Vec<_>, _>>()?;
        if infos.iter().any(|info| info.redis_settings().db() != 0) {
            return Err(LockError::Config(
                "a Redis Cluster has database 0 only".into(),
            ));
        }
        Ok(infos)
    }

    /// The sentinels' addresses (with their own credentials, if the URLs
    /// carry any) and the settings for the master they name.
    pub(crate) fn sentinel_setup(
        &self,
    ) -> Result<
        (
            Vec<redis::ConnectionInfo>,
            String,
            redis::RedisConnectionInfo,
        ),
        LockError,
    > {
        let Topology::Sentinel { sentinels, master } = &self.topology else {
            return Err(LockError::Config("not a sentinel configuration".into()));
        };
        let sentinels = sentinels
            .iter()
            .map(|url| parse_url(url))
            .collect::<Result<Vec<_>, _>>()?;
        let mut settings = redis::RedisConnectionInfo::default();
        if let Some(user) = &self.username {
            settings = settings.set_username(user);
        }
        if let Some(password) = &self.password {
            settings = settings.set_password(password);
        }
        if let Some(db) = self.database {
            settings = settings.set_db(db);
        }
        Ok((
            sentinels,
            master.clone(),
            settings.set_protocol(ProtocolVersion::RESP3),
        ))
    }

    /// One data node's parameters: `url` with the overrides, speaking RESP3.
    fn data_node_info(&self, url: &str) -> Result<redis::ConnectionInfo, LockError> {
        let info = parse_url(url)?;
        let mut redis = info.redis_settings().clone();
        if let Some(user) = &self.username {
            redis = redis.set_username(user);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password);
        }
        if let Some(db) = self.database {
            redis = redis.set_db(db);
        }
        redis = redis.set_protocol(ProtocolVersion::RESP3);
        Ok(info.set_redis_settings(redis))
    }

    /// The URL with any password replaced by `***`.
    fn redacted_url(&self) -> String {
        redact(&self.url)
    }
}

/// `host:port` of each URL (the URL, redacted, when it does not parse).
fn addresses(urls: &[String]) -> String {
    urls.iter()
        .map(|url| {
            parse_url(url)
                .map(|info| info.addr().to_string())
                .unwrap_or_else(|_| redact(url))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Why a connection failed, in words.
fn connect_reason(e: &redis::RedisError, timeout: Duration) -> String {
    use redis::ErrorKind;
    if e.is_connection_refusal() && e.kind() == ErrorKind::Io {
        return "connection refused (is redis-server running there, on that port?)".into();
    }
    if e.is_timeout() || e.to_string().contains("timed out") {
        return format!("no answer within the connect timeout ({timeout:?})");
    }
    if matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM")) {
        return format!("authentication failed: {e}");
    }
    match e.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => {
            "the server did not answer as Redis does (is that port a Redis server's?)".into()
        }
        ErrorKind::AuthenticationFailed => format!("authentication failed: {e}"),
        _ => e.to_string(),
    }
}

/// What is wrong with `url`, in words, for the cases redis' parser words
/// poorly: no scheme, a scheme that is not Redis's, a port that is no port.
fn url_problem(url: &str) -> Option<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Some(if url.contains(char::is_whitespace) || url.is_empty() {
            "it is not a URL; write redis://host:port".to_owned()
        } else {
            format!("the scheme is missing; write redis://{}", redact(url))
        });
    };
    if !matches!(scheme, "redis" | "rediss" | "redis+unix" | "unix") {
        return Some(format!(
            "the scheme {scheme}:// is not Redis's; use redis:// (or rediss:// for TLS)"
        ));
    }
    if scheme.ends_with("unix") {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    // `[::1]:6379`: the port follows the bracket.
    let port = match host_port.rsplit_once(']') {
        Some((_, after)) => after.strip_prefix(':'),
        None => host_port.rsplit_once(':').map(|(_, port)| port),
    };
    match port {
        Some(port) if port.parse::<u16>().map_or(true, |p| p == 0) => Some(format!(
            "the port {port:?} is not a port number (1 to 65535)"
        )),
        _ => None,
    }
}

/// A URL parsed and checked for what this build supports.
fn parse_url(url: &str) -> Result<redis::ConnectionInfo, LockError> {
    if let Some(problem) = url_problem(url) {
        return Err(LockError::Config(format!(
            "invalid redis URL {:?}: {problem}",
            redact(url)
        )));
    }
    let info = url
        .into_connection_info()
        .map_err(|e| LockError::Config(format!("invalid redis URL {:?}: {e}", redact(url))))?;
    if matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) && !cfg!(feature = "tls") {
        return Err(LockError::Config(
            "rediss:// needs the `tls` feature of lock-runtime".into(),
        ));
    }
    Ok(info)
}

/// `url` with any password replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            if userinfo.contains(':') {
                format!("{}{}:***{}", &url[..scheme + 3], user, &url[at..])
            } else {
                url.to_owned()
            }
        }
        _ => url.to_owned(),
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("Config");
        match &self.topology {
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
            .field("sharded_pubsub", &self.sharded_pubsub)
            .field("replica_sync", &self.replica_sync)
            .field("replica_sync_timeout", &self.replica_sync_wait())
            .finish()
    }
}

/// The longest duration accepted for a lease, a wait deadline's arithmetic
/// or any [`Config`] timeout: 100 years. Redis keeps expiries in
/// milliseconds and scripts compute with Lua numbers (exact to 2^53), and
/// `Instant` arithmetic must not overflow; 100 years is far inside all three.
/// Longer values are refused with [`LockError::Config`], never a panic.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Refuses a duration longer than [`MAX_DURATION`].
pub(crate) fn check_duration(what: &str, value: Duration) -> Result<(), LockError> {
    if value > MAX_DURATION {
        return Err(LockError::Config(format!(
            "{what} {value:?} is longer than the longest supported duration (100 years)"
        )));
    }
    Ok(())
}

/// A duration in whole milliseconds, for Redis (at least 1; callers checked
/// it against [`MAX_DURATION`], so it fits).
pub(crate) fn millis(value: Duration) -> u64 {
    u64::try_from(value.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Checks a lease asked for: longer than zero, at most [`crate::MAX_DURATION`].
pub(crate) fn check_lease(lease: Option<Duration>) -> Result<(), LockError> {
    match lease {
        Some(lease) if lease.is_zero() => {
            Err(LockError::Config("a lease must be longer than zero".into()))
        }
        Some(lease) => check_duration("lease", lease),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_past_the_limit_are_config_errors_not_panics() {
        let base = || Config::new("redis://a:1").replica_sync(ReplicaSync::Off);
        let tunes: [fn(Config) -> Config; 5] = [
            |c| c.watchdog_timeout(Duration::MAX),
            |c| c.connect_timeout(Duration::MAX),
            |c| c.response_timeout(Duration::MAX),
            |c| c.fair_wait_timeout(Duration::MAX),
            |c| c.replica_sync_timeout(Duration::MAX),
        ];
        for tune in tunes {
            let config = tune(base());
            assert!(
                matches!(config.check(), Err(LockError::Config(_))),
                "{config:?}"
            );
            // Derived values saturate instead of overflowing.
            assert!(config.unlock_latch_ttl() >= Duration::from_secs(1));
        }
        assert!(base().response_timeout(MAX_DURATION).check().is_ok());
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(MAX_DURATION), MAX_DURATION.as_millis() as u64);
    }

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
    fn replica_sync_timeout_follows_the_response_timeout_unless_set() {
        // Changing the response timeout alone is always a valid configuration.
        for ms in [1, 10, 300, 1000, 4000, 5000, 60_000] {
            let config = Config::new("redis://a:1").response_timeout(Duration::from_millis(ms));
            assert!(config.check().is_ok(), "response_timeout {ms}ms");
            assert!(config.replica_sync_wait() < config.response_timeout);
        }
        let config = Config::new("redis://a:1");
        assert_eq!(config.replica_sync_wait(), Duration::from_secs(1));
        let short = config.clone().response_timeout(Duration::from_secs(1));
        assert_eq!(short.replica_sync_wait(), Duration::from_millis(200));
        // Set, it is kept, and still checked against the response timeout.
        let set = config.replica_sync_timeout(Duration::from_millis(700));
        assert_eq!(set.replica_sync_wait(), Duration::from_millis(700));
        assert!(set.clone().check().is_ok());
        assert!(matches!(
            set.response_timeout(Duration::from_millis(500)).check(),
            Err(LockError::Config(_))
        ));
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
