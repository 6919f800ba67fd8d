//! What an acquisition on PostgreSQL may have made ([`Made`]), and its
//! undo when the acquisition fails or is dropped: below `take`, which
//! fills it in.

use std::sync::Arc;

use tokio::time::Instant;

use super::{Conn, Pg, Prepared};
use crate::engine::sql::queue::{Line, leave_untaken};
use crate::error::LockError;
use crate::holder::Who;
use crate::kept::Undo;

/// What an acquisition may have made on PostgreSQL: a row under its
/// holder id, from a statement whose answer it did not see (or did not
/// use). The undo frees it (by its holder id: never another's row) while
/// it may still be there.
pub(crate) struct Made {
    pub(super) pg: Arc<Pg>,
    /// The hold it is for: the lock's name and the holder id.
    pub(super) who: Arc<Who>,
    /// Until when a row it made may be there (its lease by this client's
    /// clock); `None` when no statement whose answer is unseen was sent.
    pub(super) until: Option<Instant>,
    /// The backends of connections it used that closed, not yet known to
    /// be over: a backend that has not noticed its client left may still
    /// run a statement sent there (a try waiting for a row lock). They are
    /// ended before anything else goes out for the acquisition.
    pub(super) strays: Vec<super::Backend>,
    /// Until when a try sent on a connection whose backend could not be
    /// ended (this role may not see or end it) may still land: a later
    /// try that finds no row of ours proves nothing before then.
    pub(super) stray: Option<Instant>,
    /// Until when this acquisition is registered as a waiter of the name
    /// (by this client's clock), if it is.
    pub(super) registered: Option<Instant>,
    /// The connection every try and the undo go through while it lives:
    /// statements on one connection run in the order they are sent, so
    /// the undo (or a later try) runs after a try whose answer was lost.
    pub(super) conn: Option<Arc<Conn>>,
    /// Its place in line (fair and read-write locks).
    pub(super) line: Line,
    /// Until when a permit it took may be there (a semaphore's; its lease
    /// by this client's clock); `None` when no try may have taken one.
    pub(super) permit: Option<Instant>,
}

impl Made {
    /// Runs `which` of the line on the acquisition's connection.
    pub(super) async fn on_line(
        &mut self,
        which: fn(&super::PreparedLine) -> &tokio_postgres::Statement,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, LockError> {
        let conn = self.conn().await?;
        self.pg.query_line_on(&conn, which, params).await
    }

    /// Runs `which` on the acquisition's connection.
    pub(super) async fn on(
        &mut self,
        which: fn(&Prepared) -> &tokio_postgres::Statement,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, LockError> {
        let conn = self.conn().await?;
        self.pg.query_on(&conn, which, params).await
    }

    /// The acquisition's connection, made or taken from the pool when it
    /// has none that is open. The backend of one that closed is ended (and
    /// its end awaited) on the next one before anything else is sent, so
    /// that what follows (a later try, the undo) runs after whatever a
    /// statement sent there did.
    pub(super) async fn conn(&mut self) -> Result<Arc<Conn>, LockError> {
        if let Some(conn) = self.conn.as_ref().filter(|c| c.is_open()) {
            return Ok(conn.clone());
        }
        if let Some(closed) = self.conn.take() {
            self.strays.push(closed.backend.clone());
        }
        let conn = self.pg.conn().await?;
        while let Some(stray) = self.strays.last() {
            if !self.pg.end(&conn, stray).await? {
                self.stray = self.stray.max(self.until);
            }
            self.strays.pop();
        }
        self.conn = Some(conn.clone());
        Ok(conn)
    }
}

impl Undo for Made {
    fn take(&mut self) -> Option<Made> {
        let (until, registered) = (self.until.take(), self.registered.take());
        let line = std::mem::take(&mut self.line);
        let permit = self.permit.take();
        if until.is_none() && registered.is_none() && line.ticket.is_none() && permit.is_none() {
            return None;
        }
        Some(Made {
            pg: self.pg.clone(),
            who: self.who.clone(),
            until,
            strays: std::mem::take(&mut self.strays),
            stray: self.stray,
            registered,
            conn: self.conn.clone(),
            line,
            permit,
        })
    }

    async fn clear(&mut self) -> Result<(), LockError> {
        let pg = self.pg.clone();
        let conn = self.conn().await?;
        if self.registered.is_some() {
            self.pg
                .query_on(&conn, |s| &s.unwait, &[&self.who.name, &self.who.holder])
                .await?;
            self.registered = None;
        }
        if self.until.is_some() {
            self.pg
                .query_on(&conn, |s| &s.release, &[&self.who.name, &self.who.holder])
                .await?;
            self.until = None;
        }
        if self.permit.is_some() {
            let (name, holder) = (&self.who.name, &self.who.holder);
            let rows = self
                .pg
                .query_permits_on(&conn, |p| &p.drop, &[name, holder])
                .await?;
            self.permit = None;
            let (_, left) = super::rows::dropped(&rows);
            crate::engine::sql::permits::settle(&*pg, name, left).await?;
        }
        let who = self.who.clone();
        leave_untaken(&pg, self, &who).await
    }

    fn may_outlive(&self) -> bool {
        let now = Instant::now();
        self.until.is_some_and(|until| now < until)
            || self.registered.is_some_and(|until| now < until)
            || self.line.ticket.is_some_and(|until| now < until)
            || self.permit.is_some_and(|until| now < until)
    }

    fn keeps_out(&self) -> bool {
        self.until.is_some() || self.line.ticket.is_some() || self.permit.is_some()
    }

    fn what(&self) -> String {
        format!("{} row {}", self.pg.channel(), self.who.name)
    }
}
