//! Sentinel: a multiplexed connection to the master the sentinels name.
//!
//! When it breaks (or the node says `READONLY`: it was demoted), the
//! sentinels are asked again, in the background on the client's runtime,
//! until they name a master that answers as one; commands meanwhile wait for
//! it up to the connect timeout. Subscriptions are made again on the new
//! master.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, Pipeline, PushInfo, PushKind, RedisError, RedisFuture, RedisResult,
    TlsMode, Value,
};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

use crate::config::Config;
use crate::error::LockError;

/// A connection to the master the sentinels name, that asks them again when
/// the master goes away.
#[derive(Clone)]
pub(super) struct SentinelLink(Arc<SentinelState>);

struct SentinelState {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Current>,
    /// The epoch of the last connection installed.
    installed: watch::Sender<u64>,
    /// Where push frames of every connection go (the pub/sub dispatcher).
    pushes: mpsc::UnboundedSender<PushInfo>,
    /// Classic channels subscribed, to subscribe again on a new master.
    channels: Mutex<HashSet<String>>,
    connect_timeout: Duration,
    response_timeout: Duration,
    db: i64,
    runtime: Handle,
}

struct Current {
    /// Counts connections made; a failure report names the one it saw fail.
    epoch: u64,
    conn: Option<MultiplexedConnection>,
    reconnecting: bool,
}

fn no_master(detail: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!("no master available from the sentinels: {detail}"),
    ))
}

impl SentinelLink {
    pub(super) async fn connect(
        config: &Config,
        pushes: mpsc::UnboundedSender<PushInfo>,
        runtime: Handle,
    ) -> Result<SentinelLink, LockError> {
        let (sentinels, master, settings) = config.sentinel_setup()?;
        let db = settings.db();
        let mut node = SentinelNodeConnectionInfo::default().set_redis_connection_info(settings);
        // The master speaks TLS when the sentinels do.
        if let Some(mode) = sentinels.iter().find_map(|s| match s.addr() {
            redis::ConnectionAddr::TcpTls { insecure, .. } => Some(if *insecure {
                TlsMode::Insecure
            } else {
                TlsMode::Secure
            }),
            _ => None,
        }) {
            node = node.set_tls_mode(mode);
        }
        let sentinel =
            SentinelClient::build(sentinels, master, Some(node), SentinelServerType::Master)
                .map_err(|e| LockError::Config(format!("{e}")))?;
        let link = SentinelLink(Arc::new(SentinelState {
            sentinel: tokio::sync::Mutex::new(sentinel),
            current: Mutex::new(Current {
                epoch: 0,
                conn: None,
                reconnecting: true,
            }),
            installed: watch::channel(0).0,
            pushes,
            channels: Mutex::new(HashSet::new()),
            connect_timeout: config.connect_timeout,
            response_timeout: config.response_timeout,
            db,
            runtime,
        }));
        // The first master is found here, so a bad configuration fails `connect`.
        let conn = link.0.open().await?;
        link.0.install(conn);
        Ok(link)
    }

    pub(super) fn epoch(&self) -> u64 {
        self.0.current().epoch
    }

    pub(super) fn get_db(&self) -> i64 {
        self.0.db
    }

    /// The current master's connection, waiting (up to the connect timeout)
    /// while a new master is being found.
    async fn conn(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let deadline = tokio::time::Instant::now() + self.0.connect_timeout;
        loop {
            let mut installed = self.0.installed.subscribe();
            {
                let current = self.0.current();
                if let Some(conn) = &current.conn {
                    return Ok((current.epoch, conn.clone()));
                }
            }
            SentinelState::reconnect(&self.0);
            match tokio::time::timeout_at(deadline, installed.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Err(no_master("none found within the connect timeout")),
            }
        }
    }

    /// Reads a command's result: a broken connection, a timeout or a
    /// `READONLY` (the node was demoted) sends us to the sentinels.
    fn check<T>(&self, epoch: u64, result: &RedisResult<T>) {
        if let Err(e) = result {
            let gone = e.is_io_error()
                || e.is_connection_dropped()
                || e.is_unrecoverable_error()
                || e.is_timeout()
                || e.code() == Some("READONLY");
            if gone {
                self.0.invalidate(epoch);
            }
        }
    }

    pub(super) async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        self.0.channels().insert(channel.to_owned());
        let (epoch, mut conn) = self.conn().await?;
        let result = conn.subscribe(channel).await;
        self.check(epoch, &result);
        if result.is_err() {
            self.0.channels().remove(channel);
        }
        result
    }

    pub(super) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        self.0.channels().remove(channel);
        // A new master's connection will not have it; only the current one may.
        let current = self.0.current().conn.clone();
        match current {
            Some(mut conn) => conn.unsubscribe(channel).await,
            None => Ok(()),
        }
    }

    // Not inlined: the MIR inliner would otherwise pull the reconnect logic
    // into every caller's future and overflow the query depth of deep ones.
    #[inline(never)]
    pub(super) fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (epoch, mut conn) = self.conn().await?;
            let result = conn.send_packed_command(cmd).await;
            self.check(epoch, &result);
            result
        })
    }

    #[inline(never)]
    pub(super) fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (epoch, mut conn) = self.conn().await?;
            let result = conn.send_packed_commands(pipeline, offset, count).await;
            self.check(epoch, &result);
            result
        })
    }
}

impl SentinelState {
    fn current(&self) -> MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn channels(&self) -> MutexGuard<'_, HashSet<String>> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops connection `epoch` (if it is still the current one) and starts
    /// looking for the master again.
    fn invalidate(self: &Arc<Self>, epoch: u64) {
        {
            let mut current = self.current();
            if current.epoch != epoch || current.conn.is_none() {
                return;
            }
            tracing::warn!("lost the master's connection; asking the sentinels");
            current.conn = None;
        }
        SentinelState::reconnect(self);
    }

    /// Starts the reconnect task on the client's runtime, unless it runs.
    fn reconnect(this: &Arc<Self>) {
        {
            let mut current = this.current();
            if current.reconnecting || current.conn.is_some() {
                return;
            }
            current.reconnecting = true;
        }
        let weak = Arc::downgrade(this);
        this.runtime.spawn(async move {
            let mut backoff = Duration::from_millis(50);
            loop {
                let Some(state) = weak.upgrade() else { return };
                match state.open().await {
                    Ok(conn) => {
                        state.install(conn);
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "no master yet; asking the sentinels again")
                    }
                }
                drop(state);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        });
    }

    /// Asks the sentinels for the master, connects to it (checking that it
    /// answers as a master) and subscribes the known channels there.
    async fn open(self: &Arc<Self>) -> Result<MultiplexedConnection, LockError> {
        let epoch = self.current().epoch + 1;
        let within = self.connect_timeout;
        let client = {
            let mut sentinel = self.sentinel.lock().await;
            tokio::time::timeout(within, sentinel.async_get_client())
                .await
                .map_err(|_| no_master("the sentinels did not answer in time"))??
        };
        let (pushes, mut pushed) = mpsc::unbounded_channel::<PushInfo>();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(within))
            .set_response_timeout(Some(self.response_timeout))
            .set_push_sender(pushes);
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let channels: Vec<String> = self.channels().iter().cloned().collect();
        if !channels.is_empty() {
            conn.subscribe(&channels).await?;
        }
        // Forwards this connection's pushes; its end means the master is gone.
        let forward_to = self.pushes.clone();
        let weak: Weak<SentinelState> = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(push) = pushed.recv().await {
                if push.kind == PushKind::Disconnection
                    && let Some(state) = weak.upgrade()
                {
                    state.invalidate(epoch);
                }
                let _ = forward_to.send(push);
            }
        });
        Ok(conn)
    }

    fn install(&self, conn: MultiplexedConnection) {
        let epoch = {
            let mut current = self.current();
            current.epoch += 1;
            current.conn = Some(conn);
            current.reconnecting = false;
            current.epoch
        };
        tracing::debug!(epoch, "connected to the master the sentinels name");
        self.installed.send_replace(epoch);
    }
}
