//! The ZooKeeper engine's floor for the shared rows ([`crate::rows`]):
//! `zk_bench` runs them alone (rows 1-4); `lock_bench` runs them after the
//! etcd rows (rows 11-14).
//!
//! - **floor**: on one `zookeeper-client` session, an ephemeral create plus
//!   a delete (2 round trips, 2 writes). The least a ZooKeeper lock can do.
//! - row 3's round trip: a plain `setData`;
//! - row 4 counts nothing on the server: each client has one session (one
//!   connection).

use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::rows::{BenchError, Floor};
use examples::ZooKeeper;

/// The floor's parent node.
const FLOOR: &str = "/bench-floor";

/// The node row 3's round trip writes.
const ROUND_TRIP: &str = "/bench-rt";

/// The ZooKeeper floor: a raw session on the same server.
pub struct ZkFloor {
    raw: zk::Client,
}

/// Creates the persistent node `path` unless it exists.
async fn persistent(raw: &zk::Client, path: &str) -> Result<(), BenchError> {
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match raw.create(path, b"", &persistent).await {
        Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

impl Floor for ZkFloor {
    type Server = ZooKeeper;
    /// Row 4 polls with the floor's own session.
    type Probe = ();
    const LABEL: &'static str = "zookeeper";
    const NAME: &'static str = "ZooKeeper";
    const ISSUE: u32 = 25;

    async fn connect(server: &ZooKeeper) -> Result<ZkFloor, BenchError> {
        let raw = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(30))
            .connect(&server.connect_string())
            .await?;
        persistent(&raw, FLOOR).await?;
        Ok(ZkFloor { raw })
    }

    async fn pairs(&self, name: &str, n: usize) -> Result<(), BenchError> {
        let node = format!("{FLOOR}/{name}");
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        for _ in 0..n {
            self.raw.create(&node, b"", &ephemeral).await?;
            self.raw.delete(&node, None).await?;
        }
        Ok(())
    }

    async fn prepare_round_trip(&self) -> Result<(), BenchError> {
        persistent(&self.raw, ROUND_TRIP).await
    }

    async fn round_trip(&self) -> Result<Duration, BenchError> {
        let write = Instant::now();
        self.raw.set_data(ROUND_TRIP, b"x", None).await?;
        Ok(write.elapsed())
    }

    /// The children of the name's node (the URL's chroot is `/locks`).
    async fn contenders(&self, name: &str) -> Result<usize, BenchError> {
        Ok(self
            .raw
            .list_children(&format!("/locks/{name}"))
            .await?
            .len())
    }

    async fn drain_probe(&self) -> Result<(), BenchError> {
        Ok(())
    }

    /// Under /locks, each name's node has two contenders, besides the
    /// benchmark's other names.
    async fn all_queued(&self, _: &mut (), names: &[String]) -> Result<bool, BenchError> {
        let mut queued = 0;
        for name in names {
            if self.contenders(name).await? >= 2 {
                queued += 1;
            }
        }
        Ok(queued == names.len())
    }
}
