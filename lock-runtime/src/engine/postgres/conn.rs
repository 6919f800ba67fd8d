//! The connections of a client on PostgreSQL: its pools (per caller
//! runtime, and its own), each connection made, its session set and its
//! statements prepared, the statements run on them within the response
//! timeout, and the backend of a connection that broke ended.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{NoTls, Row, Statement};

use super::errors::{broke, connect_error, connect_failed, store_error, timeout_error};
use super::{ENGINE, Pg, layout};
use crate::error::LockError;

/// How many connections a client keeps for its statements per caller
/// runtime (besides its listener): each pipelines the statements of many
/// tasks.
pub(crate) const POOL: usize = 4;

/// How many connections a client keeps on its own runtime (its watchdog,
/// undos and a runtime's first calls).
pub(crate) const HOME_POOL: usize = 2;

/// The session setting every connection of the engine has: each statement
/// is its own transaction, read committed (an `options` value: `-c`, and
/// the space escaped).
pub(super) const ISOLATION: &str = "-c default_transaction_isolation=read\\ committed";

/// A connection just made: its client, and the connection the client
/// talks through (to be driven by a task).
pub(crate) struct Connected {
    pub(crate) client: tokio_postgres::Client,
    pub(crate) connection:
        tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
}

/// One of the client's connections, with its statements prepared.
pub(crate) struct Conn {
    client: tokio_postgres::Client,
    st: Prepared,
    /// Its backend on the server.
    pub(crate) backend: Backend,
    /// Whether a statement on it failed as the connection broke (known
    /// before the client sees it closed).
    broken: std::sync::atomic::AtomicBool,
    /// Its pool, and its place there.
    pool: std::sync::Weak<Slots>,
    slot: usize,
}

impl Conn {
    /// Whether it can still carry statements.
    pub(crate) fn is_open(&self) -> bool {
        !self.client.is_closed() && !self.broken.load(Ordering::Relaxed)
    }
}

/// A connection's backend on the server: its process id, and when it
/// started, in microseconds since 1970 (a process id alone may come back
/// for another backend); `None` when the role may not see it.
#[derive(Clone, Debug)]
pub(crate) struct Backend {
    pid: i32,
    start: Option<i64>,
}

/// A connection's own [`Backend`].
const BACKEND: &str = "SELECT pg_backend_pid(), \
     (SELECT (extract(epoch FROM backend_start) * 1000000)::bigint \
      FROM pg_stat_activity WHERE pid = pg_backend_pid())";

/// Ends the backend `$1` started at `$2` while it runs a statement (an
/// idle one has finished what it ran): a row while it is there (sent
/// again until none, a backend ending takes a moment).
const TERMINATE: &str = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
     WHERE pid = $1 AND (extract(epoch FROM backend_start) * 1000000)::bigint = $2 \
     AND state IS DISTINCT FROM 'idle'";

/// The statements of [`layout::Statements`], prepared on one connection.
pub(crate) struct Prepared {
    pub(crate) acquire: Statement,
    pub(crate) first_try: Statement,
    pub(crate) claim: Statement,
    pub(crate) renew: Statement,
    pub(crate) release: Statement,
    pub(crate) give_back: Statement,
    pub(crate) keep: Statement,
    pub(crate) reenter: Statement,
    pub(crate) extend: Statement,
    pub(crate) force: Statement,
    pub(crate) inspect: Statement,
    pub(crate) held: Statement,
    pub(crate) wait: Statement,
    pub(crate) unwait: Statement,
    pub(crate) sweep: Statement,
    /// The line's, when the client has a line (its table is there).
    pub(crate) line: Option<PreparedLine>,
    /// The permits', when the client has a permits table.
    pub(crate) permits: Option<PreparedPermits>,
}

/// The statements of [`layout::Permits`], prepared on one connection.
pub(crate) struct PreparedPermits {
    pub(crate) take: Statement,
    pub(crate) drop: Statement,
    pub(crate) left: Statement,
    pub(crate) free: Statement,
    pub(crate) renew: Statement,
    pub(crate) keep: Statement,
    pub(crate) reenter: Statement,
    pub(crate) extend: Statement,
    pub(crate) force: Statement,
    pub(crate) holders: Statement,
    pub(crate) all_holders: Statement,
    pub(crate) sweep: Statement,
}

/// The statements of [`layout::Line`], prepared on one connection.
pub(crate) struct PreparedLine {
    pub(crate) enqueue: Statement,
    pub(crate) look: Statement,
    pub(crate) take_turn: Statement,
    pub(crate) join: Statement,
    pub(crate) mark: Statement,
    pub(crate) drop_ticket: Statement,
    pub(crate) readers_left: Statement,
    pub(crate) free_readers: Statement,
    pub(crate) hand_to_readers: Statement,
    pub(crate) renew_tickets: Statement,
    pub(crate) reenter_read: Statement,
    pub(crate) tickets: Statement,
    pub(crate) all_tickets: Statement,
    pub(crate) force_tickets: Statement,
    pub(crate) sweep_tickets: Statement,
}

/// A place in the pool: its connection once made.
#[derive(Default)]
pub(super) struct Slot {
    pub(super) conn: Mutex<Option<Arc<Conn>>>,
    making: tokio::sync::Mutex<()>,
}

impl Slot {
    /// Its connection, when made and still open.
    fn live(&self) -> Option<Arc<Conn>> {
        self.conn
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|c| c.is_open())
    }
}

/// The connections of one runtime.
pub(super) type Slots = crate::engine::sql::Slots<Slot>;

impl Pg {
    /// Prepares the statements on a connection's `client`.
    pub(super) async fn prepare(
        &self,
        client: tokio_postgres::Client,
        pool: &Arc<Slots>,
        slot: usize,
    ) -> Result<Conn, LockError> {
        let s = &self.statements;
        // One round trip, beside the preparations.
        let backend = async {
            let rows = client.query_typed(BACKEND, &[]).await?;
            let row = rows.first();
            Ok(Backend {
                pid: row.map_or(0, |r| r.get(0)),
                start: row.and_then(|r| r.get(1)),
            })
        };
        let prepared = futures_util::future::try_join_all(
            [
                &s.acquire,
                &s.first_try,
                &s.claim,
                &s.renew,
                &s.release,
                &s.give_back,
                &s.keep,
                &s.reenter,
                &s.extend,
                &s.force,
                &s.inspect,
                &s.held,
                &s.wait,
                &s.unwait,
                &s.sweep,
            ]
            .map(|text| client.prepare(text)),
        );
        let (backend, prepared) = futures_util::future::try_join(backend, prepared)
            .await
            .map_err(|e| store_error(&e))?;
        let line = match self.lined {
            true => Some(prepare_line(&client, &s.line).await?),
            false => None,
        };
        let permits = match self.permitted {
            true => Some(prepare_permits(&client, &s.permits).await?),
            false => None,
        };
        let mut p = prepared.into_iter();
        let mut next = || p.next().expect("one statement each");
        let st = Prepared {
            acquire: next(),
            first_try: next(),
            claim: next(),
            renew: next(),
            release: next(),
            give_back: next(),
            keep: next(),
            reenter: next(),
            extend: next(),
            force: next(),
            inspect: next(),
            held: next(),
            wait: next(),
            unwait: next(),
            sweep: next(),
            line,
            permits,
        };
        Ok(Conn {
            client,
            st,
            backend,
            broken: std::sync::atomic::AtomicBool::new(false),
            pool: Arc::downgrade(pool),
            slot,
        })
    }

    /// The connections for a statement of a caller's task (see
    /// [`pool_here`](crate::engine::sql::pool_here)).
    fn pool(&self) -> (Arc<Slots>, bool) {
        crate::engine::sql::pool_here(&self.home, &self.near, POOL)
    }

    /// A connection of the pool (in turn), made again (within the response
    /// timeout) when it broke: made and driven on the runtime whose pool it
    /// is.
    pub(crate) async fn conn(&self) -> Result<Arc<Conn>, LockError> {
        let (pool, home) = self.pool();
        let at = pool.next();
        let slot = &pool.slots[at];
        if let Some(conn) = slot.live() {
            return Ok(conn);
        }
        // Boxed: every statement's future holds this one, and making a
        // connection (its statements prepared) is rare and large.
        let remade = tokio::time::timeout(
            self.config.response_timeout,
            Box::pin(self.remake(pool.clone(), home, at)),
        );
        match remade.await.unwrap_or_else(|_| Err(timeout_error())) {
            // One that cannot be made (the server takes no more) is no
            // failure while another works.
            Err(e) => pool.slots.iter().find_map(Slot::live).ok_or(e),
            made => made,
        }
    }

    /// Makes the connection of `pool`'s place `at` again, unless another
    /// task did meanwhile (see [`conn`](Self::conn)).
    async fn remake(
        &self,
        pool: Arc<Slots>,
        home: bool,
        at: usize,
    ) -> Result<Arc<Conn>, LockError> {
        let slot = &pool.slots[at];
        let _making = slot.making.lock().await;
        if let Some(conn) = slot.live() {
            return Ok(conn);
        }
        let timeout = self.config.connect_timeout;
        let at_url = self.site.connect.clone();
        let make = async move {
            let made = tokio::time::timeout(timeout, connect(&at_url)).await;
            if let Ok(Ok(made)) = made {
                let Connected { client, connection } = made;
                tokio::spawn(connection);
                return Ok(Ok(client));
            }
            made.map(|made| made.map(|c| c.client))
        };
        let made = if home {
            crate::background::run(&self.runtime, make).await?
        } else {
            make.await
        };
        let client = made
            .map_err(|_| connect_error(&self.site, "no answer in time"))?
            .map_err(|e| connect_failed(&self.site, &e))?;
        let conn = Arc::new(self.prepare(client, &pool, at).await?);
        *slot.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// Runs the prepared statement `which` with `params` on a connection of
    /// the pool, within the response timeout.
    pub(crate) async fn query(
        &self,
        which: fn(&Prepared) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, LockError> {
        let conn = self.conn().await?;
        self.query_on(&conn, which, params).await
    }

    /// [`query`](Self::query) of a statement that answers no rows: how
    /// many it wrote.
    pub(crate) async fn execute(
        &self,
        which: fn(&Prepared) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, LockError> {
        let conn = self.conn().await?;
        let call = conn.client.execute(which(&conn.st), params);
        let answer = tokio::time::timeout(self.config.response_timeout, call).await;
        answered(&conn, answer)
    }

    /// [`query`](Self::query) on `conn` (statements on one connection are
    /// run in the order they are sent). A connection that does not answer
    /// in time leaves the pool: its place is made again.
    pub(crate) async fn query_on(
        &self,
        conn: &Arc<Conn>,
        which: fn(&Prepared) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, LockError> {
        self.run_on(conn, which(&conn.st), params).await
    }

    /// [`query`](Self::query) of a statement on the line;
    /// [`LockError::Config`] when the client has no line (see
    /// [`no_line`](crate::engine::sql::queue::no_line)).
    pub(crate) async fn query_line(
        &self,
        which: fn(&PreparedLine) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, LockError> {
        let conn = self.conn().await?;
        self.query_line_on(&conn, which, params).await
    }

    /// [`query_on`](Self::query_on) of a statement on the line.
    pub(crate) async fn query_line_on(
        &self,
        conn: &Arc<Conn>,
        which: fn(&PreparedLine) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, LockError> {
        let Some(line) = conn.st.line.as_ref() else {
            return Err(self.no_line());
        };
        self.run_on(conn, which(line), params).await
    }

    /// [`query`](Self::query) of a statement on the permits;
    /// [`LockError::Config`] when the client has no permits table (see
    /// [`no_permits`](crate::engine::sql::permits::no_permits)).
    pub(crate) async fn query_permits(
        &self,
        which: fn(&PreparedPermits) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, LockError> {
        let conn = self.conn().await?;
        self.query_permits_on(&conn, which, params).await
    }

    /// [`query_on`](Self::query_on) of a statement on the permits.
    pub(crate) async fn query_permits_on(
        &self,
        conn: &Arc<Conn>,
        which: fn(&PreparedPermits) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, LockError> {
        let Some(permits) = conn.st.permits.as_ref() else {
            return Err(self.no_permits());
        };
        self.run_on(conn, which(permits), params).await
    }

    /// Runs `statement` on `conn` within the response timeout (see
    /// [`query_on`](Self::query_on)).
    async fn run_on(
        &self,
        conn: &Arc<Conn>,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, LockError> {
        let call = conn.client.query(statement, params);
        let answer = tokio::time::timeout(self.config.response_timeout, call).await;
        answered(conn, answer)
    }

    /// Ends `backend` (of a connection that closed: its backend notices
    /// that only when it answers, and may still run a statement, e.g. one
    /// waiting for a row lock) through `conn`, and waits until it is gone
    /// or idle, within the response timeout: what it ran is then done, or
    /// undone (`true`). A backend this role may not see or end (its start
    /// unknown, or termination refused) is left alone, with a warning
    /// (`false`).
    pub(crate) async fn end(&self, conn: &Arc<Conn>, backend: &Backend) -> Result<bool, LockError> {
        let Some(start) = backend.start else {
            tracing::warn!(
                engine = ENGINE,
                pid = backend.pid,
                "a closed connection's backend cannot be told apart: not ended"
            );
            return Ok(false);
        };
        let ending = async {
            let params: [(&(dyn ToSql + Sync), Type); 2] =
                [(&backend.pid, Type::INT4), (&start, Type::INT8)];
            let mut pause = std::time::Duration::from_millis(1);
            while !conn
                .client
                .query_typed(TERMINATE, &params)
                .await?
                .is_empty()
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_millis(50));
            }
            Ok::<bool, tokio_postgres::Error>(true)
        };
        let ended = tokio::time::timeout(self.config.response_timeout, ending).await;
        if let Ok(Err(e)) = &ended
            && e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE)
        {
            tracing::warn!(
                engine = ENGINE,
                pid = backend.pid,
                "this role may not end a closed connection's backend: not ended"
            );
            return Ok(false);
        }
        answered(conn, ended)
    }
}

/// The `answer` of a statement sent on `conn` within the response
/// timeout (see [`Pg::query_on`]). Not async: the
/// statement's future (a kilobyte) stays where it was made.
fn answered<T>(
    conn: &Arc<Conn>,
    answer: Result<Result<T, tokio_postgres::Error>, tokio::time::error::Elapsed>,
) -> Result<T, LockError> {
    match answer {
        Ok(answer) => answer.map_err(|e| {
            if broke(&e) {
                conn.broken.store(true, Ordering::Relaxed);
            }
            store_error(&e)
        }),
        Err(_) => {
            if let Some(pool) = conn.pool.upgrade() {
                let mut slot = pool.slots[conn.slot]
                    .conn
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
                    *slot = None;
                }
            }
            Err(timeout_error())
        }
    }
}

/// The statements of the line `l`, prepared on `client`.
async fn prepare_line(
    client: &tokio_postgres::Client,
    l: &layout::Line,
) -> Result<PreparedLine, LockError> {
    let prepared = futures_util::future::try_join_all(
        [
            &l.enqueue,
            &l.look,
            &l.take_turn,
            &l.join,
            &l.mark,
            &l.drop_ticket,
            &l.readers_left,
            &l.free_readers,
            &l.hand_to_readers,
            &l.renew_tickets,
            &l.reenter_read,
            &l.tickets,
            &l.all_tickets,
            &l.force_tickets,
            &l.sweep_tickets,
        ]
        .map(|text| client.prepare(text)),
    )
    .await
    .map_err(|e| store_error(&e))?;
    let mut p = prepared.into_iter();
    let mut next = || p.next().expect("one statement each");
    Ok(PreparedLine {
        enqueue: next(),
        look: next(),
        take_turn: next(),
        join: next(),
        mark: next(),
        drop_ticket: next(),
        readers_left: next(),
        free_readers: next(),
        hand_to_readers: next(),
        renew_tickets: next(),
        reenter_read: next(),
        tickets: next(),
        all_tickets: next(),
        force_tickets: next(),
        sweep_tickets: next(),
    })
}

/// The statements of the permits `p`, prepared on `client`.
async fn prepare_permits(
    client: &tokio_postgres::Client,
    p: &layout::Permits,
) -> Result<PreparedPermits, LockError> {
    let prepared = futures_util::future::try_join_all(
        [
            &p.take,
            &p.drop,
            &p.left,
            &p.free,
            &p.renew,
            &p.keep,
            &p.reenter,
            &p.extend,
            &p.force,
            &p.holders,
            &p.all_holders,
            &p.sweep,
        ]
        .map(|text| client.prepare(text)),
    )
    .await
    .map_err(|e| store_error(&e))?;
    let mut p = prepared.into_iter();
    let mut next = || p.next().expect("one statement each");
    Ok(PreparedPermits {
        take: next(),
        drop: next(),
        left: next(),
        free: next(),
        renew: next(),
        keep: next(),
        reenter: next(),
        extend: next(),
        force: next(),
        holders: next(),
        all_holders: next(),
        sweep: next(),
    })
}

/// A new connection to `at` (not yet driven).
pub(super) async fn connect(
    at: &tokio_postgres::Config,
) -> Result<Connected, tokio_postgres::Error> {
    let (client, connection) = at.connect(NoTls).await?;
    Ok(Connected { client, connection })
}
