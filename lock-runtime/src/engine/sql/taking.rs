//! How an SQL engine takes a row ([`SqlTaking`]): what each engine's
//! statements do for one try, for the line of fair and read-write locks,
//! and for the undo of a failed or dropped acquisition. The shared
//! acquisition that drives it is `take`'s.

use std::sync::Arc;
use std::time::Duration;

use super::Rows;
use super::side::Line;
use crate::error::LockError;
use crate::holder::Who;
use crate::kept::Undo;
use crate::request::{Kind, Request};

/// A hold taken on an SQL engine.
pub(crate) type Taken = crate::kept::Taken<()>;

/// How an SQL engine takes a row: one try, and the undo of what a failed
/// or dropped acquisition may have made.
pub(crate) trait SqlTaking: Rows {
    /// What an acquisition may have made, undone when it fails or is
    /// dropped.
    type Made: Undo;
    /// The engine's name in errors and metrics.
    const ENGINE: &'static str;

    /// Nothing made yet, for an acquisition of the hold `who`.
    fn made(self: &Arc<Self>, who: &Arc<Who>) -> Self::Made;

    /// One try at a reentrant lock's hold by `holder`, or at a
    /// semaphore's permit (see `permits`), waiting while it is held (or
    /// every permit is), within the deadline.
    fn take<'a>(
        self: &'a Arc<Self>,
        request: &'a Request,
        holder: &'a str,
        made: &'a mut Self::Made,
    ) -> impl Future<Output = Result<Taken, LockError>> + Send + 'a;

    /// The row `made` may have made is the acquisition's now: nothing of
    /// it is to be undone.
    fn owned(made: &mut Self::Made);

    /// Refuses a name the lock table cannot hold (before any write).
    fn check_lock_name(&self, name: &str) -> Result<(), LockError>;

    /// What tells a waiter in line that the line of a name may have moved
    /// (PostgreSQL: the listener's wake-up of the name, once the waiter is
    /// registered; MySQL: nothing, its waiters poll).
    type Heed: Send;

    /// The heed of `name`, made before a look at its line (so that an
    /// announcement after the look is not missed).
    fn heed(&self, made: &Self::Made, name: &str) -> Self::Heed;

    /// Waits before the next look at `name`'s line: `pause`, or less when
    /// `heed` says the line moved; or not at all while the waiter `holder`
    /// is not yet registered for announcements (it registers, then looks
    /// again).
    fn pause<'a>(
        &'a self,
        made: &'a mut Self::Made,
        heed: Self::Heed,
        name: &'a str,
        holder: &'a str,
        pause: Duration,
    ) -> impl Future<Output = Result<(), LockError>> + Send + 'a;

    /// Whether the client has a line (fair and read-write locks); else
    /// [`LockError::Config`] with the statement that makes it.
    fn line_ready(&self) -> Result<(), LockError>;

    /// The acquisition's place in line (fair and read-write locks).
    fn line(made: &mut Self::Made) -> &mut Line;

    /// A ticket for `holder` at the back of `name`'s line, counting for
    /// `ttl`: its `seq`.
    fn enqueue<'a>(
        &'a self,
        made: &'a mut Self::Made,
        name: &'a str,
        holder: &'a str,
        side: Kind,
        ttl: Duration,
    ) -> impl Future<Output = Result<i64, LockError>> + Send + 'a;

    /// Ticket `seq` made to count `ttl` from now: whether no live ticket
    /// before it keeps `side` out (any, for a fair lock or a writer; a
    /// fair lock's or a writer's, for a reader); `None` when the ticket is
    /// gone.
    fn look<'a>(
        &'a self,
        made: &'a mut Self::Made,
        name: &'a str,
        seq: i64,
        side: Kind,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<bool>, LockError>> + Send + 'a;

    /// A fair lock's or writer's turn: the row taken for `lease` (made, or
    /// a free one's taken over), its ticket `seq` marked held; the token,
    /// or `None` while the row is held.
    fn take_turn<'a>(
        &'a self,
        made: &'a mut Self::Made,
        name: &'a str,
        holder: &'a str,
        seq: i64,
        lease: Duration,
    ) -> impl Future<Output = Result<Option<u64>, LockError>> + Send + 'a;

    /// A reader's turn: its ticket `seq` marked held for `lease`, then the
    /// readers' row joined (made, taken over when free, or shared), its
    /// token raised; the token, or `None` (the mark taken back) while
    /// another holds the row.
    fn join<'a>(
        &'a self,
        made: &'a mut Self::Made,
        name: &'a str,
        seq: i64,
        lease: Duration,
    ) -> impl Future<Output = Result<Option<u64>, LockError>> + Send + 'a;

    /// Ticket `seq` marked held for `lease` (a read under a write).
    fn mark<'a>(
        &'a self,
        made: &'a mut Self::Made,
        seq: i64,
        lease: Duration,
    ) -> impl Future<Output = Result<(), LockError>> + Send + 'a;

    /// `holder`'s ticket of `name` dropped: whether one was there.
    fn drop_ticket<'a>(
        &'a self,
        made: &'a mut Self::Made,
        name: &'a str,
        holder: &'a str,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'a;

    /// The readers' row of `name`, when they hold it: its token, and
    /// whether a held reader's live ticket is left.
    fn readers_left<'a>(
        &'a self,
        made: &'a mut Self::Made,
        name: &'a str,
    ) -> impl Future<Output = Result<Option<(i64, bool)>, LockError>> + Send + 'a;

    /// The readers' row of `name` freed (and announced) if its token is
    /// still `fence`: whether it was.
    fn free_readers<'a>(
        &'a self,
        made: &'a mut Self::Made,
        name: &'a str,
        fence: i64,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'a;

    /// `holder`'s row of `name` handed to the readers when a held reader's
    /// live ticket is in its line (reads taken under a write): whether it
    /// was.
    fn hand_to_readers<'a>(
        &'a self,
        made: &'a mut Self::Made,
        name: &'a str,
        holder: &'a str,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'a;

    /// `holder`'s row of `name` freed and announced ([`Rows::release`]
    /// through `made`'s connection): whether it was the holder's.
    fn release_row<'a>(
        &'a self,
        made: &'a mut Self::Made,
        name: &'a str,
        holder: &'a str,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'a;
}
