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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// Who a hold is: its lock's name and its holder id. Made once per hold
/// and shared (an `Arc`) by everything that names the hold: its tries, its
/// record, the client's lists of records and of live holds, and the scopes
/// of its guards. Equal and hashed by both.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Who {
    pub(crate) name: String,
    pub(crate) holder: String,
}

impl Who {
    /// Holder `number` (`None`: a fresh number) of `client`, on lock `name`.
    #[cfg_attr(not(turns), allow(dead_code))]
    pub(crate) fn new(client: &str, name: &str, number: Option<u64>) -> Arc<Who> {
        Arc::new(Who {
            name: name.to_owned(),
            holder: new_id(client, number),
        })
    }

    /// The holder's number as its id writes it (the part after the
    /// client's id).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn number(&self) -> &str {
        self.holder.rsplit_once(':').map_or("", |(_, n)| n)
    }
}

/// One hold visible to a scope: which client, which hold, and what the
/// holder's holds of that lock share.
#[derive(Debug, Clone)]
pub(crate) struct ScopedHold {
    pub(crate) client: String,
    pub(crate) who: Arc<Who>,
    pub(crate) chain: Chain,
}

/// What the holds of one call chain on one lock (a hold and its re-entries)
/// share: until when the lock must stay taken (`hold_at_least`), whichever
/// of them asked for it. The chain's last release applies it, in whatever
/// order its holds are given back.
#[derive(Debug, Clone, Default)]
pub(crate) struct Chain(Arc<Mutex<Option<Instant>>>);

impl Chain {
    /// The lock stays taken at least until `until` (a later minimum of the
    /// chain is kept).
    /// A chain whose first hold asked to be kept until `keep`, if at all.
    pub(crate) fn keeping(keep: Option<Instant>) -> Chain {
        let chain = Chain::default();
        if let Some(until) = keep {
            chain.keep_until(until);
        }
        chain
    }

    pub(crate) fn keep_until(&self, until: Instant) {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *kept = Some(kept.map_or(until, |kept| kept.max(until)));
    }

    /// Until when the lock stays taken, if a hold of the chain asked.
    pub(crate) fn kept_until(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
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
    [client, ":", itoa::Buffer::new().format(number)].concat()
}

/// The id of holder `number` of `client` (`None`: a fresh number).
pub(crate) fn new_id(client: &str, number: Option<u64>) -> String {
    id(client, number.unwrap_or_else(fresh_number))
}

/// A fresh id for one call (an acquire attempt, a release request: the
/// names of their latches), `<client>:r<number>`: unique across clients (the
/// client id is random) and never reused in this process. Counted, not
/// random, so an acquire + release makes no `getrandom` system call.
#[cfg(feature = "redis")]
pub(crate) fn call_id(client: &str) -> String {
    [client, ":r", itoa::Buffer::new().format(fresh_number())].concat()
}

/// The hold under which the current scope holds `name` on `client`, if it
/// does (innermost first), and its chain.
pub(crate) fn in_scope(client: &str, name: &str) -> Option<(Arc<Who>, Chain)> {
    SCOPE
        .try_with(|scope| {
            scope
                .holds
                .iter()
                .rev()
                .find(|h| h.client == client && h.who.name == name)
                .map(|h| (h.who.clone(), h.chain.clone()))
        })
        .ok()
        .flatten()
}

/// Runs `fut` with `holds` added to the scope it runs in. The outer scope is
/// read when the returned future is first polled, where it runs: a scoped
/// future spawned as a task carries only its own holds, and one built
/// before it is awaited in another scope sees that scope too.
pub(crate) async fn scoped<F: Future>(holds: Vec<ScopedHold>, fut: F) -> F::Output {
    let mut all = SCOPE
        .try_with(|scope| scope.holds.clone())
        .unwrap_or_default();
    all.extend(holds);
    SCOPE.scope(Arc::new(Scope { holds: all }), fut).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder_in_scope(client: &str, name: &str) -> Option<String> {
        in_scope(client, name).map(|(who, _)| who.holder.clone())
    }

    fn hold(name: &str, holder: &str) -> ScopedHold {
        ScopedHold {
            client: "c".into(),
            who: Arc::new(Who {
                name: name.into(),
                holder: holder.into(),
            }),
            chain: Chain::default(),
        }
    }

    #[tokio::test]
    async fn a_scope_follows_its_future_not_the_task() {
        let inside = scoped(vec![hold("x", "c:1")], async {
            tokio::task::yield_now().await;
            holder_in_scope("c", "x")
        });
        let beside = async {
            tokio::task::yield_now().await;
            holder_in_scope("c", "x")
        };
        // Both polled by one task, interleaved: only the scoped one sees it.
        let (inside, beside) = tokio::join!(inside, beside);
        assert_eq!(inside.as_deref(), Some("c:1"));
        assert_eq!(beside, None);
        assert_eq!(holder_in_scope("c", "x"), None, "gone after the scope");
    }

    #[tokio::test]
    async fn scopes_nest_and_match_client_and_name() {
        let seen = scoped(vec![hold("x", "c:1")], async {
            scoped(vec![hold("y", "c:2"), hold("x", "c:3")], async {
                (
                    holder_in_scope("c", "x"),
                    holder_in_scope("c", "y"),
                    holder_in_scope("other", "x"),
                    holder_in_scope("c", "z"),
                )
            })
            .await
        })
        .await;
        assert_eq!(seen.0.as_deref(), Some("c:3"), "the innermost hold wins");
        assert_eq!(seen.1.as_deref(), Some("c:2"));
        assert_eq!(seen.2, None, "another client's lock is another lock");
        assert_eq!(seen.3, None);
    }

    #[tokio::test]
    async fn spawned_tasks_do_not_inherit_a_scope() {
        let seen = scoped(vec![hold("x", "c:1")], async {
            let plain = tokio::spawn(async { holder_in_scope("c", "x") })
                .await
                .unwrap();
            // A scoped future spawned from inside a scope carries its own
            // holds only: the outer one is read where it runs.
            let nested = tokio::spawn(scoped(vec![hold("y", "c:2")], async {
                (holder_in_scope("c", "x"), holder_in_scope("c", "y"))
            }))
            .await
            .unwrap();
            (plain, nested)
        })
        .await;
        assert_eq!(seen.0, None);
        assert_eq!(seen.1, (None, Some("c:2".to_owned())));
    }

    #[tokio::test]
    async fn a_scoped_future_sees_the_scope_it_is_awaited_in() {
        let built = scoped(vec![hold("y", "c:2")], async { holder_in_scope("c", "x") });
        let seen = scoped(vec![hold("x", "c:1")], built).await;
        assert_eq!(seen.as_deref(), Some("c:1"));
    }

    #[test]
    fn fresh_numbers_are_never_reused() {
        let a = fresh_number();
        let b = fresh_number();
        assert_ne!(a, b);
        assert_eq!(id("c", 7), "c:7");
        assert_eq!(Who::new("c", "x", Some(7)).number(), "7");
        #[cfg(feature = "redis")]
        assert!(call_id("c").starts_with("c:r"));
    }
}
