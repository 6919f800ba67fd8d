//! The test servers of the SQL engines ([`Postgres`], [`MariaDb`]) on their
//! own: what the engines' tests rely on, checked through the databases' own
//! CLIs. Each server answers on its own free port, in a time zone that is
//! neither UTC nor a whole number of hours off it; `app` may create tables
//! in `locks` and `reader` may not; data survives a restart; servers started
//! together get different ports; a dropped server leaves neither a listener
//! nor a directory behind.

use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use tests::mariadb::{self, Maria};
use tests::postgres::{self, Pg};
use tests::sql_server::{Database, SqlServer};

/// The few statements in which the two dialects differ, and what they must
/// say.
trait Dialect: Database {
    /// The port the server says it listens on.
    const PORT_QUERY: &'static str;
    /// The server's time zone, and what it must say.
    const ZONE_QUERY: &'static str;
    const ZONE: &'static str;
    /// Local time minus UTC, in whole seconds, from one reading of the clock.
    const OFFSET_QUERY: &'static str;
    const OFFSET_SECONDS: i64;
    /// What the CLI says when `reader` tries to create a table.
    const DENIED: &'static str;
}

impl Dialect for Pg {
    const PORT_QUERY: &'static str = "SHOW port";
    const ZONE_QUERY: &'static str = "SHOW timezone";
    const ZONE: &'static str = postgres::TIME_ZONE;
    const OFFSET_QUERY: &'static str = "WITH t AS (SELECT clock_timestamp() AS c) \
         SELECT extract(epoch FROM c::timestamp - timezone('utc', c))::bigint FROM t";
    const OFFSET_SECONDS: i64 = postgres::UTC_OFFSET_SECONDS;
    const DENIED: &'static str = "permission denied";
}

impl Dialect for Maria {
    const PORT_QUERY: &'static str = "SELECT @@port";
    const ZONE_QUERY: &'static str = "SELECT @@global.time_zone";
    const ZONE: &'static str = mariadb::TIME_ZONE;
    const OFFSET_QUERY: &'static str = "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), NOW(6))";
    const OFFSET_SECONDS: i64 = mariadb::UTC_OFFSET_SECONDS;
    const DENIED: &'static str = "CREATE command denied";
}

/// Starts a server, saying how long that took (for the log: no assertion).
fn start<D: Dialect>() -> SqlServer<D> {
    let began = Instant::now();
    let server = SqlServer::<D>::start();
    eprintln!(
        "{} on port {} started in {:?}",
        D::NAME,
        server.port(),
        began.elapsed()
    );
    server
}

/// A table `held(name, holder)` made by `app`, with the row `('a', 'one')`.
fn held_table<D: Dialect>(server: &SqlServer<D>) {
    server
        .sql_as(
            "app",
            "secret",
            "CREATE TABLE held (name VARCHAR(64) PRIMARY KEY, holder VARCHAR(64) NOT NULL);
             INSERT INTO held (name, holder) VALUES ('a', 'one');",
        )
        .unwrap_or_else(|e| panic!("app cannot create a table on {}: {e}", D::NAME));
}

fn answers_on_its_own_port_in_a_non_utc_zone<D: Dialect>() {
    let server = start::<D>();
    let port = server.port();
    assert!(
        !D::DEFAULT_PORTS.contains(&port),
        "never the machine's own service's port"
    );
    assert_eq!(
        server.url(),
        format!("{}://app:secret@127.0.0.1:{port}/locks", D::SCHEME)
    );
    TcpStream::connect(("127.0.0.1", port)).expect("the server listens on its port");
    // Over TCP, as `app`, as the engine will connect: the server on the
    // other end is this one.
    let seen = server
        .sql_as("app", "secret", D::PORT_QUERY)
        .unwrap_or_else(|e| panic!("app cannot connect to {}: {e}", D::NAME));
    assert_eq!(seen, port.to_string());
    assert_eq!(server.sql(D::PORT_QUERY), port.to_string());

    let zone = server.sql(D::ZONE_QUERY);
    assert_eq!(zone, D::ZONE);
    assert_ne!(zone.to_uppercase(), "UTC");
    // Local time is ahead of UTC by 5 h 45 min, for the superuser and for
    // `app`'s session alike.
    let expected = D::OFFSET_SECONDS.to_string();
    assert_eq!(server.sql(D::OFFSET_QUERY), expected);
    assert_eq!(
        server
            .sql_as("app", "secret", D::OFFSET_QUERY)
            .expect("app"),
        expected
    );
}

fn app_creates_tables_and_reader_cannot<D: Dialect>() {
    let server = start::<D>();
    held_table(&server);
    assert_eq!(
        server.sql("SELECT holder FROM held WHERE name = 'a'"),
        "one"
    );

    let denied = server
        .sql_as("reader", "secret", "CREATE TABLE mine (name VARCHAR(64))")
        .expect_err("reader must not create tables");
    assert!(
        denied.contains(D::DENIED),
        "reader's CREATE TABLE on {} failed, but not for want of the privilege: {denied}",
        D::NAME
    );
    // It reads and writes the tables `app` made.
    server
        .sql_as(
            "reader",
            "secret",
            "INSERT INTO held (name, holder) VALUES ('b', 'two');
             UPDATE held SET holder = 'three' WHERE name = 'b';
             DELETE FROM held WHERE name = 'a';",
        )
        .unwrap_or_else(|e| panic!("reader cannot write app's table on {}: {e}", D::NAME));
    assert_eq!(
        server
            .sql_as("reader", "secret", "SELECT name FROM held ORDER BY name")
            .expect("reader reads"),
        "b"
    );
    assert_eq!(server.sql("SELECT holder FROM held ORDER BY name"), "three");
    // Passwords are checked.
    server
        .sql_as("app", "wrong", "SELECT 1")
        .expect_err("a wrong password is refused");
}

fn keeps_its_data_across_a_restart<D: Dialect>() {
    let mut server = start::<D>();
    let port = server.port();
    held_table(&server);
    server.stop();
    assert!(!server.is_running());
    server
        .sql_as("app", "secret", "SELECT 1")
        .expect_err("a stopped server does not answer");
    let began = Instant::now();
    server.restart();
    eprintln!("{} restarted in {:?}", D::NAME, began.elapsed());
    assert!(server.is_running());
    assert_eq!(server.port(), port, "restarted on the same port");
    assert_eq!(
        server.sql("SELECT holder FROM held WHERE name = 'a'"),
        "one"
    );
    assert_eq!(
        server
            .sql_as("app", "secret", "SELECT count(*) FROM held")
            .expect("app reads after the restart"),
        "1"
    );
    // A restart of a running server works too.
    server.restart();
    assert_eq!(
        server.sql("SELECT holder FROM held WHERE name = 'a'"),
        "one"
    );
}

fn servers_started_together_differ_and_leave_nothing_behind<D: Dialect>() {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(start::<D>);
        let b = s.spawn(start::<D>);
        (
            a.join().expect("first start"),
            b.join().expect("second start"),
        )
    });
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    held_table(&a);
    assert_eq!(a.sql("SELECT count(*) FROM held"), "1");
    // Each has its own data.
    held_table(&b);
    assert_eq!(b.sql("SELECT count(*) FROM held"), "1");

    for server in [a, b] {
        let (port, dir) = (server.port(), server.dir().to_owned());
        assert!(dir.is_dir());
        drop(server);
        assert!(!dir.exists(), "{} left {} behind", D::NAME, dir.display());
        TcpListener::bind(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("port {port} is still taken after the drop: {e}"));
    }
}

/// Runs each check, as a test of its own, on each database: the tests
/// are `on_postgres::<check>` and `on_mariadb::<check>`.
macro_rules! on_each_database {
    ($($check:ident),* $(,)?) => {
        mod on_postgres {
            $(#[test]
            fn $check() {
                super::$check::<tests::postgres::Pg>();
            })*
        }
        mod on_mariadb {
            $(#[test]
            fn $check() {
                super::$check::<tests::mariadb::Maria>();
            })*
        }
    };
}

on_each_database!(
    answers_on_its_own_port_in_a_non_utc_zone,
    app_creates_tables_and_reader_cannot,
    keeps_its_data_across_a_restart,
    servers_started_together_differ_and_leave_nothing_behind,
);
