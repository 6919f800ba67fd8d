//! `lockctl --url etcd://...` driven as a process against a real etcd
//! server, as `tests/lockctl.rs` drives it against Redis: `inspect --json`
//! (our holders, a read-write lock, a waiter, a foreign `etcdctl lock`
//! holder), `list --json` (a pattern, keys that are not locks skipped),
//! `force-unlock` (asks first, `--yes` frees the lock and hands it to the
//! waiter), `watch`, and its errors.

use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

use lock_runtime::{Config, LockClient, LockError};
use tests::engines::etcd_keys;
use tests::etcd::{Etcd, etcdctl, etcdctl_lock};
use tests::eventually;

const WITHIN: Duration = Duration::from_secs(20);

fn lockctl() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    cmd.env_remove("REDIS_URL")
        .env_remove("LOCK_URL")
        .kill_on_drop(true);
    cmd
}

/// Runs lockctl with `args` (stdin closed) and waits for it.
async fn run(args: &[&str]) -> Output {
    tokio::time::timeout(WITHIN, lockctl().args(args).stdin(Stdio::null()).output())
        .await
        .expect("lockctl finished")
        .expect("lockctl ran")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "lockctl failed: {}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("lockctl printed JSON")
}

async fn client(etcd: &Etcd) -> LockClient {
    LockClient::connect(Config::new(etcd.url()))
        .await
        .expect("connect to etcd")
}

/// Waits until `n` keys are under `<name>/` (holders and waiters).
async fn until_keys(etcd: &Etcd, name: &str, n: usize) {
    let endpoint = etcd.endpoint();
    eventually(&format!("{n} keys under {name}/"), WITHIN, || {
        let endpoint = endpoint.clone();
        async move { etcd_keys(&endpoint, name).await.len() == n }
    })
    .await;
}

#[tokio::test]
async fn inspect_prints_the_holder_for_people_and_the_schema_for_scripts() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let (a, b) = (client(&etcd).await, client(&etcd).await);

    let free = json(&run(&["--url", &url, "inspect", "stock:42", "--json"]).await);
    assert_eq!(free, json!({"name": "stock:42", "held": false}));

    let guard = a.lock("stock:42").acquire().await.unwrap();
    let held = json(&run(&["--url", &url, "inspect", "stock:42", "--json"]).await);
    assert_eq!(held["name"], "stock:42");
    assert_eq!(held["held"], true);
    assert_eq!(held["kind"], "reentrant");
    assert_eq!(held["mode"], Value::Null);
    assert_eq!(
        held["holders"],
        json!([{"id": guard.holder_id(), "count": 1, "write": false}])
    );
    let ttl = held["ttl_ms"].as_u64().expect("a lease");
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
    assert_eq!(held["queue"], json!([]));

    let table = run(&["--url", &url, "inspect", "stock:42"]).await;
    assert!(table.status.success(), "{}", stderr(&table));
    let text = stdout(&table);
    assert!(text.contains(guard.holder_id()), "{text}");
    assert!(text.contains("reentrant"), "{text}");

    // A waiter of another client is in the queue, by its holder id.
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("stock:42").wait(WITHIN).acquire().await }
    });
    until_keys(&etcd, "stock:42", 2).await;
    let queued = json(&run(&["--url", &url, "inspect", "stock:42", "--json"]).await);
    assert_eq!(queued["holders"][0]["id"], guard.holder_id());
    let queue = queued["queue"].as_array().expect("a queue");
    assert_eq!(queue.len(), 1, "{queued}");
    let waiting = queue[0].as_str().unwrap();
    assert!(waiting.starts_with(&format!("{}:", b.id())), "{queued}");
    guard.release().await.unwrap();
    let next = tests::finish(WITHIN, waiter).await;
    assert_eq!(next.holder_id(), waiting, "the queued id is the waiter's");
    next.release().await.unwrap();

    // A read-write lock held for writing.
    let writer = a.read_write_lock("doc").write().acquire().await.unwrap();
    let rw = json(&run(&["--url", &url, "inspect", "doc", "--json"]).await);
    assert_eq!(rw["kind"], "read_write");
    assert_eq!(rw["mode"], "write");
    assert_eq!(
        rw["holders"],
        json!([{"id": writer.holder_id(), "count": 1, "write": true}])
    );
    writer.release().await.unwrap();

    // A foreign holder: `etcdctl lock`, by its key (it writes no holder id).
    let mut theirs = etcdctl_lock(&etcd.endpoint(), "shared");
    let key = theirs.acquired(WITHIN).await.expect("etcdctl holds");
    let foreign = json(&run(&["--url", &url, "inspect", "shared", "--json"]).await);
    assert_eq!(foreign["held"], true, "{foreign}");
    assert_eq!(foreign["holders"].as_array().unwrap().len(), 1, "{foreign}");
    let lease = key.strip_prefix("shared/").unwrap();
    let id = foreign["holders"][0]["id"].as_str().unwrap();
    assert!(id.contains(lease), "{id} names etcdctl's key {key}");
    theirs.release();
    let after = json(&run(&["--url", &url, "inspect", "shared", "--json"]).await);
    assert_eq!(after, json!({"name": "shared", "held": false}));
}

#[tokio::test]
async fn list_finds_the_held_locks_that_match_and_skips_what_is_not_a_lock() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let c = client(&etcd).await;
    let _a = c.lock("stock:1").acquire().await.unwrap();
    let _b = c.fair_lock("stock:2").acquire().await.unwrap();
    let _c = c.read_write_lock("report").read().acquire().await.unwrap();
    // Not locks: a plain key, and a key under a name that is no contender's.
    for (key, value) in [("stock:3", "x"), ("stock:meta/price", "10")] {
        let put = etcdctl(&etcd.endpoint(), &["put", key, value]);
        assert!(put.status.success(), "etcdctl put: {put:?}");
    }

    let all = json(&run(&["--url", &url, "list", "--json"]).await);
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["report", "stock:1", "stock:2"]);
    assert_eq!(all[0]["kind"], "read_write");
    assert_eq!(all[0]["mode"], "read");
    assert!(all.as_array().unwrap().iter().all(|l| l["held"] == true));

    let stock = json(&run(&["--url", &url, "list", "stock:*", "--json"]).await);
    let names: Vec<&str> = stock
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["stock:1", "stock:2"]);
    let table = stdout(&run(&["--url", &url, "list", "stock:*"]).await);
    assert!(
        table.contains("stock:1") && table.contains("stock:2"),
        "{table}"
    );
    assert!(!table.contains("report"), "{table}");

    let none = json(&run(&["--url", &url, "list", "nothing:*", "--json"]).await);
    assert_eq!(none, json!([]));
}

#[tokio::test]
async fn force_unlock_asks_first_and_then_frees_the_lock_and_hands_it_on() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let holder = client(&etcd).await;
    let stuck = holder.lock("job").acquire().await.unwrap();

    // Without a terminal and without --yes: refused, nothing happens.
    let closed = run(&["--url", &url, "force-unlock", "job"]).await;
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

    // A waiter: the watchdog lease (30 s) outlasts its wait, so only the
    // force-unlock can let it in.
    let waiter_client = client(&etcd).await;
    let waiter = tokio::spawn(async move {
        let guard = waiter_client.lock("job").wait(WITHIN).acquire().await?;
        guard.release().await
    });
    until_keys(&etcd, "job", 2).await;
    let freed = run(&["--url", &url, "force-unlock", "job", "--yes"]).await;
    assert!(freed.status.success(), "{}", stderr(&freed));
    assert!(
        stdout(&freed).contains("force-unlocked"),
        "{}",
        stdout(&freed)
    );
    tests::finish(WITHIN, waiter).await;
    tokio::time::timeout(WITHIN, stuck.lost())
        .await
        .expect("the old holder learns the loss");
    assert!(matches!(stuck.release().await, Err(LockError::Lost { .. })));
    until_keys(&etcd, "job", 0).await;

    let again = run(&["--url", &url, "force-unlock", "job", "--yes"]).await;
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(stdout(&again).contains("not locked"), "{}", stdout(&again));

    // A foreign holder is freed too: etcdctl's key is deleted.
    let mut theirs = etcdctl_lock(&etcd.endpoint(), "cron");
    theirs.acquired(WITHIN).await.expect("etcdctl holds");
    let freed = run(&["--url", &url, "force-unlock", "cron", "--yes"]).await;
    assert!(freed.status.success(), "{}", stderr(&freed));
    until_keys(&etcd, "cron", 0).await;
    let ours = holder.lock("cron").try_acquire().await.unwrap();
    assert!(ours.is_some(), "free after the force-unlock");
    theirs.release();
}

#[tokio::test]
async fn watch_prints_an_acquire_and_a_release_as_they_happen() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let c = client(&etcd).await;
    tests::lockctl::watch_prints_an_acquire_and_a_release(lockctl(), &url, &c).await;
}

#[tokio::test]
async fn errors_are_one_line_with_a_reason_and_no_password() {
    let dead = format!("etcd://root:sekret@127.0.0.1:{}", tests::free_port());
    let out = run(&["--url", &dead, "inspect", "x"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("lockctl: error: "), "{err}");
    assert!(err.contains("etcd"), "names the engine: {err}");
    assert!(!err.contains("sekret"), "{err}");
    assert!(stdout(&out).is_empty());

    // A name etcd cannot tell apart from another lock's.
    let etcd = Etcd::start();
    let slash = run(&["--url", &etcd.url(), "inspect", "a/b"]).await;
    assert_eq!(slash.status.code(), Some(1));
    let err = stderr(&slash);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("a/b"), "{err}");
}
