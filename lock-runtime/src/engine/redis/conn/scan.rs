//! `SCAN` over the whole data set: every master of a cluster, one after the
//! other; the one server elsewhere. For operators (`lockctl list`), never on
//! a lock's path.

use std::collections::BTreeSet;

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{RedisError, RedisResult, Value};

use super::{Conn, Link};

/// Keys asked for per `SCAN` call.
const COUNT: u32 = 1000;

impl Conn {
    /// Every key of type `kind` whose name matches `pattern` (glob-style, as
    /// `SCAN ... MATCH`), sorted, each once.
    pub(crate) async fn scan(&self, pattern: &str, kind: &str) -> RedisResult<Vec<String>> {
        let mut conn = self.clone();
        let mut keys = BTreeSet::new();
        if let Link::Cluster(cluster) = &mut conn.link {
            let text = super::cluster::nodes(cluster).await?;
            for (host, port) in masters(&text) {
                let mut cursor = 0u64;
                loop {
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port,
                    });
                    let answer = cluster
                        .route_command(scan_cmd(cursor, pattern, kind), route)
                        .await?;
                    cursor = page(answer, &mut keys)?;
                    if cursor == 0 {
                        break;
                    }
                }
            }
        } else {
            let mut cursor = 0u64;
            loop {
                let answer: Value = scan_cmd(cursor, pattern, kind)
                    .query_async(&mut conn)
                    .await?;
                cursor = page(answer, &mut keys)?;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(keys.into_iter().collect())
    }
}

fn scan_cmd(cursor: u64, pattern: &str, kind: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(COUNT)
        .arg("TYPE")
        .arg(kind);
    cmd
}

/// Adds one `SCAN` answer's keys to `keys`; the next cursor.
fn page(answer: Value, keys: &mut BTreeSet<String>) -> RedisResult<u64> {
    let (cursor, found): (String, Vec<String>) =
        redis::from_redis_value(answer).map_err(RedisError::from)?;
    keys.extend(found);
    cursor
        .parse()
        .map_err(|_| RedisError::from((redis::ErrorKind::Parse, "SCAN cursor is not a number")))
}

/// The addresses of the masters in a `CLUSTER NODES` text that are not
/// marked failed.
fn masters(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = fields.nth(1)?;
            let flags = fields.next()?;
            let flags: Vec<&str> = flags.split(',').collect();
            if !flags.contains(&"master") || flags.iter().any(|f| f.starts_with("fail")) {
                return None;
            }
            let address = address.split(['@', ',']).next()?;
            let (host, port) = address.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::masters;

    #[test]
    fn masters_are_read_off_cluster_nodes() {
        let text = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7001@17001,host-b master - 0 0 2 connected 5461-10922
c3 127.0.0.1:7002@17002 master,fail - 0 0 3 connected
d4 127.0.0.1:7003@17003 slave a1 0 0 1 connected
";
        assert_eq!(
            masters(text),
            [
                ("127.0.0.1".to_owned(), 7000),
                ("127.0.0.1".to_owned(), 7001)
            ]
        );
    }
}
