//! Where the Redis servers are: URLs parsed and checked, the topology's
//! connection parameters, the identity of a data set, and connect errors
//! that name the servers in words (never a password).

#[cfg(feature = "redis")]
use std::time::Duration;

#[cfg(feature = "redis")]
use redis::{IntoConnectionInfo, ProtocolVersion};

use super::Config;
#[cfg(feature = "redis")]
use super::Topology;
#[cfg(feature = "redis")]
use crate::error::LockError;

#[cfg(feature = "redis")]
impl Config {
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
            engine: "redis",
            server,
            origin,
            reason: connect_reason(&e, self.connect_timeout),
            transient: crate::error::redis_transient(&e)
                && !matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM")),
        }
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
    pub(super) fn data_node_info(&self, url: &str) -> Result<redis::ConnectionInfo, LockError> {
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
}

impl Config {
    /// Which data set this configuration reaches, as a stable text: its URL
    /// (a build without Redis has no other topology).
    #[cfg(not(feature = "redis"))]
    pub(crate) fn server_identity(&self) -> String {
        self.url.clone()
    }

    /// The URL with any password replaced by `***`.
    pub(super) fn redacted_url(&self) -> String {
        redact(&self.url)
    }
}

#[cfg(feature = "redis")]
/// `host:port` of each URL (the URL, redacted, when it does not parse).
pub(super) fn addresses(urls: &[String]) -> String {
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
#[cfg(feature = "redis")]
pub(super) fn connect_reason(e: &redis::RedisError, timeout: Duration) -> String {
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
#[cfg(feature = "redis")]
pub(super) fn url_problem(url: &str) -> Option<String> {
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
#[cfg(feature = "redis")]
pub(super) fn parse_url(url: &str) -> Result<redis::ConnectionInfo, LockError> {
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
