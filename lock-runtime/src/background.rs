//! The client's own runtime thread.
//!
//! Every connection driver, the pub/sub dispatcher, the watchdog, and every
//! script call run on a current-thread tokio runtime that the client owns.
//! Callers only await join handles and channels, which work from any runtime.
//! That is what lets one global client serve several runtimes (one per
//! `#[tokio::test]`, one per thread, or a runtime that was shut down): nothing
//! the client needs lives on the caller's runtime. It also makes every Redis
//! call cancellation-safe: a caller that stops waiting does not stop the call,
//! so its effect can always be undone.

use std::future::Future;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::LockError;

/// Owns the runtime thread; dropping it stops the runtime (and every task on it).
pub(crate) struct Background {
    handle: Handle,
    _stop: oneshot::Sender<()>,
}

impl Background {
    pub(crate) fn start() -> Result<Background, LockError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("lock-runtime")
            .build()
            .map_err(|e| LockError::Config(format!("cannot start the client runtime: {e}")))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("lock-runtime".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                // Tasks still queued (background releases, renewals) are dropped here.
                runtime.shutdown_background();
            })
            .map_err(|e| LockError::Config(format!("cannot start the client thread: {e}")))?;
        Ok(Background {
            handle,
            _stop: stop,
        })
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }
}

/// Runs `fut` on the background runtime and waits for it. If the caller stops
/// waiting, `fut` still runs to completion.
pub(crate) async fn run<T: Send + 'static>(
    handle: &Handle,
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<T, LockError> {
    handle.spawn(fut).await.map_err(|_| LockError::Shutdown)
}
