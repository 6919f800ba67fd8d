//! What a lock looks like, whatever the engine: the answer of
//! [`LockClient::inspect`](crate::LockClient::inspect) and
//! [`LockClient::locks`](crate::LockClient::locks).

use std::fmt;
use std::time::Duration;

use crate::own::OwnGuard;

/// What a held lock looks like in Redis, as [`LockClient::inspect`](crate::LockClient::inspect)
/// read it (one script call: a consistent snapshot).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock's name.
    pub name: String,
    /// Which kind of lock the layout is.
    pub kind: LockKind,
    /// A read-write lock's mode; `None` for the other kinds.
    pub mode: Option<RwMode>,
    /// Who holds it and how many times (re-entries), in the hash's order.
    pub holders: Vec<HolderInfo>,
    /// The remaining lease by the server's clock; `None` when the key has
    /// no expiry (a holder that set none).
    pub ttl: Option<Duration>,
    /// A fair lock's waiters' holder ids, head first.
    pub queue: Vec<String>,
}

/// The kinds of lock [`LockInfo`] recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// Redisson's `RLock` layout (also a fair lock with nobody waiting).
    Reentrant,
    /// Redisson's `RFairLock` layout: the hash plus a waiting queue.
    Fair,
    /// Redisson's `RReadWriteLock` layout: the hash with a `mode` field.
    ReadWrite,
    /// A semaphore (DESIGN §11): every holder is one permit.
    Semaphore,
}

impl LockKind {
    /// `"reentrant"`, `"fair"`, `"read_write"` or `"semaphore"` (the `kind`
    /// of `lockctl inspect --json`).
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Reentrant => "reentrant",
            LockKind::Fair => "fair",
            LockKind::ReadWrite => "read_write",
            LockKind::Semaphore => "semaphore",
        }
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A read-write lock's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RwMode {
    /// Shared by readers.
    Read,
    /// Held by one writer (which may also hold read holds).
    Write,
}

impl RwMode {
    /// `"read"` or `"write"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
        }
    }
}

impl fmt::Display for RwMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The holder id, `<client id>:<n>` (Redisson: `<client id>:<thread id>`).
    /// For a read-write lock's writer, without the `:write` suffix of its
    /// hash field.
    pub id: String,
    /// How many times it holds the lock (re-entries). 0: its holds are
    /// released, and the lock is kept taken until its `hold_at_least`
    /// minimum ends (the TTL says when).
    pub count: u64,
    /// A read-write lock's writer (its field is `<id>:write`); false for a
    /// reader and for the other kinds.
    pub write: bool,
    /// When the holder id is of the inspecting client: its live guards on
    /// this lock (which token, which task, since when). Empty for other
    /// clients' holders.
    pub guards: Vec<OwnGuard>,
    /// The hold's fencing token, where the store keeps it with the holder
    /// (a semaphore's permit, on the stores that keep one per permit);
    /// `None` elsewhere.
    pub token: Option<u64>,
    /// What is left of the holder's own lease by the store's clock, where
    /// the store keeps one per holder (a semaphore's permit); `None` where
    /// the lock's one lease ([`LockInfo::ttl`]) is all there is.
    pub lease_left: Option<Duration>,
}

impl HolderInfo {
    /// The client part of the holder id (everything before the last `:`):
    /// which process holds it.
    pub fn client_id(&self) -> &str {
        self.id
            .rsplit_once(':')
            .map_or(&self.id, |(client, _)| client)
    }
}
