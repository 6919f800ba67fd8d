//! The global client on etcd: without `init`, `lock_runtime::client()`
//! (and so `#[distributed_lock]` without `client = ...`) connects to
//! `LOCK_URL`, whatever its scheme, before `REDIS_URL`. The environment and
//! the global client are per process, so the case runs in a child process
//! of this test binary, with `LOCK_URL` naming an etcd server and
//! `REDIS_URL` a live Redis decoy the locks must not go to.

use std::process::Command;
use std::time::Duration;

use lock_runtime::{LockError, distributed_lock};
use redis::AsyncCommands;
use tests::engines::etcd_keys;
use tests::etcd::Etcd;
use tests::{Section, Server};

/// Set in the child process: which case to run.
const CASE: &str = "GLOBAL_ETCD_CASE";

/// The etcd server's client URL (`http://...`), for `etcdctl` in the child.
const ENDPOINT: &str = "GLOBAL_ETCD_ENDPOINT";

fn endpoint() -> String {
    std::env::var(ENDPOINT).expect("the parent names the etcd endpoint")
}

/// The keys of lock `env:<id>` on etcd, from inside its locked body, and
/// the hold count a nested locked call sees.
#[distributed_lock(key = "env:<id>")]
async fn outer(id: u32) -> Result<(Vec<String>, u64), LockError> {
    let keys = etcd_keys(&endpoint(), &format!("env:{id}")).await;
    Ok((keys, inner(id).await?))
}

#[distributed_lock(key = "env:<id>")]
async fn inner(id: u32) -> Result<u64, LockError> {
    let client = lock_runtime::client().await?;
    let info = client.inspect(&format!("env:{id}")).await?;
    Ok(info.expect("held inside the body").holders[0].count)
}

#[distributed_lock(key = "env:<id>")]
async fn critical(id: u32, section: &Section) -> Result<(), LockError> {
    section.enter(async {}).await;
    Ok(())
}

#[test]
fn without_init_the_global_client_and_the_attribute_use_lock_url_on_etcd() {
    let case = "without_init_the_global_client_and_the_attribute_use_lock_url_on_etcd";
    if std::env::var_os(CASE).is_none() {
        let etcd = Etcd::start();
        let decoy = Server::start();
        let status = Command::new(std::env::current_exe().expect("the test binary"))
            .args([case, "--exact", "--nocapture"])
            .env(CASE, case)
            .env("LOCK_URL", etcd.url())
            .env("REDIS_URL", decoy.url())
            .env(ENDPOINT, etcd.endpoint())
            .status()
            .expect("the child test runs");
        assert!(status.success(), "{case} failed in the child");
        // Nothing went to the Redis decoy.
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let mut raw = decoy.raw().await;
            let keys: Vec<String> = raw.keys("*").await.unwrap();
            assert_eq!(keys, Vec::<String>::new(), "locks went to REDIS_URL");
        });
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let client = lock_runtime::client().await.expect("connects to LOCK_URL");
        assert_eq!(client.engine_name(), "etcd");

        let (keys, count) = outer(7).await.unwrap();
        assert_eq!(keys.len(), 1, "one key on etcd while held: {keys:?}");
        assert!(keys[0].starts_with("env:7/"), "{keys:?}");
        assert_eq!(count, 2, "the nested locked call re-entered");
        assert_eq!(etcd_keys(&endpoint(), "env:7").await, Vec::<String>::new());

        // Locked calls joined in one task exclude each other.
        let section = Section::new();
        let (a, b) = tokio::time::timeout(Duration::from_secs(60), async {
            tokio::join!(critical(8, &section), critical(8, &section))
        })
        .await
        .expect("the joined calls finished");
        a.unwrap();
        b.unwrap();
        assert_eq!(section.max(), 1, "two joined bodies ran at once");
        tests::take_and_release(client.lock("env:8")).await;
    });
}
