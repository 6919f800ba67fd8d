//! The process-wide client that `#[distributed_lock]` uses.

use tokio::sync::OnceCell;

use crate::{Config, LockClient, LockError};

static GLOBAL: OnceCell<LockClient> = OnceCell::const_new();

/// Sets the global client. Call it once, before the first locked call;
/// a second call fails with [`LockError::Config`].
pub async fn init(config: Config) -> Result<(), LockError> {
    let mut fresh = false;
    GLOBAL
        .get_or_try_init(|| {
            fresh = true;
            LockClient::connect(config)
        })
        .await?;
    if fresh {
        Ok(())
    } else {
        Err(LockError::Config(
            "the global lock client was already initialised".into(),
        ))
    }
}

/// The global client. When [`init`] was never called, it connects from the
/// environment: `REDIS_URL`, default `redis://127.0.0.1:6379`.
///
/// The client runs on its own thread, so it keeps working when one process
/// uses it from several tokio runtimes (one per `#[tokio::test]`, one per
/// thread, or after the runtime that first used it has shut down).
pub async fn client() -> Result<&'static LockClient, LockError> {
    GLOBAL
        .get_or_try_init(|| LockClient::connect(Config::from_env()))
        .await
}
