//! `lockctl --url <any engine's URL>` driven as a process: what it shows
//! and does the same way on every engine (`inspect`, `list`,
//! `force-unlock`, `watch`, its errors). What only one store has (keys or
//! nodes that are not locks, foreign holders such as `etcdctl lock` or
//! Curator, a Redis Cluster) is in that engine's `lockctl*.rs`, and the SQL
//! engines' `lockctl schema` in `postgres.rs` and `mysql.rs`.

use std::time::Duration;

use serde_json::{Value, json};

use lock_runtime::LockError;
use tests::engines::Store;
use tests::lockctl::{Lockctl, json, stderr, stdout};
use tests::{Kind, finish};

use super::WITHIN;

const LOCKCTL: Lockctl = Lockctl(env!("CARGO_BIN_EXE_lockctl"));

on_every_server!(
    lockctl_inspect_prints_holders_for_people_and_the_schema_for_scripts,
    lockctl_list_finds_the_held_locks_that_match,
    lockctl_force_unlock_asks_first_then_frees_the_lock_and_hands_it_on,
    lockctl_watch_prints_an_acquire_and_a_release,
    lockctl_errors_are_one_line_with_a_reason_and_no_password,
    lockctl_shows_a_semaphores_permits_and_frees_them_all,
);

/// `inspect --json` of a free lock, of a held one (its holder, count,
/// lease and an empty queue), of a fair lock with a waiter of another
/// client in its queue, and of a read-write lock held for writing; the
/// table for people names the holder and the kind.
async fn lockctl_inspect_prints_holders_for_people_and_the_schema_for_scripts(store: &Store) {
    let url = store.url();
    let (a, b) = (store.client().await, store.client().await);
    let inspect = async |name: &str| {
        json(
            &LOCKCTL
                .run(&["--url", &url, "inspect", name, "--json"])
                .await,
        )
    };

    assert_eq!(
        inspect("stock:42").await,
        json!({"name": "stock:42", "held": false})
    );

    let guard = a.lock("stock:42").acquire().await.unwrap();
    let held = inspect("stock:42").await;
    assert_eq!(held["name"], "stock:42");
    assert_eq!(held["held"], true);
    assert_eq!(held["kind"], "reentrant");
    assert_eq!(held["mode"], Value::Null);
    assert_eq!(
        held["holders"],
        json!([{"id": guard.holder_id(), "count": 1, "write": false}])
    );
    // The default watchdog lease is 30 s (on ZooKeeper, the session
    // timeout the node names).
    let ttl = held["ttl_ms"].as_u64().expect("a lease");
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
    assert_eq!(held["queue"], json!([]));

    let table = LOCKCTL.run(&["--url", &url, "inspect", "stock:42"]).await;
    assert!(table.status.success(), "{}", stderr(&table));
    let text = stdout(&table);
    assert!(text.contains(guard.holder_id()), "{text}");
    assert!(text.contains("reentrant"), "{text}");
    guard.release().await.unwrap();

    // A fair lock's waiter of another client is in the queue, by its
    // holder id, and gets the lock next.
    let first = a.fair_lock("line").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.fair_lock("line").wait(WITHIN).acquire().await }
    });
    store.until_waiting(Kind::Fair, "line", 1, WITHIN).await;
    let queued = inspect("line").await;
    assert_eq!(queued["kind"], "fair", "{queued}");
    assert_eq!(queued["holders"][0]["id"], first.holder_id());
    let queue = queued["queue"].as_array().expect("a queue");
    assert_eq!(queue.len(), 1, "{queued}");
    let waiting = queue[0].as_str().unwrap().to_owned();
    assert!(waiting.starts_with(&format!("{}:", b.id())), "{queued}");
    first.release().await.unwrap();
    let next = finish(WITHIN, waiter).await;
    assert_eq!(next.holder_id(), waiting, "the queued id is the waiter's");
    next.release().await.unwrap();

    // A read-write lock held for writing.
    let writer = a.read_write_lock("doc").write().acquire().await.unwrap();
    let rw = inspect("doc").await;
    assert_eq!(rw["kind"], "read_write");
    assert_eq!(rw["mode"], "write");
    assert_eq!(
        rw["holders"],
        json!([{"id": writer.holder_id(), "count": 1, "write": true}])
    );
    writer.release().await.unwrap();
    assert_eq!(inspect("doc").await, json!({"name": "doc", "held": false}));
}

/// `list --json` names every held lock (of each kind) in name order, and
/// only those that match a pattern; the table likewise; none match: `[]`.
async fn lockctl_list_finds_the_held_locks_that_match(store: &Store) {
    let url = store.url();
    let c = store.client().await;
    let _a = c.lock("stock:1").acquire().await.unwrap();
    // A fair lock and a read-write lock.
    let _b = c.fair_lock("stock:2").acquire().await.unwrap();
    let _c = c.read_write_lock("report").read().acquire().await.unwrap();
    let names = |listed: &Value| -> Vec<String> {
        listed
            .as_array()
            .expect("an array")
            .iter()
            .map(|l| l["name"].as_str().unwrap().to_owned())
            .collect()
    };

    let all = json(&LOCKCTL.run(&["--url", &url, "list", "--json"]).await);
    assert_eq!(names(&all), ["report", "stock:1", "stock:2"]);
    assert_eq!(all[0]["kind"], "read_write");
    assert_eq!(all[0]["mode"], "read");
    assert!(all.as_array().unwrap().iter().all(|l| l["held"] == true));

    let stock = json(
        &LOCKCTL
            .run(&["--url", &url, "list", "stock:*", "--json"])
            .await,
    );
    assert_eq!(names(&stock), ["stock:1", "stock:2"]);
    let table = stdout(&LOCKCTL.run(&["--url", &url, "list", "stock:*"]).await);
    assert!(
        table.contains("stock:1") && table.contains("stock:2"),
        "{table}"
    );
    assert!(!table.contains("report"), "{table}");

    let none = json(
        &LOCKCTL
            .run(&["--url", &url, "list", "nothing:*", "--json"])
            .await,
    );
    assert_eq!(none, json!([]));
}

/// `force-unlock` shows the holder and, without a terminal and without
/// `--yes`, changes nothing; with `--yes` it frees the lock, its waiter
/// gets it, and the old holder learns the loss; a free lock is "not
/// locked".
async fn lockctl_force_unlock_asks_first_then_frees_the_lock_and_hands_it_on(store: &Store) {
    let url = store.url();
    // A 6 s watchdog lease (ZooKeeper: session): the holder's keep-alive,
    // which finds a deleted record gone, runs every 2 s.
    let holder = store
        .client_with(|c| c.watchdog_timeout(Duration::from_secs(6)))
        .await;
    let stuck = holder.lock("job").acquire().await.unwrap();

    let closed = LOCKCTL.run(&["--url", &url, "force-unlock", "job"]).await;
    assert_eq!(closed.status.code(), Some(1), "{}", stderr(&closed));
    assert!(
        stdout(&closed).contains(stuck.holder_id()),
        "shows the holder first: {}",
        stdout(&closed)
    );
    assert!(
        stderr(&closed).contains("not confirmed"),
        "{}",
        stderr(&closed)
    );
    assert!(!stuck.is_lost());
    assert_eq!(
        holder.inspect("job").await.unwrap().unwrap().holders[0].id,
        stuck.holder_id()
    );

    // A waiter: the holder keeps its lease alive, so only the
    // force-unlock can let it in.
    let waiter_client = store.client().await;
    let waiter = tokio::spawn(async move {
        let guard = waiter_client.lock("job").wait(WITHIN).acquire().await?;
        guard.release().await
    });
    store.until_waiting(Kind::Reentrant, "job", 1, WITHIN).await;
    let freed = LOCKCTL
        .run(&["--url", &url, "force-unlock", "job", "--yes"])
        .await;
    assert!(freed.status.success(), "{}", stderr(&freed));
    assert!(
        stdout(&freed).contains("force-unlocked"),
        "{}",
        stdout(&freed)
    );
    finish(WITHIN, waiter).await;
    tokio::time::timeout(WITHIN, stuck.lost())
        .await
        .expect("the old holder learns the loss");
    assert!(matches!(stuck.release().await, Err(LockError::Lost { .. })));

    let again = LOCKCTL
        .run(&["--url", &url, "force-unlock", "job", "--yes"])
        .await;
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(stdout(&again).contains("not locked"), "{}", stdout(&again));
}

async fn lockctl_watch_prints_an_acquire_and_a_release(store: &Store) {
    let c = store.client().await;
    tests::lockctl::watch_prints_an_acquire_and_a_release(LOCKCTL.command(), &store.url(), &c)
        .await;
}

/// A store that does not answer: one line on stderr, naming the engine
/// (on every engine but the original Redis, whose driver says it its own
/// way), without the URL's password, and nothing on stdout.
async fn lockctl_errors_are_one_line_with_a_reason_and_no_password(store: &Store) {
    let dead = format!(
        "{}://root:sekret@127.0.0.1:{}",
        store.scheme(),
        tests::free_port()
    );
    let out = LOCKCTL.run(&["--url", &dead, "inspect", "x"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("lockctl: error: "), "{err}");
    if store.engine() != "redis" {
        assert!(
            err.to_lowercase().contains(store.engine()),
            "names the engine: {err}"
        );
    }
    assert!(!err.contains("sekret"), "{err}");
    assert!(stdout(&out).is_empty());
}

/// A memory store lives in the process of the clients that name it:
/// `lockctl`, a process of its own, refuses its URL and says why, rather
/// than show an empty store of its own.
#[tokio::test]
async fn lockctl_refuses_a_memory_url_and_says_why() {
    let out = LOCKCTL
        .run(&["--url", "memory://shop", "inspect", "stock:42"])
        .await;
    assert!(!out.status.success(), "lockctl took a memory URL");
    let err = stderr(&out);
    assert!(err.contains("memory://"), "{err}");
    assert!(err.contains("process"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// A semaphore (DESIGN §11): `inspect --json` shows kind `semaphore` and
/// each permit holder (its lease left where the store keeps one per
/// permit), `list` names it, and `force-unlock --yes` frees every permit
/// and lets a waiter in. An engine without semaphores refuses a permit
/// with `LockError::Unsupported` (and nothing more is asserted there).
async fn lockctl_shows_a_semaphores_permits_and_frees_them_all(store: &Store) {
    let url = store.url();
    let (a, b) = (store.client().await, store.client().await);
    let first = match a.semaphore("partner", 2).acquire().await {
        Ok(permit) => permit,
        Err(LockError::Unsupported { .. }) => return,
        Err(e) => panic!("a free semaphore: {e}"),
    };
    let second = b.semaphore("partner", 2).acquire().await.unwrap();
    let shown = json(
        &LOCKCTL
            .run(&["--url", &url, "inspect", "partner", "--json"])
            .await,
    );
    assert_eq!(shown["kind"], "semaphore", "{shown}");
    let mut ids: Vec<&str> = shown["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut held = vec![first.holder_id(), second.holder_id()];
    held.sort();
    assert_eq!(ids, held, "{shown}");
    let listed = json(&LOCKCTL.run(&["--url", &url, "list", "--json"]).await);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["name"] == "partner" && l["kind"] == "semaphore"),
        "{listed}"
    );
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.semaphore("partner", 2).wait(WITHIN).acquire().await }
    });
    store
        .until_waiting(Kind::Semaphore(2), "partner", 1, WITHIN)
        .await;
    let freed = LOCKCTL
        .run(&["--url", &url, "force-unlock", "partner", "--yes"])
        .await;
    assert!(freed.status.success(), "{}", stderr(&freed));
    let next = finish(WITHIN, waiter).await;
    for lost in [first, second] {
        tokio::time::timeout(WITHIN, lost.lost())
            .await
            .expect("a freed permit's holder learns the loss");
    }
    next.release().await.unwrap();
}
