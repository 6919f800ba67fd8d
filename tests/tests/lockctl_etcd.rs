//! `lockctl --url etcd://...` driven as a process against a real etcd
//! server: what only etcd has. A foreign `etcdctl lock` holder is shown by
//! `inspect` (by its key: it writes no holder id) and freed by
//! `force-unlock`; `list` skips keys that are not locks; a name etcd
//! cannot tell apart from another lock's is refused. What lockctl does on
//! every engine is in `tests/engines/lockctl.rs`.

use std::time::Duration;

use serde_json::json;

use lock_runtime::{Config, LockClient};
use tests::engines::etcd_keys;
use tests::etcd::{Etcd, etcdctl, etcdctl_lock};
use tests::eventually;
use tests::lockctl::{Lockctl, json, stderr};

const WITHIN: Duration = Duration::from_secs(20);

const LOCKCTL: Lockctl = Lockctl(env!("CARGO_BIN_EXE_lockctl"));

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
async fn inspect_shows_an_etcdctl_lock_holder_by_its_key() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let mut theirs = etcdctl_lock(&etcd.endpoint(), "shared");
    let key = theirs.acquired(WITHIN).await.expect("etcdctl holds");
    let foreign = json(
        &LOCKCTL
            .run(&["--url", &url, "inspect", "shared", "--json"])
            .await,
    );
    assert_eq!(foreign["held"], true, "{foreign}");
    assert_eq!(foreign["holders"].as_array().unwrap().len(), 1, "{foreign}");
    let lease = key.strip_prefix("shared/").unwrap();
    let id = foreign["holders"][0]["id"].as_str().unwrap();
    assert!(id.contains(lease), "{id} names etcdctl's key {key}");
    theirs.release();
    let after = json(
        &LOCKCTL
            .run(&["--url", &url, "inspect", "shared", "--json"])
            .await,
    );
    assert_eq!(after, json!({"name": "shared", "held": false}));
}

#[tokio::test]
async fn list_skips_keys_that_are_not_locks() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let c = client(&etcd).await;
    let _a = c.lock("stock:1").acquire().await.unwrap();
    // Not locks: a plain key, and a key under a name that is no contender's.
    for (key, value) in [("stock:3", "x"), ("stock:meta/price", "10")] {
        let put = etcdctl(&etcd.endpoint(), &["put", key, value]);
        assert!(put.status.success(), "etcdctl put: {put:?}");
    }
    let all = json(&LOCKCTL.run(&["--url", &url, "list", "--json"]).await);
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["stock:1"]);
}

#[tokio::test]
async fn force_unlock_frees_an_etcdctl_lock_holder() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let ours = client(&etcd).await;
    let mut theirs = etcdctl_lock(&etcd.endpoint(), "cron");
    theirs.acquired(WITHIN).await.expect("etcdctl holds");
    let freed = LOCKCTL
        .run(&["--url", &url, "force-unlock", "cron", "--yes"])
        .await;
    assert!(freed.status.success(), "{}", stderr(&freed));
    until_keys(&etcd, "cron", 0).await;
    let taken = ours.lock("cron").try_acquire().await.unwrap();
    assert!(taken.is_some(), "free after the force-unlock");
    theirs.release();
}

#[tokio::test]
async fn a_name_etcd_cannot_tell_apart_is_one_line_of_error() {
    let etcd = Etcd::start();
    let slash = LOCKCTL.run(&["--url", &etcd.url(), "inspect", "a/b"]).await;
    assert_eq!(slash.status.code(), Some(1));
    let err = stderr(&slash);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("a/b"), "{err}");
}
