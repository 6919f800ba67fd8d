//! The fair lock against a real redis-server: Redisson's layout, strict FIFO
//! across tasks and clients, many waiters, and waiters that give up, are
//! cancelled or die without blocking those behind them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockClient, LockError};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use tests::{Server, count_under_lock, eventually, numsub, until_unsubscribed};

const WITHIN: Duration = Duration::from_secs(20);

fn queue(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

fn timeouts(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

async fn queued(raw: &mut MultiplexedConnection, name: &str) -> Vec<String> {
    raw.lrange(queue(name), 0, -1).await.expect("LRANGE")
}

async fn deadlines(raw: &mut MultiplexedConnection, name: &str) -> Vec<(String, f64)> {
    raw.zrange_withscores(timeouts(name), 0, -1)
        .await
        .expect("ZRANGE")
}

/// The server's clock in epoch ms (deadlines are scored by it).
async fn server_ms(raw: &mut MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(raw).await.expect("TIME");
    secs * 1000 + micros / 1000
}

/// Whether `id` is a holder id of `client`: `<client id>:<n>`.
fn is_holder_of(client: &LockClient, id: &str) -> bool {
    id.strip_prefix(client.id())
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|n| n.parse::<u64>().is_ok())
}

/// Waits until the queue holds exactly `n` waiters.
async fn until_queued(raw: &MultiplexedConnection, name: &str, n: usize) {
    eventually(&format!("{n} waiters queued on {name}"), WITHIN, || {
        let mut raw = raw.clone();
        let name = name.to_owned();
        async move { queued(&mut raw, &name).await.len() == n }
    })
    .await;
}

/// No waiter is left in the queue or the deadlines, now.
async fn assert_queue_empty(raw: &MultiplexedConnection, name: &str) {
    let mut raw = raw.clone();
    assert_eq!(queued(&mut raw, name).await, Vec::<String>::new());
    assert_eq!(deadlines(&mut raw, name).await, vec![]);
}

/// Waits until no waiter is left in the queue or the deadlines.
async fn until_queue_empty(raw: &MultiplexedConnection, name: &str) {
    eventually(
        &format!("the queue and deadlines of {name} are empty"),
        WITHIN,
        || {
            let mut raw = raw.clone();
            let name = name.to_owned();
            async move {
                let list: bool = raw.exists(queue(&name)).await.unwrap();
                let zset: bool = raw.exists(timeouts(&name)).await.unwrap();
                !list && !zset
            }
        },
    )
    .await;
}

/// A waiter task: acquires `name`, appends `id` to `order`, releases.
fn waiter(
    client: &LockClient,
    name: &str,
    id: usize,
    order: &Arc<Mutex<Vec<usize>>>,
) -> tokio::task::JoinHandle<Result<(), LockError>> {
    let client = client.clone();
    let name = name.to_owned();
    let order = order.clone();
    tokio::spawn(async move {
        let guard = client.fair_lock(name).wait(WITHIN).acquire().await?;
        order.lock().unwrap().push(id);
        guard.release().await
    })
}

#[tokio::test]
async fn layout_is_redissons() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;

    let guard = client.fair_lock("report").acquire().await.unwrap();
    let fields: Vec<(String, i64)> = raw.hgetall("report").await.unwrap();
    assert_eq!(fields, vec![(guard.holder_id().to_owned(), 1)]);
    let pttl: i64 = raw.pttl("report").await.unwrap();
    assert!(pttl > 0 && pttl <= 30_000, "watchdog lease: {pttl}");
    let token: u64 = raw.get("redisson_lock_token:{report}").await.unwrap();
    assert_eq!(token, guard.token());

    // A waiter: its holder id in the queue, its deadline in the ZSET (epoch
    // ms, one wait time past the lease), listening on its own channel.
    let waiting = {
        let other = other.clone();
        tokio::spawn(async move {
            let guard = other.fair_lock("report").wait(WITHIN).acquire().await?;
            let id = guard.holder_id().to_owned();
            guard.release().await.map(|()| id)
        })
    };
    // A waiter's holder id is known once it has joined the queue.
    until_queued(&raw, "report", 1).await;
    let waiter_id = queued(&mut raw, "report").await.remove(0);
    assert!(
        is_holder_of(&other, &waiter_id),
        "the queued waiter is the other client's: {waiter_id}"
    );
    let now = server_ms(&mut raw).await as f64;
    let scores = deadlines(&mut raw, "report").await;
    assert_eq!(scores.len(), 1);
    assert_eq!(scores[0].0, waiter_id);
    assert!(
        scores[0].1 > now + 290_000.0 && scores[0].1 <= now + 330_000.0,
        "deadline = lease end + 300000 ms: {} vs now {now}",
        scores[0].1
    );
    let channel = format!("redisson_lock__channel:{{report}}:{waiter_id}");
    eventually("the waiter listens on its own channel", WITHIN, || {
        let mut raw = raw.clone();
        let channel = channel.clone();
        async move { numsub(&mut raw, &channel).await == 1 }
    })
    .await;

    guard.release().await.unwrap();
    assert_eq!(
        waiting.await.unwrap().unwrap(),
        waiter_id,
        "the waiter acquired as the holder it queued as"
    );
    until_queue_empty(&raw, "report").await;
    assert!(!raw.exists::<_, bool>("report").await.unwrap());
    until_unsubscribed(&raw, &channel).await;
}

#[tokio::test]
async fn reentrant_with_increasing_tokens() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;

    let outer = client.fair_lock("re").acquire().await.unwrap();
    // Outside the outer guard's scope, the same task is another holder.
    assert!(
        client
            .fair_lock("re")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    until_queue_empty(&raw, "re").await;
    let inner = outer
        .scope(client.fair_lock("re").try_acquire())
        .await
        .unwrap()
        .expect("re-entry in the outer guard's scope");
    assert!(inner.token() > outer.token());
    assert_eq!(inner.holder_id(), outer.holder_id());
    let count: i64 = raw.hget("re", outer.holder_id()).await.unwrap();
    assert_eq!(count, 2);
    inner.release().await.unwrap();
    outer.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("re").await.unwrap());
    assert_eq!(client.renewed_locks(), 0);
}

#[tokio::test]
async fn waiters_acquire_in_arrival_order_across_clients() {
    let server = Server::start();
    let clients = [
        server.client().await,
        server.client().await,
        server.client().await,
    ];
    let raw = server.raw().await;
    let order = Arc::new(Mutex::new(Vec::new()));

    let holder = clients[0].fair_lock("fifo").acquire().await.unwrap();
    let mut waiters = Vec::new();
    for id in 0..8 {
        // Tasks of one client and of different clients, interleaved; each
        // arrives (is in the queue) before the next starts.
        waiters.push(waiter(&clients[id % 3], "fifo", id, &order));
        until_queued(&raw, "fifo", id + 1).await;
    }
    holder.release().await.unwrap();
    for w in waiters {
        w.await.unwrap().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
    until_queue_empty(&raw, "fifo").await;
}

#[tokio::test]
async fn two_hundred_waiters_all_acquire_exclusively() {
    let server = Server::start();
    let clients = [server.client().await, server.client().await];
    let mut raw = server.raw().await;
    let _: () = raw.set("fair-counter", 0).await.unwrap();

    let mut tasks = Vec::new();
    for i in 0..200 {
        let client = clients[i % 2].clone();
        let mut conn = raw.clone();
        tasks.push(tokio::spawn(async move {
            let guard = client
                .fair_lock("crowd")
                .wait(Duration::from_secs(60))
                .acquire()
                .await?;
            let n: i64 = conn.get("fair-counter").await.unwrap();
            tokio::task::yield_now().await;
            let _: () = conn.set("fair-counter", n + 1).await.unwrap();
            guard.release().await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let n: i64 = raw.get("fair-counter").await.unwrap();
    assert_eq!(n, 200, "every waiter got the lock, one at a time");
    until_queue_empty(&raw, "crowd").await;
    assert!(!raw.exists::<_, bool>("crowd").await.unwrap());
}

#[tokio::test]
async fn read_modify_write_is_exclusive_across_clients_and_tasks() {
    let server = Server::start();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(server.client().await);
    }
    let n = count_under_lock(&server, &clients, "counter", (8, 8), |client| async move {
        client.fair_lock("counter-lock").acquire().await
    })
    .await;
    assert_eq!(n, 3 * 8 * 8, "no increment was lost");
    let raw = server.raw().await;
    until_queue_empty(&raw, "counter-lock").await;
}

#[tokio::test]
async fn cancelled_waiters_do_not_block_those_behind() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let raw = server.raw().await;
    let order = Arc::new(Mutex::new(Vec::new()));

    let holder = client.fair_lock("cancel").acquire().await.unwrap();
    let first = waiter(&other, "cancel", 1, &order);
    until_queued(&raw, "cancel", 1).await;
    // Cancelled by aborting its task.
    let aborted = waiter(&client, "cancel", 99, &order);
    until_queued(&raw, "cancel", 2).await;
    // Cancelled by dropping its acquire future.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let dropped = {
        let other = other.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = other.fair_lock("cancel").acquire() => panic!("must not acquire"),
                _ = stopped => {}
            }
        })
    };
    until_queued(&raw, "cancel", 3).await;
    let last = waiter(&client, "cancel", 2, &order);
    until_queued(&raw, "cancel", 4).await;

    aborted.abort();
    assert!(aborted.await.unwrap_err().is_cancelled());
    stop.send(()).unwrap();
    dropped.await.unwrap();
    until_queued(&raw, "cancel", 2).await;

    holder.release().await.unwrap();
    first.await.unwrap().unwrap();
    last.await.unwrap().unwrap();
    assert_eq!(*order.lock().unwrap(), vec![1, 2]);
    until_queue_empty(&raw, "cancel").await;
}

#[tokio::test]
async fn a_waiter_whose_wait_ends_leaves_the_queue() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let raw = server.raw().await;

    let holder = client.fair_lock("impatient").acquire().await.unwrap();
    // One attempt: queued by the failed attempt, and out again before the
    // try returns, so the next caller finds no one ahead of it.
    assert!(
        other
            .fair_lock("impatient")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    assert_queue_empty(&raw, "impatient").await;
    // A wait that ends.
    let timed_out = other
        .fair_lock("impatient")
        .wait(Duration::from_millis(200))
        .acquire()
        .await;
    assert!(
        matches!(timed_out, Err(LockError::Timeout { .. })),
        "{timed_out:?}"
    );
    assert_queue_empty(&raw, "impatient").await;
    holder.release().await.unwrap();
    let third = server.client().await;
    assert!(
        third
            .fair_lock("impatient")
            .try_acquire()
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_leaving_waiter_moves_those_behind_up() {
    let server = Server::start();
    let client = server.client().await;
    let other = server.client().await;
    let mut raw = server.raw().await;
    let order = Arc::new(Mutex::new(Vec::new()));

    let holder = client.fair_lock("leave").acquire().await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let leaving = {
        let other = other.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = other.fair_lock("leave").acquire() => panic!("must not acquire"),
                _ = stopped => {}
            }
        })
    };
    until_queued(&raw, "leave", 1).await;
    let leaving_id = queued(&mut raw, "leave").await[0].clone();
    let behind = waiter(&client, "leave", 1, &order);
    until_queued(&raw, "leave", 2).await;
    let behind_id = queued(&mut raw, "leave").await[1].clone();
    let score =
        |scores: &[(String, f64)], id: &str| scores.iter().find(|(w, _)| w == id).map(|(_, s)| *s);
    let before = deadlines(&mut raw, "leave").await;
    assert!(
        score(&before, &behind_id).unwrap() > score(&before, &leaving_id).unwrap(),
        "deadlines follow the queue: {before:?}"
    );

    stop.send(()).unwrap();
    leaving.await.unwrap();
    until_queued(&raw, "leave", 1).await;
    let after = deadlines(&mut raw, "leave").await;
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(
        score(&after, &behind_id).unwrap() < score(&before, &behind_id).unwrap(),
        "the one behind moved up: {before:?} -> {after:?}"
    );

    holder.release().await.unwrap();
    behind.await.unwrap().unwrap();
    until_queue_empty(&raw, "leave").await;
}

#[tokio::test]
async fn a_dead_waiter_is_evicted_and_does_not_block_those_behind() {
    let server = Server::start();
    // A short wait time and lease, so the dead waiter's deadline (lease end
    // plus wait time, as for any waiter) comes soon.
    let tune = |c: lock_runtime::Config| {
        c.fair_wait_timeout(Duration::from_secs(3))
            .watchdog_timeout(Duration::from_secs(1))
    };
    let client = server.client_with(tune).await;
    let other = server.client_with(tune).await;
    let mut raw = server.raw().await;
    let order = Arc::new(Mutex::new(Vec::new()));

    let holder = client.fair_lock("dead").acquire().await.unwrap();
    // A waiter of a process that died: queued as any waiter would be (one
    // wait time past the lease), and never coming back.
    let dead = "0d0d0d0d-dead-client:7";
    let now = server_ms(&mut raw).await;
    let pttl: u64 = raw.pttl("dead").await.unwrap();
    let _: () = raw
        .zadd(timeouts("dead"), dead, now + pttl + 3000)
        .await
        .unwrap();
    let _: () = raw.rpush(queue("dead"), dead).await.unwrap();

    let first = waiter(&other, "dead", 1, &order);
    until_queued(&raw, "dead", 2).await;
    let second = waiter(&client, "dead", 2, &order);
    until_queued(&raw, "dead", 3).await;
    assert_eq!(queued(&mut raw, "dead").await[0], dead);

    // The release wakes the dead head, which never answers; after its
    // deadline it is evicted and those behind go in order.
    holder.release().await.unwrap();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(*order.lock().unwrap(), vec![1, 2]);
    until_queue_empty(&raw, "dead").await;
    assert!(!raw.exists::<_, bool>("dead").await.unwrap());
}

#[tokio::test]
async fn a_head_past_its_deadline_is_evicted_by_the_next_attempt() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;

    let holder = client.fair_lock("stale").acquire().await.unwrap();
    // A dead waiter whose deadline is already over.
    let dead = "0d0d0d0d-dead-client:8";
    let now = server_ms(&mut raw).await;
    let _: () = raw.zadd(timeouts("stale"), dead, now - 1).await.unwrap();
    let _: () = raw.rpush(queue("stale"), dead).await.unwrap();

    let next = {
        let client = client.clone();
        tokio::spawn(async move {
            let guard = client.fair_lock("stale").wait(WITHIN).acquire().await?;
            let id = guard.holder_id().to_owned();
            guard.release().await.map(|()| id)
        })
    };
    // The live waiter's holder id is learnt from the queue: a holder id of
    // this client other than the holder's.
    let live = |id: &str| is_holder_of(&client, id) && id != holder.holder_id();
    eventually("the live waiter replaced the dead head", WITHIN, || {
        let mut raw = raw.clone();
        async move {
            let ids = queued(&mut raw, "stale").await;
            ids.len() == 1 && live(&ids[0])
        }
    })
    .await;
    let next_id = queued(&mut raw, "stale").await.remove(0);
    let scores = deadlines(&mut raw, "stale").await;
    assert_eq!(
        scores.len(),
        1,
        "the dead waiter's deadline is gone too: {scores:?}"
    );
    holder.release().await.unwrap();
    assert_eq!(next.await.unwrap().unwrap(), next_id);
    until_queue_empty(&raw, "stale").await;
}

/// Redisson's `testLeaseTimeout`: eight waiters queue in order on a fair
/// lock whose holders each take a 1 s lease and never unlock (a crashed
/// holder, a fixed lease). Nothing is published: the queue must advance at
/// every lease end, in arrival order. Old scripts told a waiter that was not
/// first, and retried while the lock was briefly free, to sleep until the
/// head's eviction deadline (minutes), and nothing woke it when its turn came
/// by another expiry: the last waiters ran out of their wait.
#[tokio::test]
async fn the_queue_advances_at_every_lease_end_in_arrival_order() {
    let server = Server::start();
    let client = server.client().await;
    let raw = server.raw().await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let lease = Duration::from_secs(1);
    // Never released: its lease ends it, long enough for all eight to queue.
    let first = client.fair_lock("lapse").lease(Duration::from_secs(5));
    std::mem::forget(first.acquire().await.unwrap());
    let mut waiters = Vec::new();
    for id in 0..8 {
        let (client, order) = (client.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = client
                .fair_lock("lapse")
                .lease(lease)
                .wait(Duration::from_secs(30))
                .acquire()
                .await?;
            order.lock().unwrap().push(id);
            // A holder that never unlocks.
            std::mem::forget(guard);
            Ok::<_, LockError>(())
        }));
        until_queued(&raw, "lapse", id + 1).await;
    }
    for (id, w) in waiters.into_iter().enumerate() {
        w.await
            .unwrap()
            .unwrap_or_else(|e| panic!("waiter {id} did not get its turn: {e:?}"));
    }
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
}
