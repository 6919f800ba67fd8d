//! The undoing of an acquisition on etcd that failed or was dropped
//! ([`Made`]): its key deleted, its fixed lease revoked.

use std::sync::Arc;
use tokio::time::Instant;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use tokio::sync::oneshot;

use super::Etcd;
use super::session::{Claim, Session};
use crate::error::LockError;
use crate::holder::Who;
use crate::kept::Undo;

/// What an acquisition has made in etcd so far, undone when it fails or
/// is dropped (see [`crate::kept::Pending`]): its key deleted, its fixed
/// lease revoked.
pub(crate) struct Made {
    pub(super) etcd: Arc<Etcd>,
    /// The session the key is bound to while it waits.
    pub(super) session: Option<Arc<Session>>,
    /// The key, claimed on the session (see `Session::claim`) once a create
    /// may have been sent.
    pub(super) key: Option<Claim>,
    /// The fixed lease the key was moved to, and when it counts as lost.
    pub(super) fixed: Option<(i64, Instant)>,
    /// Resolves once the last create sent has its answer (or never will):
    /// the undo waits for it, so a create that reaches etcd after its
    /// caller left cannot outlive the delete.
    pub(super) answered: Option<oneshot::Receiver<()>>,
    /// A create of the key was sent by this acquisition: a key found under
    /// its name with its holder id is its own (an earlier try's whose answer
    /// was lost).
    pub(super) sent: bool,
    /// The hold it is for.
    pub(super) who: Arc<Who>,
    /// The value of the key it makes: its holder id (a permit's with its
    /// semaphore's bound, `layout::value`).
    pub(super) value: String,
}

/// The undo deletes the key and revokes the fixed lease once the last
/// create sent has its answer (at most twice the response timeout). The
/// delete names the holder id (the key's value), so it never takes a key
/// made by another acquisition: a later one of this client (the turn
/// passes on after the first try), or an earlier hold kept by
/// `hold_at_least`. If the first try failed, the key may still be there,
/// and the client's next acquisition of the name waits for it like any
/// earlier key, while this keeps trying, as long as the session lives; a
/// create that lands later still is swept by the session (see
/// `Session::claim`).
impl Undo for Made {
    fn take(&mut self) -> Option<Made> {
        if self.key.is_none() && self.fixed.is_none() {
            return None;
        }
        Some(Made {
            etcd: self.etcd.clone(),
            session: self.session.clone(),
            key: self.key.take(),
            fixed: self.fixed.take(),
            answered: self.answered.take(),
            sent: self.sent,
            who: self.who.clone(),
            value: self.value.clone(),
        })
    }

    async fn clear(&mut self) -> Result<(), LockError> {
        let etcd = self.etcd.clone();
        if let Some(answered) = self.answered.take() {
            let _ = tokio::time::timeout(etcd.config.response_timeout * 2, answered).await;
        }
        let deleted = match &self.key {
            Some(claim) => {
                let delete = Txn::new()
                    .when([Compare::value(
                        claim.key(),
                        CompareOp::Equal,
                        self.value.as_str(),
                    )])
                    .and_then([TxnOp::delete(claim.key(), None)]);
                let mut kv = etcd.client().kv_client();
                etcd.call(kv.txn(delete)).await.map(drop)
            }
            None => Ok(()),
        };
        if deleted.is_ok() {
            // Done: the claim goes with it.
            self.key = None;
        }
        let revoked = match self.fixed {
            Some((id, _)) => {
                let mut leases = etcd.client().lease_client();
                etcd.call(leases.revoke(id)).await.map(drop)
            }
            None => Ok(()),
        };
        if revoked.is_ok() {
            self.fixed = None;
        }
        deleted.and(revoked)
    }

    fn may_outlive(&self) -> bool {
        !self.session.as_ref().is_some_and(|s| s.is_lost())
    }

    fn what(&self) -> String {
        self.key
            .as_ref()
            .map_or_else(String::new, |claim| claim.key().to_owned())
    }
}
