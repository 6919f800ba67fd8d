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
//!   driven there ([`POOL`](conn::POOL); see `crate::near`: an answer wakes no other
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
//! waiters poll it.
//!
//! Semaphores keep one row per permit beside the lock table
//! (`<table>_permits`, its primary key the name and a slot `0..N`; see
//! `engine::sql::permits`), and hold their name's row in the lock table
//! together (its holder ` permits`, its `fence` the name's counter). One
//! statement admits a permit: under the name's transaction lock it picks
//! the lowest slot below the bound that no live permit holds (the
//! holder's own first), takes the name's row (made, taken over when free,
//! or shared: its end the latest, its token raised), and inserts the
//! permit into its slot (an expired permit's taken over) with that token,
//! dropping the waiter's registration; the slot's key is what keeps a
//! second holder out, whatever the statement's snapshot saw. A release
//! deletes the permit and announces the name to its registered waiters;
//! the last frees the name's row. A client's waiters of one name queue in
//! the process; the head registers and sleeps until an announcement, the
//! first permit's end, or its deadline.
//!
//! Quorum locks are [`LockError::Unsupported`] on this
//! engine, as is replica sync.
//! A failover of the database to an asynchronous replica can lose or
//! duplicate a hold, as with Redis: the guard learns it at its next
//! renewal, and fencing is the defence.

mod conn;
mod errors;
mod layout;
mod listen;
mod made;
mod ops;
mod rows;
mod schema;
mod take;

use std::sync::Arc;

use tokio::runtime::Handle;
use tokio_postgres::types::{ToSql, Type};

/// A hold on PostgreSQL.
pub(crate) type PgHold = crate::engine::sql::SqlHold<Pg>;
pub(crate) use ops::{force_unlock, inspect, locks};

crate::engine::seam::engine_by_parts!(
    Pg, name "postgres", hold PgHold,
    connect Pg::connect,
    acquire |pg, alive, request| crate::kept::acquire(alive, pg, request),
    renewed |pg| pg.common.renewed(),
    inspect inspect, locks locks, force_unlock force_unlock,
    schema ddl, semaphores true,
);

use crate::config::Config;
use crate::engine::sql::{Common, Params};
use crate::error::LockError;
use conn::{
    Backend, Conn, Connected, HOME_POOL, ISOLATION, Prepared, PreparedLine, Slots, connect,
};
use errors::{connect_error, connect_failed};
use layout::{PgTable, Q};
use schema::{ddl, prepare_table};

/// The engine's name in errors and metrics.
pub(crate) const ENGINE: &str = "postgres";

/// PostgreSQL's URLs and identifiers (at most 63 bytes).
const DIALECT: crate::engine::sql::Dialect = crate::engine::sql::Dialect {
    scheme: "postgres",
    aliases: &["postgresql"],
    identifier: 63,
    own: &[],
};

/// What a URL says beyond the connection: the table and how rows go.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    pub(crate) connect: tokio_postgres::Config,
    pub(crate) table: crate::engine::sql::Table,
    pub(crate) keep_rows: bool,
    /// Where the URL came from (`from Config`, `from LOCK_URL`, ...).
    pub(crate) origin: &'static str,
}

impl Site {
    /// Reads `config`'s URL: `postgres://` or `postgresql://`, a database,
    /// and the query parameters `table=` and `keep_rows=` of ours (the
    /// others are the driver's: `connect_timeout`, `application_name`,
    /// ...).
    pub(crate) fn parse(config: &Config) -> Result<Site, LockError> {
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
        Ok(Site {
            connect,
            table,
            keep_rows,
            origin: config.origin(),
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

/// What the tasks of a client on PostgreSQL share (besides what every
/// SQL engine's client has: [`Common`], which it derefs to).
pub(crate) struct Pg {
    common: Common<Pg>,
    site: Site,
    /// The table's announcement channel (see [`PgTable::channel`]).
    channel: String,
    statements: layout::Statements,
    /// The `name` column's length (a longer name is refused).
    pub(crate) longest: Option<usize>,
    /// Whether the line of fair and read-write locks is there (made, or
    /// this role may not make it: then those are [`LockError::Config`]).
    pub(crate) lined: bool,
    /// Whether the permits table of semaphores is there (made, or this
    /// role may not make it: then permits are [`LockError::Config`]).
    pub(crate) permitted: bool,
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

/// How many acquisitions of lock `name` by this process's clients of the
/// table `url` names wait for a release (`__private::sql_waiting`).
pub(crate) fn waiting(url: &str, name: &str) -> usize {
    match Site::parse(&Config::new(url)) {
        Ok(site) => crate::engine::sql::waiting(&site.key(), name),
        Err(_) => 0,
    }
}

impl Pg {
    /// Connects to the database of `config`'s URL on the client's
    /// `runtime`, makes the lock table when it is missing (or says, with
    /// the DDL, why it cannot), checks its shape, and starts the listener
    /// and the watchdog.
    pub(crate) async fn connect(config: Config, runtime: Handle) -> Result<Arc<Pg>, LockError> {
        let site = Site::parse(&config)?;
        if config.replica_sync == crate::config::ReplicaSync::Always {
            return Err(crate::engine::seam::unsupported(
                ENGINE,
                "replica sync (a PostgreSQL primary confirms a write once it is its own; \
                 synchronous replication is the database's setting)",
            ));
        }
        let handle = runtime.clone();
        crate::background::run(&runtime, async move {
            let first = tokio::time::timeout(config.connect_timeout, connect(&site.connect))
                .await
                .map_err(|_| connect_error(&site, "no answer in time"))?
                .map_err(|e| connect_failed(&site, &e))?;
            let Connected { client, connection } = first;
            tokio::spawn(connection);
            let (longest, lined, permitted) = prepare_table(&client, &site).await?;
            let statements =
                layout::Statements::new(&site.table, site.keep_rows, config.watchdog_timeout);
            let listen_at = site.connect.clone();
            let listener = listen::Listener::start(site.table.channel(), move || {
                let at = listen_at.clone();
                async move { connect(&at).await }
            });
            let pg = Arc::new(Pg {
                near: crate::near::Near::new(handle.id()),
                common: Common::new(config, handle, site.key()),
                statements,
                longest,
                lined,
                permitted,
                home: Arc::new(Slots::new(HOME_POOL)),
                listener,
                channel: site.table.channel(),
                site,
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

    /// The error of a fair or read-write lock on a client without a line.
    pub(crate) fn no_line(&self) -> LockError {
        let table = &self.site.table;
        crate::engine::sql::queue::no_line(&table.queue().quoted(Q), &table.queue_ddl())
    }

    /// The error of a permit on a client without a permits table.
    pub(crate) fn no_permits(&self) -> LockError {
        let table = &self.site.table;
        crate::engine::sql::permits::no_permits(&table.permits().quoted(Q), &table.permits_ddl())
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
