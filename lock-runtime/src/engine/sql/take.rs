//! What taking a row has in common on the SQL engines: the shared side of
//! `kept::Taking` (the client's queue and records, the kinds, re-entry,
//! the record of a taken row). Each engine says how it makes an undo and
//! takes the row ([`SqlTaking`]).

use std::sync::Arc;

use futures_util::future::Either;

use tokio::sync::OwnedMutexGuard;

use super::Record;
use super::hold::reenter;
pub(crate) use super::taking::{SqlTaking, Taken};
use crate::error::LockError;
use crate::holder::Who;
use crate::kept::Taking;
use crate::request::{Kind, Request};

impl<S: SqlTaking> Taking for S {
    crate::kept::taking_fields!(client | s | s.common());

    type Record = Record<S>;
    type Made = S::Made;
    type More = ();
    const ENGINE: &'static str = S::ENGINE;

    fn made(self: &Arc<Self>, who: &Arc<Who>) -> S::Made {
        SqlTaking::made(self, who)
    }

    fn take<'a>(
        self: &'a Arc<Self>,
        request: &'a Request,
        who: &'a Arc<Who>,
        under: Option<&'a Arc<Record<S>>>,
        made: &'a mut S::Made,
    ) -> impl Future<Output = Result<Taken, LockError>> + Send + 'a {
        let holder = who.holder.as_str();
        match request.kind {
            // A permit is the engine's own too: a row of the permits table.
            Kind::Reentrant | Kind::Semaphore(_) => {
                Either::Left(SqlTaking::take(self, request, holder, made))
            }
            _ => Either::Right(super::queue::take_in_line(
                self, request, holder, under, made,
            )),
        }
    }

    fn record(
        self: &Arc<Self>,
        request: &Request,
        who: &Arc<Who>,
        under: Option<&Arc<Record<S>>>,
        taken: &Taken,
        made: &mut S::Made,
        turn: Option<OwnedMutexGuard<()>>,
    ) -> Result<Arc<Record<S>>, LockError> {
        S::owned(made);
        S::line(made).ticket = None;
        Ok(Record::taken(self, request, who, under, taken, turn))
    }
}
