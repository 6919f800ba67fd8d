//! The stores a lock can live on (DESIGN §9), and which one a URL names.
//!
//! Every engine gives the same four things to the layers above it: take a
//! hold (waiting for a turn), keep it alive, give it back, and inspect or
//! force a lock. Redis is the crate's original engine (`client::Core` and
//! the modules under it); the others are a module each here. No engine
//! imports another, and the shared layers reach an engine only through
//! what its module exports.

#[cfg(feature = "etcd")]
pub(crate) mod etcd;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod sql;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;

use crate::config::Config;
use crate::error::LockError;

/// Which engine a configuration's URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Store {
    /// `redis://`, `rediss://`, `unix://`, and the Sentinel and Cluster
    /// configurations.
    #[cfg(feature = "redis")]
    Redis,
    /// `etcd://`, `etcds://`.
    #[cfg(feature = "etcd")]
    Etcd,
    /// `zk://`.
    #[cfg(feature = "zookeeper")]
    ZooKeeper,
    /// `postgres://`, `postgresql://`.
    #[cfg(feature = "postgres")]
    Postgres,
    /// `mysql://`, `mariadb://`.
    #[cfg(feature = "mysql")]
    MySql,
}

impl Store {
    /// The engine `config` names: by its URL's scheme. An engine that this
    /// build does not have is [`LockError::Config`] naming the feature to
    /// enable.
    pub(crate) fn of(config: &Config) -> Result<Store, LockError> {
        let scheme = config.url().split_once("://").map(|(scheme, _)| scheme);
        match scheme {
            #[cfg(feature = "etcd")]
            Some("etcd" | "etcds") => Ok(Store::Etcd),
            #[cfg(not(feature = "etcd"))]
            Some("etcd" | "etcds") => Err(LockError::Config(
                "etcd:// URLs need lock-runtime's `etcd` feature; enable it in Cargo.toml".into(),
            )),
            #[cfg(feature = "zookeeper")]
            Some("zk") => Ok(Store::ZooKeeper),
            #[cfg(not(feature = "zookeeper"))]
            Some("zk") => Err(LockError::Config(
                "zk:// URLs need lock-runtime's `zookeeper` feature; enable it in Cargo.toml"
                    .into(),
            )),
            #[cfg(feature = "postgres")]
            Some("postgres" | "postgresql") => Ok(Store::Postgres),
            #[cfg(not(feature = "postgres"))]
            Some("postgres" | "postgresql") => Err(LockError::Config(
                "postgres:// URLs need lock-runtime's `postgres` feature; enable it in Cargo.toml"
                    .into(),
            )),
            #[cfg(feature = "mysql")]
            Some("mysql" | "mariadb") => Ok(Store::MySql),
            #[cfg(not(feature = "mysql"))]
            Some("mysql" | "mariadb") => Err(LockError::Config(
                "mysql:// URLs need lock-runtime's `mysql` feature; enable it in Cargo.toml".into(),
            )),
            #[cfg(feature = "redis")]
            _ => Ok(Store::Redis),
            #[cfg(not(feature = "redis"))]
            Some("redis" | "rediss" | "unix" | "redis+unix") => Err(LockError::Config(format!(
                "{:?} ({}): redis:// URLs need lock-runtime's `redis` feature (a default \
                 feature); enable it in Cargo.toml, or give the URL of an engine this build has: \
                 {}",
                crate::config::redact(config.url()),
                config.origin(),
                built_in()
            ))),
            #[cfg(not(feature = "redis"))]
            _ => Err(LockError::Config(format!(
                "{:?} names no engine this build has: use {}",
                crate::config::redact(config.url()),
                built_in()
            ))),
        }
    }
}

/// The URL schemes of the engines this build has, in words.
#[cfg(not(feature = "redis"))]
fn built_in() -> String {
    let schemes: &[&str] = &[
        #[cfg(feature = "etcd")]
        "etcd://",
        #[cfg(feature = "zookeeper")]
        "zk://",
        #[cfg(feature = "postgres")]
        "postgres://",
        #[cfg(feature = "mysql")]
        "mysql://",
    ];
    if schemes.is_empty() {
        "a build with an engine: lock-runtime's features `redis` (default), `etcd`, \
         `zookeeper`, `postgres` or `mysql`"
            .into()
    } else {
        schemes.join(", ")
    }
}

/// The statement that makes the lock table `config`'s URL names (the SQL
/// engines' `lockctl schema`); [`LockError::Config`] for a URL of another
/// engine.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub(crate) fn schema(config: &Config) -> Result<String, LockError> {
    match Store::of(config)? {
        #[cfg(feature = "postgres")]
        Store::Postgres => postgres::ddl(config),
        #[cfg(feature = "mysql")]
        Store::MySql => mysql::ddl(config),
        // Every other engine (none in a build of SQL engines alone).
        #[allow(unreachable_patterns)]
        _ => Err(LockError::Config(
            "schema is for the SQL engines: give a postgres:// or mysql:// URL (--url or $LOCK_URL)"
                .into(),
        )),
    }
}

/// `what` cannot be done on `engine`.
#[cfg_attr(
    not(any(
        feature = "etcd",
        feature = "zookeeper",
        feature = "postgres",
        feature = "mysql"
    )),
    allow(dead_code)
)]
pub(crate) fn unsupported(engine: &'static str, what: impl Into<String>) -> LockError {
    LockError::Unsupported {
        engine,
        what: what.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_of_an_engine_not_built_in_is_a_config_error_naming_its_feature() {
        for (url, feature, built) in [
            ("redis://127.0.0.1:1", "redis", cfg!(feature = "redis")),
            ("unix:///tmp/redis.sock", "redis", cfg!(feature = "redis")),
            ("etcd://127.0.0.1:1", "etcd", cfg!(feature = "etcd")),
            ("zk://127.0.0.1:1", "zookeeper", cfg!(feature = "zookeeper")),
            (
                "postgres://u@127.0.0.1:1/db",
                "postgres",
                cfg!(feature = "postgres"),
            ),
            ("mysql://u@127.0.0.1:1/db", "mysql", cfg!(feature = "mysql")),
        ] {
            match Store::of(&Config::new(url)) {
                Ok(_) => assert!(built, "{url} without the `{feature}` feature"),
                Err(LockError::Config(text)) => {
                    assert!(!built, "{url}: {text}");
                    assert!(text.contains(&format!("`{feature}` feature")), "{text}");
                }
                Err(other) => panic!("{url}: {other:?}"),
            }
        }
    }

    #[cfg(not(feature = "redis"))]
    #[test]
    fn without_redis_an_unknown_scheme_names_the_engines_built_in() {
        let Err(LockError::Config(text)) = Store::of(&Config::new("ftp://u:secret@h/x")) else {
            panic!("an unknown scheme was taken");
        };
        assert!(text.contains("no engine this build has"), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }
}
