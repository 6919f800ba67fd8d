//! `lockctl` driven as a process against real Redis servers: what only
//! Redis has. `list` skips a user's keys that are not locks and scans
//! every master of a cluster; `force-unlock` declined at its prompt
//! changes nothing; the errors of a bad URL, of usage, and of a key that
//! is not a lock. What lockctl does on every engine is in
//! `tests/engines/lockctl.rs`.

use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use redis::AsyncCommands;
use tests::Server;
use tests::lockctl::{Lockctl, json, stderr, stdout};
use tests::topology::Cluster;

const WITHIN: Duration = Duration::from_secs(20);

const LOCKCTL: Lockctl = Lockctl(env!("CARGO_BIN_EXE_lockctl"));

fn lockctl() -> tokio::process::Command {
    LOCKCTL.command()
}

/// Runs lockctl with `args` (stdin closed) and waits for it.
async fn run(args: &[&str]) -> Output {
    LOCKCTL.run(args).await
}

#[tokio::test]
async fn list_skips_what_is_not_a_lock_and_says_when_nothing_is_held() {
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
async fn force_unlock_declined_at_the_prompt_changes_nothing() {
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

    stuck.release().await.unwrap();
}

#[tokio::test]
async fn errors_of_bad_urls_usage_and_keys_that_are_not_locks() {
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
