//! The PostgreSQL engine (DESIGN §10): locks as rows of one table whose
//! layout is ShedLock's (its JDBC provider shares the table), with leases
//! by the database's clock, a watchdog, re-entry, fencing tokens and
//! waiters woken by `LISTEN`/`NOTIFY`.
//!
//! # Layout
//!
//! A held lock is the row `name` of the lock table (`distributed_locks`,
//! or the URL's `table=`): `lock_until` (its lease's end), `locked_at`,
//! `locked_by` (the holder id, `<client id>:<n>`) and `fence`. Every time
//! is UTC by the database's clock, never the client's. A row whose
//! `lock_until` has passed is free: the next acquisition's upsert takes it
//! over in one statement (`INSERT ... ON CONFLICT ... WHERE lock_until <=
//! now`), after a first try that inserts only where no row is (see
//! Waiting).
//!
//! - **Leases.** Without a fixed `lease`, a hold's row is renewed by the
//!   client's watchdog: one `UPDATE` for all of the client's holds every
//!   third of [`Config::watchdog_timeout`]. A hold counts as lost, by its
//!   guard's clock, at the send time of its last confirmed renewal plus
//!   the lease; a row found gone or taken over at a renewal is lost at
//!   once. With `lease(d)`, the row's end is `d` from its acquisition and
//!   nothing renews it; `extend` moves it.
//! - **Fencing token.** `fence` rises by one with every acquisition of the
//!   name, and by one with every look of a waiter of another client while
//!   the row is held (its mark, below); a row made anew (first use, or
//!   after a delete) starts from the database clock in microseconds, read
//!   once the statement holds the name's transaction lock
//!   (`pg_advisory_xact_lock`: no other acquisition of the name can take
//!   and give back the row between the read and the write), so a name's
//!   tokens keep rising across deletes (and past a ShedLock holder, which
//!   writes none), as long as the database's clock does not step back
//!   (DECISIONS). So a holder's token is the row's `fence` when it
//!   took the row; `inspect` shows the row's, which waiters may have raised
//!   since. Tokens only ever rise: what a fenced resource checks.
//! - **Rows.** A release deletes its row (under `hold_at_least`, it keeps
//!   it taken until the minimum, marked kept, and deletes it then). With
//!   `keep_rows=true` a release frees the row instead (its `lock_until`
//!   set to now): **a table shared with ShedLock needs `keep_rows=true`**,
//!   as ShedLock inserts a name's row once and afterwards only updates it.
//! - **Waiting.** A client's acquisitions of one name queue in the
//!   process (FIFO); the head first tries to take the row with a
//!   statement that only takes (all an uncontended acquisition sends):
//!   without `keep_rows` or a fixed `lease`, an insert of the row where
//!   none is (`ON CONFLICT DO NOTHING`), and where one is, the row-taking
//!   upsert (a row free by its lease, or the holder's own from a try whose
//!   answer was lost, is taken over); these two read the database's clock
//!   once, after the name's lock (`clock_timestamp()`). Then, if it
//!   waits, it looks at the row and, while it is held, registers as a
//!   waiter in the table beside the lock table (`<table>_waiting`: name,
//!   waiter, `wait_until`), looks again, and
//!   sleeps until the table's channel announces the name, until the
//!   holder's `lock_until` (a crashed holder announces nothing; a holder
//!   that is not ours, ShedLock's, is looked at again every 500 ms), or
//!   its own deadline. The statement that takes the lock drops the
//!   registration; a waiter that leaves drops it, and one that died is
//!   forgotten at its `wait_until`. One `LISTEN` connection per client
//!   carries every waiter; its reconnect wakes them all to look again.
//!   A name is announced only when someone waits (a notifying commit is
//!   serialized with every other): a waiter's look at a held row marks it,
//!   raising its `fence` by one, and a plain lock's release announces the
//!   name when the row's `fence` is past the one its holder knew (a
//!   one-table `DELETE` without `RETURNING`, its `pg_notify` in its
//!   condition; it looks at no other table). `force_unlock` and
//!   the releases of fair and read-write locks announce a name when it has
//!   a registered waiter.
//! - **Connections.** Per caller runtime, a few connections made and
//!   driven there ([`POOL`]; see `crate::near`: an answer wakes no other
//!   thread), each pipelining the statements of many tasks; [`HOME_POOL`]
//!   on the client's own runtime (its watchdog, undos and a runtime's first
//!   calls), and the listener.
//! - **Faults.** An acquisition whose answer was lost is found again by
//!   its holder id (the next upsert takes its own row over) or given back by
//!   the undo of a dropped acquisition. Connection loss and timeouts inside
//!   `wait` are tried again. A backend notices that its client left only
//!   when it answers, so a try sent on a connection that broke may still
//!   run (waiting for a row lock): the acquisition ends that backend and
//!   awaits its end (`Pg::end`) before it sends anything else, so its
//!   undo never runs before the try lands.
//!
//! `fair_lock` and `read_write_lock` keep a line of tickets beside the
//! lock table (`<table>_queue`; see `engine::sql::queue`), and their
//! waiters poll it. Quorum locks are [`LockError::Unsupported`] on this
//! engine, as is replica sync.
//! A failover of the database to an asynchronous replica can lose or
//! duplicate a hold, as with Redis: the guard learns it at its next
//! renewal, and fencing is the defence.

mod layout;
mod listen;
mod ops;
mod rows;
mod take;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::runtime::Handle;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{NoTls, Row, Statement};

/// A hold on PostgreSQL.
pub(crate) type PgHold = crate::engine::sql::SqlHold<Pg>;
pub(crate) use ops::{force_unlock, inspect, locks};

crate::engine::seam::engine_by_parts!(
    Pg, name "postgres", hold PgHold,
    connect Pg::connect,
    acquire |pg, alive, target, options| crate::turns::acquire(alive, pg, target, options),
    renewed |pg| pg.common.renewed(),
    inspect inspect, locks locks, force_unlock force_unlock,
    schema ddl,
);

use crate::config::Config;
use crate::engine::sql::{Common, Params};
use crate::error::LockError;
use layout::{PgTable, Q};

/// The engine's name in errors and metrics.
pub(crate) const ENGINE: &str = "postgres";

/// PostgreSQL's URLs and identifiers (at most 63 bytes).
const DIALECT: crate::engine::sql::Dialect = crate::engine::sql::Dialect {
    scheme: "postgres",
    aliases: &["postgresql"],
    identifier: 63,
    own: &[],
};

/// How many connections a client keeps for its statements per caller
/// runtime (besides its listener): each pipelines the statements of many
/// tasks.
pub(crate) const POOL: usize = 4;

/// How many connections a client keeps on its own runtime (its watchdog,
/// undos and a runtime's first calls).
pub(crate) const HOME_POOL: usize = 2;

/// What a URL says beyond the connection: the table and how rows go.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) connect: tokio_postgres::Config,
    pub(crate) table: crate::engine::sql::Table,
    pub(crate) keep_rows: bool,
}

/// The session setting every connection of the engine has: each statement
/// is its own transaction, read committed (an `options` value: `-c`, and
/// the space escaped).
const ISOLATION: &str = "-c default_transaction_isolation=read\\ committed";

impl Target {
    /// Reads `config`'s URL: `postgres://` or `postgresql://`, a database,
    /// and the query parameters `table=` and `keep_rows=` of ours (the
    /// others are the driver's: `connect_timeout`, `application_name`,
    /// ...).
    pub(crate) fn parse(config: &Config) -> Result<Target, LockError> {
        let Params {
            table,
            keep_rows,
            url,
            ..
        } = Params::parse(config.url(), &DIALECT)?;
        let mut connect: tokio_postgres::Config = url.parse().map_err(|e| {
            LockError::Config(format!(
                "a postgres:// URL ({}) that PostgreSQL's driver refuses: {e}",
                config.origin()
            ))
        })?;
        if connect.get_dbname().is_none_or(str::is_empty) {
            return Err(LockError::Config(format!(
                "a postgres:// URL ({}) names no database: postgres://user:password@host:5432/<database>",
                config.origin()
            )));
        }
        let (user, password) = config.credentials();
        if let Some(user) = user {
            connect.user(user);
        }
        if let Some(password) = password {
            connect.password(password);
        }
        if connect.get_connect_timeout().is_none() {
            connect.connect_timeout(config.connect_timeout);
        }
        if connect.get_application_name().is_none() {
            connect.application_name("lock-runtime");
        }
        if matches!(
            connect.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        ) {
            return Err(LockError::Config(format!(
                "a postgres:// URL ({}) that requires TLS: this build connects without it \
                 (sslmode=disable or prefer)",
                config.origin()
            )));
        }
        // Each statement on its own (no transaction spans two), and a lost
        // race is no serialization failure whatever the server's default
        // or the URL's `options=`: those are kept (a `search_path` names
        // the schema of an unqualified `table=`), the engine's own after
        // them, where a repeated setting takes the last value.
        let options = match connect.get_options() {
            Some(theirs) if !theirs.trim().is_empty() => format!("{theirs} {ISOLATION}"),
            _ => ISOLATION.to_owned(),
        };
        connect
            .options(options)
            .keepalives_idle(std::time::Duration::from_secs(15));
        Ok(Target {
            connect,
            table,
            keep_rows,
        })
    }

    /// Which table of which server: clients of one key lock the same
    /// locks.
    fn key(&self) -> String {
        format!("postgres://{}/{}", self.place(), self.table.qualified())
    }

    /// Where the server is, for errors (never the password).
    fn place(&self) -> String {
        let hosts: Vec<String> = self
            .connect
            .get_hosts()
            .iter()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(host) => host.clone(),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let port = self.connect.get_ports().first().copied().unwrap_or(5432);
        format!(
            "{}:{port}/{}",
            hosts.join(","),
            self.connect.get_dbname().unwrap_or_default()
        )
    }
}

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
struct Slot {
    conn: Mutex<Option<Arc<Conn>>>,
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

/// The connections of one runtime, made and driven there: the client's
/// own, or a caller runtime's (see `crate::near`: a statement's answer
/// then wakes no other thread).
struct Slots {
    slots: Vec<Slot>,
    next: AtomicUsize,
}

impl Slots {
    fn new(n: usize) -> Slots {
        Slots {
            slots: (0..n).map(|_| Slot::default()).collect(),
            next: AtomicUsize::new(0),
        }
    }
}

/// What the tasks of a client on PostgreSQL share (besides what every
/// SQL engine's client has: [`Common`], which it derefs to).
pub(crate) struct Pg {
    common: Common<Pg>,
    target: Target,
    /// The table's announcement channel (see [`PgTable::channel`]).
    channel: String,
    statements: layout::Statements,
    /// The `name` column's length (a longer name is refused).
    pub(crate) longest: Option<usize>,
    /// Whether the line of fair and read-write locks is there (made, or
    /// this role may not make it: then those are [`LockError::Config`]).
    pub(crate) lined: bool,
    /// The connections of the client's own runtime.
    home: Arc<Slots>,
    /// Per caller runtime, connections of its own.
    near: crate::near::Near<Arc<Slots>>,
    pub(crate) listener: Arc<listen::Listener>,
}

impl std::ops::Deref for Pg {
    type Target = Common<Pg>;

    fn deref(&self) -> &Common<Pg> {
        &self.common
    }
}

/// The statements that make the lock tables `config`'s URL names
/// (`lockctl schema`).
pub(crate) fn ddl(config: &Config) -> Result<String, LockError> {
    Ok(Target::parse(config)?.table.ddl())
}

/// How many acquisitions of lock `name` by this process's clients of the
/// table `url` names wait for a release (`__private::sql_waiting`).
pub(crate) fn waiting(url: &str, name: &str) -> usize {
    match Target::parse(&Config::new(url)) {
        Ok(target) => crate::engine::sql::waiting(&target.key(), name),
        Err(_) => 0,
    }
}

impl Pg {
    /// Connects to the database of `config`'s URL on the client's
    /// `runtime`, makes the lock table when it is missing (or says, with
    /// the DDL, why it cannot), checks its shape, and starts the listener
    /// and the watchdog.
    pub(crate) async fn connect(config: Config, runtime: Handle) -> Result<Arc<Pg>, LockError> {
        let target = Target::parse(&config)?;
        if config.replica_sync == crate::config::ReplicaSync::Always {
            return Err(crate::engine::unsupported(
                ENGINE,
                "replica sync (a PostgreSQL primary confirms a write once it is its own; \
                 synchronous replication is the database's setting)",
            ));
        }
        let handle = runtime.clone();
        crate::background::run(&runtime, async move {
            let first = tokio::time::timeout(config.connect_timeout, connect(&target.connect))
                .await
                .map_err(|_| connect_error(&target, "no answer in time"))?
                .map_err(|e| connect_failed(&target, &e))?;
            let Connected { client, connection } = first;
            tokio::spawn(connection);
            let (longest, lined) = prepare_table(&client, &target).await?;
            let statements =
                layout::Statements::new(&target.table, target.keep_rows, config.watchdog_timeout);
            let listen_at = target.connect.clone();
            let listener = listen::Listener::start(target.table.channel(), move || {
                let at = listen_at.clone();
                async move { connect(&at).await }
            });
            let pg = Arc::new(Pg {
                near: crate::near::Near::new(handle.id()),
                common: Common::new(config, handle, target.key()),
                statements,
                longest,
                lined,
                home: Arc::new(Slots::new(HOME_POOL)),
                listener,
                channel: target.table.channel(),
                target,
            });
            // The first connection of the pool is the one that made the
            // table: its statements prepared now prove the table answers.
            let conn = pg.prepare(client, &pg.home, 0).await?;
            *pg.home.slots[0]
                .conn
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(conn));
            crate::engine::sql::Keeper::start(&pg);
            Ok(pg)
        })
        .await?
    }

    /// Prepares the statements on a connection's `client`.
    async fn prepare(
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
        crate::engine::sql::pool_here(&self.home, &self.near, || Slots::new(POOL))
    }

    /// A connection of the pool (in turn), made again (within the response
    /// timeout) when it broke: made and driven on the runtime whose pool it
    /// is.
    pub(crate) async fn conn(&self) -> Result<Arc<Conn>, LockError> {
        let (pool, home) = self.pool();
        let at = pool.next.fetch_add(1, Ordering::Relaxed) % pool.slots.len();
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
        let at_url = self.target.connect.clone();
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
            .map_err(|_| connect_error(&self.target, "no answer in time"))?
            .map_err(|e| connect_failed(&self.target, &e))?;
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

    /// The error of a fair or read-write lock on a client without a line.
    pub(crate) fn no_line(&self) -> LockError {
        let table = &self.target.table;
        crate::engine::sql::queue::no_line(&table.queue().quoted(Q), &table.queue_ddl())
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

    /// The table's announcement channel.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }
}

/// A span of time as a statement's `interval` parameter (a lease, how
/// long a waiter waits): in binary, its microseconds (saturating), no days
/// and no months, which the server adds to a timestamp as it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Interval(pub(crate) std::time::Duration);

impl ToSql for Interval {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use bytes::BufMut;
        out.put_i64(crate::engine::sql::micros(self.0));
        out.put_i32(0);
        out.put_i32(0);
        Ok(tokio_postgres::types::IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::INTERVAL
    }

    tokio_postgres::types::to_sql_checked!();
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

/// A new connection to `at` (not yet driven).
async fn connect(at: &tokio_postgres::Config) -> Result<Connected, tokio_postgres::Error> {
    let (client, connection) = at.connect(NoTls).await?;
    Ok(Connected { client, connection })
}

/// Makes the table `quoted` with `ddl` when it is missing. A role that may
/// not gets [`LockError::Config`] with the statements to run (both of
/// `table`'s).
async fn make(
    client: &tokio_postgres::Client,
    ddl: String,
    quoted: &str,
    table: &crate::engine::sql::Table,
) -> Result<(), LockError> {
    let exists = || async {
        client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&quoted])
            .await
            .map(|row| row.get::<_, bool>(0))
            .map_err(|e| store_error(&e))
    };
    if !exists().await?
        && let Err(e) = client.batch_execute(&ddl).await
        // Made meanwhile by another client (whose commit made ours fail on
        // one of the names it takes: the table's, its row type's, its
        // sequence's or index's): it is there.
        && !exists().await?
    {
        return Err(match e.code() {
            Some(code) if *code == SqlState::INSUFFICIENT_PRIVILEGE => LockError::Config(format!(
                "the table {quoted} is missing and this role may not create it; \
                 have the lock tables made with:\n{}",
                table.ddl()
            )),
            _ => store_error(&e),
        });
    }
    Ok(())
}

/// Makes the lock table when it is missing and checks its columns; the
/// `name` column's length, and whether the line is there (made when
/// missing, if this role may). A role that may not create the lock table
/// gets [`LockError::Config`] with the statements to run.
async fn prepare_table(
    client: &tokio_postgres::Client,
    target: &Target,
) -> Result<(Option<usize>, bool), LockError> {
    let table = &target.table;
    let quoted = table.quoted(Q);
    make(client, table.lock_ddl(), &quoted, table).await?;
    make(
        client,
        table.waiting_ddl(),
        &table.waiting().quoted(Q),
        table,
    )
    .await?;
    // Plain locks need no line: a role that may not make it still locks.
    let lined = match make(client, table.queue_ddl(), &table.queue().quoted(Q), table).await {
        Ok(()) => true,
        Err(LockError::Config(_)) => false,
        Err(e) => return Err(e),
    };
    // From the catalog, not `information_schema` (which shows only the
    // columns this role may use).
    let columns = client
        .query(
            "SELECT a.attname::text, t.typname::text, \
                    CASE WHEN a.atttypmod > 4 THEN a.atttypmod - 4 END, a.attnotnull \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped",
            &[&quoted],
        )
        .await
        .map_err(|e| store_error(&e))?;
    let mut longest = None;
    for (column, types) in layout::COLUMNS {
        let found = columns.iter().find(|r| r.get::<_, String>(0) == column);
        let Some(found) = found else {
            let fix = if column == "fence" {
                format!(
                    " (a ShedLock table gains it with: ALTER TABLE {quoted} ADD COLUMN fence \
                     BIGINT NOT NULL DEFAULT 0;)"
                )
            } else {
                String::new()
            };
            return Err(LockError::Config(format!(
                "the table {quoted} is not a lock table: it has no `{column}` column{fix}"
            )));
        };
        let kind: String = found.get(1);
        if !types.contains(&kind.as_str()) {
            return Err(LockError::Config(format!(
                "the table {quoted} is not a lock table: its `{column}` column is {kind}, not {}",
                types.join(" or ")
            )));
        }
        if !found.get::<_, bool>(3) {
            return Err(LockError::Config(format!(
                "the table {quoted} is not a lock table: its `{column}` column may be NULL"
            )));
        }
        let length = found
            .get::<_, Option<i32>>(2)
            .and_then(|n| usize::try_from(n).ok());
        match column {
            "name" => longest = length,
            // A holder id (a UUID, `:`, a number) marked kept.
            "locked_by" if length.is_some_and(|n| n < 64) => {
                return Err(LockError::Config(format!(
                    "the table {quoted}: its `locked_by` column is shorter than a holder id \
                     (64 characters); ShedLock's is VARCHAR(255)"
                )));
            }
            _ => {}
        }
    }
    Ok((longest, lined))
}

/// A connection that could not be made, as a [`LockError`]: a refusal of
/// the credentials or the database is [`LockError::Config`]; anything
/// else may heal.
fn connect_failed(target: &Target, e: &tokio_postgres::Error) -> LockError {
    match e.code() {
        Some(code)
            if *code == SqlState::INVALID_PASSWORD
                || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            LockError::Config(format!(
                "PostgreSQL at {} refused the credentials: {}",
                target.place(),
                db_message(e)
            ))
        }
        Some(code) if *code == SqlState::INVALID_CATALOG_NAME => LockError::Config(format!(
            "PostgreSQL at {} has no such database: {}",
            target.place(),
            db_message(e)
        )),
        _ => connect_error(target, &db_message(e)),
    }
}

fn connect_error(target: &Target, reason: &str) -> LockError {
    LockError::Store {
        engine: ENGINE,
        message: format!(
            "cannot connect to PostgreSQL at {}: {reason}",
            target.place()
        ),
        transient: true,
    }
}

/// The server's message for `e`, else the driver's.
fn db_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => e.to_string(),
    }
}

/// A PostgreSQL error as a [`LockError`], saying whether it may heal (a
/// lost connection, a server shutting down or starting, a serialization
/// failure or deadlock).
pub(crate) fn store_error(e: &tokio_postgres::Error) -> LockError {
    let transient = match e.code() {
        // No answer of the server's: a connection that broke (or an I/O
        // failure beneath it) may heal; a driver's refusal (a type, a
        // parse) will not.
        None => broke(e),
        Some(code) => {
            let class = code.code().get(..2);
            class == Some("08")
                || class == Some("53")
                || *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
                || *code == SqlState::QUERY_CANCELED
                || *code == SqlState::LOCK_NOT_AVAILABLE
                || *code == SqlState::READ_ONLY_SQL_TRANSACTION
        }
    };
    LockError::Store {
        engine: ENGINE,
        message: db_message(e),
        transient,
    }
}

/// Whether `e` says the connection broke (it closed, or an I/O failure
/// beneath it).
fn broke(e: &tokio_postgres::Error) -> bool {
    e.is_closed() || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

fn timeout_error() -> LockError {
    LockError::Store {
        engine: ENGINE,
        message: "no answer within the response timeout".into(),
        transient: true,
    }
}
