//! The ZooKeeper engine against real ZooKeeper servers (standalone; the
//! failover test starts a 3-member ensemble): Curator's layout and interop
//! with Curator itself (a Java child process), session expiry, a leader
//! failover, and cancellation that leaves no node.

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient, LockError};
use tests::eventually;
use tests::proxy::Proxy;
use tests::zookeeper::{Curator, ZkEnsemble, ZooKeeper, zk_children};

const LONG: Duration = Duration::from_secs(20);

async fn client(zk: &ZooKeeper) -> LockClient {
    LockClient::connect(Config::new(zk.url()))
        .await
        .expect("connect to ZooKeeper")
}

/// The children of lock `name`'s node, in sequence order.
async fn nodes(zk: &ZooKeeper, name: &str) -> Vec<String> {
    zk_children(&zk.connect_string(), &format!("/locks/{name}")).await
}

async fn until_nodes(zk: &ZooKeeper, name: &str, n: usize) {
    eventually(&format!("{n} nodes under /locks/{name}"), LONG, || async {
        nodes(zk, name).await.len() == n
    })
    .await;
}

/// A raw session of `zk` (no lock client), the root `/locks` made with it,
/// and the create options it was made with (persistent, open to anyone).
async fn raw_with_root(
    zk: &ZooKeeper,
) -> (
    zookeeper_client::Client,
    zookeeper_client::CreateOptions<'static>,
) {
    use zookeeper_client as zk;
    let raw = zk::Client::connect(&zk.connect_string())
        .await
        .expect("a raw session");
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    raw.create("/locks", b"", &open).await.unwrap();
    (raw, open)
}

/// Whether `child` is named as Curator's protected `InterProcessMutex`
/// names its contenders: `_c_<uuid>-lock-<ten digits>`.
fn curator_mutex_node(child: &str) -> bool {
    let Some(rest) = child.strip_prefix("_c_") else {
        return false;
    };
    let Some((uuid, sequence)) = rest.split_once("-lock-") else {
        return false;
    };
    uuid.len() == 36 && sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit())
}

#[tokio::test]
async fn we_and_curator_exclude_each_other() {
    let zk = ZooKeeper::start();
    let c = client(&zk).await;
    let mut curator = Curator::start(&zk.connect_string()).await;

    // Curator holds: we wait, and get it when Curator lets go.
    assert!(curator.acquire("/locks/shared", 10_000).await);
    assert!(c.lock("shared").try_acquire().await.unwrap().is_none());
    let ours = tokio::spawn({
        let c = c.clone();
        async move { c.lock("shared").wait(LONG).acquire().await }
    });
    until_nodes(&zk, "shared", 2).await;
    let info = c.inspect("shared").await.unwrap().expect("Curator holds");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(info.queue.len(), 1, "our waiter queues behind it: {info:?}");
    curator.release("/locks/shared").await;
    let guard = tests::finish(LONG, ours).await;

    // Our node is the one Curator's recipe expects.
    let ours = nodes(&zk, "shared").await;
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert!(curator_mutex_node(&ours[0]), "{ours:?}");

    // We hold: Curator's timed acquire fails; after our release it gets it.
    assert!(!curator.acquire("/locks/shared", 300).await);
    guard.release().await.unwrap();
    assert!(curator.acquire("/locks/shared", 10_000).await);
    curator.release("/locks/shared").await;
    curator.close().await;
}

#[tokio::test]
async fn read_write_locks_share_curators_layout() {
    let zk = ZooKeeper::start();
    let c = client(&zk).await;
    let mut curator = Curator::start(&zk.connect_string()).await;
    let rw = c.read_write_lock("rw");

    // Curator reads: we read too, and our writer waits.
    assert!(curator.read_acquire("/locks/rw", 10_000).await);
    let read = rw.read().wait(LONG).acquire().await.unwrap();
    assert!(rw.write().try_acquire().await.unwrap().is_none());
    read.release().await.unwrap();
    let writer = tokio::spawn({
        let c = c.clone();
        async move { c.read_write_lock("rw").write().wait(LONG).acquire().await }
    });
    until_nodes(&zk, "rw", 2).await;
    let names = nodes(&zk, "rw").await;
    assert!(names[1].contains("__WRIT__"), "{names:?}");
    curator.read_release("/locks/rw").await;
    let write = tests::finish(LONG, writer).await;

    // We write: Curator can neither read nor write until we release.
    assert!(!curator.read_acquire("/locks/rw", 300).await);
    assert!(!curator.write_acquire("/locks/rw", 300).await);
    write.release().await.unwrap();
    assert!(curator.write_acquire("/locks/rw", 10_000).await);
    assert!(rw.read().try_acquire().await.unwrap().is_none());
    curator.write_release("/locks/rw").await;
    curator.close().await;
}

#[tokio::test]
async fn names_with_a_slash_and_what_zookeeper_cannot_do_are_refused() {
    let zk = ZooKeeper::start();
    let c = client(&zk).await;
    assert_eq!(c.engine_name(), "zookeeper");
    for name in ["a/b", "zookeeper", ".."] {
        let bad = c.lock(name).acquire().await;
        assert!(matches!(bad, Err(LockError::BadName { .. })), "{bad:?}");
    }
    let bad = c.inspect("a/b").await;
    assert!(matches!(bad, Err(LockError::BadName { .. })), "{bad:?}");
    let quorum = lock_runtime::QuorumLock::new("q", &[c.clone(), c.clone(), c.clone()])
        .acquire()
        .await;
    assert!(
        matches!(
            quorum,
            Err(LockError::Unsupported {
                engine: "zookeeper",
                ..
            })
        ),
        "{quorum:?}"
    );
    let always =
        LockClient::connect(Config::new(zk.url()).replica_sync(lock_runtime::ReplicaSync::Always))
            .await;
    assert!(
        matches!(
            always,
            Err(LockError::Unsupported {
                engine: "zookeeper",
                ..
            })
        ),
        "{always:?}"
    );
}

#[tokio::test]
async fn the_root_is_the_urls_path_and_is_made_when_missing() {
    let zk = ZooKeeper::start();
    let c = LockClient::connect(Config::new(format!(
        "zk://{}/apps/shop/locks",
        zk.connect_string()
    )))
    .await
    .unwrap();
    let guard = c.lock("stock").acquire().await.unwrap();
    let under = zk_children(&zk.connect_string(), "/apps/shop/locks/stock").await;
    assert_eq!(under.len(), 1, "{under:?}");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn readers_let_in_together_get_tokens_of_their_own_and_force_unlock_frees_them_all() {
    let zk = ZooKeeper::start();
    let (a, b) = (client(&zk).await, client(&zk).await);
    let writer = a.read_write_lock("r").write().acquire().await.unwrap();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move { b.read_write_lock("r").read().wait(LONG).acquire().await })
        })
        .collect();
    until_nodes(&zk, "r", 4).await;
    let before = writer.token();
    writer.release().await.unwrap();
    let mut tokens = Vec::new();
    let mut guards = Vec::new();
    for reader in readers {
        let guard = tests::finish(LONG, reader).await;
        assert!(guard.token() > before);
        tokens.push(guard.token());
        guards.push(guard);
    }
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "every reader has a token of its own");
    assert!(a.force_unlock("r").await.unwrap());
    for guard in &guards {
        tokio::time::timeout(LONG, guard.lost())
            .await
            .expect("every reader learns its loss");
    }
    until_nodes(&zk, "r", 0).await;
}

/// A holder cut off from ZooKeeper learns it has lost the lock, by its own
/// clock, before the server expires its session and lets anyone else in.
#[tokio::test]
async fn a_holder_cut_off_past_its_session_learns_the_loss_before_another_gets_the_lock() {
    let zk = ZooKeeper::start();
    let proxy = Proxy::start(zk.port());
    let timeout = Duration::from_secs(2);
    let cut_off = LockClient::connect(
        Config::new(format!("zk://127.0.0.1:{}/locks", proxy.port()))
            .watchdog_timeout(timeout)
            .response_timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap();
    let other = client(&zk).await;
    let guard = cut_off.lock("expiry").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let other = other.clone();
        async move {
            let guard = other.lock("expiry").wait(LONG).acquire().await;
            (Instant::now(), guard)
        }
    });
    until_nodes(&zk, "expiry", 2).await;
    proxy.stall();
    tokio::time::timeout(LONG, guard.lost())
        .await
        .expect("the cut-off holder learns the loss");
    let lost_at = Instant::now();
    assert!(guard.is_lost());
    let (granted_at, next) = tokio::time::timeout(LONG, waiter)
        .await
        .expect("the waiter finishes")
        .expect("the waiter's task runs");
    let next = next.expect("the other client gets the lock once the session expired");
    assert!(
        lost_at <= granted_at,
        "the holder knew of its loss before the next holder was granted"
    );
    assert!(next.token() > guard.token());
    next.release().await.unwrap();
    proxy.resume();
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
}

#[tokio::test]
async fn holds_and_waiters_survive_a_leader_failover() {
    let mut ensemble = ZkEnsemble::start();
    let url = ensemble.url();
    let connect = || {
        LockClient::connect(
            Config::new(url.clone())
                .watchdog_timeout(Duration::from_secs(10))
                .response_timeout(Duration::from_secs(2)),
        )
    };
    let (a, b) = (connect().await.unwrap(), connect().await.unwrap());
    let guard = a.lock("fo").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("fo").acquire().await }
    });
    let connect_string = ensemble.connect_string();
    eventually("the waiter's node", LONG, || async {
        zk_children(&connect_string, "/locks/fo").await.len() == 2
    })
    .await;
    let leader = ensemble.leader();
    ensemble.stop_member(leader).await;
    let before = guard.remaining();
    ensemble.wait_for_leader(LONG).await;
    // The hold outlives the election: a heartbeat goes through after it,
    // and the hold was never lost nor given to the waiter.
    eventually("a heartbeat after the election", LONG, || async {
        guard.remaining() > before
    })
    .await;
    assert!(!guard.is_lost());
    assert!(!waiter.is_finished());
    guard.release().await.unwrap();
    let next = tests::finish(LONG, waiter).await;
    next.release().await.unwrap();
    ensemble.start_member(leader).await;
}

/// The session that holds lock `name` on the server at `connect` (its
/// node's ephemeral owner).
async fn owner(connect: &str, name: &str) -> i64 {
    let node = zk_children(connect, &format!("/locks/{name}"))
        .await
        .remove(0);
    tests::zookeeper::zk_stat(connect, &format!("/locks/{name}/{node}"))
        .await
        .expect("the holder's node")
        .ephemeral_owner
}

/// On a multi-thread runtime, locks go through a session of that runtime
/// (no hop to the client's thread per call): exclusion, handoff, loss and
/// the watchdog's count work the same on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_thread_runtimes_own_session_locks_as_the_clients_does() {
    let zk = ZooKeeper::start();
    let (a, b) = (client(&zk).await, client(&zk).await);
    // The first call of a runtime starts its session and uses the
    // client's; a later one uses the runtime's own.
    let connect = zk.connect_string();
    let first = a.lock("near").acquire().await.unwrap();
    let clients_own = owner(&connect, "near").await;
    first.release().await.unwrap();
    eventually("a hold on the runtime's own session", LONG, || async {
        let guard = a.lock("near").acquire().await.unwrap();
        let other = owner(&connect, "near").await != clients_own;
        guard.release().await.unwrap();
        other
    })
    .await;
    let guard = a.lock("near").acquire().await.unwrap();
    assert_ne!(owner(&connect, "near").await, clients_own);
    assert_eq!(a.renewed_locks(), 1, "the runtime's session keeps it");
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("near").wait(LONG).acquire().await }
    });
    until_nodes(&zk, "near", 2).await;
    let token = guard.token();
    guard.release().await.unwrap();
    let next = tests::finish(LONG, waiter).await;
    assert!(next.token() > token);
    // Forced off: the holder learns it.
    assert!(a.force_unlock("near").await.unwrap());
    tokio::time::timeout(LONG, next.lost())
        .await
        .expect("the holder learns the loss");
    assert!(matches!(next.release().await, Err(LockError::Lost { .. })));
    assert_eq!(a.renewed_locks(), 0);
    until_nodes(&zk, "near", 0).await;
}

/// A hold on the session of a runtime that shuts down is lost, told by its
/// guard, and the lock goes to the next holder once the server expires the
/// session; its release returns at once.
#[test]
fn a_hold_on_a_runtime_that_shut_down_is_lost_and_the_lock_moves_on() {
    let zk = ZooKeeper::start();
    let url = zk.url();
    let config = move || {
        Config::new(url.clone())
            .watchdog_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_millis(500))
    };
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let main = tokio::runtime::Runtime::new().unwrap();
    let (a, b) = main.block_on(async {
        (
            LockClient::connect(config()).await.unwrap(),
            LockClient::connect(config()).await.unwrap(),
        )
    });
    // Taken from the doomed runtime, on its own session (as above).
    let guard = doomed.block_on({
        let (a, connect) = (a.clone(), zk.connect_string());
        async move {
            tokio::spawn(async move {
                let first = a.lock("doomed").acquire().await.unwrap();
                let clients_own = owner(&connect, "doomed").await;
                first.release().await.unwrap();
                loop {
                    let guard = a.lock("doomed").acquire().await.unwrap();
                    if owner(&connect, "doomed").await != clients_own {
                        return guard;
                    }
                    guard.release().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .unwrap()
        }
    });
    drop(doomed);
    main.block_on(async {
        tokio::time::timeout(LONG, guard.lost())
            .await
            .expect("the hold is lost with its runtime");
        let next = b.lock("doomed").wait(LONG).acquire().await.unwrap();
        assert!(guard.is_lost());
        let released = tokio::time::timeout(LONG, guard.release()).await;
        assert!(
            matches!(released, Ok(Err(LockError::Lost { .. }))),
            "{released:?}"
        );
        next.release().await.unwrap();
    });
}

/// A re-entry dropped after its first poll (its count taken, its write
/// sent) gives its count back: the chain's last release deletes the node.
/// A re-entry may also finish within that one poll (nothing stops it):
/// then its guard is dropped, which gives the count back too.
#[tokio::test]
async fn a_reentry_dropped_mid_way_leaves_no_node_behind() {
    let zk = ZooKeeper::start();
    let (c, other) = (client(&zk).await, client(&zk).await);
    let outer = c.lock("re").acquire().await.unwrap();
    for _ in 0..20 {
        let dropped = outer
            .scope(tokio::time::timeout(Duration::ZERO, c.lock("re").acquire()))
            .await;
        if let Ok(inner) = dropped {
            drop(inner.expect("a re-entry"));
        }
    }
    outer.release().await.unwrap();
    until_nodes(&zk, "re", 0).await;
    let next = other.lock("re").try_acquire().await.unwrap();
    next.expect("the lock is free").release().await.unwrap();
}

/// Readers share with readers only: a mutex on the same name keeps them
/// out, as it keeps writers out.
#[tokio::test]
async fn a_mutex_keeps_readers_of_the_same_name_out() {
    let zk = ZooKeeper::start();
    let (a, b) = (client(&zk).await, client(&zk).await);
    let mutex = a.lock("mixed").acquire().await.unwrap();
    let rw = b.read_write_lock("mixed");
    assert!(rw.read().try_acquire().await.unwrap().is_none());
    assert!(rw.write().try_acquire().await.unwrap().is_none());
    mutex.release().await.unwrap();
    let read = rw.read().try_acquire().await.unwrap().expect("free");
    read.release().await.unwrap();
}

/// A lock's node whose ACL lets contenders in but refuses writes to the
/// node itself (Curator's recipe needs only CREATE, READ and DELETE there)
/// locks and excludes: taking a lock never writes the lock's node.
#[tokio::test]
async fn a_lock_node_that_refuses_writes_to_itself_still_locks() {
    use zookeeper_client as zk;
    let zk = ZooKeeper::start();
    let (raw, _) = raw_with_root(&zk).await;
    let no_writes = [zk::Acl::new(
        zk::Permission::CREATE | zk::Permission::READ | zk::Permission::DELETE,
        zk::AuthId::anyone(),
    )];
    let guarded = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&no_writes));
    raw.create("/locks/guarded", b"", &guarded).await.unwrap();
    assert_eq!(
        raw.set_data("/locks/guarded", b"", None).await,
        Err(zk::Error::NoAuth),
        "the node refuses writes"
    );

    let (a, b) = (client(&zk).await, client(&zk).await);
    let first = a.lock("guarded").acquire().await.unwrap();
    assert!(b.lock("guarded").try_acquire().await.unwrap().is_none());
    until_nodes(&zk, "guarded", 1).await;
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("guarded").wait(LONG).acquire().await }
    });
    until_nodes(&zk, "guarded", 2).await;
    let before = first.token();
    first.release().await.unwrap();
    let second = tests::finish(LONG, waiter).await;
    assert!(second.token() > before);
    second.release().await.unwrap();
    until_nodes(&zk, "guarded", 0).await;
}

/// Issue 34: taking a lock never writes the lock's own node (Curator never
/// touches it): its data, its version and a data watch on it are left
/// alone, by a holder alone, a contended holder and a reader alike.
#[tokio::test]
async fn taking_a_lock_leaves_the_lock_node_alone() {
    let zk = ZooKeeper::start();
    let (raw, open) = raw_with_root(&zk).await;
    raw.create("/locks/owned", b"the owner's data", &open)
        .await
        .unwrap();
    let (_, before, watcher) = raw.get_and_watch_data("/locks/owned").await.unwrap();

    let (a, b) = (client(&zk).await, client(&zk).await);
    let first = a.lock("owned").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("owned").acquire().await }
    });
    until_nodes(&zk, "owned", 2).await;
    first.release().await.unwrap();
    let second = tests::finish(LONG, waiter).await;
    second.release().await.unwrap();
    let read = a.read_write_lock("owned").read().acquire().await.unwrap();
    let also = b.read_write_lock("owned").read().acquire().await.unwrap();
    read.release().await.unwrap();
    also.release().await.unwrap();

    let (data, after) = raw.get_data("/locks/owned").await.unwrap();
    assert_eq!(data, b"the owner's data");
    assert_eq!(after.version, before.version, "the lock node was written");
    assert_eq!(after.mzxid, before.mzxid, "the lock node was written");
    // No data event: a write would have fired the watch. Children events
    // do not reach a data watch; the node's deletion would.
    let fired = tokio::time::timeout(Duration::ZERO, watcher.changed()).await;
    assert!(fired.is_err(), "the data watch fired: {fired:?}");
}

/// Issue 34: a name with a character past U+FFFF (an emoji), which the
/// Java server refuses as a surrogate pair, is `BadName` before any call,
/// for every operation; a root with one is refused at connect.
#[tokio::test]
async fn names_outside_the_basic_plane_are_bad_names_everywhere() {
    let zk = ZooKeeper::start();
    let c = client(&zk).await;
    let name = "stock:🍕";
    let bad = |what: &str, r: Result<(), LockError>| {
        assert!(matches!(r, Err(LockError::BadName { .. })), "{what}: {r:?}");
    };
    bad("acquire", c.lock(name).acquire().await.map(drop));
    bad("try", c.lock(name).try_acquire().await.map(drop));
    bad(
        "read",
        c.read_write_lock(name).read().acquire().await.map(drop),
    );
    bad("inspect", c.inspect(name).await.map(drop));
    bad("force_unlock", c.force_unlock(name).await.map(drop));
    let rooted =
        LockClient::connect(Config::new(format!("zk://{}/locks🍕", zk.connect_string()))).await;
    assert!(
        matches!(rooted, Err(LockError::Config(_))),
        "a root ZooKeeper refuses: {:?}",
        rooted.map(|_| ())
    );
    // Characters of the basic plane that ZooKeeper takes are fine.
    c.lock("Größe:ĳ")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
