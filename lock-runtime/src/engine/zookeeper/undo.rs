//! The undoing of an acquisition on ZooKeeper that failed or was dropped
//! ([`Made`]): the nodes it made, or may have made, deleted (a lock's
//! contender; a permit's lease and its place in the semaphore's mutex).

use std::sync::Arc;

use zookeeper_client as zk;

use super::layout::made_by;
use super::session::Session;
use super::{Zk, store_error};
use crate::error::LockError;
use crate::kept::Undo;

/// A node an acquisition made, or may have made (a create whose answer
/// was lost): undone when the acquisition fails or is dropped.
pub(super) struct Node {
    pub(super) session: Arc<Session>,
    /// The lock's node.
    pub(super) lock: String,
    /// The create's protected id (`_c_<id>-`).
    pub(super) id: String,
    /// The child's name, once the create's answer is in.
    pub(super) child: Option<String>,
}

/// What an acquisition has made so far (see [`Pending`]): its node (a
/// lock's contender, a permit's lease) and, for a permit, its node in the
/// semaphore's mutex; deleted by the undo while their session lives.
///
/// [`Pending`]: crate::kept::undo::Pending
pub(crate) struct Made {
    pub(super) zk: Arc<Zk>,
    pub(super) node: Option<Node>,
    /// A permit's node in the semaphore's `locks` mutex: left here when
    /// its delete fails once the permit is in, for the undo to finish.
    pub(super) mutex: Option<Node>,
}

impl Undo for Made {
    fn take(&mut self) -> Option<Made> {
        if self.node.is_none() && self.mutex.is_none() {
            return None;
        }
        Some(Made {
            zk: self.zk.clone(),
            node: self.node.take(),
            mutex: self.mutex.take(),
        })
    }

    async fn clear(&mut self) -> Result<(), LockError> {
        // The lease first: a permit's place in the mutex keeps the other
        // acquisitions from counting leases until its lease is gone.
        if let Some(node) = &self.node {
            clear(&self.zk, node).await?;
            self.node = None;
        }
        if let Some(mutex) = &self.mutex {
            clear(&self.zk, mutex).await?;
            self.mutex = None;
        }
        Ok(())
    }

    fn may_outlive(&self) -> bool {
        [&self.node, &self.mutex]
            .into_iter()
            .flatten()
            .any(|n| !n.session.is_lost())
    }

    fn what(&self) -> String {
        [&self.node, &self.mutex]
            .into_iter()
            .flatten()
            .map(|n| n.lock.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Deletes the node `made` made: by its name when its create's answer is
/// in, else every child of its parent with its protected id (none when the
/// create never landed). Requests of one session are served in order, so
/// a create sent before this is seen by it. Nothing to do on a session
/// that is over (its nodes went with it). A session that cannot (the
/// runtime that drove it shut down, its link is down) may still be alive
/// on the server, its node with it: any session may delete a node, and
/// the client's own does, as a hold's release does (issue 34).
pub(super) async fn clear(zk: &Zk, made: &Node) -> Result<(), LockError> {
    let session = &made.session;
    if session.client.state().is_terminated() {
        return Ok(());
    }
    let Err(e) = clear_on(zk, made, session).await else {
        return Ok(());
    };
    match zk.sessions.live().filter(|own| !Arc::ptr_eq(own, session)) {
        Some(own) => match clear_on(zk, made, &own).await {
            Ok(()) => Ok(()),
            // A lost session's nodes go with it.
            Err(_) if session.is_lost() => Ok(()),
            Err(e) => Err(store_error(e)),
        },
        // A session lost by the clock takes its nodes with it when the
        // server expires it (the client library may not know yet).
        None if session.is_lost() => Ok(()),
        None => Err(store_error(e)),
    }
}

/// [`clear`] through `session`: the first failure, if any.
async fn clear_on(zk: &Zk, made: &Node, session: &Session) -> Result<(), zk::Error> {
    let children = match &made.child {
        Some(child) => vec![child.clone()],
        None => match zk
            .call(session, session.client.list_children(&made.lock))
            .await
        {
            Ok(children) => children
                .into_iter()
                .filter(|c| made_by(c, &made.id))
                .collect(),
            // No lock node: no child either.
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(e),
        },
    };
    for child in children {
        let path = format!("{}/{child}", made.lock);
        match zk.call(session, session.client.delete(&path, None)).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
