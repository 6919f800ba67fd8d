//! The global client on ZooKeeper: without `init`, `lock_runtime::client()`
//! (and so `#[distributed_lock]` without `client = ...`) connects to
//! `LOCK_URL`, a `zk://` one here, before `REDIS_URL`. The environment and
//! the global client are per process, so the case runs in a child process
//! of this test binary, with `LOCK_URL` naming a ZooKeeper server and
//! `REDIS_URL` a live Redis decoy the locks must not go to.

use std::process::Command;
use std::time::Duration;

use lock_runtime::{LockError, distributed_lock};
use redis::AsyncCommands;
use tests::zookeeper::{ZooKeeper, zk_children};
use tests::{Section, Server, eventually};

/// Set in the child process: which case to run.
const CASE: &str = "GLOBAL_ZK_CASE";

/// The ZooKeeper server's connect string (`127.0.0.1:<port>`), for reading
/// its nodes from the child.
const CONNECT: &str = "GLOBAL_ZK_CONNECT";

fn connect() -> String {
    std::env::var(CONNECT).expect("the parent names the ZooKeeper server")
}

/// The contender nodes of lock `name` (children of `/locks/<name>`, the
/// root of `LOCK_URL`), read by a ZooKeeper client of their own.
async fn nodes(name: &str) -> Vec<String> {
    zk_children(&connect(), &format!("/locks/{name}")).await
}

/// The nodes of lock `env:<id>` on ZooKeeper, from inside its locked body,
/// and the hold count a nested locked call sees.
#[distributed_lock(key = "env:<id>")]
async fn outer(id: u32) -> Result<(Vec<String>, u64), LockError> {
    let nodes = nodes(&format!("env:{id}")).await;
    Ok((nodes, inner(id).await?))
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
fn without_init_the_global_client_and_the_attribute_use_lock_url_on_zookeeper() {
    let case = "without_init_the_global_client_and_the_attribute_use_lock_url_on_zookeeper";
    if std::env::var_os(CASE).is_none() {
        let zk = ZooKeeper::start();
        let decoy = Server::start();
        let status = Command::new(std::env::current_exe().expect("the test binary"))
            .args([case, "--exact", "--nocapture"])
            .env(CASE, case)
            .env("LOCK_URL", zk.url())
            .env("REDIS_URL", decoy.url())
            .env(CONNECT, zk.connect_string())
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
        assert_eq!(client.engine_name(), "zookeeper");

        let (held, count) = outer(7).await.unwrap();
        assert_eq!(held.len(), 1, "one node on ZooKeeper while held: {held:?}");
        assert!(
            held[0].starts_with("_c_") && held[0].contains("-lock-"),
            "Curator's mutex layout: {held:?}"
        );
        assert_eq!(count, 2, "the nested locked call re-entered");
        assert_eq!(nodes("env:7").await, Vec::<String>::new());

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

    // The first runtime is gone; the global client's session is not (it
    // lives on the client's own runtime): a later runtime locks through it,
    // and a guard it drops after it is shut down is still given back.
    let later = tokio::runtime::Runtime::new().unwrap();
    let dropped = later.block_on(async {
        let (held, count) = outer(9).await.unwrap();
        assert_eq!((held.len(), count), (1, 2), "{held:?}");
        let client = lock_runtime::client().await.unwrap();
        client.lock("env:10").acquire().await.unwrap()
    });
    drop(later);
    drop(dropped);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        eventually(
            "the dropped guard's node is gone",
            Duration::from_secs(20),
            || async { nodes("env:10").await.is_empty() },
        )
        .await;
        let client = lock_runtime::client().await.unwrap();
        tests::take_and_release(client.lock("env:10")).await;
    });
}
