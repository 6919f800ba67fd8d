//! `lockctl --url zk://...` driven as a process against a real ZooKeeper
//! server, as `tests/lockctl_etcd.rs` drives it against etcd: `inspect
//! --json` (our holders, a read-write lock, a waiter, a lock held by
//! Apache Curator and Curator waiting behind us), `list --json` (a pattern,
//! nodes that are not locks skipped, Curator's lock listed), `force-unlock`
//! (asks first, `--yes` frees the lock and hands it to the waiter, and
//! frees Curator's lock by deleting its node), `watch` (ours and Curator's
//! holds come and go), `LOCK_URL` as the default URL, and its errors.

use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use zookeeper_client::{Acls, CreateMode};

use lock_runtime::{Config, LockClient, LockError};
use tests::eventually;
use tests::zookeeper::{Curator, ZooKeeper, zk_children, zk_stat};

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
    run_with(lockctl(), args).await
}

/// Runs `cmd` (a [`lockctl`] with more set up) with `args` and waits for it.
async fn run_with(mut cmd: Command, args: &[&str]) -> Output {
    tokio::time::timeout(WITHIN, cmd.args(args).stdin(Stdio::null()).output())
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
async fn inspect_prints_the_holder_for_people_and_the_schema_for_scripts() {
    let zk = ZooKeeper::start();
    let url = zk.url();
    let (a, b) = (client(&zk).await, client(&zk).await);

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
    // ZooKeeper keeps no expiry on a node: the lease shown is what our node
    // says, the session timeout (the longest the lock outlives a holder
    // that stops now; 30 s by default).
    let ttl = held["ttl_ms"].as_u64().expect("a lease");
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
    assert_eq!(held["queue"], json!([]));

    let table = run(&["--url", &url, "inspect", "stock:42"]).await;
    assert!(table.status.success(), "{}", stderr(&table));
    let text = stdout(&table);
    assert!(text.contains(guard.holder_id()), "{text}");
    assert!(text.contains("reentrant"), "{text}");

    // Without --url, lockctl goes to LOCK_URL (a zk:// one), not REDIS_URL
    // (nobody listens there).
    let mut from_env = lockctl();
    from_env.env("LOCK_URL", &url).env(
        "REDIS_URL",
        format!("redis://127.0.0.1:{}", tests::free_port()),
    );
    let by_env = json(&run_with(from_env, &["inspect", "stock:42", "--json"]).await);
    assert_eq!(by_env["holders"][0]["id"], guard.holder_id(), "{by_env}");

    // A waiter of another client is in the queue, by its holder id.
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("stock:42").wait(WITHIN).acquire().await }
    });
    until_nodes(&zk, "stock:42", 2).await;
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
async fn list_finds_the_held_locks_that_match_and_skips_what_is_not_a_lock() {
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
async fn force_unlock_asks_first_and_then_frees_the_lock_and_hands_it_on() {
    let zk = ZooKeeper::start();
    let url = zk.url();
    // A 6 s session: its heartbeat, which finds a deleted node gone, runs
    // every 2 s (the default session's would every 10 s).
    let holder =
        LockClient::connect(Config::new(zk.url()).watchdog_timeout(Duration::from_secs(6)))
            .await
            .expect("connect to ZooKeeper");
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
    until_nodes(&zk, "job", 1).await;

    // A waiter: the holder's session outlives its wait, so only the
    // force-unlock can let it in.
    let waiter_client = client(&zk).await;
    let waiter = tokio::spawn(async move {
        let guard = waiter_client.lock("job").wait(WITHIN).acquire().await?;
        guard.release().await
    });
    until_nodes(&zk, "job", 2).await;
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
    until_nodes(&zk, "job", 0).await;

    let again = run(&["--url", &url, "force-unlock", "job", "--yes"]).await;
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(stdout(&again).contains("not locked"), "{}", stdout(&again));

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
async fn watch_prints_an_acquire_and_a_release_as_they_happen() {
    let zk = ZooKeeper::start();
    let url = zk.url();
    let c = client(&zk).await;
    tests::lockctl::watch_prints_an_acquire_and_a_release(lockctl(), &url, &c).await;
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
async fn errors_are_one_line_with_a_reason_and_no_password() {
    let dead = format!("zk://root:sekret@127.0.0.1:{}/locks", tests::free_port());
    let out = run(&["--url", &dead, "inspect", "x"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("lockctl: error: "), "{err}");
    assert!(
        err.to_lowercase().contains("zookeeper"),
        "names the engine: {err}"
    );
    assert!(!err.contains("sekret"), "{err}");
    assert!(stdout(&out).is_empty());

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
