//! The PostgreSQL engine against real PostgreSQL servers the tests start
//! (UTC+05:45, never the machine's 5432): what only it has. The table is
//! made when missing, with ShedLock's columns and `fence`, names compared
//! byte for byte; a role that may not make it gets the DDL; a table of
//! another shape, a bad `table=`, a URL without a database and wrong
//! credentials are typed errors that write nothing; times are UTC by the
//! database's clock; tokens keep rising across deletes; `keep_rows` keeps
//! rows; a release wakes another client's waiter by notification.
//! What every engine does is in `tests/engines/`.

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use tests::postgres::{Postgres, UTC_OFFSET_SECONDS};
use tests::sql_server::{CutOff, a_try_cut_off_leaves_the_name_free};

const WITHIN: Duration = Duration::from_secs(20);

async fn client(url: &str) -> LockClient {
    LockClient::connect(Config::new(url))
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

#[tokio::test]
async fn the_table_is_made_with_shedlocks_columns_and_rows_are_utc_by_the_databases_clock() {
    let pg = Postgres::start();
    let c = client(&pg.url()).await;
    assert_eq!(c.engine_name(), "postgres");
    let columns = pg.sql(
        "SELECT column_name, data_type FROM information_schema.columns \
         WHERE table_name = 'distributed_locks' ORDER BY ordinal_position",
    );
    assert_eq!(
        columns,
        "name|character varying\nlock_until|timestamp without time zone\n\
         locked_at|timestamp without time zone\nlocked_by|character varying\nfence|bigint"
    );
    let guard = c.lock("stock:1").acquire().await.unwrap();
    let row = pg.sql(
        "SELECT locked_by, \
         round(extract(epoch from (locked_at - timezone('utc', clock_timestamp())))), \
         round(extract(epoch from (lock_until - locked_at))) \
         FROM distributed_locks WHERE name = 'stock:1'",
    );
    let fields: Vec<&str> = row.split('|').collect();
    assert_eq!(fields[0], guard.holder_id());
    // locked_at is now in UTC (not the server's +05:45), and the lease is
    // the watchdog's 30 s.
    assert_eq!(fields[1].trim_start_matches('-'), "0", "{row}");
    assert_eq!(fields[2], "30", "{row}");
    assert_ne!(UTC_OFFSET_SECONDS, 0);
    // Names are compared byte for byte: another case is another lock.
    let other = c.lock("Stock:1").try_acquire().await.unwrap();
    assert!(other.is_some(), "Stock:1 is not stock:1");
    drop(other);
    guard.release().await.unwrap();
    tests::eventually("the released rows are gone", WITHIN, || async {
        pg.sql("SELECT count(*) FROM distributed_locks") == "0"
    })
    .await;
}

/// Timestamp `t` in exact µs since 1970, in integers: whole days, plus the
/// µs into the day (a float of at most 86,400 s, exact to the µs).
fn exact_us(t: &str) -> String {
    format!(
        "(({t})::date - date '1970-01-01')::bigint * 86400000000 \
         + round(extract(epoch from ({t} - date_trunc('day', {t}))) * 1000000)::bigint"
    )
}

/// A new row's first token is the database's clock in whole µs: its
/// `locked_at` exactly. The engine reads it as a float (`date_part`, which
/// costs the server less than `extract`'s numeric); the float rounds back
/// to the exact µs for every time until 2106, checked here on the server
/// for two million times with all kinds of µs, against the exact µs in
/// integers (whole days since 1970, plus the µs into the day).
#[tokio::test]
async fn a_new_rows_token_is_its_time_in_exact_microseconds_until_2106() {
    let pg = Postgres::start();
    let c = client(&pg.url()).await;
    let g = c.lock("fresh").acquire().await.unwrap();
    let at = pg.sql(&format!(
        "SELECT {} FROM distributed_locks WHERE name = 'fresh'",
        exact_us("locked_at")
    ));
    assert_eq!(at, g.token().to_string());
    g.release().await.unwrap();
    let apart = pg.sql(&format!(
        "SELECT count(*), max(t) FROM (SELECT timestamp '2026-01-01' \
           + n * interval '1263 seconds' + (n * 7919 % 1000000) * interval '1 microsecond' AS t \
           FROM generate_series(0::bigint, 1999999) AS n) times \
         WHERE (date_part('epoch', t) * 1000000)::bigint <> {}",
        exact_us("t")
    ));
    assert_eq!(apart, "0|", "times whose float µs are not exact");
    let last =
        pg.sql("SELECT timestamp '2026-01-01' + 1999999 * interval '1263 seconds' > '2106-01-01'");
    assert_eq!(last, "t", "the times reach 2106");
}

/// A row's lease is the one the hold asked for, to the µs, by the
/// database's clock: the client's watchdog lease (written into the
/// statement of an uncontended first try; up to the longest a
/// configuration takes) and a fixed `lease` (sent with it).
#[tokio::test]
async fn a_rows_lease_is_the_one_asked_for_to_the_microsecond() {
    let pg = Postgres::start();
    let lease_of = |name: &str| {
        pg.sql(&format!(
            "SELECT ({}) - ({}) FROM distributed_locks WHERE name = '{name}'",
            exact_us("lock_until"),
            exact_us("locked_at")
        ))
    };
    // The first renewal comes a third of the watchdog's lease later.
    for watchdog in [Duration::new(76, 543_210_000), lock_runtime::MAX_DURATION] {
        let c = LockClient::connect(Config::new(pg.url()).watchdog_timeout(watchdog))
            .await
            .unwrap();
        let g = c.lock("renewed").acquire().await.unwrap();
        assert_eq!(lease_of("renewed"), watchdog.as_micros().to_string());
        g.release().await.unwrap();
    }
    let c = client(&pg.url()).await;
    let fixed = Duration::new(3, 141_593_000);
    let g = c.lock("fixed").lease(fixed).acquire().await.unwrap();
    assert_eq!(lease_of("fixed"), fixed.as_micros().to_string());
    g.release().await.unwrap();
}

#[tokio::test]
async fn a_one_attempt_acquisition_takes_a_row_whose_lease_ran_out_and_marks_no_held_row() {
    let pg = Postgres::start();
    let c = client(&pg.url()).await;
    // The first try makes a row only where none is: a row left by a holder
    // that died (its lease over) is there, and is taken over all the same,
    // its token rising from the row's.
    let fence: i64 = 5_000_000_000_000_000;
    pg.sql(&format!(
        "INSERT INTO distributed_locks VALUES ('job', \
         timezone('utc', clock_timestamp()) - interval '1 second', \
         timezone('utc', clock_timestamp()) - interval '31 seconds', 'dead:1', {fence})"
    ));
    let g = c.lock("job").try_acquire().await.unwrap();
    let g = g.expect("a row whose lease ran out is free");
    assert_eq!(g.token(), u64::try_from(fence).unwrap() + 1);
    // A held row: a one-attempt call finds it busy and leaves it as it was
    // (only a waiter's look marks it).
    let other = client(&pg.url()).await;
    assert!(other.lock("job").try_acquire().await.unwrap().is_none());
    assert_eq!(
        pg.sql("SELECT fence FROM distributed_locks WHERE name = 'job'"),
        (fence + 1).to_string()
    );
    g.release().await.unwrap();
}

/// A try whose connection broke while the server still ran it (waiting
/// for another session's uncommitted row of the same name) is ended
/// before anything else goes out for the acquisition: the undo of the
/// failed call runs after it, so the name is free once the other session
/// lets go, not held for a lease by a row the try made after its undo.
/// The same for a fair lock's, a writer's and a reader's try, which
/// take the row after a ticket in line (the undo drops the ticket too).
#[tokio::test]
async fn a_try_cut_off_while_the_server_runs_it_is_ended_before_the_undo() {
    let pg = Postgres::start();
    // Client sessions other than the one asking.
    let others = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' \
                  AND pid <> pg_backend_pid()";
    let (waiting, running) = (
        format!("{others} AND wait_event_type = 'Lock'"),
        format!("{others} AND state = 'active'"),
    );
    a_try_cut_off_leaves_the_name_free(
        &pg,
        CutOff {
            // A row of the name, not committed, then a lock of the
            // transaction that marks it in.
            block: "BEGIN; INSERT INTO distributed_locks VALUES \
                    ('job', timezone('utc', now()), timezone('utc', now()), 'other:1', 0); \
                    SELECT pg_advisory_xact_lock(1);",
            blocked: "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'",
            waiting: &waiting,
            unblock: "ROLLBACK;",
            over: &format!(
                "SELECT count(*) = 0 FROM pg_locks WHERE locktype = 'advisory' \
                 AND ({running}) = 0"
            ),
        },
    )
    .await;
}

#[tokio::test]
async fn a_release_wakes_another_clients_waiter() {
    let pg = Postgres::start();
    // Waiters are woken by the release's notification, long before the
    // holder's 120 s lease would end.
    let a = LockClient::connect(Config::new(pg.url()).watchdog_timeout(Duration::from_secs(120)))
        .await
        .unwrap();
    let b = client(&pg.url()).await;
    let held = a.lock("handoff").acquire().await.unwrap();
    let waiter = tokio::spawn(async move { b.lock("handoff").wait(WITHIN).acquire().await });
    tests::eventually("the waiter waits", WITHIN, || async {
        lock_runtime::__private::sql_waiting(&pg.url(), "handoff") == 1
    })
    .await;
    let first = held.token();
    held.release().await.unwrap();
    let next = tests::finish(WITHIN, waiter).await;
    assert!(next.token() > first);
    next.release().await.unwrap();
}

/// A waiter marks the held row by raising its token, and a plain lock's
/// release announces only a row whose token moved past the one its holder
/// knew. A re-entry raises the token too: one after the waiter's mark must
/// not hide the mark.
#[tokio::test]
async fn a_release_wakes_a_waiter_that_came_before_the_holders_reentry() {
    let pg = Postgres::start();
    // Not woken by the release's notification, the waiter would sleep
    // until the 120 s lease ends or half its own 120 s registration has
    // passed, far past WITHIN.
    let long = || Config::new(pg.url()).watchdog_timeout(Duration::from_secs(120));
    let a = LockClient::connect(long()).await.unwrap();
    let b = LockClient::connect(long()).await.unwrap();
    let url = pg.url().to_string();
    let holder = tokio::spawn(async move {
        let outer = a.lock("marked").acquire().await.unwrap();
        let b = b.clone();
        let waiter = tokio::spawn(async move { b.lock("marked").wait(WITHIN).acquire().await });
        tests::eventually("the waiter waits", WITHIN, || async {
            lock_runtime::__private::sql_waiting(&url, "marked") == 1
        })
        .await;
        // The waiter has looked at the row (and marked it) by now.
        let inner = outer
            .scope(a.lock("marked").wait(Duration::ZERO).acquire())
            .await
            .unwrap();
        assert!(inner.token() > outer.token());
        let last = inner.token();
        inner.release().await.unwrap();
        outer.release().await.unwrap();
        Ok::<_, LockError>((waiter, last))
    });
    let (waiter, last) = tests::finish(WITHIN, holder).await;
    let next = tests::finish(WITHIN, waiter).await;
    assert!(next.token() > last);
    next.release().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_a_typed_error_and_writes_nothing() {
    let pg = Postgres::start();
    let port = pg.port();
    let cases = [
        format!("postgres://app:wrong@127.0.0.1:{port}/locks"),
        format!("postgres://app:secret@127.0.0.1:{port}"),
        format!("postgres://app:secret@127.0.0.1:{port}/locks?table=x;drop"),
        format!("postgres://app:secret@127.0.0.1:{port}/nosuch"),
    ];
    for url in &cases {
        match LockClient::connect(Config::new(url)).await {
            Err(LockError::Config(message)) => {
                assert!(!message.contains("wrong"), "no password: {message}");
                assert!(!message.contains("secret"), "no password: {message}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    let dead = format!(
        "postgres://app:secret@127.0.0.1:{}/locks",
        tests::free_port()
    );
    assert!(matches!(
        LockClient::connect(Config::new(&dead).connect_timeout(Duration::from_secs(2))).await,
        Err(LockError::Connect {
            transient: true,
            ..
        })
    ));
    assert_eq!(
        pg.sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"),
        "0",
        "nothing was made"
    );

    // A role that may not create the table gets the statement to run.
    let reader = pg.url_as("reader", "secret");
    match LockClient::connect(Config::new(&reader)).await {
        Err(LockError::Config(message)) => {
            assert!(message.contains("CREATE TABLE"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Once made, it may use it.
    pg.sql(&format!(
        "SET ROLE app; {}",
        "CREATE TABLE distributed_locks (name VARCHAR(255) COLLATE \"C\" NOT NULL PRIMARY KEY, \
         lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, \
         locked_by VARCHAR(255) NOT NULL, fence BIGINT NOT NULL DEFAULT 0); \
         CREATE TABLE distributed_locks_waiting (name VARCHAR(255) COLLATE \"C\" NOT NULL, \
         waiter VARCHAR(255) NOT NULL, wait_until TIMESTAMP NOT NULL, PRIMARY KEY (name, waiter))"
    ));
    let r = client(&reader).await;
    tests::take_and_release(r.lock("x")).await;
    // Plain locks need no line; fair and read-write locks say how to make
    // it, and write nothing.
    match r.read_write_lock("x").read().try_acquire().await {
        Err(LockError::Config(message)) => assert!(
            message.contains("CREATE TABLE IF NOT EXISTS \"distributed_locks_queue\""),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        pg.sql("SELECT count(*) FROM pg_tables WHERE tablename = 'distributed_locks_queue'"),
        "0"
    );

    // A table of another shape names what is wrong.
    pg.sql(
        "SET ROLE app; CREATE TABLE shedlock (name VARCHAR(64) PRIMARY KEY, \
         lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, \
         locked_by VARCHAR(255) NOT NULL)",
    );
    match LockClient::connect(Config::new(format!("{}?table=shedlock", pg.url()))).await {
        Err(LockError::Config(message)) => assert!(message.contains("fence"), "{message}"),
        other => panic!("{other:?}"),
    }

    // Names the column cannot hold, or PostgreSQL's text cannot.
    let c = client(&pg.url()).await;
    for name in ["a\0b".to_owned(), "x".repeat(256)] {
        assert!(
            matches!(
                c.lock(name.clone()).try_acquire().await,
                Err(LockError::BadName { .. })
            ),
            "{name:?}"
        );
    }
}

#[tokio::test]
async fn lockctl_schema_prints_the_table_a_role_without_create_then_uses() {
    let lockctl = tests::lockctl::Lockctl(env!("CARGO_BIN_EXE_lockctl"));
    let pg = Postgres::start();
    let reader = format!("{}?table=job_locks", pg.url_as("reader", "secret"));
    let out = lockctl.run(&["--url", &reader, "schema"]).await;
    assert!(out.status.success(), "{}", tests::lockctl::stderr(&out));
    let ddl = tests::lockctl::stdout(&out);
    assert!(
        ddl.starts_with("CREATE TABLE IF NOT EXISTS \"job_locks\""),
        "{ddl}"
    );
    assert!(!ddl.contains("secret"), "{ddl}");
    pg.sql(&format!("SET ROLE app; {ddl}"));
    let c = client(&reader).await;
    tests::take_and_release(c.lock("nightly")).await;
    tests::take_and_release(c.fair_lock("nightly")).await;
    // Not an SQL URL: one line of error.
    let redis = lockctl
        .run(&["--url", "redis://127.0.0.1:1", "schema"])
        .await;
    assert_eq!(redis.status.code(), Some(1));
    assert!(tests::lockctl::stderr(&redis).contains("postgres://"));
}

/// Issue 35 review: a table whose qualified name is longer than a channel
/// (63 bytes) still announces its releases, and clients that make it at
/// once all connect.
#[tokio::test]
async fn long_table_names_announce_and_clients_may_make_the_table_at_once() {
    let pg = Postgres::start();
    let schema = "s".repeat(63);
    pg.sql(&format!("CREATE SCHEMA {schema} AUTHORIZATION app"));
    let url = format!("{}?table={schema}.{}", pg.url(), "t".repeat(63));
    let connects: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { LockClient::connect(Config::new(url)).await })
        })
        .collect();
    let mut clients = Vec::new();
    for c in connects {
        clients.push(c.await.unwrap().expect("every client connects"));
    }
    let (a, b) = (clients[0].clone(), clients[1].clone());
    let held = a.lock("long").acquire().await.unwrap();
    let waiter = tokio::spawn(async move { b.lock("long").wait(WITHIN).acquire().await });
    tests::eventually("the waiter waits", WITHIN, || async {
        lock_runtime::__private::sql_waiting(&url, "long") == 1
    })
    .await;
    held.release().await.unwrap();
    tests::finish(WITHIN, waiter).await.release().await.unwrap();

    // More clients at once, on tables made anew: each loses its race on
    // one of the names the tables take (a table's, its row type's, the
    // line's sequence's or index's) and finds them made.
    for round in 0..5 {
        let url = format!("{}?table=raced_{round}", pg.url());
        let connects: Vec<_> = (0..8)
            .map(|_| tokio::spawn(LockClient::connect(Config::new(url.clone()))))
            .collect();
        for c in connects {
            let c = c.await.unwrap().expect("every client connects");
            tests::take_and_release(c.fair_lock("raced")).await;
        }
    }
}

/// Tokens rise from holder to holder under contention, rows deleted on
/// release: a statement that read the clock and was then overtaken by
/// another holder's whole hold must not make the row anew with that older
/// time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_from_holder_to_holder_under_contention() {
    let pg = Postgres::start();
    tests::sql_server::tokens_rise_under_contention(&pg.url(), 200_000).await;
}

/// Issue 49: the URL's `options=` are kept (the engine adds its own after
/// them): with `search_path=ops`, the unqualified `table=shedlock` is
/// `ops.shedlock`, the table a ShedLock job holds `job` in, so the two
/// exclude each other.
#[tokio::test]
async fn the_urls_options_are_kept_and_name_the_table_shedlock_uses() {
    let pg = Postgres::start();
    pg.sql(
        "CREATE SCHEMA ops AUTHORIZATION app; \
         CREATE TABLE ops.shedlock (name VARCHAR(64) NOT NULL PRIMARY KEY, \
           lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, \
           locked_by VARCHAR(255) NOT NULL, fence BIGINT NOT NULL DEFAULT 0); \
         ALTER TABLE ops.shedlock OWNER TO app; \
         INSERT INTO ops.shedlock (name, lock_until, locked_at, locked_by) \
           VALUES ('job', timezone('utc', now()) + interval '1 hour', \
                   timezone('utc', now()), 'batch-host-7')",
    );
    let url = format!(
        "{}?options=-c%20search_path%3Dops&table=shedlock&keep_rows=true",
        pg.url()
    );
    let c = client(&url).await;
    let tried = c.lock("job").try_acquire().await.unwrap();
    assert!(
        tried.is_none(),
        "ShedLock's job holds `job` in ops.shedlock"
    );
    let other = c.lock("other").acquire().await.unwrap();
    assert_eq!(
        pg.sql("SELECT locked_by FROM ops.shedlock WHERE name = 'other'"),
        other.holder_id()
    );
    other.release().await.unwrap();
    assert_eq!(
        pg.sql("SELECT count(*) FROM pg_tables WHERE tablename = 'shedlock'"),
        "1",
        "no other shedlock table was made"
    );
}

/// Issue 49: a kept row freed by a release reads as free at once to
/// ShedLock, also on a table whose times hold milliseconds
/// (`TIMESTAMP(3)`, which rounds what it stores).
#[tokio::test]
async fn a_kept_row_freed_by_a_release_reads_free_at_once_to_shedlock() {
    let pg = Postgres::start();
    tests::sql_server::a_kept_row_freed_by_a_release_reads_free_at_once(
        &pg,
        tests::sql_server::MillisecondReader {
            ddl: "CREATE TABLE shedlock(name VARCHAR(64) NOT NULL PRIMARY KEY, \
                  lock_until TIMESTAMP(3) NOT NULL, locked_at TIMESTAMP(3) NOT NULL, \
                  locked_by VARCHAR(255) NOT NULL, fence BIGINT NOT NULL DEFAULT 0); \
                  ALTER TABLE shedlock OWNER TO app; \
                  CREATE TABLE rounds (n INT);",
            now: "timezone('utc', CURRENT_TIMESTAMP)",
        },
    )
    .await;
}

/// Issue 49: while the server takes no new connection (`max_connections`
/// reached), a client's statements use the connections it has: a place
/// of its pool with none yet is no failure while another works (the
/// watchdog's rounds take their connections the same way).
#[tokio::test]
async fn with_no_new_connection_to_be_had_statements_use_the_ones_there() {
    let mut pg = Postgres::start();
    pg.sql(
        "ALTER SYSTEM SET max_connections = 6; \
         ALTER SYSTEM SET superuser_reserved_connections = 1",
    );
    pg.restart();
    let c = client(&pg.url()).await;
    tests::take_and_release(c.lock("warm")).await;
    // The app's own connections fill the rest.
    let mut fillers = Vec::new();
    while let Ok((filler, connection)) =
        tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls).await
    {
        tokio::spawn(connection);
        fillers.push(filler);
        assert!(fillers.len() < 6, "the server takes no more than 6");
    }
    for n in 0..16 {
        c.inspect(&format!("x{n}"))
            .await
            .unwrap_or_else(|e| panic!("statement {n}: {e}"));
    }
    drop(fillers);
}
