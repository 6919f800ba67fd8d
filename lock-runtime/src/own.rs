//! This client's live guards, by lock name: what [`inspect`](crate::LockClient::inspect)
//! tells about holder ids of this client (which guard, which task, since
//! when). One entry per hold a guard has; it leaves the list when the hold
//! is released or dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

use crate::holder::Who;

/// One hold of a live guard of this client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OwnGuard {
    /// The fencing token of the acquisition (re-entries have their own).
    pub token: u64,
    /// The tokio task that acquired it (`tokio::task::Id` as text), when it
    /// was acquired inside a task. A guard may since have moved to another
    /// task.
    pub task: Option<String>,
    /// How long ago it was acquired.
    pub held_for: Duration,
    /// Its fixed lease; `None` when the watchdog renews it.
    pub lease: Option<Duration>,
}

struct Entry {
    /// The hold's lock name and holder id (shared with its record).
    who: Arc<Who>,
    token: u64,
    task: Option<tokio::task::Id>,
    since: Instant,
    lease: Option<Duration>,
}

/// Entries by a number that only grows: new ones go at the end of the map,
/// and nothing is hashed (a guard is listed and unlisted on every acquire
/// and release).
#[derive(Default)]
struct Table {
    next: u64,
    entries: BTreeMap<u64, Entry>,
}

/// The list; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct OwnHolds {
    table: Arc<Mutex<Table>>,
}

/// An entry in [`OwnHolds`]: removed when dropped.
pub(crate) struct Listed {
    table: Arc<Mutex<Table>>,
    id: u64,
}

impl OwnHolds {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists the hold `who` just took.
    pub(crate) fn list(
        &self,
        who: Arc<Who>,
        token: u64,
        since: Instant,
        lease: Option<Duration>,
    ) -> Listed {
        let entry = Entry {
            who,
            token,
            task: tokio::task::try_id(),
            since,
            lease,
        };
        let mut table = self.table();
        table.next += 1;
        let id = table.next;
        table.entries.insert(id, entry);
        Listed {
            table: self.table.clone(),
            id,
        }
    }

    /// The live guards of `holder` on `name`, oldest first.
    pub(crate) fn guards(&self, name: &str, holder: &str) -> Vec<OwnGuard> {
        let now = Instant::now();
        let mut found: Vec<(Instant, OwnGuard)> = self
            .table()
            .entries
            .values()
            .filter(|e| e.who.name == name && e.who.holder == holder)
            .map(|e| {
                (
                    e.since,
                    OwnGuard {
                        token: e.token,
                        task: e.task.map(|id| id.to_string()),
                        held_for: now.saturating_duration_since(e.since),
                        lease: e.lease,
                    },
                )
            })
            .collect();
        found.sort_by_key(|(since, guard)| (*since, guard.token));
        found.into_iter().map(|(_, guard)| guard).collect()
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.entries.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_leave_with_their_listing() {
        let own = OwnHolds::default();
        let now = Instant::now();
        let who = |name: &str| {
            Arc::new(Who {
                name: name.into(),
                holder: "c:1".into(),
            })
        };
        let a = own.list(who("n"), 7, now, None);
        let b = own.list(who("n"), 8, now, Some(Duration::from_secs(5)));
        let _other = own.list(who("m"), 9, now, None);
        let tokens = |own: &OwnHolds| -> Vec<u64> {
            own.guards("n", "c:1").iter().map(|g| g.token).collect()
        };
        assert_eq!(tokens(&own), [7, 8]);
        drop(a);
        assert_eq!(tokens(&own), [8]);
        drop(b);
        assert!(own.guards("n", "c:1").is_empty());
        assert!(own.guards("n", "c:2").is_empty());
    }
}
