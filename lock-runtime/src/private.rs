//! What `#[distributed_lock]` expands into. Not a public API: names here may
//! change in any release.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use crate::lock::multi::MultiLock;
use crate::lock::{Options, Target, acquire_hold};
use crate::{LockError, LockGuard};

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

fn target(kind: AttrKind, name: String) -> Result<Target, LockError> {
    match kind {
        AttrKind::Reentrant => Ok(Target::Reentrant { name }),
        AttrKind::Fair => Ok(Target::Fair { name }),
        AttrKind::Read => Ok(Target::Read { name }),
        AttrKind::Write => Ok(Target::Write { name }),
    }
}

async fn acquire(keys: Vec<String>, spec: AttrSpec) -> Result<LockGuard, LockError> {
    let client = crate::client().await?;
    let options = Options {
        wait: spec.wait,
        lease: spec.lease,
        number: None,
        metric: None,
    };
    match keys.len() {
        0 => Err(LockError::Config(
            "a #[distributed_lock] function locks at least one key".into(),
        )),
        1 => {
            let name = keys.into_iter().next().unwrap_or_default();
            let held = acquire_hold(client, target(spec.kind, name)?, options).await?;
            Ok(LockGuard::single(held))
        }
        // Several keys: a multi lock, each key of the attribute's kind.
        _ => {
            let mut multi = MultiLock::new();
            for name in keys {
                multi = multi.with_target(client, target(spec.kind, name)?);
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

/// Runs `body` under the lock named by `keys`.
///
/// - A lock that cannot be taken returns its error through `R`.
/// - With `cancel_on_lost`, a lost lease drops the body and returns
///   [`LockError::Lost`].
/// - A release that reports a lost lease turns a successful body into
///   `Err(LockError::Lost)`: the body ran without the exclusion it relied on.
///   A failed body keeps its own error (the release error is logged).
pub async fn run<R, F>(keys: Vec<String>, spec: AttrSpec, body: F) -> R
where
    R: LockResult,
    F: Future<Output = R>,
{
    // Boxed: the acquire future (multi lock included) is deep, and inlined
    // into every locked fn's future it overflows rustc's query depth there.
    let guard = match Box::pin(acquire(keys, spec)).await {
        Ok(guard) => guard,
        Err(e) => return R::from_lock_error(e),
    };
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
