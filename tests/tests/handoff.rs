//! Local handoff: a task that releases a reentrant lock hands it, in the same
//! script, to a sleeping waiter of its own client. Exclusion and fencing
//! hold through handovers, a waiter that goes away mid-handover leaves
//! nothing behind, and other clients still get their turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use tests::{Server, count_under_lock, eventually, until_unsubscribed};

const WITHIN: Duration = Duration::from_secs(20);

/// `calls` of `command` in the server's `INFO commandstats`.
async fn calls(raw: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(raw)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// One critical section on lock `name`: acquire, yield, release.
async fn section(client: &lock_runtime::LockClient, name: &str) {
    let guard = client.lock(name).acquire().await.unwrap();
    tokio::task::yield_now().await;
    guard.release().await.unwrap();
}

/// Tasks of one client taking lock `name` over and over until stopped.
struct Hammers {
    done: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Hammers {
    fn start(client: &lock_runtime::LockClient, name: &'static str, tasks: usize) -> Hammers {
        let done = Arc::new(AtomicBool::new(false));
        let tasks = (0..tasks)
            .map(|_| {
                let (client, done) = (client.clone(), done.clone());
                tokio::spawn(async move {
                    while !done.load(Ordering::Relaxed) {
                        section(&client, name).await;
                    }
                })
            })
            .collect();
        Hammers { done, tasks }
    }

    async fn stop(self) {
        self.done.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_hands_a_hot_lock_over_exclusively_without_announcing_it() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    let before = calls(&mut raw, "publish").await;

    // 8 tasks of one client, 25 sections each, on one name.
    let n = count_under_lock(
        &server,
        std::slice::from_ref(&client),
        "count",
        (8, 25),
        |client| async move { client.lock("hot").acquire().await },
    )
    .await;
    assert_eq!(n, 200, "no increment was lost: every section was exclusive");
    let published = calls(&mut raw, "publish").await - before;
    // Without handovers every one of the 200 releases announces itself.
    assert!(
        published <= 100,
        "most releases handed the lock over instead of announcing it: {published} announcements"
    );
    assert!(!raw.exists::<_, bool>("hot").await.unwrap());
    until_unsubscribed(&raw, "redisson_lock__channel:{hot}").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handed_over_holds_get_rising_fencing_tokens() {
    let server = Server::start();
    let client = server.client().await;
    let mut raw = server.raw().await;
    // Every section records its token in the order the sections ran.
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (client, mut raw) = (client.clone(), raw.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                let guard = client.lock("fenced").acquire().await.unwrap();
                let _: () = raw.rpush("tokens", guard.token()).await.unwrap();
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let tokens: Vec<u64> = raw.lrange("tokens", 0, -1).await.unwrap();
    assert_eq!(tokens.len(), 120);
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "each hold, handed over or taken, has a larger token than the one before"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_go_away_mid_handover_leave_nothing_behind() {
    let server = Server::start();
    let client = server.client().await;
    let raw = server.raw().await;

    // A holder releases while a waiter of the same client, asleep with its
    // offer, is dropped at many different moments around the release.
    for i in 0..120u64 {
        let guard = client.lock("leave").acquire().await.unwrap();
        let waiter = {
            let client = client.clone();
            tokio::spawn(async move { client.lock("leave").acquire().await })
        };
        // Let the waiter try once and go to sleep with its offer.
        tokio::time::sleep(Duration::from_millis(1 + i % 3)).await;
        let release = tokio::spawn(guard.release());
        tokio::time::sleep(Duration::from_micros((i * 53) % 700)).await;
        waiter.abort();
        release.await.unwrap().unwrap();
        if let Ok(Ok(guard)) = waiter.await {
            guard.release().await.unwrap();
        }
        // A hold handed to the waiter that left is given back, not left to
        // its lease (30 s, longer than this wait).
        eventually("no hold remains", WITHIN, || {
            let mut raw = raw.clone();
            async move { !raw.exists::<_, bool>("leave").await.unwrap() }
        })
        .await;
    }
    eventually("nothing is renewed", WITHIN, || {
        let client = client.clone();
        async move { client.renewed_locks() == 0 }
    })
    .await;
    until_unsubscribed(&raw, "redisson_lock__channel:{leave}").await;
    // And the lock still works for everyone.
    let other = server.client().await;
    let guard = other
        .lock("leave")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_clients_get_their_turn_between_streaks() {
    let server = Server::start();
    let busy = server.client().await;
    let other = server.client().await;

    // Four tasks of one client keep the lock busy, handing it over among
    // themselves, until the other client has had it once.
    let hammers = Hammers::start(&busy, "shared", 4);
    let guard = tokio::time::timeout(WITHIN, other.lock("shared").acquire())
        .await
        .expect("the other client waited for ever: handovers must not starve it")
        .unwrap();
    guard.release().await.unwrap();
    hammers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_clients_get_their_turn_from_two_tasks_handing_it_back_and_forth() {
    let server = Server::start();
    let busy = server.client().await;
    let other = server.client().await;

    // Two tasks of one client hand the lock to each other. Each holds it
    // for 5 ms and asks again 1 ms after its release: by then the other
    // one, handed the lock, has left the queue, so each handover is made
    // from a new queue. The streak must still end.
    let done = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let (client, done) = (busy.clone(), done.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    let guard = client.lock("pair").acquire().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    guard.release().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        })
        .collect();
    // Once they are at it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let guard = tokio::time::timeout(WITHIN, other.lock("pair").acquire())
        .await
        .expect("the other client waited for ever: a streak of handovers must end")
        .unwrap();
    guard.release().await.unwrap();
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_client_does_not_starve_another_busy_one() {
    let server = Server::start();
    let busy = server.client().await;
    let other = server.client().await;

    // Four tasks of one client keep the lock busy until four tasks of the
    // other client have had it 10 times each: both clients hand the lock
    // over among their own tasks, and each must still let the other in.
    let hammers = Hammers::start(&busy, "both", 4);
    let mut others = Vec::new();
    for _ in 0..4 {
        let client = other.clone();
        others.push(tokio::spawn(async move {
            for _ in 0..10 {
                section(&client, "both").await;
            }
        }));
    }
    for task in others {
        tokio::time::timeout(WITHIN, task)
            .await
            .expect("the other client starved: the busy one kept the lock")
            .unwrap();
    }
    hammers.stop().await;
}

/// What a handover runs, as the client sends it.
const HANDOFF: &str = lock_runtime::__scripts::HANDOFF;

/// One handover of lock `name` from `from` to `to` under unlock request
/// `request` and acquire latch `latch`, keeping a record of `record` ms.
fn handover<'a>(
    script: &'a redis::Script,
    name: &str,
    (from, to): (&str, &str),
    (request, latch): (&str, &str),
    record: u64,
) -> redis::ScriptInvocation<'a> {
    let mut call = script.key(name);
    call.key(format!("redisson_lock__channel:{{{name}}}"))
        .key(format!("redisson_unlock_latch:{{{name}}}:{request}"))
        .key(format!("redisson_lock_token:{{{name}}}"))
        .key(latch)
        .key(format!("redisson_lock_holds:{{{name}}}"))
        .arg(from)
        .arg(30_000)
        .arg("publish")
        // The holder's first hold.
        .arg("0")
        .arg(to)
        .arg(30_000)
        .arg(record);
    call
}

/// A handover takes its token with the counter's `INCR`, its first write: a
/// counter of another type refuses it, and the lock is freed and announced
/// instead, the counter untouched. The same when the counter has a lease or
/// more to live and the call is a first send (`handoff_fast.lua` answers
/// those first, and must fall through with nothing written).
#[tokio::test]
async fn a_handover_refused_by_the_counter_frees_the_lock_instead() {
    let server = Server::start();
    let mut raw = server.raw().await;
    let script = redis::Script::new(HANDOFF);
    for (name, first) in [("c", "0"), ("d", "1")] {
        let counter = format!("redisson_lock_token:{{{name}}}");
        let latch = format!("latch:{name}");
        let _: () = raw.hset(name, "a:1", 1).await.unwrap();
        let _: () = raw.rpush(&counter, "x").await.unwrap();
        let _: () = raw.pexpire(&counter, 600_000).await.unwrap();
        let answer: (i64, u64) = handover(&script, name, ("a:1", "a:2"), ("r1", &latch), 30_000)
            .arg(first)
            .invoke_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(answer, (1, 0), "{name}: freed, not handed over");
        assert!(
            !raw.exists::<_, bool>(name).await.unwrap(),
            "{name}: the lock is free"
        );
        let list: Vec<String> = raw.lrange(&counter, 0, -1).await.unwrap();
        assert_eq!(list, ["x"], "{name}: the counter untouched");
        assert!(
            !raw.exists::<_, bool>(&latch).await.unwrap(),
            "{name}: no token recorded"
        );
    }
}

/// The first send of a handover with a counter that needs no care (the
/// common case, `handoff_fast.lua`) answers as the full script does: the
/// waiter holds the lock with its lease and a token above the counter's,
/// the unlock latch says "handed over" for a retry, and the acquire latch
/// keeps the token when asked to.
#[tokio::test]
async fn a_first_send_hands_the_lock_over_as_the_full_script_would() {
    let server = Server::start();
    let mut raw = server.raw().await;
    let script = redis::Script::new(HANDOFF);
    let _: () = raw.hset("f", "a:1", 1).await.unwrap();
    let _: () = raw
        .set_ex("redisson_lock_token:{f}", 41, 600)
        .await
        .unwrap();
    let answer: (i64, u64) = handover(&script, "f", ("a:1", "a:2"), ("r1", "latch:f"), 30_000)
        .arg("1")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(answer, (2, 42), "handed over with the next token");
    let fields: Vec<(String, i64)> = raw.hgetall("f").await.unwrap();
    assert_eq!(fields, vec![("a:2".to_owned(), 1)], "the waiter holds it");
    let pttl: i64 = raw.pttl("f").await.unwrap();
    assert!(pttl > 0, "with the waiter's lease");
    let done: i64 = raw.get("redisson_unlock_latch:{f}:r1").await.unwrap();
    assert_eq!(done, 2, "a retry reads the handover");
    let recorded: u64 = raw.get("latch:f").await.unwrap();
    assert_eq!(recorded, 42, "the token recorded");
    // A late copy of the first send changes nothing.
    let late: (i64, u64) = handover(&script, "f", ("a:1", "a:2"), ("r1", "latch:f"), 30_000)
        .arg("1")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(late, (-1, 0), "the holder no longer holds it");
    let fields: Vec<(String, i64)> = raw.hgetall("f").await.unwrap();
    assert_eq!(
        fields,
        vec![("a:2".to_owned(), 1)],
        "the waiter still holds it"
    );
    let token: u64 = raw.get("redisson_lock_token:{f}").await.unwrap();
    assert_eq!(token, 42, "no token taken");
}

#[tokio::test]
async fn a_resent_handover_hands_the_lock_over_once() {
    let server = Server::start();
    let mut raw = server.raw().await;
    let script = redis::Script::new(HANDOFF);
    let unlock = redis::Script::new(lock_runtime::__scripts::UNLOCK);

    // Handed over once; the resend (a cluster connection resends a command
    // whose answer was lost) returns the first answer, token included when
    // the acquire latch recorded it.
    let _: () = raw.hset("h", "a:1", 1).await.unwrap();
    let call = || handover(&script, "h", ("a:1", "a:2"), ("r1", "latch:1"), 30_000);
    let first: (i64, u64) = call().invoke_async(&mut raw).await.unwrap();
    let resent: (i64, u64) = call().invoke_async(&mut raw).await.unwrap();
    assert_eq!(first.0, 2, "handed over");
    assert_eq!(resent, first);
    let fields: Vec<(String, i64)> = raw.hgetall("h").await.unwrap();
    assert_eq!(
        fields,
        vec![("a:2".to_owned(), 1)],
        "the waiter holds it, once"
    );
    let pttl: i64 = raw.pttl("h").await.unwrap();
    assert!(pttl > 0, "with the waiter's lease");
    // A release retried with plain unlock under the same request id reads
    // the handover as done, and touches nothing.
    let retried: i64 = unlock
        .key("h")
        .key("redisson_lock__channel:{h}")
        .key("redisson_unlock_latch:{h}:r1")
        .key("redisson_lock_holds:{h}")
        .arg("a:1")
        .arg(30_000)
        .arg("publish")
        .arg("0")
        .arg("0")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(retried, 1);
    assert!(raw.exists::<_, bool>("h").await.unwrap());

    // Without a record, a resend still hands nothing over twice: token 0
    // tells the caller to give that handover back.
    let _: () = raw.del("h").await.unwrap();
    let _: () = raw.hset("h", "b:1", 1).await.unwrap();
    let call = || handover(&script, "h", ("b:1", "b:2"), ("r2", "latch:2"), 0);
    let first: (i64, u64) = call().invoke_async(&mut raw).await.unwrap();
    let resent: (i64, u64) = call().invoke_async(&mut raw).await.unwrap();
    assert_eq!(first.0, 2);
    assert_eq!(resent, (2, 0));

    // A handover whose waiter's latch was marked abandoned frees the lock
    // and announces it instead.
    let _: () = raw.del("h").await.unwrap();
    let _: () = raw.hset("h", "c:1", 1).await.unwrap();
    let _: () = raw.set("latch:3", "abandoned").await.unwrap();
    let freed: (i64, u64) = handover(&script, "h", ("c:1", "c:2"), ("r3", "latch:3"), 0)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(freed, (1, 0));
    assert!(
        !raw.exists::<_, bool>("h").await.unwrap(),
        "freed, not handed"
    );

    // A holder with holds left only gives one back.
    let _: () = raw.hset("h", "d:1", 2).await.unwrap();
    let kept: (i64, u64) = handover(&script, "h", ("d:1", "d:2"), ("r4", "latch:4"), 0)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(kept, (0, 0));
    let fields: Vec<(String, i64)> = raw.hgetall("h").await.unwrap();
    assert_eq!(fields, vec![("d:1".to_owned(), 1)]);
}
