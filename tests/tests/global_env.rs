//! `client()` without `init`: the global client connects to `REDIS_URL`.
//! The environment and the global client are per process, so each case runs
//! in a child process of this test binary, with its own `REDIS_URL`.

use std::process::Command;

use lock_runtime::{LockError, distributed_lock};
use redis::AsyncCommands;
use tests::Server;

/// Set in the child processes: which case to run.
const CASE: &str = "GLOBAL_ENV_CASE";

#[derive(Debug)]
enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

/// Holds `env:<id>` (through the global client) while it checks, with a
/// connection of its own to `REDIS_URL`, that the lock is there.
#[distributed_lock(key = "env:<id>")]
async fn locked(id: u32) -> Result<bool, AppError> {
    let url = std::env::var("REDIS_URL").expect("REDIS_URL");
    let mut raw = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    Ok(raw.exists(format!("env:{id}")).await.unwrap())
}

/// Runs this binary's test `case` in a child with `REDIS_URL=url`.
fn run_child(case: &str, url: &str) {
    let status = Command::new(std::env::current_exe().expect("the test binary"))
        .args([case, "--exact", "--nocapture"])
        .env(CASE, case)
        .env("REDIS_URL", url)
        .status()
        .expect("the child test runs");
    assert!(status.success(), "{case} failed in the child");
}

fn in_child() -> bool {
    std::env::var_os(CASE).is_some()
}

#[test]
fn without_init_the_global_client_uses_redis_url() {
    if !in_child() {
        let server = Server::start();
        run_child(
            "without_init_the_global_client_uses_redis_url",
            &server.url(),
        );
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        assert!(
            locked(7).await.unwrap(),
            "the lock is on the server at REDIS_URL"
        );
        let client = lock_runtime::client().await.unwrap();
        tests::take_and_release(client.lock("env:7")).await;
    });
}

#[test]
fn an_unreachable_redis_url_is_a_typed_error() {
    if !in_child() {
        let url = format!("redis://127.0.0.1:{}", tests::free_port());
        run_child("an_unreachable_redis_url_is_a_typed_error", &url);
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let url = std::env::var("REDIS_URL").unwrap();
        let port = url.rsplit(':').next().unwrap().to_owned();
        let Err(e) = lock_runtime::client().await else {
            panic!("connected to a dead port")
        };
        // Where, where from, and why.
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "cannot connect to redis at 127.0.0.1:{port} (from REDIS_URL): connection refused"
            )),
            "{text}"
        );
        assert!(matches!(
            locked(1).await,
            Err(AppError::Lock(LockError::Connect { .. }))
        ));
    });
}

#[test]
fn after_a_failed_init_the_global_client_retries_the_configured_server_not_redis_url() {
    let case = "after_a_failed_init_the_global_client_retries_the_configured_server_not_redis_url";
    if !in_child() {
        // REDIS_URL names a live server: the defect would connect there.
        let decoy = Server::start();
        run_child(case, &decoy.url());
        return;
    }
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let dead = tests::free_port();
        let configured = lock_runtime::Config::new(format!("redis://127.0.0.1:{dead}"))
            .connect_timeout(std::time::Duration::from_secs(2));
        let Err(first) = lock_runtime::init(configured).await else {
            panic!("init connected to a dead port")
        };
        assert!(
            first
                .to_string()
                .contains(&format!("127.0.0.1:{dead} (from Config)")),
            "{first}"
        );
        // Later calls try the configured server again, and say so.
        let Err(again) = lock_runtime::client().await else {
            panic!("client() connected somewhere else than the configured server")
        };
        assert!(
            again
                .to_string()
                .contains(&format!("127.0.0.1:{dead} (from Config)")),
            "{again}"
        );
        assert!(matches!(
            locked(2).await,
            Err(AppError::Lock(LockError::Connect { .. }))
        ));

        // A second init after a failure is allowed, and wins.
        let live = Server::start();
        lock_runtime::init(lock_runtime::Config::new(live.url()))
            .await
            .unwrap();
        let client = lock_runtime::client().await.unwrap();
        let guard = client.lock("after-init").acquire().await.unwrap();
        let mut raw = live.raw().await;
        let there: bool = raw.exists("after-init").await.unwrap();
        assert!(there, "the lock is on the server given to init");
        guard.release().await.unwrap();
        // After a success, init is refused.
        assert!(matches!(
            lock_runtime::init(lock_runtime::Config::new(live.url())).await,
            Err(LockError::Config(_))
        ));
    });
}
