//! Interop with ShedLock on PostgreSQL and on MySQL/MariaDB (DESIGN §10):
//! a Java service that locks its scheduled jobs with ShedLock's JDBC
//! provider and `usingDbTime()` shares the lock table with us. ShedLock is
//! played by [`ShedLockPg`] and [`ShedLockMy`](tests::shedlock::ShedLockMy)
//! (the `mysql` module below), which run ShedLock's own statements for each
//! database (see `tests/src/shedlock.rs`) on a table made by ShedLock's
//! documented DDL plus our `fence` column; we connect with
//! `table=shedlock&keep_rows=true`. Against real PostgreSQL and MariaDB
//! servers the tests start (UTC+05:45, so that a slip between local time
//! and UTC would show).

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};
use tests::postgres::Postgres;
use tests::shedlock::ShedLockPg;

/// How long any wait is bounded (generous: it asserts no speed).
const WITHIN: Duration = Duration::from_secs(20);

/// ShedLock's DDL for PostgreSQL, verbatim from its README
/// (repository `lukas-krecan/ShedLock`, `README.md`, "# Postgres").
const SHEDLOCK_DDL: &str =
    "CREATE TABLE shedlock(name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL,
    locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name));";

/// Our column, added to ShedLock's table (invisible to its statements).
const FENCE: &str = "ALTER TABLE shedlock ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;";

/// A long `lockAtMostFor`: a ShedLock hold that outlasts every test's
/// waits unless it is unlocked.
const AT_MOST: Duration = Duration::from_secs(120);

/// A server with ShedLock's table (made by `app`, who owns the database,
/// as a service's migration would), our client on it, and one ShedLock
/// instance.
async fn setup() -> (Postgres, LockClient, ShedLockPg) {
    let pg = Postgres::start();
    pg.sql_as("app", "secret", &format!("{SHEDLOCK_DDL}\n{FENCE}"))
        .expect("ShedLock's DDL runs as app");
    let url = format!("{}?table=shedlock&keep_rows=true", pg.url());
    let ours = LockClient::connect(Config::new(url.clone()))
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    let shed = ShedLockPg::connect(&pg.url(), "shedlock")
        .await
        .expect("ShedLock's connection");
    (pg, ours, shed)
}

/// `name`'s row: `locked_by`, and `lock_until` and `locked_at` in µs since
/// the epoch (as the columns hold them: UTC).
fn row(pg: &Postgres, name: &str) -> (String, i64, i64) {
    let out = pg.sql(&format!(
        "SELECT locked_by, (extract(epoch from lock_until) * 1000000)::bigint, \
         (extract(epoch from locked_at) * 1000000)::bigint FROM shedlock WHERE name = '{name}'"
    ));
    let fields: Vec<&str> = out.split('|').collect();
    assert_eq!(fields.len(), 3, "no single row {name}: {out:?}");
    (
        fields[0].to_owned(),
        fields[1].parse().expect("lock_until"),
        fields[2].parse().expect("locked_at"),
    )
}

/// The database's clock now, in UTC µs since the epoch (as the rows hold
/// times).
fn db_now(pg: &Postgres) -> i64 {
    pg.sql("SELECT (extract(epoch from timezone('utc', clock_timestamp())) * 1000000)::bigint")
        .parse()
        .expect("the database's clock")
}

/// Rows of `name` in the table.
fn count(pg: &Postgres, name: &str) -> String {
    pg.sql(&format!(
        "SELECT count(*) FROM shedlock WHERE name = '{name}'"
    ))
}

#[tokio::test]
async fn shedlocks_hold_excludes_ours_and_ours_excludes_shedlocks() {
    let (pg, ours, shed) = setup().await;
    let name = "report-daily";

    // ShedLock's insert makes the row; ours cannot take it.
    assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
    assert!(shed.remembers(name));
    assert_eq!(row(&pg, name).0, shed.locked_by_value());
    assert!(ours.lock(name).try_acquire().await.unwrap().is_none());
    // ShedLock's extend keeps it taken (and only its own locked_by may).
    assert!(
        shed.extend(name, AT_MOST * 2, Duration::ZERO).await,
        "ShedLock extends its hold"
    );
    let (_, until, _) = row(&pg, name);
    assert!(until - db_now(&pg) > AT_MOST.as_micros() as i64, "extended");
    let elsewhere = ShedLockPg::connect(&pg.url(), "shedlock")
        .await
        .unwrap()
        .locked_by("another-host");
    assert!(!elsewhere.extend(name, AT_MOST, Duration::ZERO).await);
    assert!(!elsewhere.lock(name, AT_MOST, Duration::ZERO).await);
    assert!(ours.lock(name).try_acquire().await.unwrap().is_none());

    // ShedLock's unlock frees it for us.
    shed.unlock(name, Duration::ZERO).await;
    let guard = ours
        .lock(name)
        .try_acquire()
        .await
        .unwrap()
        .expect("free after ShedLock's unlock");
    assert_eq!(row(&pg, name).0, guard.holder_id());

    // Ours excludes ShedLock: by its update (its cache knows the row), and
    // by the insert of an instance that never saw the name.
    assert!(!shed.lock(name, AT_MOST, Duration::ZERO).await);
    let fresh = ShedLockPg::connect(&pg.url(), "shedlock")
        .await
        .unwrap()
        .locked_by("fresh-host");
    assert!(!fresh.remembers(name));
    assert!(!fresh.lock(name, AT_MOST, Duration::ZERO).await);
    assert!(fresh.remembers(name), "a row found there is remembered");
    // ShedLock's unlock of a row it does not hold changes nothing.
    shed.unlock(name, Duration::ZERO).await;
    assert!(!shed.lock(name, AT_MOST, Duration::ZERO).await);
    assert_eq!(row(&pg, name).0, guard.holder_id());

    guard.release().await.unwrap();
    assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
    shed.unlock(name, Duration::ZERO).await;
}

#[tokio::test]
async fn our_waiter_gets_the_lock_after_shedlocks_unlock_with_a_larger_token() {
    let (pg, ours, shed) = setup().await;
    let name = "invoice-run";

    let mut before = 0;
    for _ in 0..3 {
        let guard = ours.lock(name).acquire().await.unwrap();
        assert!(guard.token() > before);
        before = guard.token();
        guard.release().await.unwrap();
    }

    // ShedLock holds it for 2 minutes at most, far past the waiter's 20 s.
    // It announces nothing when it unlocks (an update of its row), so our
    // waiter looks at a holder that is not ours again now and then: it
    // gets the lock soon after the unlock, not at ShedLock's lease's end.
    let at_most = AT_MOST;
    assert!(shed.lock(name, at_most, Duration::ZERO).await);
    let waiter = tokio::spawn(ours.lock(name).wait(WITHIN).acquire());
    // Its first try failed and it sleeps.
    let url = format!("{}?table=shedlock&keep_rows=true", pg.url());
    tests::eventually("our waiter waits on ShedLock's hold", WITHIN, || async {
        lock_runtime::__private::sql_waiting(&url, name) == 1
    })
    .await;
    let unlocked_at = db_now(&pg);
    shed.unlock(name, Duration::ZERO).await;
    let guard = tests::finish(WITHIN, waiter).await;

    let (by, _, locked_at) = row(&pg, name);
    assert_eq!(by, guard.holder_id());
    assert!(
        locked_at >= unlocked_at,
        "our waiter took the row ({locked_at} µs) before ShedLock let go ({unlocked_at} µs)"
    );
    assert!(
        guard.token() > before,
        "token {} after ShedLock's hold is not above {before}",
        guard.token()
    );
    eprintln!(
        "the waiter took the lock {:.3} s after ShedLock's unlock (ShedLock's lockAtMostFor: {at_most:?})",
        (locked_at - unlocked_at) as f64 / 1e6
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn our_hold_at_least_keeps_shedlock_out_until_the_minimum() {
    let (pg, ours, shed) = setup().await;
    let name = "cleanup";
    let minimum = Duration::from_secs(2);

    let started = Instant::now();
    let guard = ours
        .lock(name)
        .hold_at_least(minimum)
        .acquire()
        .await
        .unwrap();
    let (_, _, ours_at) = row(&pg, name);
    guard.release().await.unwrap();

    // Right after our early release ShedLock is still kept out (its insert,
    // then its update). Only when the machine stalled past the minimum
    // before this attempt may it have succeeded.
    let first = shed.lock(name, AT_MOST, Duration::ZERO).await;
    if started.elapsed() < minimum {
        assert!(!first, "ShedLock locked {name} inside our minimum");
    } else {
        eprintln!("the first attempt came after the minimum; not checked");
    }
    assert!(shed.remembers(name));

    // Then ShedLock's update takes it once the minimum has passed.
    let mut taken = first;
    let deadline = Instant::now() + WITHIN;
    while !taken {
        assert!(
            Instant::now() < deadline,
            "ShedLock never got {name} after our minimum"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        taken = shed.lock(name, AT_MOST, Duration::ZERO).await;
    }
    let (by, _, shed_at) = row(&pg, name);
    assert_eq!(by, shed.locked_by_value());
    assert!(
        shed_at >= ours_at + minimum.as_micros() as i64,
        "ShedLock took {name} at {shed_at} µs, before our minimum ended ({ours_at} µs + {minimum:?})"
    );
    assert!(ours.lock(name).try_acquire().await.unwrap().is_none());
    shed.unlock(name, Duration::ZERO).await;
}

#[tokio::test]
async fn keep_rows_keeps_shedlocks_row_for_its_update() {
    let (pg, ours, shed) = setup().await;
    let name = "nightly-export";

    // ShedLock inserts the row once and remembers it.
    assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
    assert!(shed.remembers(name));
    shed.unlock(name, Duration::ZERO).await;

    // We take it and give it back: the row stays.
    let guard = ours.lock(name).acquire().await.unwrap();
    assert_eq!(row(&pg, name).0, guard.holder_id());
    guard.release().await.unwrap();
    assert_eq!(count(&pg, name), "1", "keep_rows=true keeps the row");

    // A dropped guard too.
    let dropped = ours.lock(name).acquire().await.unwrap();
    drop(dropped);
    // Given back in the background: a waiter is woken by it.
    let again = ours.lock(name).wait(WITHIN).acquire().await.unwrap();
    again.release().await.unwrap();
    assert_eq!(count(&pg, name), "1", "keep_rows=true keeps the row");

    // ShedLock, its cache warm, runs only its update: it locks again.
    assert!(shed.remembers(name));
    assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
    assert_eq!(row(&pg, name).0, shed.locked_by_value());
    assert!(ours.lock(name).try_acquire().await.unwrap().is_none());
    shed.unlock(name, Duration::ZERO).await;
    assert_eq!(count(&pg, name), "1");
}

/// The same four cases on MariaDB (our `mysql://` engine), and a fifth
/// (ShedLock's `lockAtLeastFor` keeps ours out), with ShedLock's MySQL
/// statements (`MySqlServerTimeStatementsSource`, which ShedLock uses for
/// MySQL and MariaDB alike) run by [`ShedLockMy`] through the `mariadb`
/// CLI, whose sessions keep the server's time zone (`+05:45`), as a JDBC
/// session does. ShedLock's MySQL table keeps its times in
/// `TIMESTAMP(3)` columns, which MySQL converts through each session's
/// time zone: ours and ShedLock's times land the same only when both
/// write `UTC_TIMESTAMP` in sessions of the same zone, and a slip of 5 h 45
/// min would show here.
mod mysql {
    use std::time::{Duration, Instant};

    use lock_runtime::{Config, LockClient};
    use tests::mariadb::MariaDb;
    use tests::shedlock::ShedLockMy;

    use super::{AT_MOST, WITHIN};

    /// ShedLock's DDL for MySQL, verbatim from its README (repository
    /// `lukas-krecan/ShedLock`, `README.md`, "# MySQL, MariaDB").
    const SHEDLOCK_DDL: &str = "CREATE TABLE shedlock(name VARCHAR(64) NOT NULL, \
        lock_until TIMESTAMP(3) NOT NULL, locked_at TIMESTAMP(3) NOT NULL DEFAULT \
        CURRENT_TIMESTAMP(3), locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name));";

    /// Our column, added to ShedLock's table (invisible to its statements).
    const FENCE: &str = "ALTER TABLE shedlock ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;";

    /// A server with ShedLock's table (made by `app`, as a service's
    /// migration would), our client on it, and one ShedLock instance.
    async fn setup() -> (MariaDb, LockClient, ShedLockMy) {
        let my = MariaDb::start();
        my.sql_as("app", "secret", &format!("{SHEDLOCK_DDL}\n{FENCE}"))
            .expect("ShedLock's DDL runs as app");
        let ours = client(&my, true).await;
        let shed = ShedLockMy::new(&my, "shedlock");
        (my, ours, shed)
    }

    /// Our client on ShedLock's table, keeping rows or not.
    async fn client(my: &MariaDb, keep_rows: bool) -> LockClient {
        let url = format!("{}?table=shedlock&keep_rows={keep_rows}", my.url());
        let client = LockClient::connect(Config::new(url.clone()))
            .await
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        assert_eq!(client.engine_name(), "mysql");
        client
    }

    /// `name`'s row: `locked_by`, and `lock_until` and `locked_at` in µs
    /// since the epoch, read in the server's time zone (as both ShedLock's
    /// sessions and ours see them: UTC wall-clock times).
    fn row(my: &MariaDb, name: &str) -> (String, i64, i64) {
        let out = my.sql(&format!(
            "SELECT locked_by, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', lock_until), \
             TIMESTAMPDIFF(MICROSECOND, '1970-01-01', locked_at) FROM shedlock \
             WHERE name = '{name}'"
        ));
        let fields: Vec<&str> = out.split('\t').collect();
        assert_eq!(fields.len(), 3, "no single row {name}: {out:?}");
        (
            fields[0].to_owned(),
            fields[1].parse().expect("lock_until"),
            fields[2].parse().expect("locked_at"),
        )
    }

    /// The database's clock now, in UTC µs since the epoch (as the rows
    /// hold times).
    fn db_now(my: &MariaDb) -> i64 {
        my.sql("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))")
            .parse()
            .expect("the database's clock")
    }

    /// Rows of `name` in the table.
    fn count(my: &MariaDb, name: &str) -> String {
        my.sql(&format!(
            "SELECT count(*) FROM shedlock WHERE name = '{name}'"
        ))
    }

    #[tokio::test]
    async fn shedlocks_hold_excludes_ours_and_ours_excludes_shedlocks() {
        let (my, ours, shed) = setup().await;
        let name = "report-daily";

        // ShedLock's insert makes the row; ours cannot take it.
        assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
        assert!(shed.remembers(name));
        let (by, until, at) = row(&my, name);
        assert_eq!(by, shed.locked_by_value());
        // Its times are UTC by the database's clock, as ours are.
        let now = db_now(&my);
        assert!(
            (at - now).abs() < 60_000_000,
            "ShedLock's locked_at is {} s off UTC",
            (at - now) / 1_000_000
        );
        assert!(until - at >= AT_MOST.as_micros() as i64 - 1_000);
        assert!(ours.lock(name).try_acquire().await.unwrap().is_none());
        // ShedLock's extend keeps it taken (and only its own locked_by may).
        assert!(
            shed.extend(name, AT_MOST * 2, Duration::ZERO).await,
            "ShedLock extends its hold"
        );
        let (_, until, _) = row(&my, name);
        assert!(until - db_now(&my) > AT_MOST.as_micros() as i64, "extended");
        let elsewhere = ShedLockMy::new(&my, "shedlock").locked_by("another-host");
        assert!(!elsewhere.extend(name, AT_MOST, Duration::ZERO).await);
        assert!(!elsewhere.lock(name, AT_MOST, Duration::ZERO).await);
        assert!(ours.lock(name).try_acquire().await.unwrap().is_none());

        // ShedLock's unlock frees it for us.
        shed.unlock(name, Duration::ZERO).await;
        let guard = ours
            .lock(name)
            .try_acquire()
            .await
            .unwrap()
            .expect("free after ShedLock's unlock");
        let (by, until, at) = row(&my, name);
        assert_eq!(by, guard.holder_id());
        // Our row's times are UTC as ShedLock's (no slip of the server's
        // +05:45 between its session and ours): taken now, held until the
        // watchdog's 30 s from now.
        let now = db_now(&my);
        assert!(
            (at - now).abs() < 60_000_000,
            "our locked_at is {} s off ShedLock's UTC",
            (at - now) / 1_000_000
        );
        assert!(
            (until - now - 30_000_000).abs() < 60_000_000,
            "our lock_until is {} s off ShedLock's UTC + 30 s",
            (until - now - 30_000_000) / 1_000_000
        );

        // Ours excludes ShedLock: by its update (its cache knows the row),
        // and by the insert of an instance that never saw the name.
        assert!(!shed.lock(name, AT_MOST, Duration::ZERO).await);
        let fresh = ShedLockMy::new(&my, "shedlock").locked_by("fresh-host");
        assert!(!fresh.remembers(name));
        assert!(!fresh.lock(name, AT_MOST, Duration::ZERO).await);
        assert!(fresh.remembers(name), "a row found there is remembered");
        // ShedLock's unlock of a row it does not hold changes nothing.
        shed.unlock(name, Duration::ZERO).await;
        assert!(!shed.lock(name, AT_MOST, Duration::ZERO).await);
        assert_eq!(row(&my, name).0, guard.holder_id());

        guard.release().await.unwrap();
        assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
        shed.unlock(name, Duration::ZERO).await;
    }

    #[tokio::test]
    async fn our_waiter_gets_the_lock_after_shedlocks_unlock_with_a_larger_token() {
        let (my, ours, shed) = setup().await;
        let name = "invoice-run";

        // Our holders before ShedLock's, by a client that deletes its rows:
        // ShedLock then makes the row anew (its insert), with no token in
        // it (`fence` is 0).
        let deleting = client(&my, false).await;
        let mut before = 0;
        for _ in 0..3 {
            let guard = deleting.lock(name).acquire().await.unwrap();
            assert!(guard.token() > before);
            before = guard.token();
            guard.release().await.unwrap();
            assert_eq!(count(&my, name), "0");
        }

        // ShedLock holds it for 2 minutes at most, far past the waiter's
        // 20 s. It says nothing when it unlocks (an update of its row), so
        // our waiter polls: it gets the lock soon after the unlock, not at
        // ShedLock's lease's end.
        let at_most = AT_MOST;
        assert!(shed.lock(name, at_most, Duration::ZERO).await);
        assert_eq!(
            my.sql(&format!("SELECT fence FROM shedlock WHERE name = '{name}'")),
            "0"
        );
        let waiter = tokio::spawn(ours.lock(name).wait(WITHIN).acquire());
        let url = format!("{}?table=shedlock&keep_rows=true", my.url());
        tests::eventually("our waiter waits on ShedLock's hold", WITHIN, || async {
            lock_runtime::__private::sql_waiting(&url, name) == 1
        })
        .await;
        // ShedLock's times are to the millisecond.
        let unlocked_at = db_now(&my) / 1_000 * 1_000;
        shed.unlock(name, Duration::ZERO).await;
        let guard = tests::finish(WITHIN, waiter).await;

        let (by, _, locked_at) = row(&my, name);
        assert_eq!(by, guard.holder_id());
        assert!(
            locked_at >= unlocked_at,
            "our waiter took the row ({locked_at} µs) before ShedLock let go ({unlocked_at} µs)"
        );
        assert!(
            guard.token() > before,
            "token {} after ShedLock's hold is not above {before}",
            guard.token()
        );
        eprintln!(
            "the waiter took the lock {:.3} s after ShedLock's unlock (ShedLock's lockAtMostFor: {at_most:?})",
            (locked_at - unlocked_at) as f64 / 1e6
        );
        guard.release().await.unwrap();
    }

    #[tokio::test]
    async fn our_hold_at_least_keeps_shedlock_out_until_the_minimum() {
        let (my, ours, shed) = setup().await;
        let name = "cleanup";
        let minimum = Duration::from_secs(2);

        let started = Instant::now();
        let guard = ours
            .lock(name)
            .hold_at_least(minimum)
            .acquire()
            .await
            .unwrap();
        let holder = guard.holder_id().to_owned();
        let (_, _, ours_at) = row(&my, name);
        guard.release().await.unwrap();
        // The row stays ours, marked kept, until the minimum.
        let (by, until, _) = row(&my, name);
        assert_eq!(by, format!("{holder} kept"));
        assert!(
            until >= ours_at + minimum.as_micros() as i64 - 1_000,
            "kept until {until} µs, taken at {ours_at} µs"
        );

        // Right after our early release ShedLock is still kept out (its
        // insert, then its update). Only when the machine stalled past the
        // minimum before this attempt may it have succeeded.
        let first = shed.lock(name, AT_MOST, Duration::ZERO).await;
        if started.elapsed() < minimum {
            assert!(!first, "ShedLock locked {name} inside our minimum");
        } else {
            eprintln!("the first attempt came after the minimum; not checked");
        }
        assert!(shed.remembers(name));

        // Then ShedLock's update takes it once the minimum has passed.
        let mut taken = first;
        let deadline = Instant::now() + WITHIN;
        while !taken {
            assert!(
                Instant::now() < deadline,
                "ShedLock never got {name} after our minimum"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            taken = shed.lock(name, AT_MOST, Duration::ZERO).await;
        }
        let (by, _, shed_at) = row(&my, name);
        assert_eq!(by, shed.locked_by_value());
        assert!(
            shed_at >= ours_at + minimum.as_micros() as i64 - 1_000,
            "ShedLock took {name} at {shed_at} µs, before our minimum ended ({ours_at} µs + {minimum:?})"
        );
        assert!(ours.lock(name).try_acquire().await.unwrap().is_none());
        shed.unlock(name, Duration::ZERO).await;
    }

    #[tokio::test]
    async fn keep_rows_keeps_shedlocks_row_for_its_update() {
        let (my, ours, shed) = setup().await;
        let name = "nightly-export";

        // ShedLock inserts the row once and remembers it.
        assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
        assert!(shed.remembers(name));
        shed.unlock(name, Duration::ZERO).await;

        // We take it and give it back: the row stays.
        let guard = ours.lock(name).acquire().await.unwrap();
        assert_eq!(row(&my, name).0, guard.holder_id());
        guard.release().await.unwrap();
        assert_eq!(count(&my, name), "1", "keep_rows=true keeps the row");

        // A dropped guard too.
        let dropped = ours.lock(name).acquire().await.unwrap();
        drop(dropped);
        // Given back in the background: a waiter gets it.
        let again = ours.lock(name).wait(WITHIN).acquire().await.unwrap();
        again.release().await.unwrap();
        assert_eq!(count(&my, name), "1", "keep_rows=true keeps the row");

        // ShedLock, its cache warm, runs only its update: it locks again.
        assert!(shed.remembers(name));
        assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
        assert_eq!(row(&my, name).0, shed.locked_by_value());
        assert!(ours.lock(name).try_acquire().await.unwrap().is_none());
        shed.unlock(name, Duration::ZERO).await;
        assert_eq!(count(&my, name), "1");
    }

    #[tokio::test]
    async fn shedlocks_lock_at_least_for_keeps_ours_out_until_its_minimum() {
        let (my, ours, shed) = setup().await;
        let name = "hourly-sync";
        let minimum = Duration::from_secs(2);

        let started = Instant::now();
        assert!(shed.lock(name, AT_MOST, minimum).await);
        // Its unlock leaves the row taken until locked_at + lockAtLeastFor.
        shed.unlock(name, minimum).await;
        let (by, until, shed_at) = row(&my, name);
        assert_eq!(by, shed.locked_by_value());
        assert_eq!(until - shed_at, minimum.as_micros() as i64);
        let first = ours.lock(name).try_acquire().await.unwrap();
        if started.elapsed() < minimum {
            assert!(
                first.is_none(),
                "ours locked {name} inside ShedLock's minimum"
            );
        }
        drop(first);

        // Our waiter gets it once the minimum has passed, not before (by
        // the database's clock).
        let guard = ours.lock(name).wait(WITHIN).acquire().await.unwrap();
        let (by, _, ours_at) = row(&my, name);
        assert_eq!(by, guard.holder_id());
        assert!(
            ours_at >= until,
            "ours took {name} at {ours_at} µs, before ShedLock's minimum ended ({until} µs)"
        );
        guard.release().await.unwrap();
        assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
        shed.unlock(name, Duration::ZERO).await;
    }
}
