//! The ZooKeeper harness itself (tests/src/zookeeper.rs), without the
//! library's engine: a standalone server and a three-member ensemble start,
//! serve and fail over, and two Curator clients exclude each other on them,
//! as `zk_children` shows.

use std::time::Duration;

use tests::eventually;
use tests::zookeeper::{Curator, ZkEnsemble, ZooKeeper, zk_children, zk_stat};

/// A bound on waits that must end, not a speed anyone asserts.
const LONG: Duration = Duration::from_secs(60);

#[tokio::test]
async fn curator_clients_exclude_each_other_on_a_standalone_server() {
    let zk = ZooKeeper::start();
    let connect = zk.connect_string();
    assert!(zk.url().starts_with("zk://127.0.0.1:") && zk.url().ends_with("/locks"));
    assert_ne!(zk.port(), 2181);

    let mut first = Curator::start(&connect).await;
    let mut second = Curator::start(&connect).await;

    assert!(
        first.acquire("/locks/h1", 10_000).await,
        "a free lock is taken"
    );
    let nodes = zk_children(&connect, "/locks/h1").await;
    assert_eq!(nodes.len(), 1, "one holder, no waiter: {nodes:?}");
    assert!(
        nodes[0].starts_with("_c_") && nodes[0].contains("-lock-"),
        "Curator's protected, sequential lock node: {nodes:?}"
    );
    // The lock node is ephemeral: it belongs to Curator's session.
    let node = zk_stat(&connect, &format!("/locks/h1/{}", nodes[0]))
        .await
        .expect("the lock node");
    assert_ne!(node.ephemeral_owner, 0);

    assert!(
        !second.acquire("/locks/h1", 300).await,
        "a held lock times out"
    );
    // The timed-out waiter withdrew its node.
    assert_eq!(zk_children(&connect, "/locks/h1").await, nodes);

    first.release("/locks/h1").await;
    assert!(
        second.acquire("/locks/h1", 10_000).await,
        "the released lock is taken by the other"
    );
    let now = zk_children(&connect, "/locks/h1").await;
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now, nodes, "a new holder node");

    // Errors come back as answers, not hangs.
    let answer = first.call("release /locks/h1", LONG).await;
    assert!(answer.starts_with("error "), "{answer}");

    second.release("/locks/h1").await;
    assert!(zk_children(&connect, "/locks/h1").await.is_empty());
    // Nothing is left of a lock that never existed.
    assert!(zk_children(&connect, "/locks/none").await.is_empty());
    first.close().await;
    second.close().await;
}

#[tokio::test]
async fn read_write_nodes_are_listed_in_line() {
    let zk = ZooKeeper::start();
    let connect = zk.connect_string();
    let mut reader = Curator::start(&connect).await;
    let mut writer = Curator::start(&connect).await;

    assert!(reader.read_acquire("/locks/rw", 10_000).await);
    assert!(
        !writer.write_acquire("/locks/rw", 300).await,
        "a writer waits for the reader"
    );
    let nodes = zk_children(&connect, "/locks/rw").await;
    assert_eq!(nodes.len(), 1, "the writer withdrew: {nodes:?}");
    assert!(nodes[0].contains("__READ__"), "{nodes:?}");

    reader.read_release("/locks/rw").await;
    assert!(writer.write_acquire("/locks/rw", 10_000).await);
    assert!(
        !reader.read_acquire("/locks/rw", 300).await,
        "a reader waits for the writer"
    );
    let nodes = zk_children(&connect, "/locks/rw").await;
    assert!(
        nodes.len() == 1 && nodes[0].contains("__WRIT__"),
        "{nodes:?}"
    );
    writer.write_release("/locks/rw").await;
}

#[tokio::test]
async fn a_server_pauses_resumes_and_restarts_with_its_sessions() {
    let mut zk = ZooKeeper::start();
    let connect = zk.connect_string();
    let mut curator = Curator::start_with(&connect, Duration::from_secs(30)).await;
    assert!(curator.acquire("/locks/p1", 10_000).await);
    let held = zk_children(&connect, "/locks/p1").await;

    zk.pause();
    assert!(!zk.is_serving(), "a paused server answers nobody");
    zk.resume();
    eventually("the resumed server serves", LONG, || async {
        zk.is_serving()
    })
    .await;

    // Killed and restarted on its data within the 30 s session: the session
    // and its ephemeral lock node are still there.
    zk.stop();
    assert!(!zk.is_running() && !zk.is_serving());
    zk.restart().await;
    assert!(zk.is_serving());
    assert_eq!(zk_children(&connect, "/locks/p1").await, held);
    // A clean close ends the session, which deletes the node: well before
    // the 30 s session could expire (a close on a busy machine can take
    // seconds, so it is awaited, not assumed done at once).
    curator.close().await;
    eventually(
        "the closed session's node is gone",
        Duration::from_secs(25),
        || async { zk_children(&connect, "/locks/p1").await.is_empty() },
    )
    .await;
}

#[tokio::test]
async fn an_ensemble_elects_a_new_leader_and_serves_curator() {
    let mut ensemble = ZkEnsemble::start();
    let connect = ensemble.connect_string();
    assert_eq!(connect.split(',').count(), 3);
    let old = ensemble.leader();
    for i in 0..3 {
        let expected = if i == old { "leader" } else { "follower" };
        assert_eq!(ensemble.mode(i).as_deref(), Some(expected), "member {i}");
    }

    ensemble.stop_member(old).await;
    assert!(!ensemble.is_running(old));
    let new = ensemble.wait_for_leader(LONG).await;
    assert_ne!(new, old, "a member that runs leads");

    let mut curator = Curator::start(&connect).await;
    assert!(curator.acquire("/locks/e1", 30_000).await);
    let nodes = zk_children(&connect, "/locks/e1").await;
    assert_eq!(nodes.len(), 1, "{nodes:?}");

    // The old leader rejoins, as a follower of the new one.
    ensemble.start_member(old).await;
    assert_eq!(ensemble.leader(), new);
    assert_eq!(ensemble.mode(old).as_deref(), Some("follower"));
    // It has the lock's node too (a client pinned to it reads it).
    let pinned = format!("127.0.0.1:{}", ensemble.port(old));
    assert_eq!(zk_children(&pinned, "/locks/e1").await, nodes);
    curator.release("/locks/e1").await;
    curator.close().await;
}

#[tokio::test]
async fn sessions_of_one_to_sixty_seconds_are_granted() {
    let zk = ZooKeeper::start();
    for (asked, granted) in [
        (500, 1_000),
        (1_000, 1_000),
        (60_000, 60_000),
        (120_000, 60_000),
    ] {
        let client = zookeeper_client::Client::connector()
            .with_session_timeout(Duration::from_millis(asked))
            .connect(&zk.connect_string())
            .await
            .expect("a session");
        assert_eq!(
            client.session_timeout(),
            Duration::from_millis(granted),
            "asked for {asked} ms"
        );
    }
}

#[tokio::test]
async fn curator_makes_the_lock_root_a_container_that_vanishes_once_empty() {
    let zk = ZooKeeper::start_with(&["-Dznode.container.checkIntervalMs=200"]);
    let connect = zk.connect_string();
    let mut curator = Curator::start(&connect).await;
    assert!(curator.acquire("/locks/c1", 10_000).await);
    assert!(zk_stat(&connect, "/locks").await.is_some());
    curator.release("/locks/c1").await;
    // Both the lock's node and the root were containers: the server deletes
    // them (the lock's first, then the root, now empty).
    eventually("the empty lock root is deleted", LONG, || async {
        zk_stat(&connect, "/locks").await.is_none()
    })
    .await;
    curator.close().await;
}
