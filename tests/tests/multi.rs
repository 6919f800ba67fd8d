//! The multi lock against real redis-servers: all or none, no deadlock in
//! any order, nothing held while waiting or after a failure, locks on
//! several servers, mutual exclusion under load.

use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{LockClient, LockError, MultiLock};
use redis::AsyncCommands;
use tests::{Server, eventually, numsub, until_unsubscribed};

/// Bounds waits for events (generous: no speed is asserted).
const WITHIN: Duration = Duration::from_secs(20);

async fn exists(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> bool {
    conn.exists(key).await.expect("EXISTS")
}

/// The fields of the lock hash `key` that are holder ids of `client`
/// (`<client id>:<n>`), with their counts.
async fn holders_of(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    client: &LockClient,
) -> Vec<(String, i64)> {
    let fields: Vec<(String, i64)> = conn.hgetall(key).await.expect("HGETALL");
    let prefix = format!("{}:", client.id());
    fields
        .into_iter()
        .filter(|(field, _)| field.starts_with(&prefix))
        .collect()
}

#[tokio::test]
async fn all_locks_are_taken_and_one_guard_releases_them() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    // Given out of order and with a repeat: taken once each, in name order.
    let guard = client
        .multi_lock(["m:b", "m:a", "m:c", "m:a"])
        .acquire()
        .await
        .unwrap();
    assert_eq!(guard.name(), "m:a+m:b+m:c");
    for key in ["m:a", "m:b", "m:c"] {
        let count: Option<i64> = raw.hget(key, guard.holder_id()).await.unwrap();
        assert_eq!(count, Some(1), "{key} held once by the caller");
        let fields: Vec<String> = raw.hkeys(key).await.unwrap();
        assert_eq!(fields.len(), 1, "{key}: one holder id for the whole group");
        let token: u64 = raw
            .get(format!("redisson_lock_token:{{{key}}}"))
            .await
            .unwrap();
        assert!(token <= guard.token(), "the group token is the largest");
    }
    assert_eq!(client.renewed_locks(), 3, "the watchdog renews each lock");
    assert!(other.lock("m:b").try_acquire().await.unwrap().is_none());

    guard.release().await.unwrap();
    for key in ["m:a", "m:b", "m:c"] {
        assert!(!exists(&mut raw, key).await, "{key} released");
    }
    assert_eq!(client.renewed_locks(), 0);
}

#[tokio::test]
async fn group_tokens_increase_from_one_acquisition_to_the_next() {
    let server = Server::start();
    let client = server.client().await;
    let mut last = 0;
    for round in 0..5 {
        // Other traffic on one of the names moves its counter ahead.
        for _ in 0..round {
            tests::take_and_release(client.lock("t:b")).await;
        }
        let guard = client.multi_lock(["t:a", "t:b"]).acquire().await.unwrap();
        assert!(guard.token() > last, "{} after {last}", guard.token());
        last = guard.token();
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn opposite_orders_never_deadlock() {
    let server = Server::start();
    let one = server.client().await;
    let two = server.client().await;
    let run = |client: LockClient, names: [&'static str; 3]| {
        tokio::spawn(async move {
            for _ in 0..50 {
                let guard = client.multi_lock(names).acquire().await?;
                tokio::task::yield_now().await;
                guard.release().await?;
            }
            Ok::<_, LockError>(())
        })
    };
    let forward = run(one, ["d:a", "d:b", "d:c"]);
    let backward = run(two, ["d:c", "d:b", "d:a"]);
    let both = async { (forward.await.unwrap(), backward.await.unwrap()) };
    let (f, b) = tokio::time::timeout(Duration::from_secs(40), both)
        .await
        .expect("both callers finish: no deadlock");
    f.unwrap();
    b.unwrap();
}

#[tokio::test]
async fn of_ten_concurrent_try_attempts_exactly_one_wins() {
    let server = Server::start();
    let mut clients = Vec::new();
    for _ in 0..10 {
        clients.push(server.client().await);
    }
    let start = Arc::new(tokio::sync::Barrier::new(10));
    let orders = [
        ["x:1", "x:2", "x:3"],
        ["x:3", "x:2", "x:1"],
        ["x:2", "x:3", "x:1"],
    ];
    let attempts: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, client)| {
            let client = client.clone();
            let start = start.clone();
            let names = orders[i % orders.len()];
            tokio::spawn(async move {
                start.wait().await;
                client.multi_lock(names).try_acquire().await
            })
        })
        .collect();
    // Winners keep their guards until every attempt is over.
    let mut guards = Vec::new();
    for attempt in attempts {
        guards.push(attempt.await.unwrap().unwrap());
    }
    let winners: Vec<_> = guards.into_iter().flatten().collect();
    assert_eq!(winners.len(), 1, "exactly one all-or-none attempt wins");

    let mut raw = server.raw().await;
    let winner = winners.into_iter().next().unwrap();
    for key in ["x:1", "x:2", "x:3"] {
        let fields: Vec<String> = raw.hkeys(key).await.unwrap();
        assert_eq!(fields.len(), 1, "{key} has one holder: the winner");
    }
    winner.release().await.unwrap();
}

#[tokio::test]
async fn a_failed_attempt_releases_what_it_took() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    for busy in ["p:b", "p:c"] {
        let blocker = other.lock(busy).acquire().await.unwrap();
        match client
            .multi_lock(["p:a", "p:b", "p:c"])
            .wait(Duration::ZERO)
            .acquire()
            .await
        {
            Err(LockError::Timeout { name, waited }) => {
                assert_eq!(name, busy, "the error names the busy lock");
                assert_eq!(waited, Duration::ZERO);
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        for key in ["p:a", "p:b", "p:c"] {
            assert!(
                holders_of(&mut raw, key, &client).await.is_empty(),
                "{key} is not held by the failed caller"
            );
        }
        assert!(
            exists(&mut raw, busy).await,
            "the other holder's lock is untouched"
        );
        assert!(!exists(&mut raw, "p:a").await);
        assert_eq!(client.renewed_locks(), 0, "nothing left for the watchdog");
        assert!(
            client
                .multi_lock(["p:a", "p:b", "p:c"])
                .try_acquire()
                .await
                .unwrap()
                .is_none()
        );
        blocker.release().await.unwrap();
    }
    let all = client
        .multi_lock(["p:a", "p:b", "p:c"])
        .try_acquire()
        .await
        .unwrap();
    assert!(all.is_some(), "free once the blocker is gone");
}

#[tokio::test]
async fn a_waiting_caller_holds_nothing_and_gets_all_when_free() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    let blocker = other.lock("w:b").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .multi_lock(["w:a", "w:b", "w:c"])
                .wait(WITHIN)
                .acquire()
                .await
        }
    });
    // The waiter listens on the busy lock's channel...
    eventually("the multi lock waits on w:b", WITHIN, || {
        let mut raw = raw.clone();
        async move { numsub(&mut raw, "redisson_lock__channel:{w:b}").await == 1 }
    })
    .await;
    // ...while holding none of the others.
    assert!(!exists(&mut raw, "w:a").await);
    assert!(!exists(&mut raw, "w:c").await);

    blocker.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    for key in ["w:a", "w:b", "w:c"] {
        assert!(exists(&mut raw, key).await, "{key} held after the wait");
    }
    guard.release().await.unwrap();
}

#[tokio::test]
async fn waiting_runs_out_with_a_timeout_and_leaves_nothing() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    let _blocker = other.lock("o:c").acquire().await.unwrap();
    let wait = Duration::from_millis(200);
    match client.multi_lock(["o:a", "o:c"]).wait(wait).acquire().await {
        Err(LockError::Timeout { name, waited }) => {
            assert_eq!(name, "o:c");
            assert_eq!(waited, wait);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(!exists(&mut raw, "o:a").await);
    until_unsubscribed(&raw, "redisson_lock__channel:{o:c}").await;
}

#[tokio::test]
async fn a_cancelled_acquire_leaves_nothing_behind() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    let blocker = other.lock("c:b").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let client = client.clone();
        async move { client.multi_lock(["c:a", "c:b"]).acquire().await }
    });
    eventually("the multi lock waits on c:b", WITHIN, || {
        let mut raw = raw.clone();
        async move { numsub(&mut raw, "redisson_lock__channel:{c:b}").await == 1 }
    })
    .await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    blocker.release().await.unwrap();
    eventually("no subscription left", WITHIN, || {
        let mut raw = raw.clone();
        async move { numsub(&mut raw, "redisson_lock__channel:{c:b}").await == 0 }
    })
    .await;
    for key in ["c:a", "c:b"] {
        assert!(!exists(&mut raw, key).await, "{key} free");
    }
    assert_eq!(client.renewed_locks(), 0);
}

#[tokio::test]
async fn locks_on_two_servers() {
    let east = Server::start();
    let west = Server::start();
    let (e1, w1) = (east.client().await, west.client().await);
    let (e2, w2) = (east.client().await, west.client().await);
    let mut raw_east = east.raw().await;
    let mut raw_west = west.raw().await;

    let guard = MultiLock::new()
        .with(&e1, "acct:1")
        .with_lock(w1.lock("acct:2"))
        .acquire()
        .await
        .unwrap();
    let counts = |holds: Vec<(String, i64)>| holds.into_iter().map(|(_, n)| n).collect::<Vec<_>>();
    let on_east = counts(holders_of(&mut raw_east, "acct:1", &e1).await);
    let on_west = counts(holders_of(&mut raw_west, "acct:2", &w1).await);
    assert_eq!(
        (on_east, on_west),
        (vec![1], vec![1]),
        "each lock on its own server, held once by its client"
    );
    assert!(!exists(&mut raw_east, "acct:2").await && !exists(&mut raw_west, "acct:1").await);

    // The same set through other clients, and either lock alone, are excluded.
    let again = MultiLock::new()
        .with(&w2, "acct:2")
        .with(&e2, "acct:1")
        .try_acquire()
        .await
        .unwrap();
    assert!(again.is_none());
    assert!(w2.lock("acct:2").try_acquire().await.unwrap().is_none());

    guard.release().await.unwrap();
    assert!(!exists(&mut raw_east, "acct:1").await && !exists(&mut raw_west, "acct:2").await);
    let again = MultiLock::new()
        .with(&w2, "acct:2")
        .with(&e2, "acct:1")
        .try_acquire()
        .await
        .unwrap();
    assert!(again.is_some(), "free after release");
}

#[tokio::test]
async fn bad_sets_are_typed_errors() {
    let server = Server::start();
    let client = server.client().await;
    let empty: [&str; 0] = [];
    assert!(matches!(
        client.multi_lock(empty).acquire().await,
        Err(LockError::Config(_))
    ));
    assert!(matches!(
        client.multi_lock(["ok", ""]).acquire().await,
        Err(LockError::BadName { .. })
    ));
    let mut raw = server.raw().await;
    assert!(
        !exists(&mut raw, "ok").await,
        "nothing held after a bad name"
    );
    let _: () = raw.set("str", "not a lock").await.unwrap();
    assert!(matches!(
        client.multi_lock(["a", "str"]).acquire().await,
        Err(LockError::WrongType { .. })
    ));
    assert!(
        !exists(&mut raw, "a").await,
        "nothing held after a wrong-type key"
    );
}

#[tokio::test]
async fn mutual_exclusion_under_load() {
    let east = Server::start();
    let west = Server::start();
    let mut workers = Vec::new();
    for w in 0..4 {
        let e = east.client().await;
        let wc = west.client().await;
        let mut raw = east.raw().await;
        workers.push(tokio::spawn(async move {
            for _ in 0..20 {
                // Different orders and a superset: every set contains both
                // `hot:a` (east) and `hot:b` (west).
                let multi = match w % 3 {
                    0 => MultiLock::new().with(&e, "hot:a").with(&wc, "hot:b"),
                    1 => MultiLock::new().with(&wc, "hot:b").with(&e, "hot:a"),
                    _ => MultiLock::new()
                        .with(&wc, "hot:c")
                        .with(&wc, "hot:b")
                        .with(&e, "hot:a"),
                };
                let guard = multi.wait(WITHIN).acquire().await?;
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
    let mut raw = east.raw().await;
    let total: i64 = raw.get("counter").await.unwrap();
    assert_eq!(total, 80, "no increment lost: the sets excluded each other");
}

/// Moves one unit from `from` to `to` under the locks of both accounts.
#[lock_runtime::distributed_lock(keys = ["acct:<from>", "acct:<to>"], wait = "20s")]
async fn transfer(
    from: u32,
    to: u32,
    mut raw: redis::aio::MultiplexedConnection,
) -> Result<(), LockError> {
    for account in [from, to] {
        assert!(
            exists(&mut raw, &format!("acct:{account}")).await,
            "both locks held in the body"
        );
    }
    let a: i64 = raw.get(format!("balance:{from}")).await.unwrap();
    let b: i64 = raw.get(format!("balance:{to}")).await.unwrap();
    tokio::task::yield_now().await;
    let _: () = raw.set(format!("balance:{from}"), a - 1).await.unwrap();
    let _: () = raw.set(format!("balance:{to}"), b + 1).await.unwrap();
    Ok(())
}

#[tokio::test]
async fn the_attribute_with_several_keys_is_a_multi_lock() {
    let server = Server::start();
    lock_runtime::init(lock_runtime::Config::new(server.url()))
        .await
        .unwrap();
    let mut raw = server.raw().await;
    let _: () = raw.set("balance:1", 100).await.unwrap();
    let _: () = raw.set("balance:2", 100).await.unwrap();

    let run = |from: u32, to: u32, raw: redis::aio::MultiplexedConnection| {
        tokio::spawn(async move {
            for _ in 0..20 {
                transfer(from, to, raw.clone()).await?;
            }
            Ok::<_, LockError>(())
        })
    };
    let there = run(1, 2, raw.clone());
    let back = run(2, 1, raw.clone());
    tokio::time::timeout(Duration::from_secs(60), async {
        there.await.unwrap().unwrap();
        back.await.unwrap().unwrap();
    })
    .await
    .expect("opposite transfers finish");
    let balances: (i64, i64) = (
        raw.get("balance:1").await.unwrap(),
        raw.get("balance:2").await.unwrap(),
    );
    assert_eq!(balances, (100, 100), "no update lost in either direction");
    assert!(!exists(&mut raw, "acct:1").await && !exists(&mut raw, "acct:2").await);
}

#[tokio::test]
async fn locks_of_other_kinds_join_a_multi_lock() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    let mixed = || {
        MultiLock::new()
            .with_lock(client.fair_lock("k:fair"))
            .with_lock(client.read_write_lock("k:doc").write())
            .with(&client, "k:plain")
    };
    let guard = mixed().acquire().await.unwrap();
    let mode: String = raw.hget("k:doc", "mode").await.unwrap();
    assert_eq!(mode, "write");
    assert!(
        other
            .fair_lock("k:fair")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        other
            .read_write_lock("k:doc")
            .read()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    guard.release().await.unwrap();

    // A reader elsewhere keeps the write side, and so the whole set, from being taken.
    let reader = other
        .read_write_lock("k:doc")
        .read()
        .acquire()
        .await
        .unwrap();
    assert!(mixed().try_acquire().await.unwrap().is_none());
    for key in ["k:fair", "k:plain"] {
        assert!(!exists(&mut raw, key).await, "{key} given back");
    }
    reader.release().await.unwrap();
    assert!(mixed().try_acquire().await.unwrap().is_some());

    // One name with two kinds is refused.
    let clash = MultiLock::new()
        .with(&client, "k:x")
        .with_lock(client.fair_lock("k:x"));
    assert!(matches!(clash.acquire().await, Err(LockError::Config(_))));
}
