//! The process-wide client that `#[distributed_lock]` uses.

use std::sync::Mutex;

use tokio::sync::OnceCell;

use crate::client::LockClient;
use crate::config::Config;
use crate::error::LockError;

static GLOBAL: OnceCell<LockClient> = OnceCell::const_new();

/// The configuration of the last [`init`], kept when its connect failed:
/// [`client`] connects with it, never with the environment.
static CONFIGURED: Mutex<Option<Config>> = Mutex::new(None);

fn configured() -> std::sync::MutexGuard<'static, Option<Config>> {
    CONFIGURED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sets the global client. Call it once, before the first locked call.
///
/// - When it fails (bad configuration, server unreachable), the error says
///   why, and the configuration stays the global one: [`client`] (and so
///   every locked call) tries that server again, and fails with its error,
///   rather than connect to `REDIS_URL`. Calling `init` again, with the same
///   configuration or another, is allowed.
/// - Once it succeeded, or once [`client`] connected, a further call fails
///   with [`LockError::Config`].
pub async fn init(config: Config) -> Result<(), LockError> {
    if GLOBAL.initialized() {
        return Err(already());
    }
    *configured() = Some(config.clone());
    let mut fresh = false;
    GLOBAL
        .get_or_try_init(|| {
            fresh = true;
            LockClient::connect(config)
        })
        .await?;
    if fresh { Ok(()) } else { Err(already()) }
}

fn already() -> LockError {
    LockError::Config("the global lock client was already initialised".into())
}

/// The global client. It connects on first use: with the configuration of
/// [`init`] when `init` was called (even if that call failed: the error is
/// then this server's, and a later call tries it again), else from the
/// environment (`REDIS_URL`, default `redis://127.0.0.1:6379`).
///
/// The client runs on its own thread, so it keeps working when one process
/// uses it from several tokio runtimes (one per `#[tokio::test]`, one per
/// thread, or after the runtime that first used it has shut down).
pub async fn client() -> Result<&'static LockClient, LockError> {
    GLOBAL
        .get_or_try_init(|| {
            let config = configured().clone().unwrap_or_else(Config::from_env);
            LockClient::connect(config)
        })
        .await
}

impl crate::lock::segmented::SegmentedLock {
    /// A segmented lock on the global client ([`client`]), which connects
    /// (from `LOCK_URL` or `REDIS_URL`, unless [`init`] ran) at the first
    /// acquire. This is what [`segmented_lock!`](crate::segmented_lock)
    /// declarations use.
    pub fn global(
        name: impl Into<String>,
        segments: usize,
    ) -> crate::lock::segmented::SegmentedLock {
        crate::lock::segmented::SegmentedLock::on_later(
            name.into(),
            segments,
            || Box::pin(client()),
        )
    }
}
