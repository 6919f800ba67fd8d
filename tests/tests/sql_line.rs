//! The line of fair and read-write locks on the SQL engines (DESIGN §10:
//! "their own tables"), on PostgreSQL and on MariaDB, against real servers
//! the tests start: what only these engines have. A fair lock, a writer
//! and a plain lock of one name hold the same row, and the readers hold it
//! together, so each excludes the others; the line is left empty once
//! every lock is given back; a ticket that ran out (its waiter or reader
//! died) is no one's: it keeps nobody out, and the last live reader frees
//! the row although a dead reader's ticket is still there. What every
//! engine does is in `tests/engines/`; ShedLock beside our readers and
//! writers in `tests/shedlock.rs`.
//!
//! Every case is one `async fn case<D: Line>(server: &SqlServer<D>)`, and
//! [`on_postgres_and_mysql!`] makes it two tests, `<case>::on_postgres` and
//! `<case>::on_mysql`.

use std::time::Duration;

use lock_runtime::{Config, LockClient};
use tests::mariadb::Maria;
use tests::postgres::Pg;
use tests::sql_server::{Database, SqlServer};

/// Generous bound on one wait for an event (it asserts no speed).
const WITHIN: Duration = Duration::from_secs(20);

/// Makes each named case two tests in a module of its name, `on_postgres`
/// and `on_mysql` (on MariaDB), each against a fresh server.
macro_rules! on_postgres_and_mysql {
    ($($case:ident),+ $(,)?) => {
        $(
            mod $case {
                use super::{Maria, Pg, SqlServer};

                #[tokio::test]
                async fn on_postgres() {
                    super::$case(&SqlServer::<Pg>::start()).await;
                }

                #[tokio::test]
                async fn on_mysql() {
                    super::$case(&SqlServer::<Maria>::start()).await;
                }
            }
        )+
    };
}

on_postgres_and_mysql!(
    plain_fair_and_read_write_locks_of_one_name_exclude_each_other,
    the_line_and_the_table_are_left_empty_once_every_lock_is_given_back,
    a_ticket_that_ran_out_keeps_nobody_out,
    the_last_live_reader_frees_the_row_beside_a_dead_readers_ticket,
    the_watchdog_keeps_readers_writers_and_fair_locks_past_their_lease,
);

/// How each database says "a second ago" (UTC, as the line keeps times).
trait Line: Database {
    const A_SECOND_AGO: &'static str;
}

impl Line for Pg {
    const A_SECOND_AGO: &'static str = "timezone('utc', clock_timestamp()) - interval '1 second'";
}

impl Line for Maria {
    const A_SECOND_AGO: &'static str = "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND";
}

async fn client<D: Line>(server: &SqlServer<D>) -> LockClient {
    LockClient::connect(Config::new(server.url()))
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", server.url()))
}

/// Rows of `table`.
fn count<D: Line>(server: &SqlServer<D>, table: &str) -> String {
    server.sql(&format!("SELECT count(*) FROM {table}"))
}

/// Whether a lock of `builder` is free now (then given back).
async fn free(builder: lock_runtime::LockBuilder) -> bool {
    match builder.try_acquire().await.expect("an attempt") {
        Some(guard) => {
            guard.release().await.expect("release");
            true
        }
        None => false,
    }
}

async fn plain_fair_and_read_write_locks_of_one_name_exclude_each_other<D: Line>(
    server: &SqlServer<D>,
) {
    let (a, b) = (client(server).await, client(server).await);
    let name = "shared";
    let others = |c: &LockClient| {
        [
            c.lock(name),
            c.fair_lock(name),
            c.read_write_lock(name).read(),
            c.read_write_lock(name).write(),
        ]
    };
    // Each kind held by `a` keeps every kind of `b`'s out.
    for (kind, held) in others(&a).into_iter().enumerate() {
        let guard = held.acquire().await.unwrap();
        for (other, builder) in others(&b).into_iter().enumerate() {
            let beside = kind == 2 && other == 2;
            assert_eq!(
                free(builder).await,
                beside,
                "kind {kind} held, kind {other} asked (only readers share)"
            );
        }
        guard.release().await.unwrap();
    }
}

async fn the_line_and_the_table_are_left_empty_once_every_lock_is_given_back<D: Line>(
    server: &SqlServer<D>,
) {
    let (a, b) = (client(server).await, client(server).await);
    let holder = a.fair_lock("job").acquire().await.unwrap();
    let reader = a.read_write_lock("doc").read().acquire().await.unwrap();
    // Waiters of each kind, in line behind them, one after another (the
    // reader behind the writer, so it waits too).
    let mut waiters = Vec::new();
    for (n, builder) in [
        b.fair_lock("job"),
        b.read_write_lock("doc").write(),
        b.read_write_lock("doc").read(),
    ]
    .into_iter()
    .enumerate()
    {
        waiters.push(tokio::spawn(builder.wait(WITHIN).acquire()));
        let tickets = (n + 3).to_string();
        tests::eventually("the waiter in line", WITHIN, || async {
            count(server, "distributed_locks_queue") == tickets
        })
        .await;
    }
    holder.release().await.unwrap();
    reader.release().await.unwrap();
    for waiter in waiters {
        tests::finish(WITHIN, waiter).await.release().await.unwrap();
    }
    assert_eq!(count(server, "distributed_locks_queue"), "0");
    assert_eq!(count(server, "distributed_locks"), "0");
    assert!(a.inspect("job").await.unwrap().is_none());
    assert!(a.inspect("doc").await.unwrap().is_none());
}

async fn a_ticket_that_ran_out_keeps_nobody_out<D: Line>(server: &SqlServer<D>) {
    // The client makes the line.
    let c = client(server).await;
    // A fair waiter and a writer that died in line, and a reader that died
    // holding (its row gone with its lease): their tickets ran out.
    server.sql(&format!(
        "INSERT INTO distributed_locks_queue (name, holder, side, held, ticket_until) VALUES \
         ('gone', 'dead:1', 'f', false, {t}), ('gone', 'dead:2', 'w', false, {t}), \
         ('gone', 'dead:3', 'r', true, {t});",
        t = D::A_SECOND_AGO
    ));
    assert!(free(c.fair_lock("gone")).await, "a fair lock at once");
    assert!(free(c.read_write_lock("gone").write()).await, "a writer");
    assert!(free(c.read_write_lock("gone").read()).await, "a reader");
    let info = c.inspect("gone").await.unwrap();
    assert!(info.is_none(), "nobody holds it: {info:?}");
}

async fn the_last_live_reader_frees_the_row_beside_a_dead_readers_ticket<D: Line>(
    server: &SqlServer<D>,
) {
    let (a, b, w) = (
        client(server).await,
        client(server).await,
        client(server).await,
    );
    let live = a.read_write_lock("doc").read().acquire().await.unwrap();
    let dead = b.read_write_lock("doc").read().acquire().await.unwrap();
    // `b`'s reader dies: its ticket runs out (no renewal brings back a
    // ticket that ran out).
    server.sql(&format!(
        "UPDATE distributed_locks_queue SET ticket_until = {} WHERE holder = '{}';",
        D::A_SECOND_AGO,
        dead.holder_id()
    ));
    let info = w.inspect("doc").await.unwrap().expect("read");
    let ids: Vec<&str> = info.holders.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, [live.holder_id()], "a dead reader holds nothing");
    assert!(!free(w.read_write_lock("doc").write()).await);
    live.release().await.unwrap();
    // Freed by the last live reader: a writer gets it at once.
    let writer = w
        .read_write_lock("doc")
        .write()
        .try_acquire()
        .await
        .unwrap()
        .expect("free once the last live reader is released");
    // The dead reader's guard, given back late, takes nothing of it.
    let _ = dead.release().await;
    assert_eq!(
        w.inspect("doc").await.unwrap().expect("written").holders[0].id,
        writer.holder_id()
    );
    writer.release().await.unwrap();
}

async fn the_watchdog_keeps_readers_writers_and_fair_locks_past_their_lease<D: Line>(
    server: &SqlServer<D>,
) {
    let lease = Duration::from_secs(2);
    let a = LockClient::connect(Config::new(server.url()).watchdog_timeout(lease))
        .await
        .unwrap();
    let b = client(server).await;
    let rw = |c: &LockClient| c.read_write_lock("kept");
    for (held, other) in [
        (rw(&a).read(), rw(&b).write()),
        (rw(&a).write(), rw(&b).read()),
        (a.fair_lock("kept"), b.fair_lock("kept")),
    ] {
        let guard = held.acquire().await.unwrap();
        // Three leases long: still held, never lost.
        match other.wait(lease * 3).acquire().await {
            Err(lock_runtime::LockError::Timeout { .. }) => {}
            other => panic!("free within three leases: {other:?}"),
        }
        assert!(!guard.is_lost());
        let info = b.inspect("kept").await.unwrap().expect("held");
        assert_eq!(info.holders[0].id, guard.holder_id());
        guard.release().await.unwrap();
        assert_eq!(a.renewed_locks(), 0, "a released guard is not renewed");
    }
    assert_eq!(count(server, "distributed_locks_queue"), "0");
}
