//! The checks on a configuration before a client uses it: every
//! duration within the limits, the knobs' least values, the replica sync
//! timeout against the response timeout, and what each topology needs.

use std::time::Duration;

use super::{Config, ReplicaSync, Topology, check_duration};
use crate::error::LockError;

impl Config {
    /// Checks the knobs that do not depend on the topology.
    pub(crate) fn check(&self) -> Result<(), LockError> {
        for (knob, value) in [
            ("watchdog_timeout", self.watchdog_timeout),
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
            ("fair_wait_timeout", self.fair_wait_timeout),
            ("poll_cap", self.poll_cap),
            ("replica_sync_timeout", self.replica_sync_wait()),
        ] {
            check_duration(knob, value)?;
        }
        if self.poll_cap < Duration::from_millis(1) {
            return Err(LockError::Config(format!(
                "poll_cap {:?} is too short; use at least 1ms",
                self.poll_cap
            )));
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
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::*;
    use crate::config::{MAX_DURATION, millis};

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
}
