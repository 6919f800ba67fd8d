//! The quorum (Redlock) lock over five real redis-servers: a majority is
//! enough, a minority is a typed error naming the nodes, validity spent while
//! acquiring is no hold, the watchdog keeps the quorum, tokens keep
//! increasing, mutual exclusion under load.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, QuorumLock};
use redis::AsyncCommands;
use tests::{Server, eventually};

/// Bounds waits for events (generous: no speed is asserted).
const WITHIN: Duration = Duration::from_secs(20);

struct Cluster {
    servers: Vec<Server>,
    clients: Vec<LockClient>,
}

async fn five(tune: fn(lock_runtime::Config) -> lock_runtime::Config) -> Cluster {
    let servers: Vec<Server> = (0..5).map(|_| Server::start()).collect();
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(server.client_with(tune).await);
    }
    Cluster { servers, clients }
}

/// Whether `key` exists on each running server (`None` for stopped ones).
async fn held_on(cluster: &Cluster, key: &str) -> Vec<Option<bool>> {
    let mut found = Vec::new();
    for server in &cluster.servers {
        if server.is_running() {
            let mut raw = server.raw().await;
            found.push(Some(raw.exists(key).await.unwrap()));
        } else {
            found.push(None);
        }
    }
    found
}

#[tokio::test]
async fn a_majority_is_enough() {
    let mut cluster = five(|c| c).await;
    cluster.servers[1].stop();
    cluster.servers[3].stop();

    let lock = QuorumLock::new("q:ok", &cluster.clients).node_timeout(Duration::from_secs(2));
    let guard = lock.clone().wait(Duration::ZERO).acquire().await.unwrap();
    assert_eq!(guard.name(), "q:ok");
    assert!(!guard.is_lost());
    assert_eq!(
        held_on(&cluster, "q:ok").await,
        vec![Some(true), None, Some(true), None, Some(true)]
    );
    // Redisson's reentrant layout on each node: one field, a holder id of
    // that node's client, count 1.
    let mut holders = Vec::new();
    for i in [0, 2, 4] {
        let mut raw = cluster.servers[i].raw().await;
        let fields: Vec<(String, i64)> = raw.hgetall("q:ok").await.unwrap();
        assert_eq!(fields.len(), 1, "node {i}: one holder: {fields:?}");
        let (holder, count) = fields.into_iter().next().unwrap();
        assert!(
            holder.starts_with(&format!("{}:", cluster.clients[i].id())),
            "node {i}: held by its client: {holder}"
        );
        assert_eq!(count, 1, "node {i}: held once");
        holders.push(holder);
    }
    assert!(
        holders.iter().any(|h| h == guard.holder_id()),
        "the guard's holder id is one of its holds': {} in {holders:?}",
        guard.holder_id()
    );

    // Held: another task's quorum attempt is refused as busy.
    let contender = {
        let clients = cluster.clients.clone();
        move || {
            let clients = clients.clone();
            tokio::spawn(async move {
                let lock = QuorumLock::new("q:ok", &clients).node_timeout(Duration::from_secs(2));
                lock.try_acquire().await.map(|g| g.is_some())
            })
        }
    };
    assert!(!contender().await.unwrap().unwrap());

    guard.release().await.unwrap();
    assert_eq!(
        held_on(&cluster, "q:ok").await,
        vec![Some(false), None, Some(false), None, Some(false)]
    );
    assert!(contender().await.unwrap().unwrap(), "free after release");
}

#[tokio::test]
async fn a_minority_fails_naming_the_nodes() {
    let mut cluster = five(|c| c).await;
    for i in [0, 2, 4] {
        cluster.servers[i].stop();
    }
    let lock = QuorumLock::new("q:few", &cluster.clients).node_timeout(Duration::from_secs(2));
    for attempt in [
        lock.clone().wait(Duration::ZERO).acquire().await,
        lock.clone()
            .try_acquire()
            .await
            .map(|g| g.expect("no quorum, not busy")),
    ] {
        match attempt {
            Err(LockError::NoQuorum {
                name,
                acquired,
                needed,
                failures,
            }) => {
                assert_eq!(name, "q:few");
                assert_eq!((acquired, needed), (2, 3));
                for i in [0, 2, 4] {
                    let port = cluster.servers[i].port();
                    assert!(
                        failures.contains(&format!("node {i} (127.0.0.1:{port}")),
                        "{failures}"
                    );
                }
                for i in [1, 3] {
                    assert!(!failures.contains(&format!("node {i} ")), "{failures}");
                }
            }
            other => panic!("expected NoQuorum, got {other:?}"),
        }
        assert_eq!(
            held_on(&cluster, "q:few").await,
            vec![None, Some(false), None, Some(false), None],
            "the grants of the failed attempt were given back"
        );
    }
    for client in &cluster.clients {
        assert_eq!(client.renewed_locks(), 0);
    }
}

#[tokio::test]
async fn validity_spent_while_acquiring_is_not_a_hold() {
    let cluster = five(|c| c).await;
    // Three nodes hold every write for longer than the lease: their grants
    // arrive after the lock would already have expired.
    let lease = Duration::from_millis(1500);
    for server in &cluster.servers[..3] {
        let mut raw = server.raw().await;
        tests::pause_writes(&mut raw, 2000).await;
    }
    let attempt = QuorumLock::new("q:slow", &cluster.clients)
        .lease(lease)
        .node_timeout(WITHIN)
        .wait(Duration::ZERO)
        .acquire()
        .await;
    match attempt {
        Err(LockError::NoQuorum {
            acquired, failures, ..
        }) => {
            assert_eq!(acquired, 5, "every node granted, too late");
            assert!(failures.contains("ran out"), "{failures}");
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    assert_eq!(
        held_on(&cluster, "q:slow").await,
        vec![Some(false); 5],
        "given back everywhere"
    );
}

#[tokio::test]
async fn the_watchdog_keeps_the_quorum_until_a_majority_is_gone() {
    // Renewed every third of a second: slack for servers restarting on a
    // loaded machine (a 300 ms lease lost its holds when a renewal ran
    // 200 ms late).
    let short = |c: lock_runtime::Config| c.watchdog_timeout(Duration::from_secs(1));
    let mut cluster = five(short).await;
    let guard = QuorumLock::new("q:renewed", &cluster.clients)
        .node_timeout(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();

    // Renewed: the lease runs down, then comes back up. (Not "above the
    // first TTL read": read in the millisecond the lock was taken, that is
    // the whole lease, which a renewal only restores.)
    let raw = cluster.servers[4].raw().await;
    let lowest = Arc::new(AtomicI64::new(i64::MAX));
    eventually("a renewal after the lease ran down", WITHIN, || {
        let (mut raw, lowest) = (raw.clone(), lowest.clone());
        async move {
            let ttl: i64 = raw.pttl("q:renewed").await.unwrap();
            let renewed = ttl > lowest.load(Ordering::Relaxed);
            lowest.fetch_min(ttl, Ordering::Relaxed);
            renewed
        }
    })
    .await;

    // Two nodes lose their data: the guard still has a majority.
    for i in [0, 1] {
        cluster.servers[i].restart();
    }
    for i in [0, 1] {
        let client = cluster.clients[i].clone();
        eventually("the watchdog drops the lost hold", WITHIN, || {
            let client = client.clone();
            async move { client.renewed_locks() == 0 }
        })
        .await;
    }
    assert!(!guard.is_lost(), "three of five holds remain");

    // A third: no majority any more.
    cluster.servers[2].restart();
    tokio::time::timeout(WITHIN, guard.lost())
        .await
        .expect("lost() resolves");
    assert!(guard.is_lost());
    match guard.release().await {
        Err(LockError::Lost { name }) => assert_eq!(name, "q:renewed"),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(held_on(&cluster, "q:renewed").await, vec![Some(false); 5]);
}

#[tokio::test]
async fn tokens_increase_even_when_node_counters_diverge() {
    let mut cluster = five(|c| c).await;
    // Node 4's counter is far ahead of the others.
    let mut raw = cluster.servers[4].raw().await;
    let _: i64 = raw
        .incr("redisson_lock_token:{q:token}", 100)
        .await
        .unwrap();

    let lock = QuorumLock::new("q:token", &cluster.clients).node_timeout(Duration::from_secs(2));
    let guard = lock.clone().acquire().await.unwrap();
    let first = guard.token();
    assert!(first > 100, "the largest node token: {first}");
    guard.release().await.unwrap();

    // Without node 4, the next majority still counts past the first token.
    cluster.servers[4].stop();
    let guard = lock.acquire().await.unwrap();
    assert!(guard.token() > first, "{} after {first}", guard.token());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn bad_node_sets_are_config_errors() {
    let server = Server::start();
    let a = server.client().await;
    let b = server.client().await;
    let none: [LockClient; 0] = [];
    assert!(matches!(
        QuorumLock::new("q", &none).acquire().await,
        Err(LockError::Config(_))
    ));
    assert!(matches!(
        QuorumLock::new("q", &[a.clone(), a.clone()])
            .acquire()
            .await,
        Err(LockError::Config(_))
    ));
    assert!(matches!(
        QuorumLock::new("q", &[a, b]).acquire().await,
        Err(LockError::Config(_))
    ));
}

#[tokio::test]
async fn mutual_exclusion_under_load() {
    let cluster = five(|c| c).await;
    let counter = Server::start();
    let mut workers = Vec::new();
    for _ in 0..3 {
        // Each worker is a process of its own: its own five clients.
        let mut clients = Vec::new();
        for server in &cluster.servers {
            clients.push(server.client().await);
        }
        let mut raw = counter.raw().await;
        workers.push(tokio::spawn(async move {
            for _ in 0..10 {
                let guard = QuorumLock::new("q:hot", &clients)
                    .wait(WITHIN)
                    .acquire()
                    .await?;
                let value: Option<i64> = raw.get("counter").await.unwrap();
                tokio::task::yield_now().await;
                let _: () = raw.set("counter", value.unwrap_or(0) + 1).await.unwrap();
                guard.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(60), worker)
            .await
            .expect("workers finish")
            .unwrap()
            .unwrap();
    }
    let mut raw = counter.raw().await;
    let total: i64 = raw.get("counter").await.unwrap();
    assert_eq!(total, 30, "no increment lost: one quorum holder at a time");
}
