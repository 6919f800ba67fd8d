//! The MySQL/MariaDB engine (`mysql://`, `mariadb://`) against real
//! MariaDB servers the tests start (UTC+05:45, never the machine's 3306):
//! what only it has. The table is made when missing, with ShedLock's
//! columns and `fence`, names compared byte for byte (`utf8mb4_bin`), and
//! no table for waiters (they poll); a role that may not make it gets the
//! DDL; a table of another shape, a bad `table=`, a URL without a database
//! and wrong credentials are typed errors that write nothing; names MySQL
//! would merge (a trailing space) or that the column cannot hold (too long,
//! outside its character set) are bad names; times are UTC by the
//! database's clock; tokens keep rising across deletes; `keep_rows` keeps
//! rows; a release wakes another client's waiter (by its polling) long
//! before the holder's lease would end. What every engine does is in
//! `tests/engines/`, ShedLock's statements on the same table in
//! `tests/shedlock.rs`.

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient, LockError};
use tests::mariadb::{MariaDb, UTC_OFFSET_SECONDS};
use tests::sql_server::{CutOff, a_try_cut_off_leaves_the_name_free};

const WITHIN: Duration = Duration::from_secs(20);

/// The table the engine makes when it is missing (DESIGN §10, the
/// engine's documented DDL).
const DDL: &str = "CREATE TABLE IF NOT EXISTS `distributed_locks` (
    name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    lock_until DATETIME(6) NOT NULL,
    locked_at DATETIME(6) NOT NULL,
    locked_by VARCHAR(255) NOT NULL,
    fence BIGINT NOT NULL DEFAULT 0
) ENGINE=InnoDB;";

/// The line of fair and read-write locks beside it (the engine's
/// documented DDL).
const QUEUE_DDL: &str = "CREATE TABLE IF NOT EXISTS `distributed_locks_queue` (
    seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    holder VARCHAR(255) NOT NULL,
    side CHAR(1) NOT NULL,
    held BOOLEAN NOT NULL DEFAULT FALSE,
    ticket_until DATETIME(6) NOT NULL,
    KEY by_name (name, seq)
) ENGINE=InnoDB;";

/// The permits of semaphores beside it (the engine's documented DDL): a
/// row per permit, its key the name and a slot.
const PERMITS_DDL: &str = "CREATE TABLE IF NOT EXISTS `distributed_locks_permits` (
    name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    slot INT NOT NULL,
    lock_until DATETIME(6) NOT NULL,
    locked_at DATETIME(6) NOT NULL,
    locked_by VARCHAR(255) NOT NULL,
    fence BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (name, slot)
) ENGINE=InnoDB;";

/// The slots beside it, one row per slot (the engine's documented DDL):
/// an acquisition locks its name's slot before it reads the clock for a
/// new row's token.
const SLOTS_DDL: &str = "CREATE TABLE IF NOT EXISTS `distributed_locks_slots` (
    slot SMALLINT NOT NULL PRIMARY KEY
) ENGINE=InnoDB;
INSERT IGNORE INTO `distributed_locks_slots` (slot)
WITH RECURSIVE n (i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 31)
SELECT a.i * 32 + b.i FROM n a, n b;";

async fn client(url: &str) -> LockClient {
    LockClient::connect(Config::new(url))
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// `text` with every run of white space made one space, for comparing SQL
/// whatever its layout.
fn squeezed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The message of a configuration error.
fn message_of(connected: Result<LockClient, LockError>) -> String {
    match connected {
        Err(LockError::Config(message)) => message,
        other => panic!("{other:?}"),
    }
}

/// The tables of database `schema`, by name.
fn tables(my: &MariaDb, schema: &str) -> String {
    my.sql(&format!(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = '{schema}' \
         ORDER BY table_name"
    ))
}

/// The rows of `table` (in `locks`).
fn rows(my: &MariaDb, table: &str) -> String {
    my.sql(&format!("SELECT count(*) FROM `{table}`"))
}

#[tokio::test]
async fn the_table_is_made_with_shedlocks_columns_and_rows_are_utc_by_the_databases_clock() {
    let my = MariaDb::start();
    let c = client(&my.url()).await;
    assert_eq!(c.engine_name(), "mysql");
    // The lock table, its line (fair and read-write locks) and its
    // permits (semaphores): a plain lock's waiters poll, they register
    // nowhere.
    assert_eq!(
        tables(&my, "locks"),
        "distributed_locks\ndistributed_locks_permits\ndistributed_locks_queue\n\
         distributed_locks_slots"
    );
    let columns = my.sql(
        "SELECT column_name, data_type, IFNULL(character_maximum_length, '-'), \
         IFNULL(datetime_precision, '-'), IFNULL(collation_name, '-'), is_nullable, column_key \
         FROM information_schema.columns \
         WHERE table_schema = 'locks' AND table_name = 'distributed_locks' \
         ORDER BY ordinal_position",
    );
    let columns: Vec<Vec<&str>> = columns.lines().map(|l| l.split('\t').collect()).collect();
    let shape: Vec<(&str, &str, &str, &str, &str)> = columns
        .iter()
        .map(|c| (c[0], c[1], c[2], c[3], c[5]))
        .collect();
    assert_eq!(
        shape,
        [
            ("name", "varchar", "255", "-", "NO"),
            ("lock_until", "datetime", "-", "6", "NO"),
            ("locked_at", "datetime", "-", "6", "NO"),
            ("locked_by", "varchar", "255", "-", "NO"),
            ("fence", "bigint", "-", "-", "NO"),
        ]
    );
    // The name is the primary key, compared byte for byte.
    assert_eq!((columns[0][4], columns[0][6]), ("utf8mb4_bin", "PRI"));
    assert_eq!(
        my.sql(
            "SELECT engine FROM information_schema.tables \
             WHERE table_schema = 'locks' AND table_name = 'distributed_locks'"
        ),
        "InnoDB"
    );

    let taken = Instant::now();
    let guard = c.lock("stock:1").acquire().await.unwrap();
    let row = my.sql(
        "SELECT locked_by, TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), locked_at), \
         TIMESTAMPDIFF(MICROSECOND, locked_at, lock_until), fence, \
         TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) \
         FROM distributed_locks WHERE name = 'stock:1'",
    );
    let since_taken = taken.elapsed();
    let fields: Vec<&str> = row.split('\t').collect();
    assert_eq!(fields.len(), 5, "{row}");
    assert_eq!(fields[0], guard.holder_id());
    // locked_at is now in UTC (not the server's +05:45).
    assert_ne!(UTC_OFFSET_SECONDS, 0);
    let off: i64 = fields[1].parse().unwrap();
    assert!(off.abs() < 60, "locked_at is {off} s off UTC: {row}");
    // The lease is the watchdog's 30 s (or later, when the watchdog renewed
    // it meanwhile).
    let lease: u128 = fields[2].parse().unwrap();
    assert!(
        lease >= 30_000_000 && lease <= 30_000_000 + since_taken.as_micros(),
        "lock_until - locked_at = {lease} µs: {row}"
    );
    // The token is the row's fence, made anew from the database's clock in
    // microseconds.
    let (fence, clock): (i64, i64) = (fields[3].parse().unwrap(), fields[4].parse().unwrap());
    assert_eq!(u64::try_from(fence).unwrap(), guard.token());
    assert!(
        (clock - fence).abs() < 60_000_000,
        "fence {fence} is not the clock's µs ({clock})"
    );

    // Names are compared byte for byte: another case or accent is another
    // lock.
    for name in ["Stock:1", "stöck:1", "STOCK:1"] {
        let other = c.lock(name).try_acquire().await.unwrap();
        assert!(other.is_some(), "{name} is not stock:1");
        other.unwrap().release().await.unwrap();
    }
    // mariadb:// is mysql://: the same engine, the same lock.
    let maria = client(&my.url().replacen("mysql://", "mariadb://", 1)).await;
    assert_eq!(maria.engine_name(), "mysql");
    assert!(maria.lock("stock:1").try_acquire().await.unwrap().is_none());

    guard.release().await.unwrap();
    tests::eventually("the released rows are gone", WITHIN, || async {
        rows(&my, "distributed_locks") == "0"
    })
    .await;
    tests::take_and_release(maria.lock("stock:1")).await;
}

/// The first try makes a row only where none is: a row left by a holder
/// that died (its lease over) is there, and is taken over all the same,
/// by one attempt and by a waiter, its token rising from the row's.
#[tokio::test]
async fn an_acquisition_takes_a_row_whose_lease_ran_out() {
    let my = MariaDb::start();
    let c = client(&my.url()).await;
    let fence: i64 = 5_000_000_000_000_000;
    for name in ["once", "waiting"] {
        my.sql(&format!(
            "INSERT INTO distributed_locks VALUES ('{name}', \
             UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, UTC_TIMESTAMP(6) - INTERVAL 31 SECOND, \
             'dead:1', {fence})"
        ));
    }
    let once = c.lock("once").try_acquire().await.unwrap();
    let once = once.expect("a row whose lease ran out is free");
    assert_eq!(once.token(), u64::try_from(fence).unwrap() + 1);
    let waiting = c.lock("waiting").wait(WITHIN).acquire().await.unwrap();
    assert_eq!(waiting.token(), u64::try_from(fence).unwrap() + 1);
    // A held row: another's one attempt finds it busy and leaves it.
    let other = client(&my.url()).await;
    assert!(other.lock("once").try_acquire().await.unwrap().is_none());
    assert_eq!(
        my.sql("SELECT locked_by = 'dead:1', fence FROM distributed_locks WHERE name = 'once'"),
        format!("0\t{}", fence + 1)
    );
    once.release().await.unwrap();
    waiting.release().await.unwrap();
    assert_eq!(rows(&my, "distributed_locks"), "0");
}

/// A lease past what the table's time columns hold (a ShedLock table's
/// `TIMESTAMP`s end in 2038) is refused by MySQL: the acquisition fails
/// and leaves no row, rather than holding a row whose end MySQL mangled
/// into one long past (free to anyone).
#[tokio::test]
async fn a_lease_past_the_columns_range_is_an_error_and_leaves_no_row() {
    let my = MariaDb::start();
    my.sql(
        "CREATE TABLE shedlock(name VARCHAR(64) COLLATE utf8mb4_bin NOT NULL, \
         lock_until TIMESTAMP(3) NOT NULL, \
         locked_at TIMESTAMP(3) NOT NULL, locked_by VARCHAR(255) NOT NULL, \
         fence BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (name))",
    );
    let c = client(&format!("{}?table=shedlock", my.url())).await;
    let centuries = Duration::from_secs(100 * 365 * 24 * 3600);
    let refused = c.lock("job").lease(centuries).try_acquire().await;
    assert!(
        matches!(refused, Err(LockError::Store { .. })),
        "{:?}",
        refused.map(|g| g.map(|g| g.token()))
    );
    let waited = c.lock("job").lease(centuries).wait(WITHIN).acquire().await;
    assert!(
        matches!(waited, Err(LockError::Store { .. })),
        "{:?}",
        waited.map(|g| g.token())
    );
    assert_eq!(rows(&my, "shedlock"), "0");
    // The table itself serves: an ordinary lease is held.
    let g = c.lock("job").try_acquire().await.unwrap().expect("free");
    assert_eq!(
        my.sql("SELECT count(*) FROM shedlock WHERE lock_until > UTC_TIMESTAMP(3)"),
        "1"
    );
    g.release().await.unwrap();
}

/// A try whose connection broke while the server still ran it (waiting
/// for another session's lock on the table's rows) is ended before
/// anything else goes out for the acquisition: the undo of the failed
/// call runs after it, so the name is free once the other session lets
/// go, not held for a lease by a row the try made after its undo.
/// The same for a fair lock's, a writer's and a reader's try, which
/// take the row after a ticket in line (the undo drops the ticket too).
#[tokio::test]
async fn a_try_cut_off_while_the_server_runs_it_is_ended_before_the_undo() {
    let my = MariaDb::start();
    // Inserts of the lock table's row running (they wait for the gap
    // lock below; a ticket's insert into the line does not). Seen in
    // `PROCESSLIST`: `INNODB_TRX` does not always list a waiting insert.
    let inserting = "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                     WHERE INFO LIKE 'INSERT %INTO `distributed_locks` (%'";
    a_try_cut_off_leaves_the_name_free(
        &my,
        CutOff {
            // The whole (empty) table locked against inserts (REPEATABLE
            // READ's gap lock), then a named lock that marks it so. A
            // delete of a row that is not there does not wait for it.
            block: "BEGIN; SELECT COUNT(*) FROM distributed_locks FOR UPDATE; \
                    DO GET_LOCK('other', 0);",
            blocked: "SELECT IS_USED_LOCK('other') IS NOT NULL",
            waiting: &format!("SELECT ({inserting}) > 0"),
            unblock: "ROLLBACK; DO RELEASE_LOCK('other');",
            over: &format!("SELECT IS_USED_LOCK('other') IS NULL AND ({inserting}) = 0"),
        },
    )
    .await;
}

#[tokio::test]
async fn a_release_wakes_another_clients_waiter_long_before_the_holders_lease() {
    let my = MariaDb::start();
    // The holder's lease is 120 s, renewed by its watchdog: the waiter,
    // which gives up after 20 s, can only get the lock by the release.
    let a = LockClient::connect(Config::new(my.url()).watchdog_timeout(Duration::from_secs(120)))
        .await
        .unwrap();
    let b = LockClient::connect(Config::new(my.url()).poll_cap(Duration::from_millis(50)))
        .await
        .unwrap();
    let held = a.lock("handoff").acquire().await.unwrap();
    let left: i64 = my
        .sql(
            "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), lock_until) \
             FROM distributed_locks WHERE name = 'handoff'",
        )
        .parse()
        .unwrap();
    assert!(left > 60, "the holder's lease ends in {left} s");
    let waiter = tokio::spawn(async move { b.lock("handoff").wait(WITHIN).acquire().await });
    tests::eventually("the waiter waits", WITHIN, || async {
        lock_runtime::__private::sql_waiting(&my.url(), "handoff") == 1
    })
    .await;
    let first = held.token();
    held.release().await.unwrap();
    let next = tests::finish(WITHIN, waiter).await;
    assert!(next.token() > first);
    next.release().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_a_typed_error_and_writes_nothing() {
    let my = MariaDb::start();
    let port = my.port();
    let cases = [
        format!("mysql://app:wrong@127.0.0.1:{port}/locks"),
        format!("mysql://app:secret@127.0.0.1:{port}"),
        format!("mysql://app:secret@127.0.0.1:{port}/"),
        format!("mysql://app:secret@127.0.0.1:{port}/locks?table=x;drop"),
        format!("mysql://app:secret@127.0.0.1:{port}/locks?table=a.b.c"),
        format!("mysql://app:secret@127.0.0.1:{port}/locks?table=x%60y"),
        format!("mysql://app:secret@127.0.0.1:{port}/locks?keep_rows=maybe"),
        format!("mysql://app:secret@127.0.0.1:{port}/nosuch"),
        format!("mariadb://app:wrong@127.0.0.1:{port}/locks"),
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
    let dead = format!("mysql://app:secret@127.0.0.1:{}/locks", tests::free_port());
    assert!(matches!(
        LockClient::connect(Config::new(&dead).connect_timeout(Duration::from_secs(2))).await,
        Err(LockError::Connect {
            transient: true,
            ..
        })
    ));
    assert_eq!(tables(&my, "locks"), "", "nothing was made");

    // A role that may not create the table gets the statement to run.
    let reader = my.url_as("reader", "secret");
    match LockClient::connect(Config::new(&reader)).await {
        Err(LockError::Config(message)) => {
            assert!(
                squeezed(&message).contains(&squeezed(DDL)),
                "the DDL is in: {message}"
            );
            assert!(!message.contains("secret"), "no password: {message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(tables(&my, "locks"), "", "nothing was made");
    assert!(
        squeezed(&message_of(LockClient::connect(Config::new(&reader)).await))
            .contains(&squeezed(SLOTS_DDL)),
        "and its slots'"
    );
    // Once made, it may use it.
    my.sql_as("app", "secret", &format!("{DDL}\n{SLOTS_DDL}"))
        .expect("app runs the DDL");
    let r = client(&reader).await;
    tests::take_and_release(r.lock("x")).await;
    // Plain locks need no line; fair and read-write locks say how to make
    // it, and write nothing.
    match r.fair_lock("x").try_acquire().await {
        Err(LockError::Config(message)) => assert!(
            squeezed(&message).contains(&squeezed(QUEUE_DDL)),
            "the line's DDL is in: {message}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        tables(&my, "locks"),
        "distributed_locks\ndistributed_locks_slots"
    );
    my.sql_as("app", "secret", QUEUE_DDL)
        .expect("app runs the DDL");
    let r = client(&reader).await;
    tests::take_and_release(r.read_write_lock("x").write()).await;

    // A table of another shape names what is wrong: a column missing
    // (ShedLock's table before `fence` is added), or of another type.
    my.sql_as(
        "app",
        "secret",
        "CREATE TABLE shedlock (name VARCHAR(64) NOT NULL PRIMARY KEY, \
         lock_until TIMESTAMP(3) NOT NULL, locked_at TIMESTAMP(3) NOT NULL, \
         locked_by VARCHAR(255) NOT NULL); \
         CREATE TABLE mistyped (name VARCHAR(64) NOT NULL PRIMARY KEY, \
         lock_until INT NOT NULL, locked_at DATETIME(6) NOT NULL, \
         locked_by VARCHAR(255) NOT NULL, fence BIGINT NOT NULL DEFAULT 0);",
    )
    .expect("app makes the tables");
    for (table, column) in [("shedlock", "fence"), ("mistyped", "lock_until")] {
        match LockClient::connect(Config::new(format!("{}?table={table}", my.url()))).await {
            Err(LockError::Config(message)) => {
                assert!(message.contains(column), "{table}: {message}")
            }
            other => panic!("{table}: {other:?}"),
        }
        assert_eq!(rows(&my, table), "0");
    }
}

/// Asserts that `name` is `LockError::BadName` on `client` and wrote no
/// row in `table`.
async fn bad_name(my: &MariaDb, client: &LockClient, table: &str, name: &str) {
    let before = rows(my, table);
    let attempt = client.lock(name).try_acquire().await;
    assert!(
        matches!(attempt, Err(LockError::BadName { .. })),
        "{name:?} on {table}: {attempt:?}"
    );
    assert_eq!(rows(my, table), before, "{name:?} wrote a row in {table}");
}

/// Asserts that `name` is a lock on `client`: taken, held (by its row in
/// `table`) and given back.
async fn good_name(my: &MariaDb, client: &LockClient, table: &str, name: &str) {
    let guard = client
        .lock(name)
        .try_acquire()
        .await
        .unwrap_or_else(|e| panic!("{name:?} on {table}: {e}"))
        .unwrap_or_else(|| panic!("{name:?} on {table} is free"));
    assert_eq!(rows(my, table), "1", "{name:?} in {table}");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn names_mysql_would_merge_or_its_column_cannot_hold_are_bad_names() {
    let my = MariaDb::start();
    let c = client(&my.url()).await;
    let table = "distributed_locks";
    // MySQL's PAD SPACE comparison would make "a " the lock "a".
    bad_name(&my, &c, table, "a ").await;
    bad_name(&my, &c, table, "stock:1 ").await;
    // A NUL, and more characters than the column's 255 (in characters:
    // 255 two-byte ones fit).
    bad_name(&my, &c, table, "a\0b").await;
    bad_name(&my, &c, table, &"x".repeat(256)).await;
    bad_name(&my, &c, table, &"é".repeat(256)).await;
    good_name(&my, &c, table, &"x".repeat(255)).await;
    good_name(&my, &c, table, &"é".repeat(255)).await;
    // utf8mb4 holds every character.
    good_name(&my, &c, table, "📦:1").await;
    good_name(&my, &c, table, " a").await;
    let held = c.lock("a").acquire().await.unwrap();
    bad_name(&my, &c, table, "a ").await;
    held.release().await.unwrap();

    // A table of the user's whose name column is utf8mb3 (no characters
    // beyond the BMP) or latin1, of 64 characters.
    my.sql_as(
        "app",
        "secret",
        "CREATE TABLE narrow (name VARCHAR(64) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin \
         NOT NULL PRIMARY KEY, lock_until DATETIME(6) NOT NULL, locked_at DATETIME(6) NOT NULL, \
         locked_by VARCHAR(255) NOT NULL, fence BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB; \
         CREATE TABLE latin (name VARCHAR(64) CHARACTER SET latin1 COLLATE latin1_bin \
         NOT NULL PRIMARY KEY, lock_until DATETIME(6) NOT NULL, locked_at DATETIME(6) NOT NULL, \
         locked_by VARCHAR(255) NOT NULL, fence BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB;",
    )
    .expect("app makes the tables");
    let narrow = client(&format!("{}?table=narrow", my.url())).await;
    bad_name(&my, &narrow, "narrow", "📦:1").await;
    bad_name(&my, &narrow, "narrow", &"x".repeat(65)).await;
    bad_name(&my, &narrow, "narrow", "a ").await;
    good_name(&my, &narrow, "narrow", "日本:1").await;
    good_name(&my, &narrow, "narrow", &"é".repeat(64)).await;
    let latin = client(&format!("{}?table=latin", my.url())).await;
    bad_name(&my, &latin, "latin", "📦:1").await;
    bad_name(&my, &latin, "latin", "日本:1").await;
    bad_name(&my, &latin, "latin", "ā:1").await;
    good_name(&my, &latin, "latin", "é:1").await;
    good_name(&my, &latin, "latin", &"x".repeat(64)).await;
}

#[tokio::test]
async fn lockctl_schema_prints_the_table_a_role_without_create_then_uses() {
    let lockctl = tests::lockctl::Lockctl(env!("CARGO_BIN_EXE_lockctl"));
    let my = MariaDb::start();
    let reader = format!("{}?table=job_locks", my.url_as("reader", "secret"));
    let out = lockctl.run(&["--url", &reader, "schema"]).await;
    assert!(out.status.success(), "{}", tests::lockctl::stderr(&out));
    let ddl = tests::lockctl::stdout(&out);
    assert!(
        ddl.starts_with("CREATE TABLE IF NOT EXISTS `job_locks`"),
        "{ddl}"
    );
    assert_eq!(
        squeezed(&ddl),
        squeezed(
            &format!("{DDL}\n{SLOTS_DDL}\n{QUEUE_DDL}\n{PERMITS_DDL}")
                .replace("`distributed_locks", "`job_locks")
        ),
    );
    assert!(!ddl.contains("secret"), "{ddl}");
    assert_eq!(tables(&my, "locks"), "", "schema makes nothing");
    my.sql_as("app", "secret", &ddl).expect("app runs the DDL");
    let c = client(&reader).await;
    tests::take_and_release(c.lock("nightly")).await;
    tests::take_and_release(c.fair_lock("nightly")).await;
    // Not an SQL URL: one line of error, naming the SQL schemes.
    let redis = lockctl
        .run(&["--url", "redis://127.0.0.1:1", "schema"])
        .await;
    assert_eq!(redis.status.code(), Some(1));
    assert!(
        tests::lockctl::stderr(&redis).contains("mysql://"),
        "{}",
        tests::lockctl::stderr(&redis)
    );
}

/// A table in another database of the server (`table=<schema>.<table>`)
/// is made there, and clients that make it at once all connect.
#[tokio::test]
async fn a_schema_qualified_table_is_made_there_and_clients_may_make_it_at_once() {
    let my = MariaDb::start();
    let (schema, table) = ("jobs", "job_locks");
    my.sql(&format!(
        "CREATE DATABASE {schema} CHARACTER SET utf8mb4; \
         GRANT ALL PRIVILEGES ON {schema}.* TO 'app'@'%';"
    ));
    let url = format!("{}?table={schema}.{table}", my.url());
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
    assert_eq!(
        tables(&my, schema),
        format!("{table}\n{table}_permits\n{table}_queue\n{table}_slots")
    );
    assert_eq!(tables(&my, "locks"), "");
    let (a, b) = (clients[0].clone(), clients[1].clone());
    let held = a.lock("long").acquire().await.unwrap();
    assert_eq!(
        my.sql(&format!("SELECT locked_by FROM {schema}.{table}")),
        held.holder_id()
    );
    let waiter = tokio::spawn(async move { b.lock("long").wait(WITHIN).acquire().await });
    tests::eventually("the waiter waits", WITHIN, || async {
        lock_runtime::__private::sql_waiting(&url, "long") == 1
    })
    .await;
    held.release().await.unwrap();
    tests::finish(WITHIN, waiter).await.release().await.unwrap();
}

/// MySQL's longest names, 64 characters, name a table and its database.
#[tokio::test]
async fn tables_and_databases_of_mysqls_longest_names_are_tables() {
    let my = MariaDb::start();
    let schema = "s".repeat(64);
    let table = "t".repeat(64);
    my.sql(&format!(
        "CREATE DATABASE {schema} CHARACTER SET utf8mb4; \
         GRANT ALL PRIVILEGES ON {schema}.* TO 'app'@'%';"
    ));
    for table in [table.clone(), format!("{schema}.{table}")] {
        let c = client(&format!("{}?table={table}", my.url())).await;
        tests::take_and_release(c.lock("long")).await;
    }
    // Its line's, its permits' and its slots' names would be longer than
    // 64: a hash of the table's.
    for schema in [schema.as_str(), "locks"] {
        let made = tables(&my, schema);
        let made: Vec<&str> = made.lines().collect();
        assert_eq!(made.len(), 4, "{made:?}");
        assert!(made[0].starts_with("locks_permits_"), "{made:?}");
        assert!(made[1].starts_with("locks_queue_"), "{made:?}");
        assert!(made[2].starts_with("locks_slots_"), "{made:?}");
        assert_eq!(made[3], table);
    }
}

/// Tokens rise from holder to holder under contention, rows deleted on
/// release: a statement that read the clock and was then overtaken by
/// another holder's whole hold must not make the row anew with that older
/// time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_from_holder_to_holder_under_contention() {
    let db = MariaDb::start();
    tests::sql_server::tokens_rise_under_contention(&db.url(), 200_000).await;
}

/// Issue 49: `client_found_rows=true` in the URL (which the driver takes)
/// would count a held row's untouched upsert as a change; the engine's
/// connections keep it off, so a second client still finds the name
/// held.
#[tokio::test]
async fn client_found_rows_in_the_url_lets_no_second_holder_in() {
    let my = MariaDb::start();
    let url = format!("{}?client_found_rows=true", my.url());
    let (a, b) = (client(&url).await, client(&url).await);
    let held = a.lock("job").acquire().await.unwrap();
    for _ in 0..3 {
        let tried = b.lock("job").try_acquire().await.unwrap();
        assert!(tried.is_none(), "a second holder got in");
    }
    let fair = b.fair_lock("job").try_acquire().await.unwrap();
    assert!(fair.is_none(), "a second holder got in by the line");
    held.release().await.unwrap();
    tests::take_and_release(b.lock("job")).await;
}

/// Issue 49: ShedLock's DDL on a server whose default collation folds
/// case (`utf8mb4_general_ci`, as here) makes a `name` column on which
/// `Job` and `job` are one lock. The client refuses the table with the
/// statement that makes names compare byte for byte; after it, they are
/// two locks.
#[tokio::test]
async fn a_table_whose_names_fold_case_is_refused_with_the_statement_to_run() {
    let my = MariaDb::start();
    my.sql_as(
        "app",
        "secret",
        "CREATE TABLE shedlock(name VARCHAR(64) NOT NULL, \
         lock_until TIMESTAMP(3) NOT NULL, locked_at TIMESTAMP(3) NOT NULL DEFAULT \
         CURRENT_TIMESTAMP(3), locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name)); \
         ALTER TABLE shedlock ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;",
    )
    .expect("ShedLock's DDL");
    assert_eq!(
        my.sql(
            "SELECT COLLATION_NAME FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = 'locks' AND TABLE_NAME = 'shedlock' AND COLUMN_NAME = 'name'"
        ),
        "utf8mb4_general_ci"
    );
    let url = format!("{}?table=shedlock&keep_rows=true", my.url());
    let message = message_of(LockClient::connect(Config::new(&url)).await);
    let fix = "ALTER TABLE `shedlock` MODIFY name varchar(64) CHARACTER SET utf8mb4 \
               COLLATE utf8mb4_bin NOT NULL;";
    assert!(message.contains(fix), "{message}");
    assert!(message.contains("utf8mb4_general_ci"), "{message}");
    my.sql_as("app", "secret", fix).expect("the statement runs");
    let c = client(&url).await;
    let upper = c.lock("Job").acquire().await.unwrap();
    let lower = c.lock("job").try_acquire().await.unwrap();
    assert!(lower.is_some(), "Job and job are two locks");
    lower.unwrap().release().await.unwrap();
    upper.release().await.unwrap();
}

/// Issue 49: a kept row freed by a release reads as free at once to
/// ShedLock, whose `UTC_TIMESTAMP(3)` holds milliseconds, also on a table
/// whose times hold microseconds (as the one the client makes).
#[tokio::test]
async fn a_kept_row_freed_by_a_release_reads_free_at_once_to_shedlock() {
    let my = MariaDb::start();
    tests::sql_server::a_kept_row_freed_by_a_release_reads_free_at_once(
        &my,
        tests::sql_server::MillisecondReader {
            ddl: "CREATE TABLE shedlock(name VARCHAR(64) COLLATE utf8mb4_bin NOT NULL, \
                  lock_until DATETIME(6) NOT NULL, locked_at DATETIME(6) NOT NULL, \
                  locked_by VARCHAR(255) NOT NULL, \
                  fence BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (name)); \
                  CREATE TABLE rounds (n INT); \
                  GRANT ALL PRIVILEGES ON locks.* TO 'app'@'%';",
            now: "UTC_TIMESTAMP(3)",
        },
    )
    .await;
}

/// Issue 49: after the server restarts (session ids count from 1 again),
/// the client ends no session: the sessions its broken connections had
/// died with the server, and an id remembered from before names another
/// session now (another client's, or the sender's own). With the general
/// log on, no `KILL` is sent after the restart while held and waiting
/// locks carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_client_ends_no_session_it_did_not_open() {
    let mut my = MariaDb::start();
    std::fs::write(my.dir().join(tests::mariadb::GENERAL_LOG), "").unwrap();
    my.restart();
    let url = my.url();
    let config = || Config::new(&url).watchdog_timeout(Duration::from_secs(6));
    let a = LockClient::connect(config()).await.unwrap();
    let b = LockClient::connect(config()).await.unwrap();
    let held = a.lock("held").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock("held")
                .wait(Duration::from_secs(120))
                .acquire()
                .await
        }
    });
    // Every connection of both clients in use once.
    for round in 0..4 {
        let names: Vec<String> = (0..8).map(|n| format!("n{round}:{n}")).collect();
        let takes = names.iter().flat_map(|name| {
            [a.clone(), b.clone()].map(|c| {
                let name = name.clone();
                tokio::spawn(async move {
                    if let Some(g) = c.lock(&name).try_acquire().await.unwrap() {
                        g.release().await.unwrap();
                    }
                })
            })
        });
        for t in takes.collect::<Vec<_>>() {
            t.await.unwrap();
        }
    }
    my.restart();
    // Connections are made again where the old ones broke.
    for c in [&a, &b] {
        tests::eventually("the client locks again", WITHIN, || async {
            match c.lock("after").try_acquire().await {
                Ok(Some(g)) => g.release().await.is_ok(),
                _ => false,
            }
        })
        .await;
        for n in 0..16 {
            let _ = c.lock(format!("after:{n}")).try_acquire().await;
        }
    }
    drop(held);
    let _ = tokio::time::timeout(WITHIN, waiter).await;
    let log = std::fs::read_to_string(my.dir().join(tests::mariadb::GENERAL_LOG)).unwrap();
    let since = log
        .rfind("started with:")
        .expect("the log of the last start");
    let kills: Vec<&str> = log[since..]
        .lines()
        .filter(|line| line.contains("KILL"))
        .collect();
    assert!(kills.is_empty(), "sent after the restart: {kills:#?}");
}

/// Issue 49: while the server takes no new connection (`max_connections`
/// reached), a client's statements use the connections it has: a place
/// of its pool with none yet is no failure while another works (the
/// watchdog's rounds take their connections the same way).
#[tokio::test]
async fn with_no_new_connection_to_be_had_statements_use_the_ones_there() {
    let my = MariaDb::start();
    let c = client(&my.url()).await;
    tests::take_and_release(c.lock("warm")).await;
    my.sql("SET GLOBAL max_connections = 10");
    // Root's sessions fill the rest (the server lets root one past it).
    let connected = || -> usize {
        my.sql(
            "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
                WHERE VARIABLE_NAME = 'THREADS_CONNECTED'",
        )
        .parse::<usize>()
        .unwrap()
            - 1
    };
    let fillers: Vec<_> = (connected()..10).map(|_| my.session()).collect();
    tests::eventually("the server is full", WITHIN, || async { connected() >= 10 }).await;
    assert!(
        LockClient::connect(Config::new(my.url())).await.is_err(),
        "no new connection is to be had"
    );
    for n in 0..16 {
        c.inspect(&format!("x{n}"))
            .await
            .unwrap_or_else(|e| panic!("statement {n}: {e}"));
    }
    drop(fillers);
}

/// Issue 49 (ShedLock issue 1876): through a session whose zone has
/// daylight saving, the UTC times of the spring-forward hour do not exist
/// as local times, and MySQL refuses to write them into a `TIMESTAMP`
/// column ("Incorrect datetime value", 1292). A zone made here (its clocks
/// jumped two hours forward a minute ago, so UTC's time now is such a
/// skipped local time) stands in for that hour: an acquisition on a
/// ShedLock table is a typed, transient error that leaves no row, never a
/// panic.
#[tokio::test]
async fn a_time_the_session_zone_skips_is_a_transient_error() {
    let my = MariaDb::start();
    my.sql(
        "INSERT INTO mysql.time_zone (Use_leap_seconds) VALUES ('N'); \
         SET @id = LAST_INSERT_ID(); \
         INSERT INTO mysql.time_zone_name (Name, Time_zone_id) VALUES ('Test/Jump', @id); \
         INSERT INTO mysql.time_zone_transition_type \
           (Time_zone_id, Transition_type_id, `Offset`, Is_DST, Abbreviation) \
           VALUES (@id, 0, 0, 0, 'STD'), (@id, 1, 7200, 1, 'DST'); \
         INSERT INTO mysql.time_zone_transition \
           (Time_zone_id, Transition_time, Transition_type_id) \
           VALUES (@id, UNIX_TIMESTAMP() - 60, 1);",
    );
    my.sql_as(
        "app",
        "secret",
        "CREATE TABLE shedlock(name VARCHAR(64) COLLATE utf8mb4_bin NOT NULL, \
         lock_until TIMESTAMP(3) NOT NULL, locked_at TIMESTAMP(3) NOT NULL, \
         locked_by VARCHAR(255) NOT NULL, fence BIGINT NOT NULL DEFAULT 0, \
         PRIMARY KEY (name))",
    )
    .expect("ShedLock's table");
    let url = format!(
        "{}?table=shedlock&keep_rows=true&time_zone=Test/Jump",
        my.url()
    );
    let c = client(&url).await;
    match c.lock("job").try_acquire().await {
        Err(LockError::Store {
            transient: true,
            message,
            ..
        }) => assert!(message.contains("1292"), "{message}"),
        other => panic!("{other:?}"),
    }
    // A waiting acquisition tries again (transient) until its deadline.
    let waited = c
        .lock("job")
        .wait(Duration::from_millis(200))
        .acquire()
        .await;
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "{waited:?}"
    );
    assert_eq!(rows(&my, "shedlock"), "0");
    // An unknown zone is a configuration error.
    let unknown = format!("{}?time_zone=Nowhere/Else", my.url());
    assert!(message_of(LockClient::connect(Config::new(&unknown)).await).contains("time_zone"));
}
