//! The client's own runtime thread.
//!
//! The client's own connection driver, the pub/sub dispatcher, the watchdog,
//! and every script call but acquire and release run on a current-thread
//! tokio runtime that the client owns (acquire and release run in the
//! caller's task on its runtime's near connection: see [`finish_on_drop`]
//! and `conn`).
//! Callers only await join handles and channels, which work from any runtime.
//! That is what lets one global client serve several runtimes (one per
//! `#[tokio::test]`, one per thread, or a runtime that was shut down): nothing
//! the client needs lives on the caller's runtime. It also makes every Redis
//! call cancellation-safe: a caller that stops waiting does not stop the call,
//! so its effect can always be undone.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::error::LockError;

tokio::task_local! {
    /// Set while a call whose caller left is finished (see [`finish_on_drop`]).
    static LEFT: ();
}

/// Whether the current task finishes a call whose caller left, off the
/// caller's runtime (see [`finish_on_drop`]): a near connection of that
/// runtime must not serve it. A task-local flag rather than the current
/// runtime's handle, since it is asked at every request and poll: cloning
/// the handle would bounce its reference count between the runtime's
/// threads on every lock call.
#[cfg_attr(feature = "zookeeper", allow(dead_code))]
pub(crate) fn finishing_for_one_who_left() -> bool {
    LEFT.try_with(|_| ()).is_ok()
}

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

    /// Spawns `fut` on the client's runtime, which keeps running until
    /// `fut` is done even when this was the client's last reference: the
    /// undo of an acquisition dropped with its client must not be dropped
    /// unrun with the runtime (issue 34).
    #[cfg(turns)]
    pub(crate) fn spawn_keeping<F>(self: &std::sync::Arc<Background>, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let alive = self.clone();
        self.handle.spawn(async move {
            fut.await;
            drop(alive);
        });
    }
}

/// Runs `fut` on the background runtime and waits for it. If the caller stops
/// waiting, `fut` still runs to completion.
///
/// Not an `async fn`: `fut` is spawned here, at once, so the future returned
/// is a join handle whatever `fut`'s size (an `async fn` would carry `fut`
/// inline until first polled, and so would every future awaiting it).
pub(crate) fn run<T: Send + 'static, F: Future<Output = T> + Send + 'static>(
    handle: &Handle,
    fut: F,
) -> impl Future<Output = Result<T, LockError>> + use<T, F> {
    let task = handle.spawn(fut);
    async move { task.await.map_err(|_| LockError::Shutdown) }
}

/// Runs `fut` in the caller's own task, without a hop to another thread. If
/// the caller drops this before `fut` is done, the rest of `fut` runs as a
/// task of its own, and `abandoned` gets its output there.
///
/// For calls on a near connection: the request already sent is finished,
/// and its effect undone, after the caller left. That task runs on
/// `fallback`, the client's own runtime, never on the caller's: nothing
/// need drive the caller's runtime again (a sync wrapper's current-thread
/// runtime sits idle between two `block_on`s), and freeing a lock must not
/// wait for it. There the near connection hands over (see `conn`): a
/// request in flight on it fails as a lost connection, which `fut` settles
/// as it settles any lost answer (an acquire is reconciled, a release
/// retried with the same request id), over the client's own connection,
/// which serves every later request of `fut` too. `fut` must not be
/// waiting on a timer of the caller's runtime when dropped (such a timer
/// fires only while that runtime is driven).
///
/// Not an `async fn`: `fut` goes to the heap here, at once, so the future
/// returned is a few words whatever `fut`'s size. (An `async fn` would keep
/// `fut` inline in its own state until first polled: every caller's task,
/// waiting or not, would carry the size of a release.) Dropped before it
/// was first polled, it never starts `fut`.
#[cfg_attr(not(any(feature = "redis", feature = "etcd")), allow(dead_code))]
pub(crate) fn finish_on_drop<T, A, U>(
    fallback: &Handle,
    fut: impl Future<Output = T> + Send + 'static,
    abandoned: A,
) -> impl Future<Output = T> + Send
where
    T: Send + 'static,
    A: FnOnce(T) -> U + Send + 'static,
    U: Future<Output = ()> + Send + 'static,
{
    type Call<T> = Pin<Box<dyn Future<Output = T> + Send>>;
    type Abandoned<T> = Box<dyn FnOnce(T) -> Call<()> + Send>;

    struct Unfinished<T: Send + 'static> {
        call: Option<Call<T>>,
        abandoned: Option<Abandoned<T>>,
        fallback: Handle,
        /// Polled at least once: the call may have been sent.
        started: bool,
    }

    impl<T: Send + 'static> Drop for Unfinished<T> {
        fn drop(&mut self) {
            if !self.started {
                return;
            }
            if let (Some(call), Some(abandoned)) = (self.call.take(), self.abandoned.take()) {
                self.fallback
                    .spawn(LEFT.scope((), async move { abandoned(call.await).await }));
            }
        }
    }

    let mut unfinished = Unfinished {
        call: Some(Box::pin(fut) as Call<T>),
        abandoned: Some(Box::new(move |out: T| Box::pin(abandoned(out)) as Call<()>)),
        fallback: fallback.clone(),
        started: false,
    };
    async move {
        let out = std::future::poll_fn(|cx| {
            unfinished.started = true;
            match unfinished.call.as_mut() {
                Some(call) => call.as_mut().poll(cx),
                None => Poll::Pending,
            }
        })
        .await;
        // Done: nothing left to finish on drop.
        drop(unfinished.call.take());
        out
    }
}
