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
//! - **Connections.** Per caller runtime, a pool of at most [`POOL`](conn::POOL)
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
//! waiters poll it.
//!
//! Semaphores keep one row per permit beside the lock table
//! (`<table>_permits`, its primary key the name and a slot `0..N`; see
//! `engine::sql::permits`), and hold their name's row in the lock table
//! together (its holder ` permits`, its `fence` the name's counter). A
//! permit takes three statements on the acquisition's connection: an
//! `INSERT ... SELECT` of the lowest slot below the bound that no live
//! permit holds (the holder's own first; an expired permit's taken over
//! by `ON DUPLICATE KEY UPDATE`), whose key keeps a second holder out;
//! then the name's row, taken as the readers take theirs (its token the
//! last insert id), the slot given back when another kind holds the
//! name; then the token written into the permit. A release deletes the
//! permit; the last frees the name's row. A client's waiters of one name
//! queue in the process; the head polls as a plain waiter does (capped,
//! never past the first permit's end or its deadline).
//!
//! Quorum locks are [`LockError::Unsupported`] on this
//! engine, as is replica sync.

mod conn;
mod errors;
mod layout;
mod ops;
mod rows;
mod schema;
mod take;

use std::sync::Arc;

use mysql_async::{Opts, OptsBuilder};
use tokio::runtime::Handle;

pub(crate) use ops::{force_unlock, inspect, locks};

crate::engine::seam::engine_by_parts!(
    My, name "mysql", hold MyHold,
    connect My::connect,
    acquire |my, alive, request| crate::kept::acquire(alive, my, request),
    renewed |my| my.common.renewed(),
    inspect inspect, locks locks, force_unlock force_unlock,
    schema ddl, semaphores true,
);

use crate::config::Config;
use crate::engine::sql::{Common, Table};
use crate::error::LockError;
use conn::{Answer, HOME_POOL, Link, PREPARED, Pooled, Slot, Slots, Stmt, open};
use errors::{connect_error, connect_failed, timeout_error};
use layout::Charset;
use schema::{ddl, prepare_table};

/// The engine's name in errors and metrics.
pub(crate) const ENGINE: &str = "mysql";

/// MySQL's URLs and identifiers (at most 64 bytes).
const DIALECT: crate::engine::sql::Dialect = crate::engine::sql::Dialect {
    scheme: "mysql",
    aliases: &["mariadb"],
    identifier: 64,
    own: &["time_zone"],
};

/// A hold on MySQL.
pub(crate) type MyHold = crate::engine::sql::SqlHold<My>;

/// What a URL says: the connection, the table and how rows go.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    pub(crate) opts: Opts,
    pub(crate) table: Table,
    pub(crate) keep_rows: bool,
    /// Where the URL came from (`from Config`, `from LOCK_URL`, ...).
    pub(crate) origin: &'static str,
}

impl Site {
    /// Reads `config`'s URL: `mysql://` or `mariadb://`, a database, and
    /// the query parameters `table=` and `keep_rows=` of ours (the others
    /// are the driver's).
    pub(crate) fn parse(config: &Config) -> Result<Site, LockError> {
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
        Ok(Site {
            opts: builder.into(),
            table,
            keep_rows,
            origin: config.origin(),
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

/// How many acquisitions of lock `name` by this process's clients of the
/// table `url` names wait for a release (`__private::sql_waiting`).
pub(crate) fn waiting(url: &str, name: &str) -> usize {
    match Site::parse(&Config::new(url)) {
        Ok(site) => crate::engine::sql::waiting(&site.key(), name),
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
    site: Site,
    st: layout::Statements,
    /// The `name` column's length (a longer name is refused).
    longest: Option<usize>,
    /// The `name` column's character set.
    charset: Charset,
    /// Whether the line of fair and read-write locks is there (made, or
    /// this role may not make it: then those are [`LockError::Config`]).
    pub(crate) lined: bool,
    /// Whether the permits table of semaphores is there (made, or this
    /// role may not make it: then permits are [`LockError::Config`]).
    pub(crate) permitted: bool,
    /// The permits table's `name` column's length (a longer name has no
    /// permit).
    permit_longest: Option<usize>,
}

impl std::ops::Deref for My {
    type Target = Common<My>;

    fn deref(&self) -> &Common<My> {
        &self.common
    }
}

impl My {
    /// Connects to the database of `config`'s URL on the client's
    /// `runtime`, makes the lock table when it is missing (or says, with
    /// the DDL, why it cannot), checks its shape, and starts the watchdog.
    pub(crate) async fn connect(config: Config, runtime: Handle) -> Result<Arc<My>, LockError> {
        let site = Site::parse(&config)?;
        if config.replica_sync == crate::config::ReplicaSync::Always {
            return Err(crate::engine::seam::unsupported(
                ENGINE,
                "replica sync (a MySQL primary confirms a write once it is its own; \
                 semi-synchronous replication is the database's setting)",
            ));
        }
        let handle = runtime.clone();
        crate::background::run(&runtime, async move {
            let mut conn = tokio::time::timeout(config.connect_timeout, open(site.opts.clone()))
                .await
                .map_err(|_| connect_error(&site, "no answer in time"))?
                .map_err(|e| connect_failed(&site, &e))?;
            let shape =
                tokio::time::timeout(config.response_timeout, prepare_table(&mut conn.0, &site))
                    .await
                    .unwrap_or_else(|_| Err(timeout_error()));
            let schema::Shape {
                longest,
                charset,
                lined,
                permitted,
                permit_longest,
            } = shape?;
            let home = Slots::new(HOME_POOL);
            // The connection that made the table is the first of the pool.
            let st = layout::Statements::new(&site.table, site.keep_rows);
            *home.slots[0].try_lock().expect("nobody else has it yet") =
                Some(Link::new(conn, &st, None));
            let my = Arc::new(My {
                near: crate::near::Near::new(handle.id()),
                common: Common::new(config, handle, site.key()),
                home: Arc::new(home),
                st,
                longest,
                charset,
                lined,
                permitted,
                permit_longest,
                site,
            });
            crate::engine::sql::Keeper::start(&my);
            Ok(my)
        })
        .await?
    }

    /// Refuses a name this table cannot hold (before any write).
    pub(crate) fn check_name(&self, name: &str) -> Result<(), LockError> {
        layout::check_name(name, self.longest, self.charset)
    }

    /// Refuses a name a permit cannot be taken of (before any write): one
    /// the lock table or the permits table cannot hold, or any when this
    /// client has no permits table.
    pub(crate) fn check_permit_name(&self, name: &str) -> Result<(), LockError> {
        self.check_name(name)?;
        if !self.permitted {
            let table = &self.site.table;
            return Err(crate::engine::sql::permits::no_permits(
                &layout::permits(table).quoted(layout::Q),
                &layout::permits_ddl(table),
            ));
        }
        layout::check_name(name, self.permit_longest, self.charset)
    }
}
