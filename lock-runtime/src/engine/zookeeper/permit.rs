//! Taking a permit of a semaphore on ZooKeeper, as Curator's
//! `InterProcessSemaphoreV2` does (see `layout` for the nodes): the
//! semaphore's mutex (`locks`) first, then a lease; the permit is in once
//! the leases number at most its bound, and the mutex goes only then.
//! Curator's clients and ours add leases under the same mutex and count
//! the same children, so they share the bound.
//!
//! Only the mutex's holder adds a lease, so at most one lease waits, and
//! a lease let in while the leases number at most N keeps the held ones at
//! most N. The first round trip sends the mutex's node, a read of the
//! mutex's line, the lease, a read of the leases and a read of the lock's
//! own children at once: the lease was made while the mutex was ours when
//! the line read before it shows our node first. When it does not, the
//! lease is deleted at once (a lease made out of turn only makes others
//! count more, never let in one too many) and made again once the mutex
//! is ours.

use std::sync::Arc;
use std::time::SystemTime;
use tokio::time::Instant;

use zookeeper_client as zk;

use super::layout::{self, Contender, Term, blocker, contenders};
use super::session::Session;
use super::turn::{session_ended, wait_for_turn};
use super::undo::{Node, clear};
use super::{Zk, is_refusal, store_error};
use crate::error::LockError;
use crate::holder::Who;
use crate::request::{Request, within};

/// A permit taken in ZooKeeper.
type Taken = crate::kept::Taken<()>;

/// A create's answer: the stat of the node made and its child name.
type Created = Result<(zk::Stat, String), zk::Error>;

/// A read of a node's children.
type Listed = Result<Vec<String>, zk::Error>;

/// The answers of a lease's create and the reads sent right after it: the
/// leases, and the children of the lock's own node (a lock's contenders
/// there refuse the permit).
struct Leased {
    lease: Created,
    leases: Listed,
    kinds: Listed,
}

/// One try at a permit of semaphore `request.name` of `permits` permits
/// for the hold `who` (see the module docs). Every node it makes is in
/// `pending` until the permit is in, so that a failed or dropped try
/// deletes them; the mutex's node is deleted before the permit is handed
/// out, as Curator releases it.
pub(super) async fn take(
    zk: &Arc<Zk>,
    request: &Request,
    who: &Who,
    permits: u32,
    pending: &mut super::undo::Made,
) -> Result<Taken, LockError> {
    // An earlier try's nodes (an answer lost, a session gone) first.
    // Cleared by reference: dropped meanwhile, the acquisition's undo
    // still knows them.
    for made in [&mut pending.node, &mut pending.mutex] {
        if let Some(node) = made.as_ref() {
            clear(zk, node).await?;
            *made = None;
        }
    }
    let session = zk.session().await?;
    let name = request.name.as_str();
    let semaphore = zk.lock_path(name);
    let mutex = format!("{semaphore}/{}", layout::LOCKS);
    let leases = format!("{semaphore}/{}", layout::LEASES);
    let permits = usize::try_from(permits).unwrap_or(usize::MAX);
    let data = layout::data(&who.holder, term(request, &session));
    let node = |parent: &str, id: &str| Node {
        session: session.clone(),
        lock: parent.to_owned(),
        id: id.to_owned(),
        child: None,
    };
    let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());

    // The mutex's node, the line, and a lease made in the same round trip.
    let (ours, line, mut lease) = loop {
        let (mutex_id, lease_id) = (zk.protected_id(), zk.protected_id());
        pending.mutex = Some(node(&mutex, &mutex_id));
        pending.node = Some(node(&leases, &lease_id));
        let sent = Instant::now();
        let mutex_path = layout::create_path(crate::kept::Access::Mutex, &mutex, &mutex_id);
        let lease_path = layout::lease_path(&leases, &lease_id);
        let both = {
            let created = session.client.create(&mutex_path, &data, &mode);
            let line = session.client.list_children(&mutex);
            let leased = leased(&session, &lease_path, &data, &mode, &leases, &semaphore);
            async {
                let (created, line, leased) = tokio::join!(created, line, leased);
                match &created {
                    Err(e) if !is_refusal(e) => Err(e.clone()),
                    _ => Ok((named(&mutex_path, created), line, leased)),
                }
            }
        };
        let (created, line, leased) = Box::pin(zk.call(&session, both))
            .await
            .map_err(store_error)?;
        if let (Ok((_, child)), Some(made)) = (&created, pending.mutex.as_mut()) {
            made.child = Some(child.clone());
        }
        if let (Ok((_, child)), Some(made)) = (&leased.lease, pending.node.as_mut()) {
            made.child = Some(child.clone());
        }
        let missing = |e: &Created| matches!(e, Err(zk::Error::NoNode));
        if missing(&created) || missing(&leased.lease) {
            // A parent is missing (a first use, or the server reaped an
            // empty container): what was made goes, the parents are made
            // as containers, and the creates are sent again.
            for made in [&mut pending.node, &mut pending.mutex] {
                if let Some(node) = made.as_ref() {
                    clear(zk, node).await?;
                    *made = None;
                }
            }
            let parents = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
            for parent in [&mutex, &leases] {
                Box::pin(zk.call(&session, session.client.mkdir(parent, &parents)))
                    .await
                    .map_err(store_error)?;
            }
            continue;
        }
        let (_, ours) = created.map_err(store_error)?;
        let ours = Contender::of(&ours).ok_or_else(|| strange(name, &ours))?;
        let line = line.map_err(store_error)?;
        break (ours, line, (leased, sent));
    };

    // Not first in the mutex's line: the lease was made out of turn. It
    // goes at once; a new one is made once the mutex is ours.
    if blocker(&contenders(&line), &ours).is_some() {
        if let Some(made) = pending.node.as_ref() {
            clear(zk, made).await?;
            pending.node = None;
        }
        if request.once() {
            return Err(request.timed_out());
        }
        match wait_for_turn(zk, &session, request, &mutex, &ours).await? {
            Some(_) => {}
            None => return Err(node_gone(name, "its node in the semaphore's mutex")),
        }
        let id = zk.protected_id();
        pending.node = Some(node(&leases, &id));
        let sent = Instant::now();
        let lease_path = layout::lease_path(&leases, &id);
        let again = leased(&session, &lease_path, &data, &mode, &leases, &semaphore);
        let again = Box::pin(zk.call(&session, async move {
            let again = again.await;
            match &again.lease {
                Err(e) if !is_refusal(e) => Err(e.clone()),
                _ => Ok(again),
            }
        }))
        .await
        .map_err(store_error)?;
        if let (Ok((_, child)), Some(made)) = (&again.lease, pending.node.as_mut()) {
            made.child = Some(child.clone());
        }
        if matches!(again.lease, Err(zk::Error::NoNode)) {
            // The server reaped the empty `leases` while we waited: the
            // next try makes it again.
            pending.node = None;
            return Err(node_gone(name, "the semaphore's `leases` node"));
        }
        lease = (again, sent);
    }

    let (
        Leased {
            lease,
            leases: listed,
            kinds,
        },
        mut sent,
    ) = lease;
    let (stat, child) = lease.map_err(store_error)?;
    let kinds = kinds.map_err(store_error)?;
    if !contenders(&kinds).is_empty() {
        // A lock's contenders at the name: one kind per name.
        return Err(LockError::WrongType {
            name: name.to_owned(),
        });
    }
    let listed = listed.map_err(store_error)?;
    let mut waited = false;
    if !listed.contains(&child) {
        pending.node = None;
        return Err(node_gone(name, "its lease"));
    }
    if listed.len() > permits {
        if request.once() {
            return Err(request.timed_out());
        }
        waited = true;
        match wait_for_room(zk, &session, request, &leases, &child, permits).await? {
            Some(admitted) => sent = admitted,
            None => {
                pending.node = None;
                return Err(node_gone(name, "its lease"));
            }
        }
    }

    // In: the mutex goes, as Curator releases it. A fixed lease counts
    // from now, and its node says so (one round trip with the delete).
    let lease_path = format!("{leases}/{child}");
    let rewritten = (waited && !request.lease.renewed)
        .then(|| layout::data(&who.holder, term(request, &session)));
    let held =
        (pending.mutex.as_ref()).and_then(|m| Some(format!("{}/{}", m.lock, m.child.as_ref()?)));
    if let Some(path) = held {
        let write = rewritten
            .as_ref()
            .map(|data| session.client.set_data(&lease_path, data, None));
        let delete = session.client.delete(&path, None);
        let (written, deleted) = zk
            .call(&session, async {
                let written = match write {
                    Some(write) => Some(write.await),
                    None => None,
                };
                let deleted = delete.await;
                match &deleted {
                    Err(e) if !is_refusal(e) => Err(e.clone()),
                    _ => Ok((written, deleted)),
                }
            })
            .await
            .unwrap_or((None, Err(zk::Error::ConnectionLoss)));
        // A mutex's node whose delete failed is the undo's (the
        // acquisition's leftovers are deleted in the background).
        if matches!(deleted, Ok(()) | Err(zk::Error::NoNode)) {
            pending.mutex = None;
        }
        if let Some(Err(zk::Error::NoNode)) = written {
            pending.node = None;
            return Err(node_gone(name, "its lease"));
        }
    }
    Ok(Taken {
        token: u64::try_from(stat.czxid).unwrap_or(0),
        sent,
        more: (),
    })
}

/// What a new node of hold `request` on `session` says of its term.
fn term(request: &Request, session: &Session) -> Term {
    match request.lease.fixed() {
        Some(lease) => Term::Until(SystemTime::now() + lease),
        None => Term::Session(session.timeout()),
    }
}

/// A create's answer as the stat and the child's name (the create's path
/// with the sequence ZooKeeper appended, less the parent).
fn named(path: &str, created: Result<(zk::Stat, zk::CreateSequence), zk::Error>) -> Created {
    let prefix = &path[path.rfind('/').map_or(0, |at| at + 1)..];
    created.map(|(stat, sequence)| (stat, format!("{prefix}{sequence}")))
}

/// A lease's create at `path` under `leases`, sent with a read of the
/// leases and one of the lock node `lock`'s children right after it (the
/// requests of one session are served in order).
fn leased<'a>(
    session: &'a Session,
    path: &'a str,
    data: &'a [u8],
    mode: &'a zk::CreateOptions<'_>,
    leases: &'a str,
    lock: &'a str,
) -> impl Future<Output = Leased> + Send + 'a {
    let lease = session.client.create(path, data, mode);
    let listed = session.client.list_children(leases);
    let kinds = session.client.list_children(lock);
    async move {
        let (lease, leases, kinds) = tokio::join!(lease, listed, kinds);
        Leased {
            lease: named(path, lease),
            leases,
            kinds,
        }
    }
}

/// Waits, holding the mutex, until the leases under `leases` number at
/// most `permits`, with `ours` among them: each time, a read of them that
/// watches them, and a wait for any change (no polling). The send time of
/// the read that let it in; `None` when our lease is gone.
async fn wait_for_room(
    zk: &Zk,
    session: &Session,
    request: &Request,
    leases: &str,
    ours: &str,
    permits: usize,
) -> Result<Option<Instant>, LockError> {
    loop {
        let sent = Instant::now();
        let read = zk
            .call(session, session.client.get_and_watch_children(leases))
            .await;
        let (children, _, watcher) = match read {
            Ok(read) => read,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(store_error(e)),
        };
        if !children.iter().any(|c| c == ours) {
            return Ok(None);
        }
        // A session lost by the clock would hand on a permit already lost.
        if session.is_lost() {
            return Err(session_ended(request, "its session counts as lost"));
        }
        if children.len() <= permits {
            return Ok(Some(sent));
        }
        drop(children);
        let event = tokio::select! {
            biased;
            event = async { within!(watcher.changed(), request.deadline, request) } => event?,
            () = session.lost() => {
                return Err(session_ended(request, "its session counts as lost"));
            }
        };
        if matches!(event.event_type, zk::EventType::Session) {
            session.retire();
            return Err(session_ended(request, "its session ended"));
        }
    }
}

/// Whether the semaphore at lock node `lock` has a lease now (a lock's
/// try looks, when the node has a `leases` child: one kind per name).
pub(super) async fn any_lease(zk: &Zk, session: &Session, lock: &str) -> Result<bool, LockError> {
    let leases = format!("{lock}/{}", layout::LEASES);
    match zk
        .call(session, session.client.list_children(&leases))
        .await
    {
        Ok(children) => Ok(!layout::leases(&children).is_empty()),
        Err(zk::Error::NoNode) => Ok(false),
        Err(e) => Err(store_error(e)),
    }
}

/// The error of a try whose node went (a `force_unlock`, a session that
/// ended): the next try starts again.
fn node_gone(name: &str, what: &str) -> LockError {
    LockError::Store {
        engine: super::ENGINE,
        message: format!("semaphore `{name}`: {what} was deleted"),
        transient: true,
    }
}

/// The error of a child name the server gave that is not the one asked.
fn strange(name: &str, child: &str) -> LockError {
    LockError::Store {
        engine: super::ENGINE,
        message: format!("semaphore `{name}`: the server named our node {child:?}"),
        transient: false,
    }
}
