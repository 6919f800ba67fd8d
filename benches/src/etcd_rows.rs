//! The etcd engine's floor for the shared rows ([`crate::rows`]):
//! `etcd_bench` runs them alone (rows 1-4); `lock_bench` runs them after
//! the Redis rows (rows 7-10).
//!
//! - **floor**: on one `etcd-client` connection with one lease granted up
//!   front (kept alive), a txn "put the key with the lease if it does not
//!   exist" plus a delete (2 round trips, 2 writes). The least an etcd lock can do.
//! - row 3's round trip: a plain put;
//! - row 4 also counts the watch streams the waiting client opened (etcd's
//!   own `etcd_debugging_mvcc_watch_stream_total`).

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, KvClient, PutOptions, Txn, TxnOp};

use crate::rows::{BenchError, DRAIN, Floor, Streams};
use examples::Etcd;

/// The floor's lease's time to live, in seconds (kept alive).
const LEASE_TTL: i64 = 30;

/// The etcd floor: a raw client of the same etcd, and its lease.
pub struct EtcdFloor {
    kv: KvClient,
    lease: i64,
    /// The client `kv` came from, kept for the whole run.
    _client: etcd_client::Client,
    /// Where row 4 reads the watch streams and connects its probe.
    endpoint: String,
}

impl EtcdFloor {
    /// How many keys begin with `prefix`.
    async fn count(kv: &mut KvClient, prefix: &str) -> Result<i64, BenchError> {
        let found = kv
            .get(
                prefix,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await?;
        Ok(found.count())
    }
}

impl Floor for EtcdFloor {
    type Server = Etcd;
    /// Row 4's probe: a client of its own.
    type Probe = KvClient;
    const LABEL: &'static str = "etcd";
    const NAME: &'static str = "etcd";
    const ISSUE: u32 = 24;
    const STREAMS: Option<Streams> = Some(Streams {
        unit: "watch stream(s)",
        goal: "one watch stream",
        most: 1,
    });

    async fn connect(etcd: &Etcd) -> Result<EtcdFloor, BenchError> {
        let endpoint = etcd.endpoint();
        let client = etcd_client::Client::connect([endpoint.as_str()], None).await?;
        let mut leases = client.lease_client();
        let lease = leases.grant(LEASE_TTL, None).await?.id();
        // Kept alive as a lock's lease is, for runs longer than its TTL.
        let (mut keeper, mut answers) = leases.keep_alive(lease).await?;
        tokio::spawn(async move {
            let every = Duration::from_secs(LEASE_TTL.unsigned_abs() / 3);
            loop {
                tokio::time::sleep(every).await;
                if keeper.keep_alive().await.is_err() || answers.message().await.is_err() {
                    return;
                }
            }
        });
        Ok(EtcdFloor {
            kv: client.kv_client(),
            lease,
            _client: client,
            endpoint,
        })
    }

    async fn pairs(&self, name: &str, n: usize) -> Result<(), BenchError> {
        let mut kv = self.kv.clone();
        for _ in 0..n {
            let key = format!("{name}/{:x}", self.lease);
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.as_str(),
                    "",
                    Some(PutOptions::new().with_lease(self.lease)),
                )]);
            if !kv.txn(txn).await?.succeeded() {
                return Err("the floor's key was taken".into());
            }
            kv.delete(key, None).await?;
        }
        Ok(())
    }

    async fn round_trip(&self) -> Result<Duration, BenchError> {
        let mut kv = self.kv.clone();
        let put = Instant::now();
        kv.put("bench-rt", "x", None).await?;
        Ok(put.elapsed())
    }

    async fn contenders(&self, name: &str) -> Result<usize, BenchError> {
        let found = Self::count(&mut self.kv.clone(), &format!("{name}/")).await?;
        Ok(found as usize)
    }

    async fn drain_probe(&self) -> Result<KvClient, BenchError> {
        Ok(etcd_client::Client::connect([self.endpoint.as_str()], None)
            .await?
            .kv_client())
    }

    /// Each name's holder and head waiter have their keys (2 per name).
    async fn all_queued(&self, kv: &mut KvClient, names: &[String]) -> Result<bool, BenchError> {
        Ok(Self::count(kv, DRAIN).await? >= 2 * names.len() as i64)
    }

    /// etcd's count of open watch streams, from its metrics endpoint.
    fn streams(&self) -> Result<i64, BenchError> {
        use std::io::{Read, Write};
        let host = self.endpoint.trim_start_matches("http://");
        let mut conn = std::net::TcpStream::connect(host)?;
        write!(conn, "GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
        let mut body = String::new();
        conn.read_to_string(&mut body)?;
        body.lines()
            .find_map(|l| l.strip_prefix("etcd_debugging_mvcc_watch_stream_total "))
            .and_then(|n| n.trim().parse::<f64>().ok())
            .map(|n| n as i64)
            .ok_or_else(|| "no watch stream gauge in etcd's metrics".into())
    }
}
