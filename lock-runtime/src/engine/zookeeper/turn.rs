//! A contender's wait for its turn in a line of nodes (a lock's, and a
//! semaphore's `locks` mutex), below both `take` and `permit`: the watch
//! on the last node that keeps it out, and the error of a waiter whose
//! session ended.

use zookeeper_client as zk;

use super::layout::{Contender, blocker, contenders};
use super::session::Session;
use super::{Zk, store_error};
use crate::error::LockError;
use crate::request::{Request, within};

/// Waits until no contender before `ours` keeps it out: each time, watches
/// the last one that does and reads the children again once it is gone
/// (no herd). Returns the token ([`first_in_line`]), or `None` when our
/// node is gone.
pub(super) async fn wait_for_turn(
    zk: &Zk,
    session: &Session,
    request: &Request,
    lock: &str,
    ours: &Contender,
) -> Result<Option<u64>, LockError> {
    loop {
        let (children, stat) = zk
            .call(session, session.client.get_children(lock))
            .await
            .map_err(store_error)?;
        let all = contenders(&children);
        if !all.iter().any(|c| c.child == ours.child) {
            return Ok(None);
        }
        // A session lost by the clock (a blip past most of its timeout)
        // would hand on a hold already lost: start again on a new one.
        if session.is_lost() {
            return Err(session_ended(request, "its session counts as lost"));
        }
        let Some(before) = blocker(&all, ours) else {
            return Ok(Some(u64::try_from(stat.pzxid).unwrap_or(0)));
        };
        let path = format!("{lock}/{}", before.child);
        drop(children);
        loop {
            let (there, watcher) = zk
                .call(session, session.client.check_and_watch_stat(&path))
                .await
                .map_err(store_error)?;
            if there.is_none() {
                break;
            }
            let event = tokio::select! {
                biased;
                event = async { within!(watcher.changed(), request.deadline, request) } => event?,
                () = session.lost() => {
                    return Err(session_ended(request, "its session counts as lost"));
                }
            };
            match event.event_type {
                zk::EventType::NodeDeleted => break,
                zk::EventType::Session => {
                    session.retire();
                    return Err(session_ended(request, "its session ended"));
                }
                // Its data changed (a re-entry): watched again.
                _ => {}
            }
        }
    }
}

/// The error of a waiter whose session ended or counts as lost: it tries
/// again on a new session (its node is cleared first).
pub(super) fn session_ended(request: &Request, why: &str) -> LockError {
    LockError::Store {
        engine: super::ENGINE,
        message: format!("lock `{}`: the waiter stopped waiting: {why}", request.name),
        transient: true,
    }
}
