//! What taking a row has in common on the SQL engines: the shared side of
//! `kept::Taking` (the client's queue and records, the kinds, re-entry,
//! the record of a taken row). Each engine says how it makes an undo and
//! takes the row ([`SqlTaking`]).

use std::sync::Arc;

use tokio::sync::OwnedMutexGuard;

use super::hold::{SqlHold, reenter};
use super::{Record, Rows};
use crate::background::Background;
use crate::error::LockError;
use crate::holder::Chain;
use crate::kept::{Taking, Undo};
use crate::request::{Options, Target};
use crate::turns::Kind;

/// Who takes a hold on an SQL engine.
pub(crate) type How<'a, S> = crate::kept::How<'a, Record<S>, Kind>;

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

    /// Nothing made yet, for an acquisition by `holder`.
    fn made(self: &Arc<Self>, holder: &str) -> Self::Made;

    /// One try at the hold (waiting while it is held, within the
    /// deadline).
    fn take<'a>(
        self: &'a Arc<Self>,
        target: &'a Target,
        options: &'a Options,
        how: &'a How<'a, Self>,
        made: &'a mut Self::Made,
    ) -> impl Future<Output = Result<Taken, LockError>> + Send + 'a;

    /// The row `made` may have made is the acquisition's now: nothing of
    /// it is to be undone.
    fn owned(made: &mut Self::Made);
}

impl<S: SqlTaking> Taking for S {
    type Record = Record<S>;
    type Side = Kind;
    type Made = S::Made;
    type More = ();
    const ENGINE: &'static str = S::ENGINE;

    fn id(&self) -> &str {
        &self.common().id
    }

    fn turns(&self) -> &crate::turns::Turns {
        &self.common().turns
    }

    fn records(&self) -> &crate::turns::Records<Record<S>> {
        &self.common().records
    }

    fn side(target: &Target) -> Result<Kind, LockError> {
        super::side(target, S::ENGINE)
    }

    fn kind(side: Kind) -> Kind {
        side
    }

    fn reenter<'a>(
        alive: Arc<Background>,
        record: Arc<Record<S>>,
        _side: Kind,
        chain: Chain,
        options: &'a Options,
        metric: &'static str,
    ) -> impl Future<Output = Result<SqlHold<S>, LockError>> + Send + 'a {
        reenter(alive, record, chain, options, metric)
    }

    fn made(self: &Arc<Self>, holder: &str) -> S::Made {
        SqlTaking::made(self, holder)
    }

    fn take<'a>(
        self: &'a Arc<Self>,
        target: &'a Target,
        options: &'a Options,
        how: &'a How<'a, S>,
        made: &'a mut S::Made,
    ) -> impl Future<Output = Result<Taken, LockError>> + Send + 'a {
        SqlTaking::take(self, target, options, how, made)
    }

    fn record(
        self: &Arc<Self>,
        name: &str,
        options: &Options,
        how: &How<'_, S>,
        taken: &Taken,
        made: &mut S::Made,
        turn: Option<OwnedMutexGuard<()>>,
    ) -> Result<Arc<Record<S>>, LockError> {
        S::owned(made);
        Ok(Record::taken(
            self, name, how.holder, options, taken.sent, turn, how.under,
        ))
    }
}
