//! `lockctl` driven as a process against real servers: `inspect` (table and
//! `--json`), `list` (a pattern, non-locks skipped, every master of a
//! cluster), `force-unlock` (asks first, `--yes`, wakes a waiter), `watch`
//! printing an acquire and a release as they happen, and its errors.

use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use lock_runtime::LockError;
use redis::AsyncCommands;
use tests::Server;
use tests::topology::Cluster;

const WITHIN: Duration = Duration::from_secs(20);

fn lockctl() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    cmd.env_remove("REDIS_URL").kill_on_drop(true);
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

#[tokio::test]
async fn inspect_prints_the_holder_for_people_and_the_schema_for_scripts() {
    let server = Server::start();
    let url = server.url();
    let client = server.client().await;

    let free = json(&run(&["--url", &url, "inspect", "stock:42", "--json"]).await);
    assert_eq!(free, serde_json::json!({"name": "stock:42", "held": false}));

    let guard = client.lock("stock:42").acquire().await.unwrap();
    let held = json(&run(&["--url", &url, "inspect", "stock:42", "--json"]).await);
    assert_eq!(held["name"], "stock:42");
    assert_eq!(held["held"], true);
    assert_eq!(held["kind"], "reentrant");
    assert_eq!(held["mode"], Value::Null);
    assert_eq!(held["holders"][0]["id"], guard.holder_id());
    assert_eq!(held["holders"][0]["count"], 1);
    assert_eq!(held["holders"].as_array().unwrap().len(), 1);
    let ttl = held["ttl_ms"].as_u64().expect("a lease");
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
    assert_eq!(held["queue"], serde_json::json!([]));

    let table = run(&["--url", &url, "inspect", "stock:42"]).await;
    assert!(table.status.success());
    let text = stdout(&table);
    assert!(text.contains(guard.holder_id()), "{text}");
    assert!(text.contains("reentrant"), "{text}");

    // A read-write lock held for writing.
    let writer = client
        .read_write_lock("doc")
        .write()
        .acquire()
        .await
        .unwrap();
    let rw = json(&run(&["--url", &url, "inspect", "doc", "--json"]).await);
    assert_eq!(rw["kind"], "read_write");
    assert_eq!(rw["mode"], "write");
    assert_eq!(rw["holders"][0]["id"], writer.holder_id());
    writer.release().await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn list_finds_the_held_locks_that_match_and_skips_what_is_not_a_lock() {
    let server = Server::start();
    let url = server.url();
    let client = server.client().await;
    let mut raw = server.raw().await;
    let _a = client.lock("stock:1").acquire().await.unwrap();
    let _b = client.fair_lock("stock:2").acquire().await.unwrap();
    let _c = client
        .read_write_lock("report")
        .read()
        .acquire()
        .await
        .unwrap();
    // Not locks: a user's hash, a string, and the locks' own derived keys.
    let _: () = raw.hset("stock:meta", "price", 10).await.unwrap();
    let _: () = raw.set("stock:3", "x").await.unwrap();

    let all = json(&run(&["--url", &url, "list", "--json"]).await);
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["report", "stock:1", "stock:2"]);
    assert_eq!(all[0]["kind"], "read_write");

    let stock = json(&run(&["--url", &url, "list", "stock:*", "--json"]).await);
    assert_eq!(stock.as_array().unwrap().len(), 2);
    let table = stdout(&run(&["--url", &url, "list", "stock:*"]).await);
    assert!(
        table.contains("stock:1") && table.contains("stock:2"),
        "{table}"
    );
    assert!(!table.contains("report"), "{table}");
    let none = stdout(&run(&["--url", &url, "list", "nothing:*"]).await);
    assert!(none.contains("no held lock"), "{none}");
}

#[tokio::test]
async fn list_scans_every_master_of_a_cluster() {
    let cluster = Cluster::shared();
    let client = cluster.client().await;
    // Names until they sit on every master.
    let masters = cluster.masters();
    let mut names = Vec::new();
    let mut covered = std::collections::BTreeSet::new();
    for i in 0.. {
        let name = format!("lockctl-list:{i}");
        if covered.insert(cluster.master_of(&name)) || names.len() < 3 {
            names.push(name);
        }
        if covered.len() == masters.len() && names.len() >= 3 {
            break;
        }
    }
    let mut guards = Vec::new();
    for name in &names {
        guards.push(client.lock(name.clone()).acquire().await.unwrap());
    }
    let seeds = cluster.urls().join(",");
    let found = json(&run(&["--cluster", &seeds, "list", "lockctl-list:*", "--json"]).await);
    let mut found: Vec<String> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_owned())
        .collect();
    found.sort();
    names.sort();
    assert_eq!(found, names);
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn force_unlock_asks_first_and_then_frees_the_lock_and_wakes_its_waiter() {
    let server = Server::start();
    let url = server.url();
    // 120 s watchdog leases: a waiter that is not woken sleeps far past WITHIN.
    let holder = server
        .client_with(|c| c.watchdog_timeout(Duration::from_secs(120)))
        .await;
    let stuck = holder.lock("job").acquire().await.unwrap();

    // Declined: nothing happens, exit status 1.
    let mut child = lockctl()
        .args(["--url", &url, "force-unlock", "job"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"n\n").await.unwrap();
    let declined = tokio::time::timeout(WITHIN, child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(declined.status.code(), Some(1));
    assert!(
        stdout(&declined).contains(stuck.holder_id()),
        "shows the holder first"
    );
    assert!(stderr(&declined).contains("not confirmed"));
    assert!(holder.inspect("job").await.unwrap().is_some());

    // Without a terminal and without --yes: refused too.
    let closed = run(&["--url", &url, "force-unlock", "job"]).await;
    assert_eq!(closed.status.code(), Some(1));
    assert!(holder.inspect("job").await.unwrap().is_some());

    let waiter_client = server.client().await;
    let waiter = tokio::spawn(async move {
        let guard = waiter_client.lock("job").acquire().await?;
        guard.release().await
    });
    let mut raw = server.raw().await;
    tests::eventually("the waiter listens", WITHIN, || {
        let mut raw = raw.clone();
        async move { tests::numsub(&mut raw, "redisson_lock__channel:{job}").await == 1 }
    })
    .await;
    let freed = run(&["--url", &url, "force-unlock", "job", "--yes"]).await;
    assert!(freed.status.success(), "{}", stderr(&freed));
    assert!(stdout(&freed).contains("force-unlocked"));
    tokio::time::timeout(WITHIN, waiter)
        .await
        .expect("the waiter was woken")
        .unwrap()
        .unwrap();
    assert!(matches!(stuck.release().await, Err(LockError::Lost { .. })));
    let exists: bool = raw.exists("job").await.unwrap();
    assert!(!exists);

    let again = run(&["--url", &url, "force-unlock", "job", "--yes"]).await;
    assert!(again.status.success());
    assert!(stdout(&again).contains("not locked"));
}

#[tokio::test]
async fn watch_prints_an_acquire_and_a_release_as_they_happen() {
    let server = Server::start();
    let url = server.url();
    let client = server.client().await;
    tests::lockctl::watch_prints_an_acquire_and_a_release(lockctl(), &url, &client).await;
}

#[tokio::test]
async fn errors_are_one_line_with_a_reason_and_no_password() {
    let dead = format!("redis://:sekret@127.0.0.1:{}", tests::free_port());
    let out = run(&["--url", &dead, "inspect", "x"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("lockctl: error: "), "{err}");
    assert!(!err.contains("sekret"), "{err}");
    assert!(stdout(&out).is_empty());

    let bad = run(&["--url", "not a url", "list"]).await;
    assert_eq!(bad.status.code(), Some(1));
    assert!(!stderr(&bad).is_empty());

    // Usage errors: clap's message and status 2.
    let usage = run(&["--sentinel", "redis://127.0.0.1:1", "inspect", "x"]).await;
    assert_eq!(usage.status.code(), Some(2));
    assert!(stderr(&usage).contains("--master"));

    // A key that is not a lock.
    let server = Server::start();
    let mut raw = server.raw().await;
    let _: () = raw.set("plain", "x").await.unwrap();
    let wrong = run(&["--url", &server.url(), "inspect", "plain"]).await;
    assert_eq!(wrong.status.code(), Some(1));
    assert!(stderr(&wrong).contains("not a lock"), "{}", stderr(&wrong));
}
