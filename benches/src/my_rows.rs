//! The MySQL/MariaDB engine's floor for the shared rows ([`crate::rows`]):
//! `my_bench` runs them alone (rows 1-4); `lock_bench` runs them after the
//! PostgreSQL rows (rows 19-22).
//!
//! - **floor**: the engine's own driver (`mysql_async`) on a pool of as
//!   many connections as the engine's ([`POOL`], 8), used in turn
//!   statement by statement, each in the engine's session settings and
//!   over its transport (the URL's TCP address, never the server's unix
//!   socket), with its statements prepared through the driver's cache (the
//!   engine runs its own by handle; for the floor's short texts the
//!   cache's look-up costs little): a bare `INSERT IGNORE INTO
//!   floor_locks(name) VALUES (?)` plus `DELETE FROM floor_locks WHERE
//!   name = ?` (2 round trips, 2 writes). The least
//!   a lock in a table can do; no lease, no holder, no token.
//! - row 3's unit (issue 35): the floor's own release + insert, timed
//!   together. MySQL has no notification: the engine's waiters poll, from
//!   4 ms up to `Config::poll_cap` (100 ms by default), so the handoff is
//!   set by where the waiter's backoff stands, not by round trips; the
//!   issue asks for it reported with what the polling costs, not bounded.
//! - what the polling costs (issue 35: "the polling's queries per second
//!   per waiting name"): the server's `Com_stmt_execute` (the prepared
//!   statements run: the engine's polls, and its holder's renewals) and
//!   `Questions` (every statement, a connect's too) counted over row 4's
//!   steady stretch, from when every
//!   name has its waiter to the end of the rows' pause, per second and per
//!   waiting name ([`Polling`]; `my_bench` prints it after the rows, as
//!   the shared rows have no line of a floor's own).
//! - row 3's and row 4's waiters leave no trace in the database between
//!   polls: the rows count them in this process, through the hook the
//!   engine's tests use (`lock_runtime::__private::sql_waiting`), and
//!   their holders as rows of the lock table;
//! - row 4 also counts the waiting client's connections: the server's
//!   connections of the URL's user (`information_schema.PROCESSLIST`)
//!   but the floor's own, from before the client connects.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Value};

use crate::rows::{BenchError, DRAIN, Floor, Streams};
use examples::MariaDb;

/// How many connections the floor keeps: as many as a `LockClient` keeps
/// at most (`lock_runtime`'s MySQL `POOL`).
pub const POOL: usize = 8;

/// How many connections the engine keeps on its client's own runtime,
/// besides a pool per caller runtime (`lock_runtime`'s MySQL `HOME_POOL`).
pub const HOME_POOL: usize = 2;

/// The floor's table: a name and nothing else.
const TABLE: &str = "floor_locks";

/// The name row 3's unit inserts and deletes.
const ROUND_TRIP: &str = "bench-rt";

/// The engine's session settings, which the floor's connections take too
/// (so that only the statements differ).
const SESSION: [&str; 2] = [
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "SET NAMES utf8mb4",
];

/// What the engine's polling cost the server in row 4's steady stretch.
#[derive(Debug, Clone, Copy)]
pub struct Polling {
    /// Statements the server ran (`Questions`), every client's: with a
    /// connection's set-up when a statement opens one.
    pub statements: u64,
    /// Prepared statements it ran (`Com_stmt_execute`): the engine's
    /// statements proper (the polls, the holder's renewals).
    pub executed: u64,
    /// How long the stretch lasted.
    pub stretch: Duration,
    /// Names with waiters in it (one polling head waiter each).
    pub names: usize,
}

impl Polling {
    /// `count` per second per waiting name.
    pub fn per_name(&self, count: u64) -> f64 {
        examples::per_second(count, self.stretch) / self.names.max(1) as f64
    }
}

impl std::fmt::Display for Polling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "polling while waiting (row 4, {} names, {:.0?} after all queued), per waiting \
             name: {:.1} statements/s executed (Com_stmt_execute), {:.1}/s in all (Questions)",
            self.names,
            self.stretch,
            self.per_name(self.executed),
            self.per_name(self.statements),
        )
    }
}

/// The last [`Polling`] this process measured.
static POLLING: Mutex<Option<Polling>> = Mutex::new(None);

/// What the engine's polling cost in the last row 4 of this process
/// (`None` before one ran).
pub fn polling() -> Option<Polling> {
    *POLLING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The MySQL/MariaDB floor: a pool of raw connections to the same database.
pub struct MyFloor {
    pool: Vec<tokio::sync::Mutex<Conn>>,
    next: AtomicUsize,
    /// The pool's connection ids, which row 4 does not count.
    ids: Vec<u32>,
    /// The engine's URL: `lock_runtime::__private::sql_waiting` finds
    /// this process's waiters by it.
    url: String,
    /// The engine's lock table (the URL's `table=`), quoted.
    locks: String,
    /// Row 4's steady stretch: the server's `Questions` when every name
    /// had its waiter, when, and how many names.
    queued: Mutex<Option<([u64; 2], Instant, usize)>>,
}

/// The driver's options for a lock URL: without the engine's own query
/// parameters (`table=`, `keep_rows=`), in the engine's session settings,
/// over the engine's transport: the URL's TCP address. (The driver's
/// default, `prefer_socket`, moves a connection to `127.0.0.1` onto the
/// server's unix socket, which the engine never does: a proxy in front of
/// the server would be passed by.)
pub fn driver_opts(url: &str) -> Result<Opts, BenchError> {
    let url = examples::store::driver_url(url);
    Ok(OptsBuilder::from_opts(Opts::from_url(&url)?)
        .init(SESSION.to_vec())
        .prefer_socket(false)
        .into())
}

impl MyFloor {
    /// The next connection of the pool, in turn, once it is free.
    async fn conn(&self) -> tokio::sync::MutexGuard<'_, Conn> {
        self.pool[self.next.fetch_add(1, Ordering::Relaxed) % self.pool.len()]
            .lock()
            .await
    }

    /// How many of `names` are held rows of the lock table.
    async fn held(&self, names: &[String]) -> Result<usize, BenchError> {
        let marks = vec!["?"; names.len()].join(", ");
        let params: Vec<Value> = names.iter().map(|n| Value::from(n.as_str())).collect();
        let count: Option<u64> = self
            .conn()
            .await
            .exec_first(
                format!(
                    "SELECT COUNT(*) FROM {} WHERE name IN ({marks}) \
                     AND lock_until > UTC_TIMESTAMP(6)",
                    self.locks
                ),
                params,
            )
            .await?;
        Ok(count.unwrap_or(0) as usize)
    }

    /// The server's counts of statements, every client's: `Questions`
    /// (all of them) and `Com_stmt_execute` (prepared statements run: the
    /// engine's, without what its connects send).
    async fn questions(&self) -> Result<[u64; 2], BenchError> {
        let rows: Vec<(String, u64)> = self
            .conn()
            .await
            .query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_stmt_execute')")
            .await?;
        let count = |name: &str| {
            rows.iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map_or(0, |(_, v)| *v)
        };
        Ok([count("Questions"), count("Com_stmt_execute")])
    }

    /// The server's connections of the URL's user, but the floor's.
    async fn connections(&self) -> Result<i64, BenchError> {
        let ids: Vec<String> = self.ids.iter().map(u32::to_string).collect();
        let count: Option<i64> = self
            .conn()
            .await
            .query_first(format!(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE USER = SUBSTRING_INDEX(CURRENT_USER(), '@', 1) AND ID NOT IN ({})",
                ids.join(", ")
            ))
            .await?;
        Ok(count.unwrap_or(0))
    }

    /// Row 4's steady stretch ends: what the polling cost since
    /// [`Floor::all_queued`] saw every name queued (kept for [`polling`]).
    async fn end_stretch(&self) -> Result<(), BenchError> {
        let start = self.queued.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((before, at, names)) = start {
            let after = self.questions().await?;
            *POLLING.lock().unwrap_or_else(|e| e.into_inner()) = Some(Polling {
                statements: after[0].saturating_sub(before[0]),
                executed: after[1].saturating_sub(before[1]),
                stretch: at.elapsed(),
                names,
            });
        }
        Ok(())
    }
}

impl Floor for MyFloor {
    type Server = MariaDb;
    /// The names seen with a waiter ([`MyFloor::drain_probe`]).
    type Probe = Vec<bool>;
    const LABEL: &'static str = "mysql";
    const NAME: &'static str = "MySQL/MariaDB";
    const ISSUE: u32 = 35;
    /// A client's connections: its pool (no listener: its waiters poll).
    const STREAMS: Option<Streams> = Some(Streams {
        unit: "connection(s)",
        goal: "a pool per runtime + 2",
        most: (POOL + HOME_POOL) as i64,
    });
    const STREAMS_FROM_CONNECT: bool = true;
    /// MySQL's waiters poll: the handoff is reported, with the polling's
    /// cost (issue 35), not held to PostgreSQL's goal.
    const HANDOFF_GOAL: Option<f64> = None;
    const ROUND_TRIP: &'static str = "floor release+insert";

    async fn connect(server: &MariaDb) -> Result<MyFloor, BenchError> {
        let opts = driver_opts(server.url())?;
        let mut pool = Vec::with_capacity(POOL);
        let mut ids = Vec::with_capacity(POOL);
        for n in 0..POOL {
            let mut conn = Conn::new(opts.clone()).await?;
            if n == 0 {
                conn.query_drop(format!(
                    "CREATE TABLE IF NOT EXISTS {TABLE} (name VARCHAR(255) CHARACTER SET \
                     utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY) ENGINE=InnoDB"
                ))
                .await?;
                conn.query_drop(format!("DELETE FROM {TABLE}")).await?;
            }
            ids.push(conn.id());
            pool.push(tokio::sync::Mutex::new(conn));
        }
        Ok(MyFloor {
            pool,
            next: AtomicUsize::new(0),
            ids,
            url: server.url().to_owned(),
            locks: crate::rows::lock_table(server.url(), '`'),
            queued: Mutex::new(None),
        })
    }

    async fn pairs(&self, name: &str, n: usize) -> Result<(), BenchError> {
        let insert = format!("INSERT IGNORE INTO {TABLE}(name) VALUES (?)");
        let delete = format!("DELETE FROM {TABLE} WHERE name = ?");
        for _ in 0..n {
            let mut conn = self.conn().await;
            conn.exec_drop(&insert, (name,)).await?;
            if conn.affected_rows() != 1 {
                return Err("the floor's row was taken".into());
            }
            drop(conn);
            self.conn().await.exec_drop(&delete, (name,)).await?;
        }
        Ok(())
    }

    async fn prepare_round_trip(&self) -> Result<(), BenchError> {
        self.conn()
            .await
            .exec_drop(format!("DELETE FROM {TABLE} WHERE name = ?"), (ROUND_TRIP,))
            .await?;
        Ok(())
    }

    /// One insert, then one release: what a handoff's holder and waiter
    /// write at the least (a poll that finds the row free is the insert).
    async fn round_trip(&self) -> Result<Duration, BenchError> {
        let started = Instant::now();
        let mut conn = self.conn().await;
        conn.exec_drop(
            format!("INSERT IGNORE INTO {TABLE}(name) VALUES (?)"),
            (ROUND_TRIP,),
        )
        .await?;
        if conn.affected_rows() != 1 {
            return Err("the floor's round-trip row was taken".into());
        }
        drop(conn);
        let mut conn = self.conn().await;
        conn.exec_drop(format!("DELETE FROM {TABLE} WHERE name = ?"), (ROUND_TRIP,))
            .await?;
        if conn.affected_rows() != 1 {
            return Err("the floor's round-trip row was gone".into());
        }
        Ok(started.elapsed())
    }

    /// The name's held row, and this process's waiters on it.
    async fn contenders(&self, name: &str) -> Result<usize, BenchError> {
        let held = self.held(&[name.to_owned()]).await?;
        Ok(held + lock_runtime::__private::sql_waiting(&self.url, name))
    }

    /// Which names have been seen with a waiter: a head waiter shows
    /// only while it sleeps between polls, so a name counts from the first
    /// look that sees it (the head polls until the release).
    async fn drain_probe(&self) -> Result<Vec<bool>, BenchError> {
        Ok(Vec::new())
    }

    /// Every name is a held row, and has been seen with a waiter of this
    /// process; when they all are, row 4's steady stretch starts (the
    /// server's `Questions` noted).
    async fn all_queued(&self, seen: &mut Vec<bool>, names: &[String]) -> Result<bool, BenchError> {
        debug_assert!(names.iter().all(|n| n.starts_with(DRAIN)));
        if self.held(names).await? < names.len() {
            return Ok(false);
        }
        seen.resize(names.len(), false);
        for (seen, name) in seen.iter_mut().zip(names) {
            *seen = *seen || lock_runtime::__private::sql_waiting(&self.url, name) >= 1;
        }
        let queued = seen.iter().all(|&s| s);
        if queued {
            let before = self.questions().await?;
            *self.queued.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((before, Instant::now(), names.len()));
        }
        Ok(queued)
    }

    /// The server's count of the user's connections but the floor's
    /// (`information_schema.PROCESSLIST`), asked on the floor's pool from
    /// the runtime's blocking section (the trait's method is not async).
    /// Asked at the end of row 4's pause, it also ends the stretch whose
    /// statements [`polling`] reports.
    fn streams(&self) -> Result<i64, BenchError> {
        let handle = tokio::runtime::Handle::try_current()?;
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return Err("the MySQL rows count connections on a multi-thread runtime".into());
        }
        tokio::task::block_in_place(|| {
            handle.block_on(async {
                self.end_stretch().await?;
                self.connections().await
            })
        })
    }
}
