//! What `#[distributed_lock]` expands into. Not a public API: names here may
//! change in any release.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use crate::client::LockClient;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lock::acquire_hold;
use crate::lock::multi::MultiLock;
use crate::request::{Kind, Request};

pub use std::format;

/// The lock kind the attribute asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrKind {
    /// `kind = "reentrant"` (the default).
    Reentrant,
    /// `kind = "fair"`.
    Fair,
    /// `kind = "read"`.
    Read,
    /// `kind = "write"`.
    Write,
    /// `permits = N`: a semaphore of N permits.
    Semaphore(u32),
}

/// The attribute's options, checked at compile time.
#[derive(Debug, Clone, Copy)]
pub struct AttrSpec {
    /// Which lock.
    pub kind: AttrKind,
    /// `wait = "..."`: `None` waits until acquired.
    pub wait: Option<Duration>,
    /// `lease = "..."`: `None` lets the watchdog renew.
    pub lease: Option<Duration>,
    /// `on_lost = "cancel"`: drop the body when the lease is lost.
    pub cancel_on_lost: bool,
    /// `hold_at_least = "..."`: the lock stays taken at least this long.
    pub hold_at_least: Option<Duration>,
}

/// The outcome of taking the attribute's lock.
pub enum Taken<R> {
    /// Held: run the body.
    Held(LockGuard),
    /// Still busy when the wait ended (the `LockError::Timeout`): the
    /// attribute's busy path runs (`on_busy`, `fallback`, or the error).
    Busy(LockError),
    /// Any other failure, already the function's result.
    Failed(R),
}

/// What `client = expr` may evaluate to.
#[diagnostic::on_unimplemented(
    message = "`client = ...` must be a `LockClient` (or a reference to one, or an `Arc` of one), not `{Self}`",
    label = "this is not a lock client",
    note = "e.g. `client = self.locks` for a `LockClient` field, or `client = shop_locks()` returning `&'static LockClient`"
)]
pub trait AttrClient {
    /// The client.
    fn lock_client(&self) -> &LockClient;
}

impl AttrClient for LockClient {
    fn lock_client(&self) -> &LockClient {
        self
    }
}

impl<T: AttrClient + ?Sized> AttrClient for &T {
    fn lock_client(&self) -> &LockClient {
        (**self).lock_client()
    }
}

impl<T: AttrClient + ?Sized> AttrClient for std::sync::Arc<T> {
    fn lock_client(&self) -> &LockClient {
        (**self).lock_client()
    }
}

/// The client of `client = expr`.
pub fn attr_client<T: AttrClient + ?Sized>(client: &T) -> &LockClient {
    client.lock_client()
}

/// The value a skipped call returns: `Ok(())` or `Ok(None)`.
#[diagnostic::on_unimplemented(
    message = "`on_busy = \"skip\"` needs a function returning `Result<(), E>` or `Result<Option<T>, E>`, not `{Self}`",
    note = "a skipped call returns `Ok(())` or `Ok(None)`; for another `Ok` type use `fallback = path` or leave `on_busy` out"
)]
pub trait Skipped {
    /// `Ok(())` or `Ok(None)`.
    fn skipped() -> Self;
}

impl<E> Skipped for Result<(), E> {
    fn skipped() -> Self {
        Ok(())
    }
}

impl<T, E> Skipped for Result<Option<T>, E> {
    fn skipped() -> Self {
        Ok(None)
    }
}

/// `R`'s skipped value (`on_busy = "skip"`).
pub fn skipped<R: Skipped>() -> R {
    R::skipped()
}

/// `R`'s error for a busy lock (the default `on_busy = "error"`).
pub fn busy<R: LockResult>(error: LockError) -> R {
    R::from_lock_error(error)
}

/// A value that can stand in a lock key placeholder.
#[diagnostic::on_unimplemented(
    message = "lock key placeholder value `{Self}` does not implement `std::fmt::Display`",
    label = "this placeholder's value must be `Display` to appear in the lock key",
    note = "name a field that is `Display` (`<param.field>`), or implement `Display` for `{Self}`"
)]
pub trait KeyPart: Display {}

impl<T: Display + ?Sized> KeyPart for T {}

/// Formats a placeholder's value for the key. Bound by `KeyPart` alone and
/// returning a `String`, so that a value that is not `Display` gives one
/// error, with `KeyPart`'s message, on the key.
pub fn key_part<T: KeyPart + ?Sized>(value: &T) -> String {
    value.to_string()
}

/// The return type of a locked function: a `Result` whose error takes a
/// [`LockError`].
#[diagnostic::on_unimplemented(
    message = "a #[distributed_lock] function must return `Result<T, E>` where `E: From<LockError>`",
    note = "add `impl From<lock_runtime::LockError> for YourError`, or return `Result<T, lock_runtime::LockError>`"
)]
pub trait LockResult: Sized {
    /// The function's result when taking (or keeping) the lock failed.
    fn from_lock_error(error: LockError) -> Self;
    /// Whether the body succeeded.
    fn succeeded(&self) -> bool;
}

impl<T, E: From<LockError>> LockResult for Result<T, E> {
    fn from_lock_error(error: LockError) -> Self {
        Err(E::from(error))
    }
    fn succeeded(&self) -> bool {
        self.is_ok()
    }
}

impl AttrKind {
    fn kind(self) -> Kind {
        match self {
            AttrKind::Reentrant => Kind::Reentrant,
            AttrKind::Fair => Kind::Fair,
            AttrKind::Read => Kind::Read,
            AttrKind::Write => Kind::Write,
            AttrKind::Semaphore(permits) => Kind::Semaphore(permits),
        }
    }
}

async fn acquire(
    client: Option<&LockClient>,
    keys: Vec<String>,
    spec: AttrSpec,
) -> Result<LockGuard, LockError> {
    let client = match client {
        Some(client) => client,
        None => crate::client().await?,
    };
    match keys.len() {
        0 => Err(LockError::Config(
            "a #[distributed_lock] function locks at least one key".into(),
        )),
        1 => {
            let name = keys.into_iter().next().unwrap_or_default();
            let request = Request::new(name, spec.kind.kind(), client.config());
            let request = Request {
                hold_at_least: spec.hold_at_least,
                ..request.asking(spec.wait, spec.lease)
            };
            let held = acquire_hold(client.clone(), request).await?;
            Ok(LockGuard::single(held))
        }
        // Several keys: a multi lock, each key of the attribute's kind.
        _ => {
            let mut multi = MultiLock::new();
            for name in keys {
                multi = multi.with_kind(client, name, spec.kind.kind());
            }
            if let Some(wait) = spec.wait {
                multi = multi.wait(wait);
            }
            if let Some(lease) = spec.lease {
                multi = multi.lease(lease);
            }
            multi.acquire().await
        }
    }
}

/// Takes the lock named by `keys` on `client` (the global client when
/// `None`). A lock still busy when the wait ends is [`Taken::Busy`]; any
/// other failure comes back through `R`.
pub async fn take<R: LockResult>(
    client: Option<&LockClient>,
    keys: Vec<String>,
    spec: AttrSpec,
) -> Taken<R> {
    // Boxed: the acquire future (multi lock included) is deep, and inlined
    // into every locked fn's future it overflows rustc's query depth there.
    match Box::pin(acquire(client, keys, spec)).await {
        Ok(guard) => Taken::Held(guard),
        Err(e @ LockError::Timeout { .. }) => Taken::Busy(e),
        Err(e) => Taken::Failed(R::from_lock_error(e)),
    }
}

/// Runs `body` under `guard`, then releases it.
///
/// - With `cancel_on_lost`, a lost lease drops the body and returns
///   [`LockError::Lost`].
/// - A release that reports a lost lease turns a successful body into
///   `Err(LockError::Lost)`: the body ran without the exclusion it relied on.
///   A failed body keeps its own error (the release error is logged).
pub async fn run<R, F>(guard: LockGuard, spec: AttrSpec, body: F) -> R
where
    R: LockResult,
    F: Future<Output = R>,
{
    // The body runs in the hold's scope: locked calls awaited inside re-enter.
    let body = guard.scope(body);
    let result = if spec.cancel_on_lost {
        tokio::select! {
            result = body => result,
            () = guard.lost() => {
                let name = guard.name().to_owned();
                drop(guard);
                return R::from_lock_error(LockError::Lost { name });
            }
        }
    } else {
        body.await
    };
    match guard.release().await {
        Ok(()) => result,
        Err(e) if result.succeeded() => R::from_lock_error(e),
        Err(e) => {
            tracing::warn!(error = %e, "release after a failed locked call failed");
            result
        }
    }
}
