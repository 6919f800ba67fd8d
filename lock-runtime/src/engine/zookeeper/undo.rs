//! The undoing of an acquisition on ZooKeeper that failed or was dropped
//! ([`Made`]): the node it made, or may have made, deleted.

use std::sync::Arc;

use zookeeper_client as zk;

use super::layout::Contender;
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

/// What an acquisition has made so far (see [`Pending`]): its node,
/// deleted by the undo while its session lives.
pub(crate) struct Made {
    pub(super) zk: Arc<Zk>,
    pub(super) node: Option<Node>,
}

impl Undo for Made {
    fn take(&mut self) -> Option<Made> {
        let node = self.node.take()?;
        Some(Made {
            zk: self.zk.clone(),
            node: Some(node),
        })
    }

    async fn clear(&mut self) -> Result<(), LockError> {
        match &self.node {
            Some(node) => clear(&self.zk, node).await,
            None => Ok(()),
        }
    }

    fn may_outlive(&self) -> bool {
        self.node.as_ref().is_some_and(|n| !n.session.is_lost())
    }

    fn what(&self) -> String {
        self.node
            .as_ref()
            .map_or_else(String::new, |n| n.lock.clone())
    }
}

/// Deletes the node `made` made: by its name when its create's answer is
/// in, else every child of the lock with its protected id (none when the
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
                .filter(|c| Contender::of(c).is_some_and(|c| c.made_by(&made.id)))
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
