//! Taking a hold on ZooKeeper: the process queue (mutex nodes), the node
//! made on the client's session, and the wait for the contenders before it
//! (a watch on the last one that keeps it out); the undoing of all that
//! when the acquisition fails or is dropped is `undo`'s.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;
use tokio::time::Instant;

use tokio::sync::OwnedMutexGuard;
use zookeeper_client as zk;

use super::hold::{Record, lost, reenter};
use super::layout::{self, Contender, Term, blocker, check_name, contenders};
use super::session::Session;
use super::turn::wait_for_turn;
use super::undo::{Made, Node, clear};
use super::{Zk, store_error};
use crate::clock::valid_until;
use crate::error::LockError;
use crate::holder::Who;
use crate::kept::Access;
use crate::kept::{Taking, listed};
use crate::request::{Kind, Request};

/// A hold taken in ZooKeeper.
type Taken = crate::kept::Taken<()>;

impl Taking for Zk {
    crate::kept::taking_fields!(client | z | z, take by module);

    type Record = Record;
    type Made = Made;
    type More = ();
    const ENGINE: &'static str = super::ENGINE;

    fn check(request: &Request) -> Result<(), LockError> {
        check_name(&request.name)
    }

    fn made(self: &Arc<Self>, _who: &Arc<Who>) -> Made {
        Made {
            zk: self.clone(),
            node: None,
            mutex: None,
        }
    }

    fn record(
        self: &Arc<Self>,
        request: &Request,
        who: &Arc<Who>,
        under: Option<&Arc<Record>>,
        taken: &Taken,
        made: &mut Made,
        turn: Option<OwnedMutexGuard<()>>,
    ) -> Result<Arc<Record>, LockError> {
        let Some(Node {
            session,
            child: Some(child),
            lock,
            ..
        }) = made.node.take()
        else {
            return Err(lost(&request.name));
        };
        let fixed = (request.lease.fixed()).map(|lease| Mutex::new(valid_until(taken.sent, lease)));
        let record = Arc::new(Record {
            zk: self.clone(),
            base: crate::kept::Base::new(who, turn, under),
            side: Access::from(request.kind),
            path: format!("{lock}/{child}"),
            session,
            bound: OnceLock::new(),
            fixed,
            timer: OnceLock::new(),
        });
        Ok(listed(&self.records, record, under))
    }
}

/// One try at the hold: the node made on the session (its parents made
/// first when missing), sent together with a read of the lock's children
/// ([`created_listed`]), then, if contenders before it keep it out, the
/// wait for them to go. The lock's own node is never written (issue 34:
/// Curator never touches it, and its data and watches are its owner's).
async fn take(
    zk: &Arc<Zk>,
    request: &Request,
    who: &Who,
    under: Option<&Arc<Record>>,
    pending: &mut Made,
) -> Result<Taken, LockError> {
    if let Kind::Semaphore(permits) = request.kind {
        return super::permit::take(zk, request, who, permits, pending).await;
    }
    let holder = who.holder.as_str();
    // An earlier try's node (its answer lost, or its session gone) first.
    // Cleared by reference: dropped meanwhile, the acquisition's undo
    // still knows it.
    if let Some(made) = &pending.node {
        clear(zk, made).await?;
        pending.node = None;
    }
    let session = zk.session().await?;
    let (name, side) = (request.name.as_str(), Access::from(request.kind));
    let lock = zk.lock_path(name);
    let id = zk.protected_id();
    let path = layout::create_path(side, &lock, &id);
    let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let term = |session: &Session| match request.lease.fixed() {
        Some(lease) => Term::Until(SystemTime::now() + lease),
        None => Term::Session(session.timeout()),
    };
    let data = layout::data(holder, term(&session));
    let mut sent;
    let (ours, listed) = loop {
        pending.node = Some(Node {
            session: session.clone(),
            lock: lock.clone(),
            id: id.clone(),
            child: None,
        });
        sent = Instant::now();
        let first = created_listed(zk, &session, &path, &data, &mode, &lock).await;
        let created = match first {
            Ok(created) => created,
            Err(e) => return Err(store_error(e)),
        };
        match created {
            Ok((child, listed)) => {
                if let Some(made) = pending.node.as_mut() {
                    made.child = Some(child.clone());
                }
                let ours = Contender::of(&child).ok_or_else(|| LockError::Store {
                    engine: super::ENGINE,
                    message: format!("lock `{}`: the server named our node {child:?}", name),
                    transient: false,
                })?;
                break (ours, listed);
            }
            // The lock's node (or the root) is missing: made, as
            // containers, and the create sent again.
            Err(zk::Error::NoNode) => {
                pending.node = None;
                let parents = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
                Box::pin(zk.call(&session, session.client.mkdir(&lock, &parents)))
                    .await
                    .map_err(store_error)?;
            }
            Err(e) => {
                // Refused: nothing was made.
                if super::is_refusal(&e) {
                    pending.node = None;
                }
                return Err(store_error(e));
            }
        }
    };
    // A semaphore's leases at the name keep every lock out (a permit's
    // try looks for contenders in turn): one kind per name.
    let leased = listed.as_ref().map_or(true, |(children, _)| {
        children.iter().any(|c| c == layout::LEASES)
    });
    if leased && super::permit::any_lease(zk, &session, &lock).await? {
        return Err(LockError::WrongType {
            name: name.to_owned(),
        });
    }
    // Alone, the read's `pzxid` is the token (see [`first_in_line`]),
    // ours alone: the hold begins there, after every earlier holder's
    // end, and no reader let in with ours shares it.
    let alone = matches!(&listed, Ok((children, _)) if children.len() == 1);
    let first = match under {
        // Under this client's write: ours at once if the write's node is
        // still there now that ours is made (it keeps everyone else out);
        // a write of its own (below) gives it its token.
        Some(write) => {
            let (children, stat) = match listed {
                Ok(listed) => listed,
                Err(_) => zk
                    .call(&session, session.client.get_children(&lock))
                    .await
                    .map_err(store_error)?,
            };
            let child = write.path.rsplit('/').next().unwrap_or_default();
            if write.is_lost() || !children.iter().any(|c| c == child) {
                return Err(lost(name));
            }
            Ok(Some(u64::try_from(stat.pzxid).unwrap_or(0)))
        }
        None => listed.map(|(children, stat)| first_in_line(&children, &ours, &stat)),
    };
    // A read that failed: the wait reads again.
    let token = first.unwrap_or(None);
    let mut waited = false;
    let token = match token {
        Some(token) => token,
        None => {
            waited = true;
            if request.once() {
                return Err(request.timed_out());
            }
            match wait_for_turn(zk, &session, request, &lock, &ours).await? {
                Some(token) => {
                    sent = Instant::now();
                    token
                }
                None => {
                    // Our node went while we waited (the session expired,
                    // someone deleted it): try again, at the back of the line.
                    pending.node = None;
                    return Err(LockError::Store {
                        engine: super::ENGINE,
                        message: format!("lock `{name}`: the waiter's node was deleted"),
                        transient: true,
                    });
                }
            }
        }
    };
    // Readers let in together would share the lock node's zxid: a write
    // of its own gives each its token. A fixed lease counts from the turn:
    // its node says so.
    let token = if (side == Access::Read && !alone) || (waited && !request.lease.renewed) {
        sent = Instant::now();
        let node = format!("{lock}/{}", ours.child);
        let data = layout::data(holder, term(&session));
        match zk
            .call(&session, session.client.set_data(&node, &data, None))
            .await
        {
            Ok(stat) => u64::try_from(stat.mzxid).unwrap_or(0),
            // Deleted at its turn: try again, at the back of the line.
            Err(zk::Error::NoNode) => {
                pending.node = None;
                return Err(LockError::Store {
                    engine: super::ENGINE,
                    message: format!("lock `{name}`: the node was deleted at its turn"),
                    transient: true,
                });
            }
            Err(e) => return Err(store_error(e)),
        }
    } else {
        token
    };
    Ok(Taken {
        token,
        sent,
        more: (),
    })
}

/// A create's answer: our child's name and the lock's children read
/// right after it, or the server's refusal (nothing was made).
type Created = Result<(String, Listed), zk::Error>;

/// The lock's children and its node's stat, as a read answered them.
type Listed = Result<(Vec<String>, zk::Stat), zk::Error>;

/// The create and a read of the lock's children, sent at once (requests
/// of one session are served in order): answered, or refused, if either
/// is (a pair of failures is no answer: it must not confirm the session).
async fn created_listed(
    zk: &Zk,
    session: &Session,
    path: &str,
    data: &[u8],
    mode: &zk::CreateOptions<'_>,
    lock: &str,
) -> Result<Created, zk::Error> {
    let both = {
        let create = session.client.create(path, data, mode);
        let list = session.client.get_children(lock);
        async move {
            let (created, listed) = tokio::join!(create, list);
            match (&created, &listed) {
                (Err(e), Err(_)) if !super::is_refusal(e) => Err(e.clone()),
                _ => Ok((created, listed)),
            }
        }
    };
    let (created, listed) = Box::pin(zk.call(session, both)).await?;
    let prefix = &path[path.rfind('/').map_or(0, |at| at + 1)..];
    Ok(created.map(|(_, sequence)| (format!("{prefix}{sequence}"), listed)))
}

/// The token when `ours` is first in line among `children` (no contender
/// before it keeps it out): the lock node's `pzxid`, which is at least the
/// last child's create or deletion, so at least every earlier holder's
/// end. `None` while it must wait, or when it is not among them.
fn first_in_line(children: &[String], ours: &Contender, stat: &zk::Stat) -> Option<u64> {
    let all = contenders(children);
    if !all.iter().any(|c| c.child == ours.child) || blocker(&all, ours).is_some() {
        return None;
    }
    Some(u64::try_from(stat.pzxid).unwrap_or(0))
}
