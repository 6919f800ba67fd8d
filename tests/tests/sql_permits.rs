//! Semaphores on the SQL engines (DESIGN §11: "a permits table beside the
//! lock table"), on PostgreSQL and on MariaDB, against real servers the
//! tests start: what only these engines have. The permits table is made
//! beside the lock table (after `table=`) and `lockctl schema` prints it;
//! one of another shape is a typed error; many acquirers on several
//! clients never hold more live permits than the bound, as the database
//! itself counts them, and leave both tables empty; a permit whose lease
//! ran out is reclaimed by the next acquisition, in its slot. What every
//! engine does is in `tests/engines/semaphore.rs`.
//!
//! Every case is one `async fn case<D: Database>(server: &SqlServer<D>)`,
//! and [`on_postgres_and_mysql!`] makes it two tests, `<case>::on_postgres`
//! and `<case>::on_mysql`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, LockKind};
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
    the_permits_table_is_made_beside_the_lock_table_and_printed_by_schema,
    a_permits_table_of_another_shape_is_a_config_error,
    many_acquirers_on_several_clients_never_hold_more_than_n_permits,
    a_permit_whose_lease_ran_out_is_reclaimed_in_its_slot,
);

async fn client(url: &str) -> LockClient {
    LockClient::connect(Config::new(url))
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// The columns of `table`, in byte order (each database's collation
/// orders `_` its own way), one a line.
fn columns<D: Database>(server: &SqlServer<D>, table: &str) -> String {
    let listed = server.sql(&format!(
        "SELECT column_name FROM information_schema.columns WHERE table_name = '{table}'"
    ));
    let mut columns: Vec<&str> = listed.lines().collect();
    columns.sort_unstable();
    columns.join("\n")
}

/// How many rows of `table` say `condition`.
fn count<D: Database>(server: &SqlServer<D>, table: &str, condition: &str) -> usize {
    server
        .sql(&format!("SELECT count(*) FROM {table} WHERE {condition}"))
        .parse()
        .expect("a count")
}

async fn the_permits_table_is_made_beside_the_lock_table_and_printed_by_schema<D: Database>(
    server: &SqlServer<D>,
) {
    let url = format!("{}?table=job_locks", server.url());
    let c = client(&url).await;
    assert_eq!(
        columns(server, "job_locks_permits"),
        "fence\nlock_until\nlocked_at\nlocked_by\nname\nslot"
    );
    let permit = c.semaphore("nightly", 2).acquire().await.unwrap();
    // The permit's row, and the name's row in the lock table that keeps
    // other kinds out.
    assert_eq!(
        server.sql("SELECT slot, locked_by FROM job_locks_permits"),
        format!("0{}{}", sep::<D>(), permit.holder_id())
    );
    assert_eq!(
        server.sql("SELECT locked_by FROM job_locks WHERE name = 'nightly'"),
        " permits"
    );
    // Listed as a semaphore, beside a lock, with the permit's token.
    let lock = c.lock("weekly").acquire().await.unwrap();
    let listed = c.locks("*ly").await.unwrap();
    let kinds: Vec<(&str, LockKind)> = listed.iter().map(|l| (l.name.as_str(), l.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("nightly", LockKind::Semaphore),
            ("weekly", LockKind::Reentrant)
        ]
    );
    assert_eq!(listed[0].holders[0].token, Some(permit.token()));
    lock.release().await.unwrap();
    permit.release().await.unwrap();
    assert_eq!(count(server, "job_locks_permits", "1 = 1"), 0);
    assert_eq!(count(server, "job_locks", "1 = 1"), 0);

    let lockctl = tests::lockctl::Lockctl(env!("CARGO_BIN_EXE_lockctl"));
    let out = lockctl.run(&["--url", &url, "schema"]).await;
    assert!(out.status.success(), "{}", tests::lockctl::stderr(&out));
    let ddl = tests::lockctl::stdout(&out);
    assert!(ddl.contains("job_locks_permits"), "{ddl}");
    assert!(ddl.contains("PRIMARY KEY (name, slot)"), "{ddl}");
}

/// How the database's CLI separates the columns of a row.
fn sep<D: Database>() -> &'static str {
    match D::ENGINE {
        "postgres" => "|",
        _ => "\t",
    }
}

async fn a_permits_table_of_another_shape_is_a_config_error<D: Database>(server: &SqlServer<D>) {
    server.sql(
        "CREATE TABLE odd_permits (name VARCHAR(255) NOT NULL, \
         lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, \
         locked_by VARCHAR(255) NOT NULL, fence BIGINT NOT NULL)",
    );
    let url = format!("{}?table=odd", server.url());
    match LockClient::connect(Config::new(&url)).await {
        Err(LockError::Config(message)) => {
            assert!(message.contains("odd_permits"), "{message}");
            assert!(message.contains("slot"), "{message}");
        }
        other => panic!("a permits table without slots: {other:?}"),
    }
}

/// Eight tasks on each of four clients take and give back permits of one
/// semaphore of three (waiting, or one attempt each), while the
/// database's own count of live permits is read again and again: it never
/// exceeds three, every task gets in, every token is new, and both tables
/// are empty at the end.
async fn many_acquirers_on_several_clients_never_hold_more_than_n_permits<D: Database>(
    server: &SqlServer<D>,
) {
    const PERMITS: usize = 3;
    // A 3 s watchdog lease: the name's row in the lock table may outlive
    // the last permit by one lease (below).
    let lease = Duration::from_secs(3);
    let mut clients = Vec::new();
    for _ in 0..4 {
        let config = Config::new(server.url()).watchdog_timeout(lease);
        clients.push(LockClient::connect(config).await.expect("connect"));
    }
    let live = format!("name = 'pool' AND lock_until > {}", D::UTC_NOW);
    let done = AtomicBool::new(false);
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for t in 0..8 {
            let (client, tokens) = (client.clone(), tokens.clone());
            tasks.push(tokio::spawn(async move {
                let mut taken = 0;
                while taken < 4 {
                    let semaphore = client.semaphore("pool", PERMITS as u32);
                    let permit = match (c + t) % 2 {
                        // Long: the one-attempt tasks barge in meanwhile.
                        0 => semaphore.wait(WITHIN * 3).acquire().await?,
                        _ => match semaphore.try_acquire().await? {
                            Some(permit) => permit,
                            None => {
                                tokio::task::yield_now().await;
                                continue;
                            }
                        },
                    };
                    tokens.lock().unwrap().push(permit.token());
                    tokio::task::yield_now().await;
                    permit.release().await?;
                    taken += 1;
                }
                Ok::<_, LockError>(())
            }));
        }
    }
    let work = async {
        for task in tasks {
            tests::finish(Duration::from_secs(120), task).await;
        }
        done.store(true, Ordering::SeqCst);
    };
    // The database's own count, read again and again until every task is
    // done (at least once after the first permits are in).
    let watch = async {
        let (mut most, mut looks) = (0, 0);
        while !done.load(Ordering::SeqCst) || looks == 0 {
            let sql = format!("SELECT count(*) FROM distributed_locks_permits WHERE {live}");
            let n: usize = server.sql_async(&sql).await.parse().expect("a count");
            most = most.max(n);
            looks += 1;
        }
        (most, looks)
    };
    let ((), (most, looks)) = tokio::join!(work, watch);
    assert!(
        most <= PERMITS,
        "{most} live permits of {PERMITS} in the database ({looks} looks)"
    );
    let mut tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 4 * 8 * 4);
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 4 * 8 * 4, "every permit's token is its own");
    assert_eq!(count(server, "distributed_locks_permits", "1 = 1"), 0);
    // The name's row goes with the last permit, or, after an admission
    // that lost its slot's race (its token raised, no permit made: the
    // last release then leaves the row, docs/DECISIONS.md), when its lease
    // ends: never beyond it.
    let row = format!("lock_until > {}", D::UTC_NOW);
    tests::eventually("the name's row is free", WITHIN, || async {
        count(server, "distributed_locks", &row) == 0
    })
    .await;
}

/// A permit left by a holder that died (its lease over, nobody renewing
/// or giving it back) keeps nobody out: the next acquisition takes its
/// slot over, in one attempt, and the table holds one permit of the name,
/// the new one.
async fn a_permit_whose_lease_ran_out_is_reclaimed_in_its_slot<D: Database>(server: &SqlServer<D>) {
    let c = client(&server.url()).await;
    let ago = format!("{} - INTERVAL '1' SECOND", D::UTC_NOW);
    server.sql(&format!(
        "INSERT INTO distributed_locks_permits (name, slot, lock_until, locked_at, locked_by, fence) \
         VALUES ('import', 0, {ago}, {ago}, 'dead-host', 7)"
    ));
    let permit = c.semaphore("import", 1).try_acquire().await.unwrap();
    let permit = permit.expect("the expired permit's slot");
    assert_eq!(
        server.sql("SELECT slot, locked_by FROM distributed_locks_permits WHERE name = 'import'"),
        format!("0{}{}", sep::<D>(), permit.holder_id())
    );
    // Its bound is 1: nobody else gets in while it lives.
    let other = client(&server.url()).await;
    assert!(
        other
            .semaphore("import", 1)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    permit.release().await.unwrap();
    assert_eq!(count(server, "distributed_locks_permits", "1 = 1"), 0);
}
