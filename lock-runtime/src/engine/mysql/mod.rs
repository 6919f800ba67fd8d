//! The MySQL/MariaDB engine (DESIGN §10): locks as rows of one table whose
//! layout is ShedLock's (its JDBC provider shares the table), with leases
//! by the database's clock, a watchdog, re-entry, fencing tokens and
//! waiters that poll.
//!
//! # Layout
//!
//! The same as PostgreSQL's (see `engine::postgres`): a held lock is the
//! row `name` of the lock table (`distributed_locks`, or the URL's
//! `table=`) with `lock_until`, `locked_at`, `locked_by` (the holder id)
//! and `fence`; every time is UTC by the database's clock
//! (`UTC_TIMESTAMP(6)`). The tables this engine makes keep times as
//! `DATETIME(6)`, which MySQL stores as written whatever a session's time
//! zone. A ShedLock table's `TIMESTAMP` columns are converted through the
//! session's time zone: this engine leaves its sessions at the server's
//! default, as ShedLock's JDBC sessions do, so that both write and read
//! the same values. Names are compared byte for byte (`utf8mb4_bin`);
//! MySQL pads `VARCHAR`s with spaces when it compares them, so a name
//! ending with a space is refused; a table whose `name` column folds case
//! (a collation not `_bin`: ShedLock's DDL on most servers) is refused
//! with the `ALTER TABLE` that makes it binary. The URL's other query
//! parameters are the driver's, but `client_found_rows` stays off (the
//! statements count changed rows).
//!
//! Beside the lock table are its slots (`<table>_slots`, 1,024 rows made
//! with it): a statement that may make a name's row reads the clock
//! (`SYSDATE(6)`) for a new row's first token in a sub-select that first
//! locks its slot's row (`CRC32(name) % 1024`, `FOR UPDATE`), so that a name's
//! tokens rise under contention too (DECISIONS).
//!
//! - **Statements.** MySQL has no `RETURNING`: an acquisition's first
//!   try is one `INSERT IGNORE` that makes the row where none is, its
//!   affected rows saying whether it did and its token coming back as
//!   `LAST_INSERT_ID(expr)` in the same answer. Where the row is there, an
//!   `INSERT ... ON DUPLICATE KEY UPDATE` takes it over when it is free
//!   (with `keep_rows`, where rows stay, that upsert is the first try); a
//!   busy row is looked at by a second statement. IGNORE turns a value
//!   MySQL would refuse into a warning: a claim that made its row with
//!   warnings counts as not taken, and the upsert after it refuses the
//!   value (a lease past the column's range). Leases, `keep_rows`,
//!   `hold_at_least` and the sweep are as on PostgreSQL.
//! - **Waiting.** MySQL has no notification: a client's acquisitions of
//!   one name queue in the process (FIFO), and the head polls the row,
//!   first after a few milliseconds, then twice as long each time up to
//!   [`Config::poll_cap`] (100 ms by default), never sleeping past the
//!   holder's `lock_until` or its own deadline. A release is noticed
//!   within about the cap.
//! - **Connections.** Per caller runtime, a pool of at most [`POOL`]
//!   connections made and driven there (see `crate::near`: a statement
//!   wakes no other thread), plus [`HOME_POOL`] on the client's own runtime
//!   for its watchdog, undos and a runtime's first calls. Each runs one
//!   statement at a time and keeps its session and the client's statements
//!   prepared (each prepared when first run there; running it again sends
//!   only its parameters).
//! - **Faults.** A lost race (a deadlock, 1213 and 3058, or a lock wait
//!   that timed out) is tried again as busy. An acquisition whose answer
//!   was lost is found again by its holder id (the next try takes its own
//!   row over) or given back by the undo of a dropped acquisition. A
//!   session notices that its client left only when it answers, so a
//!   statement abandoned on its way (its caller left, it timed out, or the
//!   connection broke) may still run: the next connection made in its
//!   place ends that session and awaits its end first (see `My::made`),
//!   so an undo never runs before the try it undoes lands.
//!
//! `fair_lock` and `read_write_lock` keep a line of tickets beside the
//! lock table (`<table>_queue`; see `engine::sql::queue`), and their
//! waiters poll it. Quorum locks are [`LockError::Unsupported`] on this
//! engine, as is replica sync.

mod layout;
mod ops;
mod rows;
mod take;

use std::sync::Arc;

use mysql_async::prelude::{FromRow, Queryable};
use std::sync::atomic::{AtomicUsize, Ordering};

use mysql_async::{Conn, Opts, OptsBuilder, Params};
use tokio::runtime::Handle;
use tokio::sync::OwnedMutexGuard;

pub(crate) use ops::{force_unlock, inspect, locks};

crate::engine::seam::engine_by_parts!(
    My, name "mysql", hold MyHold,
    connect My::connect,
    acquire |my, alive, target, options| crate::turns::acquire(alive, my, target, options),
    renewed |my| my.common.renewed(),
    inspect inspect, locks locks, force_unlock force_unlock,
    schema ddl,
);

use crate::config::Config;
use crate::engine::sql::{Common, Table};
use crate::error::LockError;
use layout::{Charset, Q};

/// The engine's name in errors and metrics.
pub(crate) const ENGINE: &str = "mysql";

/// MySQL's URLs and identifiers (at most 64 bytes).
const DIALECT: crate::engine::sql::Dialect = crate::engine::sql::Dialect {
    scheme: "mysql",
    aliases: &["mariadb"],
    identifier: 64,
    own: &["time_zone"],
};

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
/// [`rows::BATCH_SIZES`] sizes and a few statements of its set-up.
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
struct Mark(String);

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
    fn new(
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

/// MySQL's "unknown prepared statement handler" (1243).
const UNKNOWN_STATEMENT: u16 = 1243;

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

/// Connections of one runtime: each made when first needed (and again
/// after it broke), on that runtime.
struct Slots {
    slots: Vec<Slot>,
    next: AtomicUsize,
}

impl Slots {
    fn new(n: usize) -> Slots {
        Slots {
            slots: (0..n)
                .map(|_| Arc::new(tokio::sync::Mutex::new(None)))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }
}

/// A hold on MySQL.
pub(crate) type MyHold = crate::engine::sql::SqlHold<My>;

/// What a URL says: the connection, the table and how rows go.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) opts: Opts,
    pub(crate) table: Table,
    pub(crate) keep_rows: bool,
}

impl Target {
    /// Reads `config`'s URL: `mysql://` or `mariadb://`, a database, and
    /// the query parameters `table=` and `keep_rows=` of ours (the others
    /// are the driver's).
    pub(crate) fn parse(config: &Config) -> Result<Target, LockError> {
        let crate::engine::sql::Params {
            table,
            keep_rows,
            url,
            own,
        } = crate::engine::sql::Params::parse(config.url(), &DIALECT)?;
        let time_zone = own.last().map(|(_, zone)| time_zone(zone)).transpose()?;
        let opts = Opts::from_url(&url).map_err(|e| {
            LockError::Config(format!(
                "a mysql:// URL ({}) that MySQL's driver refuses: {e}",
                config.origin()
            ))
        })?;
        if opts.db_name().is_none_or(str::is_empty) {
            return Err(LockError::Config(format!(
                "a mysql:// URL ({}) names no database: mysql://user:password@host:3306/<database>",
                config.origin()
            )));
        }
        let (user, password) = config.credentials();
        // A URL's larger statement cache stays.
        let prepared = opts.stmt_cache_size().max(PREPARED);
        let mut init = vec![
            "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'".to_owned(),
            "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED".to_owned(),
            "SET NAMES utf8mb4".to_owned(),
        ];
        // Checked to hold only a zone's characters: written in.
        init.extend(time_zone.map(|zone| format!("SET SESSION time_zone = '{zone}'")));
        let mut builder = OptsBuilder::from_opts(opts)
            // The URL's host and port, never a socket the server names
            // instead (which would also pass by a proxy in front of it).
            .prefer_socket(false)
            .tcp_keepalive(Some(std::time::Duration::from_secs(15)))
            .stmt_cache_size(prepared)
            // The engine reads a held row's untouched upsert by its
            // affected rows, 0: never the rows found (a URL's
            // `client_found_rows=true` would count it 1, and let a second
            // holder in).
            .client_found_rows(false)
            // Run in reverse order. Each statement on its own, a lost race
            // a deadlock retried as busy, never a silently mangled value.
            .init(init);
        if let Some(user) = user {
            builder = builder.user(Some(user));
        }
        if let Some(password) = password {
            builder = builder.pass(Some(password));
        }
        Ok(Target {
            opts: builder.into(),
            table,
            keep_rows,
        })
    }

    /// Where the server is, for errors (never the password).
    fn place(&self) -> String {
        format!(
            "{}:{}/{}",
            self.opts.ip_or_hostname(),
            self.opts.tcp_port(),
            self.opts.db_name().unwrap_or_default()
        )
    }

    /// Which table of which server: clients of one key lock the same
    /// locks.
    fn key(&self) -> String {
        format!("mysql://{}/{}", self.place(), self.table.qualified())
    }
}

/// The URL's `time_zone=` (`value`, percent-encoded), checked to hold
/// only a zone's characters: the session time zone the engine's
/// connections set (`SET time_zone`), for a table whose `TIMESTAMP`
/// columns ShedLock's sessions write through a zone forced on them
/// (`connectionTimeZone=UTC&forceConnectionTimeZoneToSession=true`: then
/// `time_zone=%2B00:00`); without it, sessions keep the server's default
/// zone, as a JDBC session does. An offset (`+00:00`, `%2B` for the `+`),
/// `SYSTEM`, or a zone's name the server knows (its time zone tables
/// loaded).
fn time_zone(value: &str) -> Result<String, LockError> {
    let zone = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
    let fits = !zone.is_empty()
        && zone.len() <= 64
        && zone
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-:/_.".contains(&b));
    if !fits {
        return Err(LockError::Config(format!(
            "time_zone={zone:?}: an offset such as %2B00:00 (+00:00), SYSTEM, \
             or a zone's name such as Europe/Berlin"
        )));
    }
    Ok(zone.into_owned())
}

/// The statement that makes the lock table `config`'s URL names
/// (`lockctl schema`).
pub(crate) fn ddl(config: &Config) -> Result<String, LockError> {
    Ok(layout::all_ddl(&Target::parse(config)?.table))
}

/// How many acquisitions of lock `name` by this process's clients of the
/// table `url` names wait for a release (`__private::sql_waiting`).
pub(crate) fn waiting(url: &str, name: &str) -> usize {
    match Target::parse(&Config::new(url)) {
        Ok(target) => crate::engine::sql::waiting(&target.key(), name),
        Err(_) => 0,
    }
}

/// What the tasks of a client on MySQL share (besides what every SQL
/// engine's client has: [`Common`], which it derefs to).
pub(crate) struct My {
    common: Common<My>,
    /// The connections of the client's own runtime. The driver's own pool
    /// is not used: giving a connection back to it passes through a task
    /// of its own, a hop per statement.
    home: Arc<Slots>,
    /// Per caller runtime, connections of its own.
    near: crate::near::Near<Arc<Slots>>,
    target: Target,
    st: layout::Statements,
    /// The `name` column's length (a longer name is refused).
    longest: Option<usize>,
    /// The `name` column's character set.
    charset: Charset,
    /// Whether the line of fair and read-write locks is there (made, or
    /// this role may not make it: then those are [`LockError::Config`]).
    pub(crate) lined: bool,
}

impl std::ops::Deref for My {
    type Target = Common<My>;

    fn deref(&self) -> &Common<My> {
        &self.common
    }
}

/// A connection of the pool, the caller's until dropped (`None` when its
/// place has none yet).
pub(crate) type Lease = OwnedMutexGuard<Option<Link>>;

/// A statement's answer: its rows, affected rows, last insert id and how
/// many warnings it raised.
pub(crate) struct Answer<T> {
    pub(crate) rows: Vec<T>,
    pub(crate) affected: u64,
    pub(crate) last_id: Option<u64>,
    pub(crate) warnings: u16,
}

impl My {
    /// Connects to the database of `config`'s URL on the client's
    /// `runtime`, makes the lock table when it is missing (or says, with
    /// the DDL, why it cannot), checks its shape, and starts the watchdog.
    pub(crate) async fn connect(config: Config, runtime: Handle) -> Result<Arc<My>, LockError> {
        let target = Target::parse(&config)?;
        if config.replica_sync == crate::config::ReplicaSync::Always {
            return Err(crate::engine::unsupported(
                ENGINE,
                "replica sync (a MySQL primary confirms a write once it is its own; \
                 semi-synchronous replication is the database's setting)",
            ));
        }
        let handle = runtime.clone();
        crate::background::run(&runtime, async move {
            let mut conn = tokio::time::timeout(config.connect_timeout, open(target.opts.clone()))
                .await
                .map_err(|_| connect_error(&target, "no answer in time"))?
                .map_err(|e| connect_failed(&target, &e))?;
            let shape =
                tokio::time::timeout(config.response_timeout, prepare_table(&mut conn.0, &target))
                    .await
                    .unwrap_or_else(|_| Err(timeout_error()));
            let (longest, charset, lined) = shape?;
            let home = Slots::new(HOME_POOL);
            // The connection that made the table is the first of the pool.
            let st = layout::Statements::new(&target.table, target.keep_rows);
            *home.slots[0].try_lock().expect("nobody else has it yet") =
                Some(Link::new(conn, &st, None));
            let my = Arc::new(My {
                near: crate::near::Near::new(handle.id()),
                common: Common::new(config, handle, target.key()),
                home: Arc::new(home),
                st,
                longest,
                charset,
                lined,
                target,
            });
            crate::engine::sql::Keeper::start(&my);
            Ok(my)
        })
        .await?
    }

    /// The connections for a statement of a caller's task (see
    /// [`pool_here`](crate::engine::sql::pool_here)).
    fn slots(&self) -> (Arc<Slots>, bool) {
        crate::engine::sql::pool_here(&self.home, &self.near, || Slots::new(POOL))
    }

    /// A connection of the pool, within the response timeout: a free one
    /// (from the next in turn), else the next in turn once it is free;
    /// made when its place has none (on the runtime whose pool it is).
    pub(crate) async fn conn(&self) -> Result<Lease, LockError> {
        let (pool, home) = self.slots();
        let start = pool.next.fetch_add(1, Ordering::Relaxed);
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
    pub(crate) async fn lease_on(&self, slot: &Slot) -> Result<Lease, LockError> {
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
    async fn made(&self, mut lease: Lease, home: bool) -> Result<Lease, LockError> {
        let link = match lease.as_mut().filter(|link| !link.conn.is_disconnected()) {
            Some(link) => link,
            None => {
                let make = tokio::time::timeout(
                    self.config.connect_timeout,
                    open(self.target.opts.clone()),
                );
                let made = if home {
                    crate::background::run(&self.runtime, make).await?
                } else {
                    make.await
                };
                let made = made
                    .map_err(|_| connect_error(&self.target, "no answer in time"))?
                    .map_err(|e| connect_failed(&self.target, &e))?;
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
        lease: &mut Option<Lease>,
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

    /// Refuses a name this table cannot hold (before any write).
    pub(crate) fn check_name(&self, name: &str) -> Result<(), LockError> {
        layout::check_name(name, self.longest, self.charset)
    }
}

/// `slot` when it is free and its connection works, with no session of
/// an earlier one left to end there.
fn ready(slot: &Slot) -> Option<Lease> {
    let lease = slot.clone().try_lock_owned().ok()?;
    let works = lease
        .as_ref()
        .is_some_and(|link| !link.conn.is_disconnected() && link.strays.is_empty());
    works.then_some(lease)
}

/// A new connection with `opts`, and its session's [`Mark`] when the
/// session is the connection's own (see [`Link::session`]).
async fn open(opts: Opts) -> Result<(Conn, Option<Mark>), mysql_async::Error> {
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

/// A column as `information_schema.COLUMNS` describes it: its name, data
/// type, length, whether it may be NULL (`YES`), character set, collation
/// and whole type (`varchar(64)`).
type Column = (
    String,
    String,
    Option<u64>,
    String,
    Option<String>,
    Option<String>,
    String,
);

/// Makes the lock table when it is missing and checks its columns; the
/// `name` column's length and character set, and whether the line is
/// there (made when missing, if this role may). A role that may not
/// create the lock table gets [`LockError::Config`] with the statements
/// to run.
async fn prepare_table(
    conn: &mut Conn,
    target: &Target,
) -> Result<(Option<usize>, Charset, bool), LockError> {
    let table = &target.table;
    let quoted = table.quoted(Q);
    let schema = table.schema.clone();
    make(conn, table, table, &layout::ddl(table)).await?;
    prepare_slots(conn, table).await?;
    // Plain locks need no line: a role that may not make it still locks.
    let queue = layout::queue(table);
    let lined = match make(conn, table, &queue, &layout::queue_ddl(table)).await {
        Ok(()) => true,
        Err(LockError::Config(_)) => false,
        Err(e) => return Err(e),
    };
    let columns: Vec<Column> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH, IS_NULLABLE, \
                    CHARACTER_SET_NAME, COLLATION_NAME, COLUMN_TYPE \
             FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
            (schema, table.name.clone()),
        )
        .await
        .map_err(|e| store_error(&e))?;
    let mut longest = None;
    let mut charset = Charset::Any;
    let mut folds = None;
    for (column, types) in layout::COLUMNS {
        let Some((_, kind, length, nullable, set, collation, whole)) =
            columns.iter().find(|c| c.0.eq_ignore_ascii_case(column))
        else {
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
        let kind = kind.to_ascii_lowercase();
        if !types.contains(&kind.as_str()) {
            return Err(LockError::Config(format!(
                "the table {quoted} is not a lock table: its `{column}` column is {kind}, not {}",
                types.join(" or ")
            )));
        }
        if nullable.eq_ignore_ascii_case("YES") {
            return Err(LockError::Config(format!(
                "the table {quoted} is not a lock table: its `{column}` column may be NULL"
            )));
        }
        let length = length.and_then(|n| usize::try_from(n).ok());
        match column {
            "name" => {
                longest = length;
                charset = Charset::of(set.as_deref());
                folds = Some((whole, set, collation));
            }
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
    // Once every column is there, of its type.
    if let Some((whole, set, collation)) = folds {
        binary(&quoted, whole, set.as_deref(), collation.as_deref())?;
    }
    Ok((longest, charset, lined))
}

/// Refuses a `name` column (of whole type `whole`, in character set
/// `set`) whose collation `collation` is not binary: one that folds case
/// (`utf8mb4_general_ci`, the default of many servers, and so of a
/// ShedLock table made without one) makes `Job` and `job` one lock, and
/// a hold that took over another spelling's row would read as lost at its
/// first renewal. The error names the statement that makes it binary.
fn binary(
    quoted: &str,
    whole: &str,
    set: Option<&str>,
    collation: Option<&str>,
) -> Result<(), LockError> {
    let Some(collation) = collation else {
        return Ok(());
    };
    if collation.ends_with("_bin") {
        return Ok(());
    }
    let set = set.unwrap_or("utf8mb4");
    Err(LockError::Config(format!(
        "the table {quoted}: its `name` column compares names by the collation {collation}, \
         which may make two names one lock (`Job` and `job`); names must compare byte for \
         byte: ALTER TABLE {quoted} MODIFY name {whole} CHARACTER SET {set} COLLATE {set}_bin \
         NOT NULL;"
    )))
}

/// Makes the slots beside lock table `table` (see [`layout::slots`]) when
/// they are missing, and their rows: an acquisition whose name's slot has
/// no row could never take it.
async fn prepare_slots(
    conn: &mut Conn,
    table: &crate::engine::sql::Table,
) -> Result<(), LockError> {
    let slots = layout::slots(table);
    make(conn, table, &slots, &layout::slots_ddl(table)).await?;
    let count = format!("SELECT COUNT(*) FROM {}", slots.quoted(Q));
    let counted = conn.query_first::<u64, _>(&count).await;
    if counted.map_err(|e| store_error(&e))? == Some(u64::from(layout::SLOTS)) {
        return Ok(());
    }
    if let Err(e) = conn.query_drop(layout::slots_rows(table)).await {
        return Err(match server_code(&e) {
            // Denied: INSERT (1142).
            Some(1142) => LockError::Config(format!(
                "the table {} lacks rows and this role may not insert them; run:\n{}",
                slots.quoted(Q),
                layout::slots_rows(table)
            )),
            _ => store_error(&e),
        });
    }
    match conn
        .query_first::<u64, _>(&count)
        .await
        .map_err(|e| store_error(&e))?
    {
        Some(n) if n == u64::from(layout::SLOTS) => Ok(()),
        n => Err(LockError::Config(format!(
            "the table {} is not a slots table: it has {} rows, not the {} slots 0 to {}",
            slots.quoted(Q),
            n.unwrap_or(0),
            layout::SLOTS,
            layout::SLOTS - 1
        ))),
    }
}

/// Makes `which` (the lock table `table`, its slots or its line) with `ddl` when it
/// is missing. A role that may not gets [`LockError::Config`] with the
/// statements to run.
async fn make(
    conn: &mut Conn,
    table: &crate::engine::sql::Table,
    which: &crate::engine::sql::Table,
    ddl: &str,
) -> Result<(), LockError> {
    let exists: Option<u64> = conn
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
            (which.schema.clone(), which.name.clone()),
        )
        .await
        .map_err(|e| store_error(&e))?;
    if exists.unwrap_or(0) == 0
        && let Err(e) = conn.query_drop(ddl).await
    {
        return Err(match server_code(&e) {
            // Denied: CREATE (1142), or the database (1044).
            Some(1142 | 1044) => LockError::Config(format!(
                "the table {} is missing and this role may not create it; \
                 have the lock tables made with:\n{}",
                which.quoted(Q),
                layout::all_ddl(table)
            )),
            _ => store_error(&e),
        });
    }
    Ok(())
}

/// The server's error code of `e`, if it is the server's.
fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

/// A connection that could not be made, as a [`LockError`]: a refusal of
/// the credentials or the database is [`LockError::Config`]; anything
/// else may heal.
fn connect_failed(target: &Target, e: &mysql_async::Error) -> LockError {
    match e {
        // Access denied (1045), to the database (1044); unknown database
        // (1049).
        mysql_async::Error::Server(s) if matches!(s.code, 1044 | 1045) => {
            LockError::Config(format!(
                "MySQL at {} refused the credentials: {}",
                target.place(),
                s.message
            ))
        }
        mysql_async::Error::Server(s) if s.code == 1049 => LockError::Config(format!(
            "MySQL at {} has no such database: {}",
            target.place(),
            s.message
        )),
        // Unknown or incorrect time zone (1298): the URL's `time_zone=`.
        mysql_async::Error::Server(s) if s.code == 1298 => LockError::Config(format!(
            "MySQL at {} does not know the URL's time_zone= ({}): give an offset such as \
             %2B00:00, or load the server's time zone tables",
            target.place(),
            s.message
        )),
        _ => connect_error(target, &e.to_string()),
    }
}

fn connect_error(target: &Target, reason: &str) -> LockError {
    LockError::Store {
        engine: ENGINE,
        message: format!("cannot connect to MySQL at {}: {reason}", target.place()),
        transient: true,
    }
}

/// A MySQL error as a [`LockError`], saying whether it may heal (a lost
/// connection, a server going away or shutting down, a deadlock, a lock
/// wait that timed out, a read-only server during a failover).
pub(crate) fn store_error(e: &mysql_async::Error) -> LockError {
    let transient = match e {
        mysql_async::Error::Io(_) => true,
        mysql_async::Error::Driver(d) => matches!(
            d,
            mysql_async::DriverError::ConnectionClosed
                | mysql_async::DriverError::PoolDisconnected
                | mysql_async::DriverError::PacketOutOfOrder
        ),
        // Deadlock (1213), lock deadlock (3058), lock wait timeout (1205),
        // read-only (1290, 1836), shutting down (1053), too many
        // connections (1040), query interrupted (1317), lost (2006, 2013),
        // a prepared statement closed (prepared again next time).
        mysql_async::Error::Server(s) => {
            matches!(
                s.code,
                1213 | 3058
                    | 1205
                    | 1290
                    | 1836
                    | 1053
                    | 1040
                    | 1317
                    | 2006
                    | 2013
                    | UNKNOWN_STATEMENT
            ) || skipped_time(s.code, &s.message)
        }
        _ => false,
    };
    let message = match e {
        mysql_async::Error::Server(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    };
    LockError::Store {
        engine: ENGINE,
        message,
        transient,
    }
}

/// Whether error `code` with `message` is a time the session's zone
/// skips: "Incorrect datetime value" (1292) for a time within a
/// `TIMESTAMP` column's range (before 2038), which the session's zone
/// cannot convert because its clocks jump over it (the spring-forward hour
/// of a zone with daylight saving, for the UTC times written through a
/// session in that zone, as a ShedLock table's `TIMESTAMP` columns are).
/// It passes once the hour is over: transient. A time past the column's
/// range (a lease past 2038) is refused for good.
fn skipped_time(code: u16, message: &str) -> bool {
    if code != 1292 || !message.contains("datetime value") {
        return false;
    }
    let year = message
        .split_once('\'')
        .and_then(|(_, rest)| rest.get(..4))
        .and_then(|year| year.parse::<u32>().ok());
    year.is_some_and(|year| (1970..2038).contains(&year))
}

pub(crate) fn timeout_error() -> LockError {
    LockError::Store {
        engine: ENGINE,
        message: "no answer within the response timeout".into(),
        transient: true,
    }
}
