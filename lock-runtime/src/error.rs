//! The one error type of the crate.

use std::time::Duration;

/// Why a lock operation failed.
///
/// Every fault is reported through this type: bad input and broken
/// connections never panic.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock stayed busy for the whole `wait` (one attempt when `wait`
    /// is zero).
    #[error("{}", timeout_text(.name, .waited))]
    Timeout {
        /// The lock's name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The lease ran out or the lock was taken away (server restart, eviction,
    /// a failover that lost the key, a fixed lease that expired) before release.
    #[error("the lease on lock `{name}` was lost before it was released")]
    Lost {
        /// The lock's name.
        name: String,
    },
    /// The operation needs a hold the caller does not have (for example a
    /// reader asking to upgrade to a write lock).
    #[error("lock `{name}`: {reason}")]
    NotHeld {
        /// The lock's name.
        name: String,
        /// What was asked and why it cannot be done.
        reason: String,
    },
    /// Redis answered with an error, or could not be reached.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),
    /// The client could not connect to its store, on any engine: which
    /// servers, where their address came from, and why. For example:
    /// `cannot connect to redis at 127.0.0.1:6380 (from REDIS_URL):
    /// connection refused (is redis-server running there, on that port?)`.
    /// Never shows a password.
    #[error("cannot connect to {engine} at {server} ({origin}): {reason}")]
    Connect {
        /// The engine: `"redis"`, `"etcd"`, `"zookeeper"`, `"postgres"`,
        /// `"mysql"` (as [`LockClient::engine_name`](crate::LockClient::engine_name)
        /// gives it).
        engine: &'static str,
        /// `host:port`, or the sentinels or cluster seeds, or the endpoints.
        server: String,
        /// `from Config`, `from LOCK_URL`, `from REDIS_URL`, or `the
        /// default; neither LOCK_URL nor REDIS_URL is set`.
        origin: &'static str,
        /// Why, in words: refused, no answer in time, not a Redis server,
        /// authentication failed, ...
        reason: String,
        /// Whether it may heal by itself (nothing listening yet, no answer
        /// in time), as opposed to a refused login or a server of another
        /// kind: see [`LockError::is_transient`].
        transient: bool,
    },
    /// The configuration cannot be used (bad URL, missing feature, ...).
    #[error("bad configuration: {0}")]
    Config(String),
    /// The lock name cannot be used as a Redis key.
    #[error("bad lock name {name:?}: {reason}")]
    BadName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The key at the lock's name holds a value that is not a lock.
    #[error("key `{name}` holds a value of another type, not a lock")]
    WrongType {
        /// The lock's name.
        name: String,
    },
    /// A quorum lock did not reach a majority of its nodes.
    #[error(
        "quorum lock `{name}` not acquired ({acquired} nodes granted, {needed} needed): {failures}"
    )]
    NoQuorum {
        /// The lock's name.
        name: String,
        /// Nodes that granted the lock.
        acquired: usize,
        /// Nodes needed for a majority.
        needed: usize,
        /// What each failing node said, e.g. `node 2: refused; node 4: timed out`.
        failures: String,
    },
    /// The lock was taken, but no replica acknowledged it within
    /// `replica_sync_timeout` (see [`Config::replica_sync`](crate::Config::replica_sync)),
    /// so a failover could lose it. The hold was given back.
    #[error("lock `{name}` was not acknowledged by a replica within {waited:?}; it was given back")]
    NotReplicated {
        /// The lock's name.
        name: String,
        /// How long the acquisition waited for a replica.
        waited: Duration,
    },
    /// The client's background runtime is gone (the process is shutting down).
    #[error("the lock client has shut down")]
    Shutdown,
    /// The client's engine cannot do what was asked (a quorum lock on etcd,
    /// say: etcd is already a quorum). Never approximated silently.
    #[error("the {engine} engine does not support {what}")]
    Unsupported {
        /// The engine: `"redis"`, `"etcd"`, `"zookeeper"`.
        engine: &'static str,
        /// What was asked for.
        what: String,
    },
    /// A store other than Redis (etcd, ZooKeeper) answered with an error, or
    /// could not be reached.
    #[error("{engine} error: {message}")]
    Store {
        /// The engine: `"etcd"`, `"zookeeper"`.
        engine: &'static str,
        /// The store's or the transport's error, in words.
        message: String,
        /// Whether the fault may heal by itself (no answer in time, a lost
        /// connection, a leader election): a waiter retries it within its
        /// wait.
        transient: bool,
    },
}

/// `Timeout`'s message: a zero wait was one attempt.
fn timeout_text(name: &str, waited: &Duration) -> String {
    if waited.is_zero() {
        format!("lock `{name}` is busy (one attempt)")
    } else {
        format!("lock `{name}` was still held by another holder after waiting {waited:?}")
    }
}

impl LockError {
    /// Maps a Redis error met while working on lock `name`, recognising the
    /// cases that have their own kind.
    #[cfg(feature = "redis")]
    pub(crate) fn from_redis(name: &str, err: redis::RedisError) -> Self {
        let wrong_type = err.code() == Some("WRONGTYPE")
            || err.to_string().contains("WRONGTYPE")
            || err.to_string().contains("wrong kind of value");
        if wrong_type {
            LockError::WrongType {
                name: name.to_owned(),
            }
        } else {
            LockError::Redis(err)
        }
    }

    /// True for the kinds that say "someone else has it", as opposed to a fault.
    pub fn is_timeout(&self) -> bool {
        matches!(self, LockError::Timeout { .. })
    }

    /// The store of `engine` was not reached at `server` (an address
    /// `origin` gave) for `reason`: a fault that may heal by itself.
    #[cfg_attr(not(remote_turns), allow(dead_code))]
    pub(crate) fn unreached(
        engine: &'static str,
        server: String,
        origin: &'static str,
        reason: impl Into<String>,
    ) -> LockError {
        LockError::Connect {
            engine,
            server,
            origin,
            reason: reason.into(),
            transient: true,
        }
    }

    /// True for a fault that may heal by itself, so that the same call is
    /// worth making again later: a store that could not be reached or did
    /// not answer in time, a lost connection, a server loading its data or
    /// electing a leader, a replica that did not acknowledge in time. A
    /// waiting acquisition already retries these within its `wait`. False
    /// for a busy lock ([`is_timeout`](Self::is_timeout)), a lost hold, bad
    /// input or configuration, a refused login, a missing feature or an
    /// unsupported kind: trying again changes nothing.
    pub fn is_transient(&self) -> bool {
        match self {
            LockError::Store { transient, .. } | LockError::Connect { transient, .. } => *transient,
            #[cfg(feature = "redis")]
            LockError::Redis(e) => redis_transient(e),
            LockError::NotReplicated { .. } => true,
            LockError::Timeout { .. }
            | LockError::Lost { .. }
            | LockError::NotHeld { .. }
            | LockError::Config(_)
            | LockError::BadName { .. }
            | LockError::WrongType { .. }
            | LockError::NoQuorum { .. }
            | LockError::Shutdown
            | LockError::Unsupported { .. } => false,
        }
    }
}

/// Whether a Redis call failed because its connection is gone or did not
/// answer (not a script or server error): the call may be retried on
/// another.
#[cfg(feature = "redis")]
pub(crate) fn redis_connection_lost(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() || e.is_timeout()
}

/// Whether a Redis error may heal by itself while a waiter waits, so that
/// the attempt is worth making again: a lost or timed-out connection (not a
/// refused login), a server still loading its data, a cluster or a
/// replica's master not ready, a slot being moved. Errors that will not
/// heal (authentication, permissions, wrong types, bad names, scripts) are
/// not.
#[cfg(feature = "redis")]
pub(crate) fn redis_transient(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    match e.kind() {
        ErrorKind::AuthenticationFailed => false,
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown,
        ) => true,
        _ => redis_connection_lost(e),
    }
}

/// Whether `e` is a store's fault that may heal by itself (tried again
/// within a wait).
#[cfg(turns)]
pub(crate) fn transient(e: &LockError) -> bool {
    e.is_transient()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_that_may_heal_is_transient_and_a_busy_lock_or_bad_input_is_not() {
        let connect = |transient| LockError::Connect {
            engine: "etcd",
            server: "127.0.0.1:1".into(),
            origin: "from Config",
            reason: "connection refused".into(),
            transient,
        };
        assert!(connect(true).is_transient());
        assert!(!connect(false).is_transient());
        assert_eq!(
            connect(true).to_string(),
            "cannot connect to etcd at 127.0.0.1:1 (from Config): connection refused"
        );
        let store = |transient| LockError::Store {
            engine: "mysql",
            message: "gone away".into(),
            transient,
        };
        assert!(store(true).is_transient());
        assert!(!store(false).is_transient());
        let busy = LockError::Timeout {
            name: "a".into(),
            waited: Duration::ZERO,
        };
        assert!(busy.is_timeout() && !busy.is_transient());
        assert!(!LockError::Config("bad".into()).is_transient());
        assert!(!LockError::Lost { name: "a".into() }.is_transient());
        assert!(
            LockError::NotReplicated {
                name: "a".into(),
                waited: Duration::ZERO
            }
            .is_transient()
        );
    }
}
