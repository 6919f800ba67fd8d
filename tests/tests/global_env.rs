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
        assert!(matches!(
            lock_runtime::client().await,
            Err(LockError::Redis(_))
        ));
        assert!(matches!(
            locked(1).await,
            Err(AppError::Lock(LockError::Redis(_)))
        ));
    });
}
