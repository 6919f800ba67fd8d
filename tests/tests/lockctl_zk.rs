//! `lockctl --url zk://...` driven as a process against a real ZooKeeper
//! server: what only ZooKeeper has. A lock held by Apache Curator is shown
//! by `inspect` (by its node's name), with our waiter queued behind it
//! and Curator's behind us; `list` skips nodes that are not locks and
//! lists Curator's lock; `force-unlock` frees Curator's lock by deleting
//! its node; `watch` shows Curator take and give back the lock; `LOCK_URL`
//! (a `zk://` one) is the default URL; names ZooKeeper refuses are one
//! line of error. What lockctl does on every engine is in
//! `tests/engines/lockctl.rs`.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use zookeeper_client::{Acls, CreateMode};

use lock_runtime::{Config, LockClient};
use tests::eventually;
use tests::lockctl::{Lockctl, json, run_with, stderr, stdout};
use tests::zookeeper::{Curator, ZooKeeper, zk_children, zk_stat};

const WITHIN: Duration = Duration::from_secs(20);

const LOCKCTL: Lockctl = Lockctl(env!("CARGO_BIN_EXE_lockctl"));

fn lockctl() -> Command {
    LOCKCTL.command()
}

/// Runs lockctl with `args` (stdin closed) and waits for it.
async fn run(args: &[&str]) -> std::process::Output {
    LOCKCTL.run(args).await
}

async fn client(zk: &ZooKeeper) -> LockClient {
    LockClient::connect(Config::new(zk.url()))
        .await
        .expect("connect to ZooKeeper")
}

/// The contender nodes of lock `name` (children of `/locks/<name>`), in
/// sequence order: the holder first.
async fn nodes(zk: &ZooKeeper, name: &str) -> Vec<String> {
    zk_children(&zk.connect_string(), &format!("/locks/{name}")).await
}

/// Waits until `n` nodes are under `/locks/<name>` (holders and waiters).
async fn until_nodes(zk: &ZooKeeper, name: &str, n: usize) {
    eventually(
        &format!("{n} nodes under /locks/{name}"),
        WITHIN,
        || async { nodes(zk, name).await.len() == n },
    )
    .await;
}

/// Whether `child` is named as Curator's protected `InterProcessMutex`
/// names its contenders: `_c_<uuid>-lock-<ten digits>`.
fn curator_mutex_node(child: &str) -> bool {
    let Some((uuid, sequence)) = child
        .strip_prefix("_c_")
        .and_then(|rest| rest.split_once("-lock-"))
    else {
        return false;
    };
    uuid.len() == 36 && sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit())
}

/// Curator's `InterProcessMutex(path).acquire(ms)` in a task of its own, so
/// that it can wait while the test goes on; the task hands the driver back.
fn curator_acquires(
    mut curator: Curator,
    path: &'static str,
) -> tokio::task::JoinHandle<(Curator, bool)> {
    tokio::spawn(async move {
        let acquired = curator.acquire(path, WITHIN.as_millis() as u64).await;
        (curator, acquired)
    })
}

#[tokio::test]
async fn inspect_shows_curator_holding_and_waiting_and_lock_url_is_the_default() {
    let zk = ZooKeeper::start();
    let url = zk.url();
    let (a, b) = (client(&zk).await, client(&zk).await);
    let guard = a.lock("stock:42").acquire().await.unwrap();

    // Without --url, lockctl goes to LOCK_URL (a zk:// one), not REDIS_URL
    // (nobody listens there).
    let mut from_env = lockctl();
    from_env.env("LOCK_URL", &url).env(
        "REDIS_URL",
        format!("redis://127.0.0.1:{}", tests::free_port()),
    );
    let by_env = json(&run_with(from_env, &["inspect", "stock:42", "--json"]).await);
    assert_eq!(by_env["holders"][0]["id"], guard.holder_id(), "{by_env}");

    guard.release().await.unwrap();

    // A foreign holder: Curator's InterProcessMutex on /locks/shared. Its
    // node's data is the host's address, not a holder id: it is shown by
    // its node's name, and with no lease (its node says none; its session
    // timeout is Curator's to know).
    let mut curator = Curator::start(&zk.connect_string()).await;
    assert!(
        curator
            .acquire("/locks/shared", WITHIN.as_millis() as u64)
            .await
    );
    let theirs = nodes(&zk, "shared").await;
    assert_eq!(theirs.len(), 1, "{theirs:?}");
    assert!(curator_mutex_node(&theirs[0]), "{theirs:?}");
    let foreign = json(&run(&["--url", &url, "inspect", "shared", "--json"]).await);
    assert_eq!(foreign["held"], true, "{foreign}");
    assert_eq!(foreign["kind"], "reentrant", "{foreign}");
    assert_eq!(
        foreign["holders"],
        json!([{"id": theirs[0], "count": 1, "write": false}])
    );
    assert_eq!(foreign["ttl_ms"], Value::Null, "{foreign}");
    assert_eq!(foreign["queue"], json!([]));

    // Our waiter queues behind Curator, by our holder id.
    let ours = tokio::spawn({
        let b = b.clone();
        async move { b.lock("shared").wait(WITHIN).acquire().await }
    });
    until_nodes(&zk, "shared", 2).await;
    let behind = json(&run(&["--url", &url, "inspect", "shared", "--json"]).await);
    assert_eq!(behind["holders"][0]["id"], theirs[0], "{behind}");
    let queue = behind["queue"].as_array().expect("a queue");
    assert_eq!(queue.len(), 1, "{behind}");
    assert!(
        queue[0]
            .as_str()
            .unwrap()
            .starts_with(&format!("{}:", b.id())),
        "{behind}"
    );
    curator.release("/locks/shared").await;
    let ours = tests::finish(WITHIN, ours).await;

    // And Curator waits behind us, by its node's name.
    let curator = curator_acquires(curator, "/locks/shared");
    until_nodes(&zk, "shared", 2).await;
    let line = nodes(&zk, "shared").await;
    let curator_waits = json(&run(&["--url", &url, "inspect", "shared", "--json"]).await);
    assert_eq!(
        curator_waits["holders"][0]["id"],
        ours.holder_id(),
        "{curator_waits}"
    );
    assert_eq!(curator_waits["queue"], json!([line[1]]), "{curator_waits}");
    assert!(curator_mutex_node(&line[1]), "{line:?}");
    ours.release().await.unwrap();
    let (mut curator, acquired) = tokio::time::timeout(WITHIN * 2, curator)
        .await
        .expect("Curator's acquire answered")
        .expect("Curator's task ran");
    assert!(acquired, "Curator gets the lock once we release");
    let now = json(&run(&["--url", &url, "inspect", "shared", "--json"]).await);
    assert_eq!(now["holders"][0]["id"], line[1], "{now}");
    curator.release("/locks/shared").await;
    curator.close().await;
    let after = json(&run(&["--url", &url, "inspect", "shared", "--json"]).await);
    assert_eq!(after, json!({"name": "shared", "held": false}));
}

#[tokio::test]
async fn list_skips_nodes_that_are_not_locks_and_lists_curators() {
    let zk = ZooKeeper::start();
    let url = zk.url();
    let c = client(&zk).await;
    // No lock was ever taken: the root is not there yet, and nothing is
    // held.
    assert!(zk_stat(&zk.connect_string(), "/locks").await.is_none());
    let empty = json(&run(&["--url", &url, "list", "--json"]).await);
    assert_eq!(empty, json!([]));
    let _a = c.lock("stock:1").acquire().await.unwrap();
    let _b = c.fair_lock("stock:2").acquire().await.unwrap();
    let _c = c.read_write_lock("report").read().acquire().await.unwrap();
    let mut curator = Curator::start(&zk.connect_string()).await;
    assert!(
        curator
            .acquire("/locks/stock:4", WITHIN.as_millis() as u64)
            .await
    );
    let curators = nodes(&zk, "stock:4").await;
    assert_eq!(curators.len(), 1, "{curators:?}");

    // Not locks: a plain node under the root, and a node whose child is no
    // contender's (written by another ZooKeeper client).
    let other = zookeeper_client::Client::connector()
        .connect(&zk.connect_string())
        .await
        .expect("a ZooKeeper session of the test");
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    for (path, data) in [
        ("/locks/stock:3", "x"),
        ("/locks/stock:meta", ""),
        ("/locks/stock:meta/price", "10"),
    ] {
        other
            .create(path, data.as_bytes(), &persistent)
            .await
            .unwrap_or_else(|e| panic!("creating {path}: {e}"));
    }

    let all = json(&run(&["--url", &url, "list", "--json"]).await);
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["report", "stock:1", "stock:2", "stock:4"]);
    assert_eq!(all[0]["kind"], "read_write");
    assert_eq!(all[0]["mode"], "read");
    assert!(all.as_array().unwrap().iter().all(|l| l["held"] == true));
    // Curator's lock, by its node's name.
    assert_eq!(
        all[3]["holders"],
        json!([{"id": curators[0], "count": 1, "write": false}])
    );

    let stock = json(&run(&["--url", &url, "list", "stock:*", "--json"]).await);
    let names: Vec<&str> = stock
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["stock:1", "stock:2", "stock:4"]);
    let table = stdout(&run(&["--url", &url, "list", "stock:*"]).await);
    assert!(
        table.contains("stock:1") && table.contains("stock:2") && table.contains("stock:4"),
        "{table}"
    );
    assert!(!table.contains("report"), "{table}");
    assert!(!table.contains("stock:3"), "{table}");
    assert!(!table.contains("stock:meta"), "{table}");

    let none = json(&run(&["--url", &url, "list", "nothing:*", "--json"]).await);
    assert_eq!(none, json!([]));
    curator.release("/locks/stock:4").await;
    curator.close().await;
}

#[tokio::test]
async fn force_unlock_frees_a_lock_curator_holds() {
    let zk = ZooKeeper::start();
    let url = zk.url();
    let holder = client(&zk).await;
    // A foreign holder is freed too: Curator's node is deleted, so Curator
    // holds nothing any more (whatever its process still believes) and we
    // get the lock at once.
    let mut curator = Curator::start(&zk.connect_string()).await;
    assert!(
        curator
            .acquire("/locks/cron", WITHIN.as_millis() as u64)
            .await
    );
    let theirs = nodes(&zk, "cron").await;
    assert_eq!(theirs.len(), 1, "{theirs:?}");
    let asked = run(&["--url", &url, "force-unlock", "cron"]).await;
    assert_eq!(asked.status.code(), Some(1), "{}", stderr(&asked));
    assert!(
        stdout(&asked).contains(&theirs[0]),
        "shows Curator's node as the holder: {}",
        stdout(&asked)
    );
    assert_eq!(nodes(&zk, "cron").await, theirs, "refused: left as it was");
    let freed = run(&["--url", &url, "force-unlock", "cron", "--yes"]).await;
    assert!(freed.status.success(), "{}", stderr(&freed));
    assert!(
        stdout(&freed).contains("force-unlocked"),
        "{}",
        stdout(&freed)
    );
    until_nodes(&zk, "cron", 0).await;
    let ours = holder
        .lock("cron")
        .try_acquire()
        .await
        .unwrap()
        .expect("free after the force-unlock");
    let now = nodes(&zk, "cron").await;
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0], theirs[0], "Curator's node is gone for good");
    ours.release().await.unwrap();
    // Curator's release of its deleted node is no error (the recipe ignores
    // a node already gone), and its next acquire makes a node of its own.
    curator.release("/locks/cron").await;
    assert!(
        curator
            .acquire("/locks/cron", WITHIN.as_millis() as u64)
            .await
    );
    let again = nodes(&zk, "cron").await;
    assert_eq!(again.len(), 1, "{again:?}");
    assert_ne!(again[0], theirs[0]);
    curator.release("/locks/cron").await;
    curator.close().await;
}

#[tokio::test]
async fn watch_shows_curator_take_and_give_back_the_lock() {
    let zk = ZooKeeper::start();
    let mut child = lockctl()
        .args(["--url", &zk.url(), "watch", "batch"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut until = async |what: &str| -> String {
        loop {
            let line = tokio::time::timeout(WITHIN, lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("watch never printed {what:?}"))
                .unwrap()
                .unwrap_or_else(|| panic!("watch ended before {what:?}"));
            if line.contains(what) {
                return line;
            }
        }
    };
    until("batch: free").await;

    let mut curator = Curator::start(&zk.connect_string()).await;
    assert!(
        curator
            .acquire("/locks/batch", WITHIN.as_millis() as u64)
            .await
    );
    let theirs = nodes(&zk, "batch").await;
    assert_eq!(theirs.len(), 1, "{theirs:?}");
    let acquired = until("acquired").await;
    assert!(acquired.contains(&theirs[0]), "{acquired}");
    curator.release("/locks/batch").await;
    let released = until("released").await;
    assert!(released.contains(&theirs[0]), "{released}");
    child.kill().await.unwrap();
    curator.close().await;
}

#[tokio::test]
async fn names_zookeeper_refuses_are_one_line_of_error() {
    // Names ZooKeeper cannot tell apart from another lock's, or refuses.
    let zk = ZooKeeper::start();
    for name in ["a/b", "zookeeper"] {
        let bad = run(&["--url", &zk.url(), "inspect", name]).await;
        assert_eq!(bad.status.code(), Some(1), "{name}");
        let err = stderr(&bad);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(name), "{err}");
    }
    let bad = run(&["--url", &zk.url(), "force-unlock", "a/b", "--yes"]).await;
    assert_eq!(bad.status.code(), Some(1), "{}", stderr(&bad));
}
