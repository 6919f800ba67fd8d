//! A client's record of its row of one name on the SQL engines, shared by
//! a hold and its re-entries ([`Record`]): what it knows of the row, and
//! what any engine's statements ([`Rows`]) let it do on its own. Taking,
//! renewing and giving it back are `hold`'s.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use super::{Rows, UNKNOWN_TOKEN};
use crate::clock::valid_until;
use crate::kept::Hold;
use crate::request::Kind;

/// A client's one row for one name, shared by a hold and its re-entries.
/// The process queue's turn is kept until it is dropped, after the row is
/// given back.
pub(crate) struct Record<S: Rows> {
    pub(crate) store: Arc<S>,
    /// Who the hold is, its chain's count, its loss, its turn and its
    /// downgrade.
    pub(crate) base: crate::kept::Base<Record<S>>,
    /// A plain lock's row, or a fair lock's, a reader's or a writer's
    /// ticket and row (see [`queue`](super::queue)).
    pub(super) side: Kind,
    /// Until when the hold counts, by this client's clock: the last
    /// confirmed renewal's send time plus the lease (less the safety
    /// margin), or a fixed lease's end.
    pub(super) until: Mutex<Instant>,
    /// A fixed lease: nothing renews the row.
    pub(super) fixed: bool,
    /// Its row is kept by a `hold_at_least` minimum (its holder id marked
    /// kept).
    pub(super) kept: AtomicBool,
    /// The row's token as the record last knew it (its acquisition's, then
    /// its re-entries'), or [`UNKNOWN_TOKEN`]: a plain lock's release
    /// announces the name when the row's token moved past it (PostgreSQL's
    /// waiters mark a held row by raising it).
    pub(super) token: AtomicI64,
}

crate::kept::base_of!(Record<S>, for <S: Rows>);

/// A hold on an SQL engine: the record it shares with its chain, and its
/// own token.
pub(crate) type SqlHold<S> = Hold<Record<S>>;

impl<S: Rows> Drop for Record<S> {
    fn drop(&mut self) {
        crate::kept::unlist(&self.store.common().records, &self.who);
    }
}

impl<S: Rows> Record<S> {
    /// The row is known gone: the hold is lost, and this client's next
    /// acquisition of the name may go ahead.
    pub(crate) fn gone(&self) {
        self.deleted.set();
        drop(self.turn.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// The holder id.
    pub(crate) fn holder(&self) -> &str {
        &self.who.holder
    }

    /// A re-entry raised the row's token to `token`: known still when it
    /// is the next after the one known (no waiter marked the row between).
    pub(super) fn reentered(&self, token: u64) {
        let token = i64::try_from(token).unwrap_or(UNKNOWN_TOKEN);
        let _ = self
            .token
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |known| {
                Some(match known.checked_add(1) == Some(token) {
                    true => token,
                    false => UNKNOWN_TOKEN,
                })
            });
    }

    pub(super) fn until(&self) -> Instant {
        *self.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A renewal sent at `sent` for `lease` was confirmed: the hold lasts
    /// the lease from then.
    pub(super) fn renewed(&self, sent: Instant, lease: Duration) {
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        *until = (*until).max(valid_until(sent, lease));
    }

    pub(super) fn is_lost(&self) -> bool {
        self.deleted.is_set() || Instant::now() >= self.until()
    }

    pub(super) fn remaining(&self) -> Duration {
        if self.deleted.is_set() {
            return Duration::ZERO;
        }
        self.until().saturating_duration_since(Instant::now())
    }

    pub(super) async fn lost(&self) {
        crate::kept::gone_or_ended(&self.deleted, || Some(self.until())).await;
    }
}
