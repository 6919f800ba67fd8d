//! Operations on any lock, found by its Redis layout: what
//! [`LockClient::inspect`](crate::LockClient::inspect) reads and
//! [`LockClient::force_unlock`](crate::LockClient::force_unlock) deletes.
//!
//! Every kind keeps a HASH at the lock's name (DESIGN §4). A hash with a
//! `mode` field is a read-write lock; one with a fair queue or waiter
//! deadlines beside it is a fair lock; any other is a reentrant lock. A fair
//! lock that nobody waits for has no queue, and then reads as reentrant: the
//! two layouts are the same.

use std::fmt;
use std::time::Duration;

use crate::client::Engine;
#[cfg(feature = "etcd")]
use crate::engine::etcd;
use crate::engine::redis::Core;
use crate::engine::redis::keys;
use crate::engine::redis::scripts::SCRIPTS;
use crate::error::LockError;
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
}

impl LockKind {
    /// `"reentrant"`, `"fair"` or `"read_write"` (the `kind` of `lockctl
    /// inspect --json`).
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Reentrant => "reentrant",
            LockKind::Fair => "fair",
            LockKind::ReadWrite => "read_write",
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

/// The inspect script's answer.
type Snapshot = (String, i64, Vec<String>, Vec<String>, i64);

/// Reads lock `name`'s keys; `None` when it is free.
pub(crate) async fn inspect(core: &Core, name: &str) -> Result<Option<LockInfo>, LockError> {
    crate::request::check_name(name)?;
    core.conn.check_slot_name(name)?;
    let (kind, pttl, fields, queue, fair): Snapshot = SCRIPTS
        .inspect
        .key(name)
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .invoke_async(&mut core.conn.clone())
        .await
        .map_err(|e| LockError::from_redis(name, e))?;
    match kind.as_str() {
        "hash" => {}
        "none" => return Ok(None),
        _ => {
            return Err(LockError::WrongType {
                name: name.to_owned(),
            });
        }
    }
    read_layout(core, name, pttl, &fields, queue, fair == 1)
        .map(Some)
        .ok_or_else(|| LockError::WrongType {
            name: name.to_owned(),
        })
}

/// The held locks whose names match `pattern` (`SCAN ... MATCH pattern TYPE
/// hash` on every master, then one inspect per hash that is a lock), sorted
/// by name. Hashes that are not locks are skipped, and so are locks freed
/// between the scan and their inspect.
pub(crate) async fn locks(core: &Core, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
    let names = core.conn.scan(pattern, "hash").await?;
    let mut found = Vec::new();
    for name in names {
        match inspect(core, &name).await {
            Ok(Some(info)) => found.push(info),
            Ok(None) | Err(LockError::WrongType { .. } | LockError::BadName { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(found)
}

/// Whether `field` can be a holder's field: `<client id>:<n>`, and for a
/// read-write lock's writer `<client id>:<n>:write`.
fn holder_field(field: &str) -> bool {
    let id = field.strip_suffix(":write").unwrap_or(field);
    matches!(
        id.rsplit_once(':'),
        Some((client, n)) if !client.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    )
}

/// Makes a [`LockInfo`] of the script's answer; `None` when the hash is
/// not a lock (a field that is no holder id, a count that is no number).
fn read_layout(
    core: &Core,
    name: &str,
    pttl: i64,
    fields: &[String],
    queue: Vec<String>,
    fair: bool,
) -> Option<LockInfo> {
    let mut mode = None;
    let mut holders = Vec::new();
    for pair in fields.chunks(2) {
        let [field, value] = pair else { continue };
        if field == "mode" {
            mode = Some(if value == "write" {
                RwMode::Write
            } else {
                RwMode::Read
            });
            continue;
        }
        if !holder_field(field) {
            return None;
        }
        holders.push((field.as_str(), value.parse::<u64>().ok()?));
    }
    let own = format!("{}:", core.id);
    let holders = holders
        .into_iter()
        .map(|(field, count)| {
            let (id, write) = match field.strip_suffix(":write") {
                Some(id) if mode.is_some() => (id, true),
                _ => (field, false),
            };
            let guards = if id.starts_with(&own) {
                core.own.guards(name, id)
            } else {
                Vec::new()
            };
            HolderInfo {
                id: id.to_owned(),
                count,
                write,
                guards,
            }
        })
        .collect();
    let kind = match (mode, fair) {
        (Some(_), _) => LockKind::ReadWrite,
        (None, true) => LockKind::Fair,
        (None, false) => LockKind::Reentrant,
    };
    Some(LockInfo {
        name: name.to_owned(),
        kind,
        mode,
        holders,
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        queue,
    })
}

/// Deletes lock `name` whatever its kind and wakes every waiter; a fair
/// lock's queue goes too. Whether a lock was there.
pub(crate) async fn force_unlock(core: &Core, name: &str) -> Result<bool, LockError> {
    crate::request::check_name(name)?;
    core.conn.check_slot_name(name)?;
    let deleted: i64 = SCRIPTS
        .force_unlock
        .key(name)
        .key(keys::lock_channel(name))
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .key(keys::rw_channel(name))
        .key(keys::tagged(name))
        .key(keys::holds_key(name))
        .arg(core.conn.publish_command())
        .invoke_async(&mut core.conn.clone())
        .await
        .map_err(|e| LockError::from_redis(name, e))?;
    if deleted == 1 {
        tracing::warn!(lock = name, "force-unlocked");
    }
    Ok(deleted == 1)
}

/// Operations: what a lock looks like, and freeing a stuck one.
impl crate::client::LockClient {
    /// What lock `name` looks like in Redis, whatever its kind (recognised
    /// by its layout, see [`LockInfo`]): its holders with their hold counts,
    /// the remaining lease, a fair lock's queue, a read-write lock's mode.
    /// `None` when it is free. For holder ids of this client, each holder
    /// also lists its live guards (token, task, age). Works on locks held
    /// by any client, Redisson's included. Read in one script call.
    ///
    /// Fails with [`LockError::WrongType`] when the key holds something
    /// that is not a lock.
    pub async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let name = name.to_owned();
        match self.engine() {
            Engine::Redis(core) => {
                let core = core.clone();
                self.on_background(async move { inspect(&core, &name).await })
                    .await?
            }
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => {
                let etcd = etcd.clone();
                self.on_background(async move { etcd::inspect(&etcd, &name).await })
                    .await?
            }
        }
    }

    /// The held locks whose names match `pattern` (glob-style, as Redis
    /// `SCAN ... MATCH`: `"stock:*"`; `"*"` for all), with what
    /// [`inspect`](Self::inspect) tells of each, sorted by name. Scans every
    /// master of a cluster. Hashes that are not locks are skipped.
    ///
    /// An operator's tool: it walks the whole key space (`SCAN`, which does
    /// not block the server, then one call per lock found). A lock taken or
    /// freed during the walk may or may not be listed.
    pub async fn locks(&self, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
        let pattern = pattern.to_owned();
        match self.engine() {
            Engine::Redis(core) => {
                let core = core.clone();
                self.on_background(async move { locks(&core, &pattern).await })
                    .await?
            }
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => {
                let etcd = etcd.clone();
                self.on_background(async move { etcd::locks(&etcd, &pattern).await })
                    .await?
            }
        }
    }

    /// Frees lock `name` whatever its kind and whoever holds it, and wakes
    /// every waiter (Redisson's `forceUnlock`): the lock's hash goes, with a
    /// read-write lock's read holds and a fair lock's queue (its waiters ask
    /// again when woken). The fencing token counter stays, so tokens keep
    /// rising. Returns whether a lock was there.
    ///
    /// The holder is not told at once: its guard learns the loss at its next
    /// renewal (watchdog leases; [`LockGuard::lost`](crate::LockGuard::lost)
    /// resolves) or at its release ([`LockError::Lost`]). An operator's tool
    /// for a lock whose holder is stuck; a working holder loses its
    /// exclusion.
    pub async fn force_unlock(&self, name: &str) -> Result<bool, LockError> {
        let name = name.to_owned();
        match self.engine() {
            Engine::Redis(core) => {
                let core = core.clone();
                self.on_background(async move { force_unlock(&core, &name).await })
                    .await?
            }
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => {
                let etcd = etcd.clone();
                self.on_background(async move { etcd::force_unlock(&etcd, &name).await })
                    .await?
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::holder_field;

    #[test]
    fn holder_fields_are_client_ids_and_numbers() {
        for ok in ["6f1c:57", "a:b:1", "c:1:write"] {
            assert!(holder_field(ok), "{ok}");
        }
        for bad in ["price", ":1", "c:", "c:x", "c:1:read", "write"] {
            assert!(!holder_field(bad), "{bad}");
        }
    }
}
