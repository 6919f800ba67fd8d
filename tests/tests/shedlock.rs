//! Interop with ShedLock on PostgreSQL and on MySQL/MariaDB (DESIGN §10):
//! a Java service that locks its scheduled jobs with ShedLock's JDBC
//! provider and `usingDbTime()` shares the lock table with us. ShedLock is
//! played by [`ShedLock`]: [`ShedLockPg`](tests::shedlock::ShedLockPg) and
//! [`ShedLockMy`](tests::shedlock::ShedLockMy), which run ShedLock's own
//! statements for each database (see `tests/src/shedlock.rs`) on a table
//! made by ShedLock's documented DDL plus our `fence` column; we connect
//! with `table=shedlock&keep_rows=true`. Against real PostgreSQL and
//! MariaDB servers the tests start (UTC+05:45, so that a slip between local
//! time and UTC would show).
//!
//! Every case below is one `async fn case<D: Side>(t: &Table<D>)`, and
//! [`on_postgres_and_mysql!`] makes it two tests, `<case>::on_postgres` and
//! `<case>::on_mysql`, each against a fresh server of its own. On MariaDB
//! (our `mysql://` engine) ShedLock's statements are its MySQL ones
//! (`MySqlServerTimeStatementsSource`, which ShedLock uses for MySQL and
//! MariaDB alike), run through the `mariadb` CLI, whose sessions keep the
//! server's time zone (`+05:45`), as a JDBC session does. ShedLock's MySQL
//! table keeps its times in `TIMESTAMP(3)` columns, which MySQL converts
//! through each session's time zone: ours and ShedLock's times land the
//! same only when both write `UTC_TIMESTAMP` in sessions of the same zone,
//! and a slip of 5 h 45 min would show here.
//!
//! Run one database's part with `cargo test -p tests --test shedlock
//! on_mysql`.

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};
use tests::mariadb::{Maria, MariaDb};
use tests::postgres::{Pg, Postgres};
use tests::shedlock::{Accessor, MyCli, PgClient, ShedLock, ShedLockMy, ShedLockPg};
use tests::sql_server::{Database, SqlServer};

/// How long any wait is bounded (generous: it asserts no speed).
const WITHIN: Duration = Duration::from_secs(20);

/// Our column, added to ShedLock's table (invisible to its statements).
const FENCE: &str = "ALTER TABLE shedlock ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;";

/// On MySQL, ShedLock's `name` column as README's ShedLock section has it
/// made: compared byte for byte (ShedLock's DDL takes the database's
/// default collation, which folds case on most servers; the client
/// refuses such a table).
const BINARY_NAMES: &str = "ALTER TABLE shedlock MODIFY name VARCHAR(64) \
    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;";

/// A long `lockAtMostFor`: a ShedLock hold that outlasts every test's
/// waits unless it is unlocked.
const AT_MOST: Duration = Duration::from_secs(120);

/// Makes each named `async fn(&Table<D>)` case two tests in a module of
/// the case's name: `on_postgres` and `on_mysql` (on MariaDB), each on a
/// fresh server.
macro_rules! on_postgres_and_mysql {
    ($($case:ident),+ $(,)?) => {
        $(
            mod $case {
                use super::{Maria, Pg, Table};

                #[tokio::test]
                async fn on_postgres() {
                    super::$case(&Table::<Pg>::start().await).await;
                }

                #[tokio::test]
                async fn on_mysql() {
                    super::$case(&Table::<Maria>::start().await).await;
                }
            }
        )+
    };
}

on_postgres_and_mysql!(
    shedlocks_hold_excludes_ours_and_ours_excludes_shedlocks,
    our_waiter_gets_the_lock_after_shedlocks_unlock_with_a_larger_token,
    our_hold_at_least_keeps_shedlock_out_until_the_minimum,
    keep_rows_keeps_shedlocks_row_for_its_update,
    shedlocks_lock_at_least_for_keeps_ours_out_until_its_minimum,
    our_readers_writers_and_fair_locks_share_the_row_with_shedlock,
);

/// What a case needs to know of one database: ShedLock's table there, its
/// ShedLock client, and how the CLI reads times back.
trait Side: Database + Sized {
    /// How ShedLock's statements run there.
    type Accessor: Accessor;
    /// ShedLock's DDL for the database, verbatim from its README
    /// (repository `lukas-krecan/ShedLock`, `README.md`).
    const SHEDLOCK_DDL: &'static str;
    /// What README's ShedLock section has run on ShedLock's table besides
    /// adding `fence`.
    const ADJUST: &'static str;
    /// What separates columns in the output of [`SqlServer::sql`].
    const COLUMNS: char;
    /// The database's clock now, in UTC, as an SQL expression.
    const CLOCK: &'static str;
    /// What ShedLock's times there are whole multiples of, in µs.
    const TICK: i64;
    /// How far ShedLock's time of an event may read before ours of an
    /// event it follows, in µs: times taken to the millisecond on MySQL
    /// (`TIMESTAMP(3)`), none on PostgreSQL.
    const SLACK: i64;

    /// The SQL expression for `time` (a timestamp holding UTC) in µs since
    /// the epoch.
    fn micros(time: &str) -> String;

    /// A ShedLock instance on `server`'s table `shedlock`, with the host
    /// name as `locked_by`.
    async fn shedlock(server: &SqlServer<Self>) -> ShedLock<Self::Accessor>;
}

impl Side for Pg {
    type Accessor = PgClient;
    /// "# Postgres".
    const SHEDLOCK_DDL: &'static str =
        "CREATE TABLE shedlock(name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL,
    locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name));";
    const ADJUST: &'static str = "";
    const COLUMNS: char = '|';
    const CLOCK: &'static str = "timezone('utc', clock_timestamp())";
    const TICK: i64 = 1;
    const SLACK: i64 = 0;

    fn micros(time: &str) -> String {
        format!("(extract(epoch from {time}) * 1000000)::bigint")
    }

    async fn shedlock(server: &Postgres) -> ShedLockPg {
        ShedLockPg::connect(&server.url(), "shedlock")
            .await
            .expect("ShedLock's connection")
    }
}

/// Its times are read in the server's time zone, as both ShedLock's
/// sessions and ours see them: UTC wall-clock times.
impl Side for Maria {
    type Accessor = MyCli;
    /// "# MySQL, MariaDB".
    const SHEDLOCK_DDL: &'static str = "CREATE TABLE shedlock(name VARCHAR(64) NOT NULL, \
        lock_until TIMESTAMP(3) NOT NULL, locked_at TIMESTAMP(3) NOT NULL DEFAULT \
        CURRENT_TIMESTAMP(3), locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name));";
    const ADJUST: &'static str = BINARY_NAMES;
    const COLUMNS: char = '\t';
    const CLOCK: &'static str = "UTC_TIMESTAMP(6)";
    const TICK: i64 = 1_000;
    const SLACK: i64 = 1_000;

    fn micros(time: &str) -> String {
        format!("TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {time})")
    }

    async fn shedlock(server: &MariaDb) -> ShedLockMy {
        ShedLockMy::new(server, "shedlock")
    }
}

/// A server of `D` with ShedLock's table (made by `app`, who owns the
/// database, as a service's migration would), our client on it, and one
/// ShedLock instance. (Fields drop in order: the server last.)
struct Table<D: Side> {
    shed: ShedLock<D::Accessor>,
    ours: LockClient,
    server: SqlServer<D>,
}

impl<D: Side> Table<D> {
    async fn start() -> Table<D> {
        let server = SqlServer::<D>::start();
        server
            .sql_as(
                "app",
                "secret",
                &format!("{}\n{FENCE}\n{}", D::SHEDLOCK_DDL, D::ADJUST),
            )
            .expect("ShedLock's DDL runs as app");
        let ours = client(&server, true).await;
        let shed = D::shedlock(&server).await;
        Table { shed, ours, server }
    }

    /// Another ShedLock instance (of another host: `locked_by`), its cache
    /// empty.
    async fn shedlock(&self, locked_by: &str) -> ShedLock<D::Accessor> {
        D::shedlock(&self.server).await.locked_by(locked_by)
    }

    /// `name`'s row: `locked_by`, and `lock_until` and `locked_at` in µs
    /// since the epoch (as the columns hold them: UTC).
    fn row(&self, name: &str) -> (String, i64, i64) {
        let out = self.server.sql(&format!(
            "SELECT locked_by, {}, {} FROM shedlock WHERE name = '{name}'",
            D::micros("lock_until"),
            D::micros("locked_at")
        ));
        let fields: Vec<&str> = out.split(D::COLUMNS).collect();
        assert_eq!(fields.len(), 3, "no single row {name}: {out:?}");
        (
            fields[0].to_owned(),
            fields[1].parse().expect("lock_until"),
            fields[2].parse().expect("locked_at"),
        )
    }

    /// The database's clock now, in UTC µs since the epoch (as the rows
    /// hold times).
    fn db_now(&self) -> i64 {
        self.server
            .sql(&format!("SELECT {}", D::micros(D::CLOCK)))
            .parse()
            .expect("the database's clock")
    }

    /// Rows of `name` in the table.
    fn count(&self, name: &str) -> String {
        self.server.sql(&format!(
            "SELECT count(*) FROM shedlock WHERE name = '{name}'"
        ))
    }
}

/// Our URL of ShedLock's table on `server`, keeping rows or not.
fn url<D: Side>(server: &SqlServer<D>, keep_rows: bool) -> String {
    format!("{}?table=shedlock&keep_rows={keep_rows}", server.url())
}

/// Our client on ShedLock's table on `server`, keeping rows or not.
async fn client<D: Side>(server: &SqlServer<D>, keep_rows: bool) -> LockClient {
    let url = url(server, keep_rows);
    let client = LockClient::connect(Config::new(url.clone()))
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    assert_eq!(client.engine_name(), D::SCHEME);
    client
}

/// Asserts that `time` is within a minute of `expected` (both UTC µs
/// since the epoch): a slip of the servers' 5 h 45 min would show.
fn assert_near(time: i64, expected: i64, what: &str, of: &str) {
    assert!(
        (time - expected).abs() < 60_000_000,
        "{what} is {} s off {of}",
        (time - expected) / 1_000_000
    );
}

async fn shedlocks_hold_excludes_ours_and_ours_excludes_shedlocks<D: Side>(t: &Table<D>) {
    let (ours, shed) = (&t.ours, &t.shed);
    let name = "report-daily";

    // ShedLock's insert makes the row; ours cannot take it.
    assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
    assert!(shed.remembers(name));
    let (by, until, at) = t.row(name);
    assert_eq!(by, shed.locked_by_value());
    // Its times are UTC by the database's clock, as ours are.
    assert_near(at, t.db_now(), "ShedLock's locked_at", "UTC");
    assert!(until - at >= AT_MOST.as_micros() as i64 - D::SLACK);
    assert!(ours.lock(name).try_acquire().await.unwrap().is_none());
    // ShedLock's extend keeps it taken (and only its own locked_by may).
    assert!(
        shed.extend(name, AT_MOST * 2, Duration::ZERO).await,
        "ShedLock extends its hold"
    );
    let (_, until, _) = t.row(name);
    assert!(until - t.db_now() > AT_MOST.as_micros() as i64, "extended");
    let elsewhere = t.shedlock("another-host").await;
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
    let (by, until, at) = t.row(name);
    assert_eq!(by, guard.holder_id());
    // Our row's times are UTC as ShedLock's (no slip of the server's
    // +05:45 between its session and ours): taken now, held until the
    // watchdog's 30 s from now.
    let now = t.db_now();
    assert_near(at, now, "our locked_at", "ShedLock's UTC");
    assert_near(
        until,
        now + 30_000_000,
        "our lock_until",
        "ShedLock's UTC + 30 s",
    );

    // Ours excludes ShedLock: by its update (its cache knows the row), and
    // by the insert of an instance that never saw the name.
    assert!(!shed.lock(name, AT_MOST, Duration::ZERO).await);
    let fresh = t.shedlock("fresh-host").await;
    assert!(!fresh.remembers(name));
    assert!(!fresh.lock(name, AT_MOST, Duration::ZERO).await);
    assert!(fresh.remembers(name), "a row found there is remembered");
    // ShedLock's unlock of a row it does not hold changes nothing.
    shed.unlock(name, Duration::ZERO).await;
    assert!(!shed.lock(name, AT_MOST, Duration::ZERO).await);
    assert_eq!(t.row(name).0, guard.holder_id());

    guard.release().await.unwrap();
    assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
    shed.unlock(name, Duration::ZERO).await;
}

async fn our_waiter_gets_the_lock_after_shedlocks_unlock_with_a_larger_token<D: Side>(
    t: &Table<D>,
) {
    let (ours, shed) = (&t.ours, &t.shed);
    let name = "invoice-run";

    // Our holders before ShedLock's, by a client that deletes its rows:
    // ShedLock then makes the row anew (its insert), with no token in it
    // (`fence` is 0).
    let deleting = client(&t.server, false).await;
    let mut before = 0;
    for _ in 0..3 {
        let guard = deleting.lock(name).acquire().await.unwrap();
        assert!(guard.token() > before);
        before = guard.token();
        guard.release().await.unwrap();
        assert_eq!(t.count(name), "0");
    }

    // ShedLock holds it for 2 minutes at most, far past the waiter's 20 s.
    // It announces nothing when it unlocks (an update of its row), so our
    // waiter looks at a holder that is not ours again now and then: it
    // gets the lock soon after the unlock, not at ShedLock's lease's end.
    let at_most = AT_MOST;
    assert!(shed.lock(name, at_most, Duration::ZERO).await);
    assert_eq!(
        t.server
            .sql(&format!("SELECT fence FROM shedlock WHERE name = '{name}'")),
        "0"
    );
    let waiter = tokio::spawn(ours.lock(name).wait(WITHIN).acquire());
    // Its first try failed and it sleeps.
    let url = url(&t.server, true);
    tests::eventually("our waiter waits on ShedLock's hold", WITHIN, || async {
        lock_runtime::__private::sql_waiting(&url, name) == 1
    })
    .await;
    // ShedLock's times are whole ticks (milliseconds on MySQL).
    let unlocked_at = t.db_now() / D::TICK * D::TICK;
    shed.unlock(name, Duration::ZERO).await;
    let guard = tests::finish(WITHIN, waiter).await;

    let (by, _, locked_at) = t.row(name);
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

async fn our_hold_at_least_keeps_shedlock_out_until_the_minimum<D: Side>(t: &Table<D>) {
    let (ours, shed) = (&t.ours, &t.shed);
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
    let (_, _, ours_at) = t.row(name);
    guard.release().await.unwrap();
    // The row stays ours, marked kept, until the minimum.
    let (by, until, _) = t.row(name);
    assert_eq!(by, format!("{holder} kept"));
    assert!(
        until >= ours_at + minimum.as_micros() as i64 - D::SLACK,
        "kept until {until} µs, taken at {ours_at} µs"
    );

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

    // Then ShedLock's update takes it once the minimum has passed (by the
    // database's clock: ShedLock tries again, as its scheduler would).
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
    let (by, _, shed_at) = t.row(name);
    assert_eq!(by, shed.locked_by_value());
    assert!(
        shed_at >= ours_at + minimum.as_micros() as i64 - D::SLACK,
        "ShedLock took {name} at {shed_at} µs, before our minimum ended ({ours_at} µs + {minimum:?})"
    );
    assert!(ours.lock(name).try_acquire().await.unwrap().is_none());
    shed.unlock(name, Duration::ZERO).await;
}

async fn keep_rows_keeps_shedlocks_row_for_its_update<D: Side>(t: &Table<D>) {
    let (ours, shed) = (&t.ours, &t.shed);
    let name = "nightly-export";

    // ShedLock inserts the row once and remembers it.
    assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
    assert!(shed.remembers(name));
    shed.unlock(name, Duration::ZERO).await;

    // We take it and give it back: the row stays.
    let guard = ours.lock(name).acquire().await.unwrap();
    assert_eq!(t.row(name).0, guard.holder_id());
    guard.release().await.unwrap();
    assert_eq!(t.count(name), "1", "keep_rows=true keeps the row");

    // A dropped guard too.
    let dropped = ours.lock(name).acquire().await.unwrap();
    drop(dropped);
    // Given back in the background: a waiter gets it.
    let again = ours.lock(name).wait(WITHIN).acquire().await.unwrap();
    again.release().await.unwrap();
    assert_eq!(t.count(name), "1", "keep_rows=true keeps the row");

    // ShedLock, its cache warm, runs only its update: it locks again.
    assert!(shed.remembers(name));
    assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
    assert_eq!(t.row(name).0, shed.locked_by_value());
    assert!(ours.lock(name).try_acquire().await.unwrap().is_none());
    shed.unlock(name, Duration::ZERO).await;
    assert_eq!(t.count(name), "1");
}

async fn shedlocks_lock_at_least_for_keeps_ours_out_until_its_minimum<D: Side>(t: &Table<D>) {
    let (ours, shed) = (&t.ours, &t.shed);
    let name = "hourly-sync";
    let minimum = Duration::from_secs(2);

    let started = Instant::now();
    assert!(shed.lock(name, AT_MOST, minimum).await);
    // Its unlock leaves the row taken until locked_at + lockAtLeastFor.
    shed.unlock(name, minimum).await;
    let (by, until, shed_at) = t.row(name);
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

    // Our waiter gets it once the minimum has passed, not before (by the
    // database's clock).
    let guard = ours.lock(name).wait(WITHIN).acquire().await.unwrap();
    let (by, _, ours_at) = t.row(name);
    assert_eq!(by, guard.holder_id());
    assert!(
        ours_at >= until,
        "ours took {name} at {ours_at} µs, before ShedLock's minimum ended ({until} µs)"
    );
    guard.release().await.unwrap();
    assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
    shed.unlock(name, Duration::ZERO).await;
}

/// Our fair locks, writers and readers hold the same row of the table as
/// a plain lock (the readers together, under one holder id): ShedLock's
/// hold keeps each of them out, and each of them keeps ShedLock out, the
/// readers until the last of them is released (its row kept: `keep_rows`).
async fn our_readers_writers_and_fair_locks_share_the_row_with_shedlock<D: Side>(t: &Table<D>) {
    let (ours, shed) = (&t.ours, &t.shed);
    let name = "etl-nightly";
    let rw = ours.read_write_lock(name);
    assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
    assert!(rw.read().try_acquire().await.unwrap().is_none());
    assert!(rw.write().try_acquire().await.unwrap().is_none());
    assert!(ours.fair_lock(name).try_acquire().await.unwrap().is_none());
    shed.unlock(name, Duration::ZERO).await;

    // Two readers of ours: ShedLock stays out until the last is released.
    let other = client(&t.server, true).await;
    let first = rw.read().try_acquire().await.unwrap().expect("a reader");
    let second = other
        .read_write_lock(name)
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("a second reader beside it");
    let fresh = t.shedlock("fresh-host").await;
    assert!(!shed.lock(name, AT_MOST, Duration::ZERO).await);
    assert!(!fresh.lock(name, AT_MOST, Duration::ZERO).await);
    first.release().await.unwrap();
    assert!(!shed.lock(name, AT_MOST, Duration::ZERO).await);
    second.release().await.unwrap();
    assert_eq!(t.count(name), "1", "keep_rows keeps the row");
    assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
    shed.unlock(name, Duration::ZERO).await;

    // A writer and a fair lock of ours, each in turn.
    for builder in [rw.write(), ours.fair_lock(name)] {
        let guard = builder.try_acquire().await.unwrap().expect("free");
        assert!(!shed.lock(name, AT_MOST, Duration::ZERO).await);
        assert_eq!(t.row(name).0, guard.holder_id());
        guard.release().await.unwrap();
        assert!(shed.lock(name, AT_MOST, Duration::ZERO).await);
        shed.unlock(name, Duration::ZERO).await;
    }
}

/// Issue 49: a team whose JDBC URL forces ShedLock's session zone
/// (`connectionTimeZone=UTC&forceConnectionTimeZoneToSession=true`) writes
/// the `TIMESTAMP(3)` columns through UTC, not the server's +05:45. With
/// `time_zone=%2B00:00` (README's ShedLock section) the client's sessions
/// do the same, and the two exclude each other both ways.
#[tokio::test]
async fn with_shedlocks_session_zone_forced_to_utc_the_urls_time_zone_keeps_exclusion() {
    let my = MariaDb::start();
    my.sql_as(
        "app",
        "secret",
        &format!("{}\n{FENCE}\n{BINARY_NAMES}", Maria::SHEDLOCK_DDL),
    )
    .expect("ShedLock's DDL runs as app");
    let shed = ShedLockMy::in_zone(&my, "shedlock", "+00:00");
    let url = format!(
        "{}?table=shedlock&keep_rows=true&time_zone=%2B00:00",
        my.url()
    );
    let ours = LockClient::connect(Config::new(url)).await.unwrap();
    let held = ours.lock("job").acquire().await.unwrap();
    let ten_minutes = Duration::from_secs(600);
    assert!(
        !shed.lock("job", ten_minutes, Duration::ZERO).await,
        "ShedLock takes a name we hold"
    );
    held.release().await.unwrap();
    assert!(
        shed.lock("job", ten_minutes, Duration::ZERO).await,
        "ShedLock takes the name we gave back"
    );
    assert!(
        ours.lock("job").try_acquire().await.unwrap().is_none(),
        "we take a name ShedLock holds"
    );
    shed.unlock("job", Duration::ZERO).await;
    tests::take_and_release(ours.lock("job")).await;
}
