//! Who holds a lock: re-entry follows the call chain, not the task.
//!
//! A holder id is `<client uuid>:<n>` (Redisson's layout; Redisson's `n` is
//! a thread id). Here `n` is a fresh number for every acquisition made
//! outside a scope, so two futures polled by one task (`join!`, `select!`,
//! `join_all`) are two holders and exclude each other.
//!
//! A guard's [`scope`](crate::LockGuard::scope) attaches its holds to one
//! future and everything that future awaits (a tokio task-local, set per
//! poll, so it follows the future even when several futures share a task).
//! An acquisition of the same lock on the same client inside that scope uses
//! the scope's holder id and re-enters the hold; scopes nest, the innermost
//! hold of a name winning. Spawned tasks do not inherit a scope: they are
//! other holders.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One hold visible to a scope: which client, which lock, which holder.
#[derive(Debug, Clone)]
pub(crate) struct ScopedHold {
    pub(crate) client: String,
    pub(crate) name: String,
    pub(crate) holder: String,
}

/// The holds of the scopes a future runs in, outermost first.
#[derive(Debug, Default)]
struct Scope {
    holds: Vec<ScopedHold>,
}

tokio::task_local! {
    static SCOPE: Arc<Scope>;
}

/// Numbers for new holders: process-wide, never reused.
static NEXT: AtomicU64 = AtomicU64::new(1);

/// A number no holder of this process has used.
pub(crate) fn fresh_number() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// `<client>:<number>`.
pub(crate) fn id(client: &str, number: u64) -> String {
    format!("{client}:{number}")
}

/// The holder id under which the current scope holds `name` on `client`,
/// if it does (innermost first).
pub(crate) fn in_scope(client: &str, name: &str) -> Option<String> {
    SCOPE
        .try_with(|scope| {
            scope
                .holds
                .iter()
                .rev()
                .find(|h| h.client == client && h.name == name)
                .map(|h| h.holder.clone())
        })
        .ok()
        .flatten()
}

/// Runs `fut` with `holds` added to the current scope.
pub(crate) fn scoped<F: Future>(holds: Vec<ScopedHold>, fut: F) -> impl Future<Output = F::Output> {
    let mut all = SCOPE
        .try_with(|scope| scope.holds.clone())
        .unwrap_or_default();
    all.extend(holds);
    SCOPE.scope(Arc::new(Scope { holds: all }), fut)
}
