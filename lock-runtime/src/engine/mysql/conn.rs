//! The connections of a client on MySQL: its pools (per caller runtime,
//! and its own), each connection made with its session's mark, the
//! client's statements kept prepared on it, the statements run on them
//! within the response timeout, and the session of a connection
//! abandoned mid-statement ended before its place is used again.

use std::sync::Arc;

use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::{Conn, Opts, Params};
use tokio::sync::OwnedMutexGuard;

use super::errors::{UNKNOWN_STATEMENT, connect_error, connect_failed, store_error, timeout_error};
use super::{ENGINE, My, layout};
use crate::error::LockError;

/// How many connections a client keeps at most per caller runtime: each
/// runs one statement at a time, and keeps its session and its prepared
/// statements.
pub(crate) const POOL: usize = 8;

/// How many connections a client keeps on its own runtime.
pub(crate) const HOME_POOL: usize = 2;

/// A place for one connection (none until first needed, or after it
/// broke).
pub(crate) type Slot = Arc<tokio::sync::Mutex<Option<Link>>>;

/// How many statements a connection keeps prepared at most (the driver's
/// cache, which closes the least recently used beyond it): more than a
/// client runs, so that none of those it keeps ([`Link`]) is closed. A
/// client runs its [`layout::Sql`]s, renewals of
/// [`rows::BATCH_SIZES`](super::rows::BATCH_SIZES) sizes and a few
/// statements of its set-up.
pub(crate) const PREPARED: usize = 128;

/// One connection, and the client's [`layout::Sql`]s prepared on it, each
/// in its place once first run there: running one again sends only its
/// parameters (no parsing or look-up of its text).
pub(crate) struct Link {
    conn: Conn,
    prepared: Vec<Option<mysql_async::Statement>>,
    /// Its session's mark on the server (see [`Mark`]); `None` when its
    /// session is not the connection's own (a proxy in between), so that
    /// it cannot be ended.
    session: Option<Mark>,
    /// The sessions of connections this one replaced in its place that
    /// were abandoned mid-statement, and are not yet known to be over
    /// (see [`My::made`]); at most [`STRAYS`], the latest.
    strays: Vec<Mark>,
}

/// A session of the client's, known by a mark only it has: a user lock
/// (`GET_LOCK`) named `lock-runtime:<random uuid>`, taken as the
/// connection is made and kept for the session's life. The server frees
/// it when the session ends, also when the server stops, and
/// `IS_USED_LOCK` names the session that holds it: so a session is ended
/// (`KILL CONNECTION`) only when the server shows it still holds its
/// mark. A session id alone is not enough: the server numbers sessions
/// from 1 again after every start, so an id remembered from before a
/// restart names another session (another client's, or the sender's own).
#[derive(Clone, Debug)]
pub(super) struct Mark(String);

impl Mark {
    fn new() -> Mark {
        Mark(format!("lock-runtime:{}", uuid::Uuid::new_v4().simple()))
    }
}

/// How many sessions whose end is not yet confirmed a place keeps (a
/// server that keeps failing to end them drops the oldest).
const STRAYS: usize = 16;

impl Link {
    /// A link over a connection just made (and its own session), in the
    /// place of `left`, if any: its session and the sessions it had not
    /// yet ended are this one's to end (see [`My::made`]).
    pub(super) fn new(
        (conn, session): (Conn, Option<Mark>),
        st: &layout::Statements,
        left: Option<Link>,
    ) -> Link {
        let mut strays = Vec::new();
        if let Some(left) = left {
            strays = left.strays;
            strays.extend(left.session);
            if strays.len() > STRAYS {
                strays.remove(0);
            }
        }
        Link {
            conn,
            prepared: vec![None; st.count],
            session,
            strays,
        }
    }

    /// Runs `statement` with `params`: rows, affected rows, last insert id
    /// and warnings.
    async fn exec<T: FromRow + Send + 'static>(
        &mut self,
        statement: Stmt<'_>,
        params: Params,
    ) -> Result<Answer<T>, mysql_async::Error> {
        let conn = &mut self.conn;
        let rows = match statement {
            Stmt::Text(text) => conn.exec(text, params).await?,
            Stmt::Kept(sql) => {
                let prepared = match self.prepared.get_mut(sql.at).and_then(Option::take) {
                    Some(prepared) => prepared,
                    None => conn.prep(sql.text.as_str()).await?,
                };
                let rows = conn.exec(&prepared, params).await;
                if let Some(place) = self.prepared.get_mut(sql.at) {
                    *place = Some(prepared);
                }
                // Closed meanwhile (it cannot be, within [`PREPARED`]):
                // prepared again next time.
                if let Err(mysql_async::Error::Server(e)) = &rows
                    && e.code == UNKNOWN_STATEMENT
                {
                    self.prepared.fill(None);
                }
                rows?
            }
        };
        Ok(Answer {
            rows,
            affected: conn.affected_rows(),
            last_id: conn.last_insert_id(),
            warnings: conn.get_warnings(),
        })
    }
}

/// A statement to run: one of the client's, kept prepared on each
/// connection, or a text of the moment (a renewal of so many rows),
/// prepared through the driver's cache.
#[derive(Clone, Copy)]
pub(crate) enum Stmt<'a> {
    Kept(&'a layout::Sql),
    Text(&'a str),
}

impl<'a> From<&'a layout::Sql> for Stmt<'a> {
    fn from(sql: &'a layout::Sql) -> Stmt<'a> {
        Stmt::Kept(sql)
    }
}

impl<'a> From<&'a String> for Stmt<'a> {
    fn from(text: &'a String) -> Stmt<'a> {
        Stmt::Text(text)
    }
}

/// The connections of one runtime.
pub(super) type Slots = crate::engine::sql::Slots<Slot>;

/// A connection of the pool, the caller's until dropped (`None` when its
/// place has none yet).
pub(crate) type Pooled = OwnedMutexGuard<Option<Link>>;

/// A statement's answer: its rows, affected rows, last insert id and how
/// many warnings it raised.
pub(crate) struct Answer<T> {
    pub(crate) rows: Vec<T>,
    pub(crate) affected: u64,
    pub(crate) last_id: Option<u64>,
    pub(crate) warnings: u16,
}

impl My {
    /// The connections for a statement of a caller's task (see
    /// [`pool_here`](crate::engine::sql::pool_here)).
    fn slots(&self) -> (Arc<Slots>, bool) {
        crate::engine::sql::pool_here(&self.home, &self.near, POOL)
    }

    /// A connection of the pool, within the response timeout: a free one
    /// (from the next in turn), else the next in turn once it is free;
    /// made when its place has none (on the runtime whose pool it is).
    pub(crate) async fn conn(&self) -> Result<Pooled, LockError> {
        let (pool, home) = self.slots();
        let start = pool.next();
        let n = pool.slots.len();
        let places = || (0..n).map(|i| &pool.slots[(start + i) % n]);
        // A free place with a working connection first: a connection is
        // made only when every one there is busy (or none is there), and
        // one that cannot be made (the server takes no more) is no
        // failure while another works.
        if let Some(lease) = places().find_map(ready) {
            return self.made(lease, home).await;
        }
        let lease = match places().find_map(|slot| slot.clone().try_lock_owned().ok()) {
            Some(lease) => lease,
            None => tokio::time::timeout(
                self.config.response_timeout,
                pool.slots[start % n].clone().lock_owned(),
            )
            .await
            .map_err(|_| timeout_error())?,
        };
        match self.made(lease, home).await {
            Err(e) => match places().find_map(ready) {
                Some(lease) => self.made(lease, home).await,
                None => Err(e),
            },
            made => made,
        }
    }

    /// The connection of `slot`, within the response timeout (made when it
    /// has none, on the current runtime).
    pub(crate) async fn lease_on(&self, slot: &Slot) -> Result<Pooled, LockError> {
        let lease = tokio::time::timeout(self.config.response_timeout, slot.clone().lock_owned())
            .await
            .map_err(|_| timeout_error())?;
        self.made(lease, false).await
    }

    /// `lease` with a connection: its own, or one made now (on the
    /// client's runtime for its `home` pool).
    ///
    /// A statement abandoned on its way (its caller left, it timed out, or
    /// its connection broke) leaves its connection's answers out of step
    /// with its requests, and may still run on the server, whose session
    /// notices that its client left only when it answers (a statement
    /// waiting for a row lock runs on once it gets it). Such a connection
    /// stays in its place until another is made there; that one ends the
    /// abandoned session, and waits until it is over, before anything
    /// else goes out there, so that what follows runs after whatever the
    /// abandoned statement did (an undo after the try it undoes). A
    /// session not yet known to be over stays on the place's list, and is
    /// ended first the next time.
    async fn made(&self, mut lease: Pooled, home: bool) -> Result<Pooled, LockError> {
        let link = match lease.as_mut().filter(|link| !link.conn.is_disconnected()) {
            Some(link) => link,
            None => {
                let make =
                    tokio::time::timeout(self.config.connect_timeout, open(self.site.opts.clone()));
                let made = if home {
                    crate::background::run(&self.runtime, make).await?
                } else {
                    make.await
                };
                let made = made
                    .map_err(|_| connect_error(&self.site, "no answer in time"))?
                    .map_err(|e| connect_failed(&self.site, &e))?;
                let link = Link::new(made, &self.st, lease.take());
                lease.insert(link)
            }
        };
        while let Some(stray) = link.strays.last() {
            let ended =
                tokio::time::timeout(self.config.response_timeout, ended(&mut link.conn, stray))
                    .await;
            match ended {
                Ok(Ok(())) => {
                    link.strays.pop();
                }
                Ok(Err(e)) => return Err(store_error(&e)),
                Err(_) => return Err(timeout_error()),
            }
        }
        Ok(lease)
    }

    /// Runs `statement` with `params` on `lease` (a connection of the
    /// pool, taken when `None`; kept there for the next statement) within
    /// the response timeout. A connection that broke, or does not answer
    /// in time, is closed and its place made again.
    pub(crate) async fn on<'s, T: FromRow + Send + 'static>(
        &self,
        lease: &mut Option<Pooled>,
        statement: impl Into<Stmt<'s>>,
        params: Params,
    ) -> Result<Answer<T>, LockError> {
        let mut held = match lease.take() {
            Some(held) => held,
            None => self.conn().await?,
        };
        let Some(link) = held.as_mut() else {
            return Err(timeout_error());
        };
        let answer = tokio::time::timeout(
            self.config.response_timeout,
            link.exec::<T>(statement.into(), params),
        )
        .await;
        match answer {
            Ok(Ok(answer)) => {
                *lease = Some(held);
                Ok(answer)
            }
            // A server's refusal leaves the connection usable.
            Ok(Err(e @ mysql_async::Error::Server(_))) => {
                *lease = Some(held);
                Err(store_error(&e))
            }
            // A broken connection (and one whose statement did not answer
            // in time) is left in its place: the next lease there replaces
            // it once the server has ended its session (see `made`), so
            // that the next statement runs after this one (the order an
            // undo relies on).
            Ok(Err(e)) => Err(store_error(&e)),
            Err(_) => Err(timeout_error()),
        }
    }

    /// [`on`](Self::on) a connection of the pool, given back after.
    pub(crate) async fn query<'s, T: FromRow + Send + 'static>(
        &self,
        statement: impl Into<Stmt<'s>>,
        params: Params,
    ) -> Result<Answer<T>, LockError> {
        self.on(&mut None, statement, params).await
    }
}

/// `slot` when it is free and its connection works, with no session of
/// an earlier one left to end there.
fn ready(slot: &Slot) -> Option<Pooled> {
    let lease = slot.clone().try_lock_owned().ok()?;
    let works = lease
        .as_ref()
        .is_some_and(|link| !link.conn.is_disconnected() && link.strays.is_empty());
    works.then_some(lease)
}

/// A new connection with `opts`, and its session's [`Mark`] when the
/// session is the connection's own (see [`Link::session`]).
pub(super) async fn open(opts: Opts) -> Result<(Conn, Option<Mark>), mysql_async::Error> {
    let mut conn = Conn::new(opts).await?;
    let mark = Mark::new();
    let (id, marked): (Option<u64>, Option<i64>) = conn
        .exec_first("SELECT CONNECTION_ID(), GET_LOCK(?, 0)", (&mark.0,))
        .await?
        .unwrap_or((None, None));
    let own = id.is_some_and(|id| id == u64::from(conn.id())) && marked == Some(1);
    let own = own.then_some(mark);
    if own.is_none() {
        tracing::warn!(
            engine = ENGINE,
            "a connection's session is not the one it was given (a proxy?): \
             its statements cannot be ended if it breaks"
        );
    }
    Ok((conn, own))
}

/// Ends the server's session marked `stray` (a connection of ours
/// abandoned mid-statement) through `conn`, and waits until it is gone:
/// what it was running is then done, or undone. A mark nobody holds is a
/// session over already (also one of a server run before a restart).
/// Session ids are not used again while the server runs, and a restart
/// ends `conn` too: the id the server names for the mark is the stray's
/// until the `KILL`.
async fn ended(conn: &mut Conn, stray: &Mark) -> Result<(), mysql_async::Error> {
    let holder: Option<Option<u64>> = conn
        .exec_first("SELECT IS_USED_LOCK(?)", (&stray.0,))
        .await?;
    let Some(id) = holder.flatten() else {
        return Ok(());
    };
    match conn.query_drop(format!("KILL CONNECTION {id}")).await {
        // Unknown thread id (1094), or one of another user's (1095): ours
        // is gone already.
        Err(mysql_async::Error::Server(s)) if matches!(s.code, 1094 | 1095) => {}
        other => other?,
    }
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        let there: Option<u64> = conn
            .exec_first(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
                (id,),
            )
            .await?;
        if there.unwrap_or(0) == 0 {
            return Ok(());
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(50));
    }
}
