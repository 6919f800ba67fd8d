//! The PostgreSQL engine's floor for the shared rows ([`crate::rows`]):
//! `pg_bench` runs them alone (rows 1-4); `lock_bench` runs them after the
//! ZooKeeper rows (rows 15-18).
//!
//! - **floor**: the engine's own driver (`tokio-postgres`) on a pool of as
//!   many connections as the engine's ([`POOL`], 4), used in turn statement
//!   by statement as the engine uses its own, each with its statements
//!   prepared: a bare `INSERT INTO floor_locks(name) VALUES ($1) ON
//!   CONFLICT DO NOTHING` plus `DELETE FROM floor_locks WHERE name = $1`
//!   (2 round trips, 2 writes). The least a lock in a table can do; no
//!   lease, no holder, no token, no notification.
//! - row 3's unit (issue 35: "the floor's own release + NOTIFY + insert"):
//!   one release that announces, `WITH gone AS (DELETE ... RETURNING name)
//!   SELECT pg_notify(...) FROM gone` (one statement, one round trip, as the
//!   engine's release), plus one insert, timed together;
//! - row 3's and row 4's waiters leave no trace in the database (they sleep
//!   until a notification): the rows count them in this process, through
//!   the hook the engine's tests use (`lock_runtime::__private::sql_waiting`),
//!   and their holders as rows of the lock table;
//! - row 4 also counts the waiting client's connections: the server's
//!   backends whose `application_name` is the engine's (`lock-runtime`),
//!   from before the client connects.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls, Statement};

use crate::rows::{BenchError, DRAIN, Floor, Streams};
use examples::Postgres;

/// How many connections the floor keeps: as many as a `LockClient` keeps
/// for its statements (`lock_runtime`'s `POOL`, besides its listener).
pub const POOL: usize = 4;

/// How many connections the engine keeps on its client's own runtime,
/// besides a pool per caller runtime (`lock_runtime`'s `HOME_POOL`).
pub const HOME_POOL: usize = 2;

/// The floor's table: a name and nothing else.
const TABLE: &str = "floor_locks";

/// The name row 3's unit inserts and deletes.
const ROUND_TRIP: &str = "bench-rt";

/// The engine's `application_name`, by which row 4 counts its backends.
const ENGINE_APPLICATION: &str = "lock-runtime";

/// One of the floor's connections and its prepared statements.
struct Conn {
    client: Client,
    insert: Statement,
    delete: Statement,
    /// The delete that announces (row 3's unit).
    release: Statement,
}

/// The PostgreSQL floor: a pool of raw connections to the same database.
pub struct PgFloor {
    pool: Vec<Conn>,
    next: AtomicUsize,
    /// The engine's URL: `lock_runtime::__private::sql_waiting` finds
    /// this process's waiters by it.
    url: String,
    /// The engine's lock table (the URL's `table=`), quoted.
    locks: String,
}

/// The driver's connection settings for a lock URL: without the engine's
/// own query parameters (`table=`, `keep_rows=`), named apart from the
/// engine's backends.
fn driver_config(url: &str) -> Result<tokio_postgres::Config, BenchError> {
    let mut config: tokio_postgres::Config = examples::store::driver_url(url).parse()?;
    config.application_name("lock-bench-floor");
    Ok(config)
}

impl PgFloor {
    /// The next connection of the pool, in turn.
    fn conn(&self) -> &Conn {
        &self.pool[self.next.fetch_add(1, Ordering::Relaxed) % self.pool.len()]
    }

    /// How many of `names` are held rows of the lock table.
    async fn held(&self, names: &[String]) -> Result<usize, BenchError> {
        let count: i64 = self
            .conn()
            .client
            .query_one(
                &format!(
                    "SELECT count(*) FROM {} WHERE name = ANY($1::text[]) \
                     AND lock_until > timezone('utc', clock_timestamp())",
                    self.locks
                ),
                &[&names],
            )
            .await?
            .get(0);
        Ok(count as usize)
    }

    /// The server's backends of the engine's clients (all of them).
    async fn backends(&self) -> Result<i64, BenchError> {
        Ok(self
            .conn()
            .client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&ENGINE_APPLICATION],
            )
            .await?
            .get(0))
    }
}

impl Floor for PgFloor {
    type Server = Postgres;
    /// Row 4 polls with the floor's own pool.
    type Probe = ();
    const LABEL: &'static str = "postgres";
    const NAME: &'static str = "PostgreSQL";
    const ISSUE: u32 = 35;
    /// A client's connections: a pool per caller runtime, two on its own
    /// runtime and its one `LISTEN` connection.
    const STREAMS: Option<Streams> = Some(Streams {
        unit: "connection(s)",
        goal: "pools + one listener",
        most: (POOL + HOME_POOL) as i64 + 1,
    });
    const STREAMS_FROM_CONNECT: bool = true;
    const ROUND_TRIP: &'static str = "release+NOTIFY+insert";

    async fn connect(server: &Postgres) -> Result<PgFloor, BenchError> {
        let config = driver_config(server.url())?;
        let mut pool = Vec::with_capacity(POOL);
        for n in 0..POOL {
            let (client, connection) = config.connect(NoTls).await?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            if n == 0 {
                client
                    .batch_execute(&format!(
                        "CREATE TABLE IF NOT EXISTS {TABLE} \
                         (name VARCHAR(255) COLLATE \"C\" NOT NULL PRIMARY KEY); \
                         DELETE FROM {TABLE};"
                    ))
                    .await?;
            }
            let insert = client
                .prepare(&format!(
                    "INSERT INTO {TABLE}(name) VALUES ($1) ON CONFLICT DO NOTHING"
                ))
                .await?;
            let delete = client
                .prepare(&format!("DELETE FROM {TABLE} WHERE name = $1"))
                .await?;
            let release = client
                .prepare(&format!(
                    "WITH gone AS (DELETE FROM {TABLE} WHERE name = $1 RETURNING name) \
                     SELECT pg_notify('{TABLE}', name) FROM gone"
                ))
                .await?;
            pool.push(Conn {
                client,
                insert,
                delete,
                release,
            });
        }
        Ok(PgFloor {
            pool,
            next: AtomicUsize::new(0),
            url: server.url().to_owned(),
            locks: crate::rows::lock_table(server.url(), '"'),
        })
    }

    async fn pairs(&self, name: &str, n: usize) -> Result<(), BenchError> {
        for _ in 0..n {
            let conn = self.conn();
            if conn.client.execute(&conn.insert, &[&name]).await? != 1 {
                return Err("the floor's row was taken".into());
            }
            let conn = self.conn();
            conn.client.execute(&conn.delete, &[&name]).await?;
        }
        Ok(())
    }

    async fn prepare_round_trip(&self) -> Result<(), BenchError> {
        let conn = self.conn();
        conn.client.execute(&conn.delete, &[&ROUND_TRIP]).await?;
        Ok(())
    }

    /// One insert, then one release that announces: what a handoff's
    /// holder and waiter do at the least.
    async fn round_trip(&self) -> Result<Duration, BenchError> {
        let started = Instant::now();
        let conn = self.conn();
        if conn.client.execute(&conn.insert, &[&ROUND_TRIP]).await? != 1 {
            return Err("the floor's round-trip row was taken".into());
        }
        let conn = self.conn();
        if conn
            .client
            .query(&conn.release, &[&ROUND_TRIP])
            .await?
            .len()
            != 1
        {
            return Err("the floor's round-trip row was gone".into());
        }
        Ok(started.elapsed())
    }

    /// The name's held row, and this process's waiters on it.
    async fn contenders(&self, name: &str) -> Result<usize, BenchError> {
        let held = self.held(&[name.to_owned()]).await?;
        Ok(held + lock_runtime::__private::sql_waiting(&self.url, name))
    }

    async fn drain_probe(&self) -> Result<(), BenchError> {
        Ok(())
    }

    /// Every name is a held row, and has a waiter of this process.
    async fn all_queued(&self, _: &mut (), names: &[String]) -> Result<bool, BenchError> {
        debug_assert!(names.iter().all(|n| n.starts_with(DRAIN)));
        if self.held(names).await? < names.len() {
            return Ok(false);
        }
        Ok(names
            .iter()
            .all(|name| lock_runtime::__private::sql_waiting(&self.url, name) >= 1))
    }

    /// The server's count of the engine's backends (`pg_stat_activity`),
    /// asked on the floor's pool from the runtime's blocking section (the
    /// trait's method is not async).
    fn streams(&self) -> Result<i64, BenchError> {
        let handle = tokio::runtime::Handle::try_current()?;
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return Err("the PostgreSQL rows count connections on a multi-thread runtime".into());
        }
        tokio::task::block_in_place(|| handle.block_on(self.backends()))
    }
}
