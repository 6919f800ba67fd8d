//! What ShedLock's table promises on both SQL stores (PostgreSQL and
//! MySQL/MariaDB), written once: each case is one `async fn(&Store)` made
//! one test per SQL store by [`on_every_sql_engine!`], reading the table
//! through the store's own client ([`Store::sql`]). The cases that name
//! one server's types, roles or faults stay in `tests/tests/postgres.rs`
//! and `tests/tests/mysql.rs`.

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use tests::engines::Store;

use super::WITHIN;

on_every_sql_engine!(
    tokens_keep_rising_across_deletes_and_keep_rows_keeps_rows,
    a_force_unlocked_hold_stays_lost_when_rows_are_kept,
);

/// How many rows `table` has.
async fn rows(store: &Store, table: &str) -> String {
    store.sql(&format!("SELECT count(*) FROM {table}")).await
}

/// Tokens rise from holder to holder whether releases delete the rows
/// (the default) or keep them (`keep_rows`, ShedLock's way): a kept row
/// stays, free by its `lock_until`, and is taken again.
async fn tokens_keep_rising_across_deletes_and_keep_rows_keeps_rows(store: &Store) {
    let c = store.client().await;
    let mut last = 0;
    for _ in 0..3 {
        let g = c.lock("job").acquire().await.unwrap();
        assert!(g.token() > last, "{} after {last}", g.token());
        last = g.token();
        g.release().await.unwrap();
        let left = "SELECT count(*) FROM distributed_locks WHERE name = 'job'";
        assert_eq!(store.sql(left).await, "0", "a released row is deleted");
    }
    let kept = format!("{}?table=shedlock&keep_rows=true", store.url());
    let kept = LockClient::connect(Config::new(kept)).await.unwrap();
    let g = kept.lock("job").acquire().await.unwrap();
    assert!(g.token() > last, "{} after {last}", g.token());
    last = g.token();
    g.release().await.unwrap();
    let free = format!(
        "SELECT count(*) FROM shedlock WHERE name = 'job' AND lock_until <= {}",
        store.utc_now()
    );
    assert_eq!(store.sql(&free).await, "1", "a released row stays, free");
    let again = kept.lock("job").acquire().await.unwrap();
    assert!(again.token() > last, "{} after {last}", again.token());
    again.release().await.unwrap();
    assert_eq!(rows(store, "shedlock").await, "1");
}

/// With `keep_rows`, a hold freed by `force_unlock` stays lost: its
/// watchdog does not take the row back, the other client takes it, and
/// the old guard's release reports the loss and leaves the new holder's
/// row as it is.
async fn a_force_unlocked_hold_stays_lost_when_rows_are_kept(store: &Store) {
    let url = format!("{}?keep_rows=true", store.url());
    // Renewed every second.
    let holder = LockClient::connect(Config::new(&url).watchdog_timeout(Duration::from_secs(3)))
        .await
        .unwrap();
    let other = LockClient::connect(Config::new(&url)).await.unwrap();
    let stuck = holder.lock("kept").acquire().await.unwrap();
    assert!(other.force_unlock("kept").await.unwrap());
    tokio::time::timeout(WITHIN, stuck.lost())
        .await
        .expect("the old holder learns the loss");
    let taken = other.lock("kept").wait(WITHIN).acquire().await.unwrap();
    assert!(matches!(stuck.release().await, Err(LockError::Lost { .. })));
    let locked_by = "SELECT locked_by FROM distributed_locks WHERE name = 'kept'";
    assert_eq!(store.sql(locked_by).await, taken.holder_id());
    taken.release().await.unwrap();
    assert_eq!(rows(store, "distributed_locks").await, "1");
}
