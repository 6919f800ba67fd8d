//! What taking a row has in common on the SQL engines: the shared side of
//! `kept::Taking` (the client's queue and records, the kinds, re-entry,
//! the record of a taken row). Each engine says how it makes an undo and
//! takes the row ([`SqlTaking`]).

use std::sync::Arc;

use futures_util::future::Either;

use tokio::sync::OwnedMutexGuard;

use super::Record;
use super::hold::reenter;
use super::queue::Side;
use super::record::SqlHold;
pub(crate) use super::taking::{How, SqlTaking, Taken};
use crate::background::Background;
use crate::error::LockError;
use crate::holder::Chain;
use crate::kept::Taking;
use crate::request::{Options, Target};

impl<S: SqlTaking> Taking for S {
    crate::kept::taking_fields!(client | s | s.common());

    type Record = Record<S>;
    type Side = Side;
    type Made = S::Made;
    type More = ();
    const ENGINE: &'static str = S::ENGINE;

    fn side(target: &Target) -> Result<Side, LockError> {
        Ok(Side::of(target))
    }

    fn reenter<'a>(
        alive: Arc<Background>,
        record: Arc<Record<S>>,
        side: Side,
        chain: Chain,
        options: &'a Options,
        metric: &'static str,
    ) -> impl Future<Output = Result<SqlHold<S>, LockError>> + Send + 'a {
        reenter(alive, record, side, chain, options, metric)
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
        match how.side {
            Side::Mutex => Either::Left(SqlTaking::take(self, target, options, how, made)),
            _ => Either::Right(super::queue::take_in_line(self, target, options, how, made)),
        }
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
        S::line(made).ticket = None;
        Ok(Record::taken(
            self,
            name,
            how,
            options,
            taken.sent,
            taken.token,
            turn,
        ))
    }
}
