//! Cluster: redis' cluster connection, which routes each command by the slot
//! of its first key, follows `MOVED`/`ASK`, retries through a failover, and
//! resubscribes each channel on the node that owns its slot. Also the slot
//! arithmetic and the cluster's view of replicas.

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ProtocolVersion, PushInfo, RedisError};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::error::LockError;

/// The cluster client `config` names. Its connections send push frames
/// (pub/sub messages) to `pushes` when given.
pub(super) fn client(
    config: &Config,
    pushes: Option<mpsc::UnboundedSender<PushInfo>>,
) -> Result<ClusterClient, LockError> {
    let mut builder = ClusterClientBuilder::new(config.cluster_seeds()?)
        .use_protocol(ProtocolVersion::RESP3)
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.response_timeout)
        // Through a failover: ~100 ms apart at first, at most 1 s, about ten
        // seconds in all before a command fails.
        .retries(16)
        .min_retry_wait(100)
        .max_retry_wait(1000);
    if let Some(pushes) = pushes {
        builder = builder.push_sender(pushes);
    }
    builder
        .build()
        .map_err(|e| LockError::Config(format!("{e}")))
}

/// Whether `key` has a non-empty hash tag: text between its first `{` and
/// the next `}`.
pub(super) fn has_hash_tag(key: &str) -> bool {
    key.split_once('{')
        .and_then(|(_, rest)| rest.find('}'))
        .is_some_and(|len| len > 0)
}

/// The cluster slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag
/// (the text between the first `{` and the next `}`, when not empty), modulo
/// 16384. Scripts touching several keys must keep them in one slot.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    let mut crc: u16 = 0;
    for &byte in hashed {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// The major version of a (random) cluster node.
pub(super) async fn server_major_version(cluster: &ClusterConnection) -> Result<u32, LockError> {
    let mut cluster = cluster.clone();
    let mut info = redis::cmd("INFO");
    info.arg("server");
    let text: String = redis::from_redis_value(
        cluster
            .route_command(info, RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random))
            .await?,
    )
    .map_err(RedisError::from)?;
    Ok(text
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .and_then(|v| v.trim().split('.').next()?.parse().ok())
        .unwrap_or(0))
}

/// `CLUSTER NODES` as some node of the cluster sees it.
pub(super) async fn nodes(cluster: &mut ClusterConnection) -> Result<String, RedisError> {
    let mut nodes = redis::cmd("CLUSTER");
    nodes.arg("NODES");
    let text = cluster
        .route_command(
            nodes,
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await?;
    redis::from_redis_value(text).map_err(RedisError::from)
}

/// `(master id, first slot, last slot, replicas)` from a `CLUSTER NODES`
/// text: for each master's slot ranges, its replicas that are not marked
/// failed.
pub(super) fn replicas_per_range(text: &str) -> Vec<(String, u16, u16, usize)> {
    // <id> <addr> <flags> <master id or -> <ping> <pong> <epoch> <link> <slot>...
    let nodes: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let failed = |flags: &str| flags.split(',').any(|f| f == "fail" || f == "noaddr");
    let mut ranges = Vec::new();
    for master in nodes.iter().filter(|n| n.len() >= 8) {
        if !master[2].split(',').any(|f| f == "master") {
            continue;
        }
        let replicas = nodes
            .iter()
            .filter(|n| n.len() >= 4 && n[3] == master[0] && !failed(n[2]))
            .count();
        // Slot entries: `a-b` or `a`; migrations (`[...]`) are skipped.
        for entry in master[8..].iter().filter(|e| !e.starts_with('[')) {
            let (first, last) = entry.split_once('-').unwrap_or((entry, entry));
            if let (Ok(first), Ok(last)) = (first.parse(), last.parse()) {
                ranges.push((master[0].to_owned(), first, last, replicas));
            }
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::slot;

    #[test]
    fn replicas_are_counted_per_master_range() {
        let text = "\
m1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [5461->-m2]
r1 127.0.0.1:7003@17003 slave m1 0 0 1 connected
m2 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922 16000
r2 127.0.0.1:7004@17004 slave,fail m2 0 0 2 disconnected
m3 127.0.0.1:7002@17002 master,fail - 0 0 3 disconnected
";
        assert_eq!(
            super::replicas_per_range(text),
            vec![
                ("m1".to_owned(), 0, 5460, 1),
                ("m2".to_owned(), 5461, 10922, 0),
                ("m2".to_owned(), 16000, 16000, 0)
            ]
        );
    }

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("123456789"), 12739);
        assert_eq!(slot("{foo}:anything"), slot("foo"));
        assert_eq!(slot("redisson_lock__channel:{foo}"), slot("foo"));
        // An empty tag does not count: the whole key is hashed.
        assert_ne!(slot("{}foo"), slot("foo"));
    }

    #[test]
    fn hash_tags_are_recognised() {
        assert!(super::has_hash_tag("a{b}c"));
        assert!(super::has_hash_tag("}{a}"));
        assert!(!super::has_hash_tag("{}a"));
        assert!(!super::has_hash_tag("q{"));
        assert!(!super::has_hash_tag("a}b"));
    }
}
