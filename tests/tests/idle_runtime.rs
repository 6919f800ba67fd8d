//! A caller's runtime that stops being driven (a sync wrapper's
//! current-thread runtime, between two `block_on`s) right after it dropped
//! an acquire mid-call strands nothing: the lock it may have taken is given
//! back, and the client keeps serving its other runtimes. Nothing that
//! frees a lock or serves another runtime waits for that runtime.

use std::time::Duration;

use lock_runtime::{Config, LockClient};
use tests::Server;
use tests::proxy::Proxy;

/// Generous: bounds a wait, asserts no speed (the lease is 30 s).
const WITHIN: Duration = Duration::from_secs(10);

/// `connected_clients` of the server.
fn connected(server: &Server) -> u64 {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    let info: String = redis::cmd("INFO").arg("clients").query(&mut conn).unwrap();
    tests::topology::info_field(&info, "connected_clients")
        .and_then(|n| n.parse().ok())
        .expect("connected_clients")
}

/// A server; the client under test, connected through a proxy; a rival
/// client, connected directly, holding "warm"; the runtime the client
/// serves the caller on, with its near connection made; the runtime
/// everything else runs on.
struct Setup {
    server: Server,
    proxy: Proxy,
    other: tokio::runtime::Runtime,
    client: LockClient,
    rival: LockClient,
    warm: lock_runtime::LockGuard,
    idle: tokio::runtime::Runtime,
}

fn setup() -> Setup {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let other = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (client, rival) = other.block_on(async {
        let client = LockClient::connect(Config::new(proxy.url())).await.unwrap();
        (client, server.client().await)
    });
    // Busy for the client: its tries take nothing, so they look up nothing
    // about replicas.
    let warm = other.block_on(rival.lock("warm").acquire()).unwrap();

    // The caller's runtime makes a few calls: its near connection is made.
    let idle = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let before = connected(&server);
    idle.block_on(async {
        let busy = client.lock("warm").try_acquire().await.unwrap();
        assert!(busy.is_none());
        tests::eventually("the runtime has its near connection", WITHIN, || async {
            connected(&server) > before
        })
        .await;
        let busy = client.lock("warm").try_acquire().await.unwrap();
        assert!(busy.is_none());
    });
    Setup {
        server,
        proxy,
        other,
        client,
        rival,
        warm,
        idle,
    }
}

impl Setup {
    /// Runs `call` on the idle runtime until the proxy holds back a request
    /// with `needle`, then drops it there: `None`. `Some` if it finished
    /// first. The runtime is not driven afterwards.
    fn drop_at<T>(&self, needle: &[u8], call: impl std::future::Future<Output = T>) -> Option<T> {
        self.proxy.stall_on(needle);
        let finished = self.idle.block_on(async {
            tokio::select! {
                done = call => Some(done),
                () = async {
                    while !self.proxy.triggered() {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                } => None,
            }
        });
        self.proxy.resume();
        finished
    }

    /// The rival takes "x" well before a 30 s lease taken by the dropped
    /// call could end, and the client serves another runtime.
    fn nothing_stranded(self) {
        let Setup {
            server,
            proxy,
            other,
            client,
            rival,
            warm,
            idle,
        } = self;
        other.block_on(async {
            let x = tokio::time::timeout(WITHIN, rival.lock("x").wait(WITHIN).acquire())
                .await
                .expect("the rival's acquisition of x returned")
                .expect("x was given back");
            x.release().await.unwrap();
            let y = tokio::time::timeout(
                WITHIN,
                client.lock("y").wait(Duration::from_secs(2)).acquire(),
            )
            .await
            .expect("an acquisition of y from another runtime returned")
            .expect("y acquired");
            y.release().await.unwrap();
            warm.release().await.unwrap();
        });
        // Kept alive, never driven, until here.
        drop(idle);
        drop((client, rival, proxy, server));
    }
}

#[test]
fn an_acquire_dropped_in_its_replica_lookup_strands_nothing() {
    let setup = setup();
    // Dropped while the client looks up the replicas (the lookup is held
    // back by the proxy), after the script took "x".
    let finished = setup.drop_at(b"$11\r\nreplication", setup.client.lock("x").acquire());
    assert!(
        finished.is_none(),
        "the acquire finished before its replica lookup: {finished:?}"
    );
    setup.nothing_stranded();
}

#[test]
fn an_acquire_dropped_with_its_script_in_flight_strands_nothing() {
    let setup = setup();
    // Dropped with its script sent (held back by the proxy, delivered
    // afterwards): it takes "x" after its caller left.
    let finished = setup.drop_at(
        b"redisson_lock_acquire_latch:{x}",
        setup.client.lock("x").acquire(),
    );
    assert!(finished.is_none(), "{finished:?}");
    setup.nothing_stranded();
}

#[test]
fn a_release_dropped_in_flight_strands_nothing() {
    let setup = setup();
    let guard = setup
        .idle
        .block_on(setup.client.lock("x").acquire())
        .unwrap();
    let finished = setup.drop_at(b"redisson_unlock_latch:{x}", guard.release());
    assert!(finished.is_none(), "{finished:?}");
    setup.nothing_stranded();
}
