//! The operations on any lock or semaphore on ZooKeeper, foreign holders
//! (Curator) included: `inspect`, `locks` (lockctl's list) and
//! `force_unlock`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use zookeeper_client as zk;

use super::layout::{self, Contender, Term, check_name, contenders, read_data};
use super::session::Session;
use super::{Zk, store_error};
use crate::error::LockError;
use crate::info::LockInfo;
use crate::kept::line;

/// The children of lock node `lock` (empty when it has none).
async fn children(zk: &Zk, session: &Session, lock: &str) -> Result<Vec<String>, LockError> {
    match zk.call(session, session.client.list_children(lock)).await {
        Ok(children) => Ok(children),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(store_error(e)),
    }
}

/// The data and stat of each node `parent/<child>` (`None` for one that
/// went meanwhile), in one round trip.
async fn read<'a>(
    zk: &Zk,
    session: &Session,
    parent: &str,
    children: impl Iterator<Item = &'a str>,
) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>, LockError> {
    // Every read sent before the first answer is awaited: one round trip.
    let reads: Vec<_> = children
        .map(|child| session.client.get_data(&format!("{parent}/{child}")))
        .collect();
    let mut out = Vec::with_capacity(reads.len());
    for read in reads {
        // Not through `Zk::call`: sent before the earlier answers came, a
        // read's answer would confirm the session from too late a time.
        let read = tokio::time::timeout(zk.config.response_timeout, read).await;
        out.push(match read.unwrap_or(Err(zk::Error::Timeout)) {
            Ok(read) => Some(read),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(store_error(e)),
        });
    }
    Ok(out)
}

/// A node's holder id: the one in its data (this crate's), else (Curator
/// writes the host's address) the child's name.
fn holder_of(child: &str, data: &[u8]) -> String {
    match read_data(data).0 {
        Some(id) => id.to_owned(),
        None => child.to_owned(),
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
/// contender that is not one; the queue is the rest, in order. A name
/// with no contender but a `leases` child is a semaphore's
/// ([`inspect_permits`]).
pub(crate) async fn inspect(zk: &Arc<Zk>, name: &str) -> Result<Option<LockInfo>, LockError> {
    check_name(name)?;
    let session = zk.session().await?;
    let lock = zk.lock_path(name);
    let children = children(zk, &session, &lock).await?;
    let found = contenders(&children);
    if found.is_empty() && children.iter().any(|c| c == layout::LEASES) {
        return inspect_permits(zk, &session, name).await;
    }
    let read = read(zk, &session, &lock, found.iter().map(|c| c.child.as_str())).await?;
    let present: Vec<(Contender, Vec<u8>)> = found
        .into_iter()
        .zip(read)
        .filter_map(|(c, read)| read.map(|(d, _)| (c, d)))
        .collect();
    let Some((_, first)) = present.first() else {
        return Ok(None);
    };
    let ttl = ttl_of(first);
    let line = present
        .iter()
        .map(|(contender, data)| line::Contender {
            side: contender.side,
            id: holder_of(&contender.child, data),
            kept: matches!(read_data(data).1, Some(Term::Kept(_))),
        })
        .collect();
    Ok(line::info(name, line, &zk.records, &zk.own, ttl))
}

/// A semaphore's leases that hold, and its queue.
struct Permits {
    /// Each lease that holds: its child name, holder id, data and stat.
    held: Vec<(String, String, Vec<u8>, zk::Stat)>,
    /// The holder ids of the acquisitions in its mutex's line.
    queue: Vec<String>,
}

/// The permits of the semaphore at lock node `semaphore` (Curator's
/// `InterProcessSemaphoreV2` layout), in two round trips. The lease of the
/// mutex's holder does not hold yet when it is ours (it waits for room,
/// or is being let in); a Curator client's waiting lease looks like a
/// held one, and counts as one.
async fn permits(zk: &Zk, session: &Session, semaphore: &str) -> Result<Permits, LockError> {
    let (leases, mutex) = (
        format!("{semaphore}/{}", layout::LEASES),
        format!("{semaphore}/{}", layout::LOCKS),
    );
    let (listed, line) = tokio::join!(
        children(zk, session, &leases),
        children(zk, session, &mutex)
    );
    let (listed, line) = (listed?, contenders(&line?));
    let found = layout::leases(&listed);
    let waiting = line.iter().map(|c| c.child.as_str());
    let (read, waiting) = tokio::join!(
        read(zk, session, &leases, found.iter().copied()),
        read(zk, session, &mutex, waiting)
    );
    let queue: Vec<String> = line
        .iter()
        .zip(waiting?)
        .filter_map(|(c, read)| read.map(|(data, _)| holder_of(&c.child, &data)))
        .collect();
    // The mutex's holder, when it is ours: its lease is not in yet.
    let admitting = queue
        .first()
        .filter(|id| read_data(id.as_bytes()).0.is_some());
    let held = found
        .iter()
        .zip(read?)
        .filter_map(|(child, read)| read.map(|(data, stat)| (child, data, stat)))
        .map(|(child, data, stat)| ((*child).to_owned(), holder_of(child, &data), data, stat))
        .filter(|(_, id, _, _)| Some(id) != admitting)
        .collect();
    Ok(Permits { held, queue })
}

/// What semaphore `name` looks like (see [`permits`]); `None` when no
/// permit is held. Each holder has its token (its lease's `czxid`) and
/// what its node says of its term.
async fn inspect_permits(
    zk: &Zk,
    session: &Session,
    name: &str,
) -> Result<Option<LockInfo>, LockError> {
    let Permits { held, queue } = permits(zk, session, &zk.lock_path(name)).await?;
    let held = held
        .into_iter()
        .map(|(_, id, data, stat)| line::Permit {
            kept: matches!(read_data(&data).1, Some(Term::Kept(_))),
            token: u64::try_from(stat.czxid).ok(),
            lease_left: ttl_of(&data),
            id,
        })
        .collect();
    Ok(line::permits(name, held, queue, &zk.records, &zk.own))
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
/// holder, and the old holders' guards report the loss. A semaphore's
/// leases that hold (see [`permits`]) are deleted: its permits are freed
/// (their guards report the loss), and the acquisition that waits for
/// room in its mutex gets in, then the next ones in its line. Whether
/// there was a holder.
pub(crate) async fn force_unlock(zk: &Arc<Zk>, name: &str) -> Result<bool, LockError> {
    check_name(name)?;
    let session = zk.session().await?;
    let lock = zk.lock_path(name);
    let children = children(zk, &session, &lock).await?;
    let contenders = contenders(&children);
    let held = line::holding(contenders.iter().map(|c| c.side));
    let mut doomed: Vec<String> = contenders[..held]
        .iter()
        .map(|holder| format!("{lock}/{}", holder.child))
        .collect();
    if children.iter().any(|c| c == layout::LEASES) {
        let leases = format!("{lock}/{}", layout::LEASES);
        let held = permits(zk, &session, &lock).await?.held;
        doomed.extend(held.iter().map(|(child, ..)| format!("{leases}/{child}")));
    }
    // Every delete sent before the first answer is awaited: one round
    // trip (a waiter let in by the first sees the others gone at once).
    let deletes: Vec<_> = doomed
        .iter()
        .map(|path| session.client.delete(path, None))
        .collect();
    let mut freed = false;
    for (path, delete) in doomed.iter().zip(deletes) {
        let deleted = tokio::time::timeout(zk.config.response_timeout, delete).await;
        match deleted.unwrap_or(Err(zk::Error::Timeout)) {
            Ok(()) => freed = true,
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(store_error(e)),
        }
        told_at_once(zk, name, path);
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
