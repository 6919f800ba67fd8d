//! The global client across several tokio runtimes. One test function: the
//! global client is per process, and this binary's process is its own.

use std::time::Duration;

use lock_runtime::{Config, LockError};
use redis::AsyncCommands;
use tests::Server;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_global_client_serves_every_runtime() {
    let server = Server::start();
    let url = server.url();

    // A first runtime initialises the global client, uses it, and is shut down.
    let first = runtime();
    first.block_on(async {
        lock_runtime::init(Config::new(&url)).await.unwrap();
        let guard = lock_runtime::client()
            .await
            .unwrap()
            .lock("g")
            .acquire()
            .await
            .unwrap();
        guard.release().await.unwrap();
        assert!(matches!(
            lock_runtime::init(Config::new(&url)).await,
            Err(LockError::Config(_))
        ));
    });
    drop(first);

    // Several runtimes on several threads, in parallel, after that.
    let threads: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                let rt = if i % 2 == 0 {
                    runtime()
                } else {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap()
                };
                rt.block_on(async {
                    let client = lock_runtime::client().await.unwrap();
                    for _ in 0..20 {
                        let guard = client
                            .lock("g")
                            .wait(Duration::from_secs(10))
                            .acquire()
                            .await
                            .unwrap();
                        tokio::task::yield_now().await;
                        guard.release().await.unwrap();
                    }
                });
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }

    // A guard taken on one runtime and dropped after that runtime is gone is
    // still released.
    let rt = runtime();
    let guard = rt.block_on(async {
        lock_runtime::client()
            .await
            .unwrap()
            .lock("g")
            .acquire()
            .await
            .unwrap()
    });
    drop(rt);
    drop(guard);
    let rt = runtime();
    rt.block_on(async {
        let mut raw = server.raw().await;
        tests::eventually(
            "the dropped guard was released",
            Duration::from_secs(10),
            || {
                let mut raw = raw.clone();
                async move { !raw.exists::<_, bool>("g").await.unwrap() }
            },
        )
        .await;
        let _: bool = raw.exists("g").await.unwrap();
    });
}
