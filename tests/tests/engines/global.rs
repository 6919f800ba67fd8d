//! The global client on every engine: without `init`,
//! `lock_runtime::client()` (and so `#[distributed_lock]` without
//! `client = ...`) connects to `LOCK_URL`, whatever its scheme, before
//! `REDIS_URL`. The environment and the global client are per process, so
//! each engine's case runs in a child process of this test binary, with
//! `LOCK_URL` naming the engine's server and `REDIS_URL` a live Redis
//! decoy the locks must not go to.

use lock_runtime::{Config, LockClient, LockError, distributed_lock};
use redis::AsyncCommands;
use tests::engines::Store;
use tests::{Section, Server, eventually};

use super::{WITHIN, run_in_child};

/// Set in the child process: the engine whose case it runs.
const ENGINE: &str = "ENGINES_GLOBAL_ENGINE";

in_a_child_on_every_engine!(
    without_init_the_global_client_and_the_attribute_use_lock_url,
    super::in_child,
    and memory
);

/// In the test process: starts the store and a Redis decoy, runs this
/// test again in a child process with `LOCK_URL` and `REDIS_URL` naming
/// them, and checks that nothing went to the decoy. In the child: the
/// case.
fn in_child(engine: &str, start: fn() -> Store) {
    if std::env::var(ENGINE).ok().as_deref() == Some(engine) {
        return the_global_client_locks_on_lock_url(engine);
    }
    let test = format!(
        "global::without_init_the_global_client_and_the_attribute_use_lock_url::on_{engine}"
    );
    let store = start();
    let decoy = Server::start();
    let vars = [
        (ENGINE, engine.to_owned()),
        ("LOCK_URL", store.url()),
        ("REDIS_URL", decoy.url()),
    ];
    run_in_child(&test, &vars);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut raw = decoy.raw().await;
        let keys: Vec<String> = raw.keys("*").await.unwrap();
        assert_eq!(keys, Vec::<String>::new(), "locks went to REDIS_URL");
    });
}

/// Who holds lock `env:<id>` as a client of its own on `LOCK_URL` sees
/// it (from inside its locked body), and the hold count a nested locked
/// call sees.
#[distributed_lock(key = "env:<id>")]
async fn outer(id: u32) -> Result<(Vec<String>, u64), LockError> {
    let seen = holders(&format!("env:{id}")).await;
    Ok((seen, inner(id).await?))
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

/// The holders of lock `name`, as a lock client of its own on `LOCK_URL`
/// (not the global one) inspects them.
async fn holders(name: &str) -> Vec<String> {
    let url = std::env::var("LOCK_URL").expect("the parent names LOCK_URL");
    let client = LockClient::connect(Config::new(url))
        .await
        .expect("a client of LOCK_URL");
    let info = client.inspect(name).await.expect("inspect");
    info.map(|i| i.holders.into_iter().map(|h| h.id).collect())
        .unwrap_or_default()
}

fn the_global_client_locks_on_lock_url(engine: &str) {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let client = lock_runtime::client().await.expect("connects to LOCK_URL");
        assert_eq!(client.engine_name(), engine);

        let (seen, count) = outer(7).await.unwrap();
        assert_eq!(seen.len(), 1, "one holder on LOCK_URL while held: {seen:?}");
        assert!(
            seen[0].starts_with(&format!("{}:", client.id())),
            "{seen:?}"
        );
        assert_eq!(count, 2, "the nested locked call re-entered");
        assert_eq!(holders("env:7").await, Vec::<String>::new());

        // Locked calls joined in one task exclude each other.
        let section = Section::new();
        let (a, b) = tokio::time::timeout(WITHIN * 3, async {
            tokio::join!(critical(8, &section), critical(8, &section))
        })
        .await
        .expect("the joined calls finished");
        a.unwrap();
        b.unwrap();
        assert_eq!(section.max(), 1, "two joined bodies ran at once");
        tests::take_and_release(client.lock("env:8")).await;
    });

    // The first runtime is gone; the global client is not (it lives on
    // its own runtime): a later runtime locks through it, and a guard it
    // drops after it is shut down is still given back.
    let later = tokio::runtime::Runtime::new().unwrap();
    let dropped = later.block_on(async {
        let (seen, count) = outer(9).await.unwrap();
        assert_eq!((seen.len(), count), (1, 2), "{seen:?}");
        let client = lock_runtime::client().await.unwrap();
        client.lock("env:10").acquire().await.unwrap()
    });
    drop(later);
    drop(dropped);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        eventually("the dropped guard is given back", WITHIN, || async {
            holders("env:10").await.is_empty()
        })
        .await;
        let client = lock_runtime::client().await.unwrap();
        tests::take_and_release(client.lock("env:10")).await;
    });
}
