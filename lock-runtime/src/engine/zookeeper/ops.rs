//! The operations on any lock on ZooKeeper, foreign holders (Curator)
//! included: `inspect`, `locks` (lockctl's list) and `force_unlock`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use zookeeper_client as zk;

use super::layout::{Contender, Term, check_name, contenders, read_data};
use super::{Zk, store_error};
use crate::error::LockError;
use crate::info::LockInfo;
use crate::kept::line;

/// The contenders of lock `name` in sequence order, each with its node's
/// data (`None` when it went meanwhile); empty when the lock has no node.
async fn read(zk: &Arc<Zk>, name: &str) -> Result<Vec<(Contender, Option<Vec<u8>>)>, LockError> {
    let session = zk.session().await?;
    let lock = zk.lock_path(name);
    let children = match zk.call(&session, session.client.list_children(&lock)).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(e) => return Err(store_error(e)),
    };
    let found = contenders(&children);
    // Every read sent before the first answer is awaited: one round trip.
    let reads: Vec<_> = found
        .iter()
        .map(|c| session.client.get_data(&format!("{lock}/{}", c.child)))
        .collect();
    let mut out = Vec::with_capacity(found.len());
    for (contender, read) in found.into_iter().zip(reads) {
        // Not through `Zk::call`: sent before the earlier answers came, a
        // read's answer would confirm the session from too late a time.
        let read = tokio::time::timeout(zk.config.response_timeout, read).await;
        let data = match read.unwrap_or(Err(zk::Error::Timeout)) {
            Ok((data, _)) => Some(data),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(store_error(e)),
        };
        out.push((contender, data));
    }
    Ok(out)
}

/// A contender's holder id: the one in its data (this crate's), else
/// (Curator writes the host's address) the child's name.
fn holder_of(contender: &Contender, data: &[u8]) -> String {
    match read_data(data).0 {
        Some(id) => id.to_owned(),
        None => contender.child.clone(),
    }
}

/// How long the lock lasts by what its first holder's node says (see
/// [`Term`]): a session's timeout (the longest it outlives a holder that
/// stops now), or the time left of a fixed lease or a minimum, by this
/// host's clock; `None` for a node that does not say (Curator's).
fn ttl_of(data: &[u8]) -> Option<Duration> {
    let left = |at: SystemTime| at.duration_since(SystemTime::now()).unwrap_or_default();
    match read_data(data).1? {
        Term::Session(timeout) => Some(timeout),
        Term::Until(at) | Term::Kept(at) => Some(left(at)),
    }
}

/// What lock `name` looks like on ZooKeeper; `None` when nobody holds it.
/// The holders are the first contender, or the readers before the first
/// contender that is not one; the queue is the rest, in order.
pub(crate) async fn inspect(zk: &Arc<Zk>, name: &str) -> Result<Option<LockInfo>, LockError> {
    check_name(name)?;
    let read = read(zk, name).await?;
    let present: Vec<(Contender, Vec<u8>)> = read
        .into_iter()
        .filter_map(|(c, data)| data.map(|d| (c, d)))
        .collect();
    let Some((_, first)) = present.first() else {
        return Ok(None);
    };
    let ttl = ttl_of(first);
    let line = present
        .iter()
        .map(|(contender, data)| line::Contender {
            side: contender.side,
            id: holder_of(contender, data),
            kept: matches!(read_data(data).1, Some(Term::Kept(_))),
        })
        .collect();
    Ok(line::info(name, line, &zk.records, &zk.own, ttl))
}

/// The held locks whose names match `pattern` (`*` and `?` wildcards).
pub(crate) async fn locks(zk: &Arc<Zk>, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
    let session = zk.session().await?;
    let mut names = match zk
        .call(&session, session.client.list_children(&zk.root))
        .await
    {
        Ok(names) => names,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => return Err(store_error(e)),
    };
    names.retain(|name| crate::request::glob(pattern.as_bytes(), name.as_bytes()));
    names.sort();
    let mut infos = Vec::with_capacity(names.len());
    for name in names {
        if check_name(&name).is_err() {
            continue;
        }
        if let Some(info) = inspect(zk, &name).await? {
            infos.push(info);
        }
    }
    Ok(infos)
}

/// Deletes the holders' nodes of lock `name`: the next in line becomes
/// holder, and the old holders' guards report the loss. Whether there was
/// a holder.
pub(crate) async fn force_unlock(zk: &Arc<Zk>, name: &str) -> Result<bool, LockError> {
    check_name(name)?;
    let session = zk.session().await?;
    let lock = zk.lock_path(name);
    let children = match zk.call(&session, session.client.list_children(&lock)).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(false),
        Err(e) => return Err(store_error(e)),
    };
    let contenders = contenders(&children);
    let held = line::holding(contenders.iter().map(|c| c.side));
    let mut freed = false;
    for holder in &contenders[..held] {
        let path = format!("{lock}/{}", holder.child);
        match zk.call(&session, session.client.delete(&path, None)).await {
            Ok(()) => freed = true,
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(store_error(e)),
        }
        told_at_once(zk, name, &path);
    }
    Ok(freed)
}

/// A hold of this client on the node at `path`, deleted by its own
/// `force_unlock`, learns it at once (others' at their session's next
/// heartbeat).
fn told_at_once(zk: &Zk, name: &str, path: &str) {
    for record in crate::kept::records_of(&zk.records, name) {
        if record.path == path {
            super::session::Gone::gone(&*record);
        }
    }
}
