//! Several `#[tokio::test]`s, each with its own runtime, share the global
//! client in one process, in any order and in parallel.

use std::sync::OnceLock;
use std::time::Duration;

use lock_runtime::{LockClient, LockError};
use tests::Server;

static SERVER: OnceLock<Server> = OnceLock::new();

async fn global() -> &'static LockClient {
    let server = SERVER.get_or_init(Server::start);
    match lock_runtime::init(lock_runtime::Config::new(server.url())).await {
        Ok(()) | Err(LockError::Config(_)) => {}
        Err(e) => panic!("init: {e}"),
    }
    lock_runtime::client().await.unwrap()
}

async fn use_it(name: &str) {
    let client = global().await;
    for _ in 0..10 {
        let guard = client
            .lock(name)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        tokio::task::yield_now().await;
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn first() {
    use_it("shared").await;
}

#[tokio::test]
async fn second() {
    use_it("shared").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn third() {
    use_it("shared").await;
}

#[tokio::test]
async fn fourth() {
    use_it("own").await;
}
