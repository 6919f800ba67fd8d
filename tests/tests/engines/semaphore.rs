//! Semaphores (DESIGN §11) on every engine: at most N holders of a name,
//! each permit a hold as a lock's is (lease, loss, fencing, re-entry).
//!
//! An engine that keeps no semaphores yet refuses every permit with
//! [`LockError::Unsupported`], never approximates one: each case checks
//! that first ([`semaphores`]) and asserts nothing more there.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockKind, distributed_lock};
use tests::engines::Store;
use tests::{Kind, eventually, finish};

use super::WITHIN;

on_every_engine!(
    a_semaphore_admits_n_holders_and_the_next_waits_for_a_release,
    permits_are_fenced_and_inspect_lists_each_holder,
    a_lost_permit_is_told_and_its_place_goes_to_a_waiter,
    a_permit_never_released_returns_when_its_lease_ends,
    a_dropped_permit_waiter_leaves_nothing_behind,
    a_permit_is_reentered_in_its_scope_and_only_there,
    many_tasks_on_few_permits_never_exceed_the_bound_and_all_get_in,
    the_attribute_with_permits_admits_that_many_calls,
    the_watchdog_keeps_a_permit_past_its_lease,
    hold_at_least_keeps_a_permit_taken_after_an_early_release,
    a_name_is_one_kind_never_read_as_another,
    a_semaphore_of_zero_permits_is_a_config_error,
);

/// Whether the store's engine keeps semaphores; when it does not, a
/// permit is refused with [`LockError::Unsupported`] naming the engine
/// (asserted), and nothing was taken.
async fn semaphores(store: &Store) -> bool {
    let client = store.client().await;
    match client.semaphore("probe", 1).try_acquire().await {
        Ok(Some(permit)) => {
            permit.release().await.unwrap();
            true
        }
        Err(LockError::Unsupported { engine, what }) => {
            assert_eq!(engine, store.engine(), "{what}");
            assert!(what.contains("semaphore"), "{what}");
            assert!(client.inspect("probe").await.unwrap().is_none());
            false
        }
        other => panic!("on {}: a free semaphore: {other:?}", store.engine()),
    }
}

/// Three permits held by two clients; the fourth acquisition gets none,
/// waits, and is woken by a release (the holders' watchdog leases would
/// outlast its wait).
async fn a_semaphore_admits_n_holders_and_the_next_waits_for_a_release(store: &Store) {
    if !semaphores(store).await {
        return;
    }
    let (a, b) = (store.client().await, store.client().await);
    let first = a.semaphore("api", 3).acquire().await.unwrap();
    let second = b.semaphore("api", 3).acquire().await.unwrap();
    // In the same task, outside any scope: a new permit.
    let third = a.semaphore("api", 3).try_acquire().await.unwrap();
    let third = third.expect("a third of three permits");
    assert!(b.semaphore("api", 3).try_acquire().await.unwrap().is_none());
    match b
        .semaphore("api", 3)
        .wait(Duration::from_millis(200))
        .acquire()
        .await
    {
        Err(LockError::Timeout { name, .. }) => assert_eq!(name, "api"),
        other => panic!("a fourth of three permits: {other:?}"),
    }
    store
        .until_waiting(Kind::Semaphore(3), "api", 0, WITHIN)
        .await;

    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.semaphore("api", 3).wait(WITHIN).acquire().await }
    });
    store
        .until_waiting(Kind::Semaphore(3), "api", 1, WITHIN)
        .await;
    second.release().await.unwrap();
    let fourth = finish(WITHIN, waiter).await;
    assert!(!fourth.is_lost());
    assert!(b.semaphore("api", 3).try_acquire().await.unwrap().is_none());
    // A larger bound of another caller is its own: it gets in.
    let wider = b.semaphore("api", 4).try_acquire().await.unwrap();
    let wider = wider.expect("a bound of 4 over 3 held");
    for permit in [first, third, fourth, wider] {
        permit.release().await.unwrap();
    }
    assert!(a.inspect("api").await.unwrap().is_none());
}

/// Every permit's token is larger than every earlier one of the name,
/// whichever client took it; `inspect` shows kind semaphore and each
/// holder once.
async fn permits_are_fenced_and_inspect_lists_each_holder(store: &Store) {
    if !semaphores(store).await {
        return;
    }
    let (a, b) = (store.client().await, store.client().await);
    let mut last = 0;
    let mut held = Vec::new();
    for round in 0..4 {
        let client = if round % 2 == 0 { &a } else { &b };
        let permit = client.semaphore("fenced", 4).acquire().await.unwrap();
        assert!(permit.token() > last, "{} after {last}", permit.token());
        last = permit.token();
        held.push(permit);
    }
    let info = b.inspect("fenced").await.unwrap().expect("held");
    assert_eq!(info.kind, LockKind::Semaphore);
    let mut seen: Vec<&str> = info.holders.iter().map(|h| h.id.as_str()).collect();
    let mut ids: Vec<&str> = held.iter().map(|p| p.holder_id()).collect();
    seen.sort();
    ids.sort();
    assert_eq!(seen, ids);
    for holder in &info.holders {
        if let Some(token) = holder.token {
            let permit = held.iter().find(|p| p.holder_id() == holder.id).unwrap();
            assert_eq!(token, permit.token(), "{}", holder.id);
        }
    }
    // A release frees one permit; the next one's token is larger still.
    held.remove(0).release().await.unwrap();
    let next = a.semaphore("fenced", 4).try_acquire().await.unwrap();
    let next = next.expect("a freed permit");
    assert!(next.token() > last);
    held.push(next);
    for permit in held {
        permit.release().await.unwrap();
    }
}

/// `force_unlock` frees every permit: each guard's `lost()` resolves, its
/// release is [`LockError::Lost`], and a waiter gets a permit.
async fn a_lost_permit_is_told_and_its_place_goes_to_a_waiter(store: &Store) {
    if !semaphores(store).await {
        return;
    }
    let (a, b) = (store.client().await, store.client().await);
    let one = a.semaphore("partner", 2).acquire().await.unwrap();
    let two = a.semaphore("partner", 2).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.semaphore("partner", 2).wait(WITHIN).acquire().await }
    });
    store
        .until_waiting(Kind::Semaphore(2), "partner", 1, WITHIN)
        .await;
    assert!(b.force_unlock("partner").await.unwrap());
    let next = finish(WITHIN, waiter).await;
    tokio::time::timeout(WITHIN, one.lost())
        .await
        .expect("the first permit's loss is told");
    tokio::time::timeout(WITHIN, two.lost())
        .await
        .expect("the second permit's loss is told");
    assert!(one.is_lost() && two.is_lost());
    for lost in [one, two] {
        match lost.release().await {
            Err(LockError::Lost { name }) => assert_eq!(name, "partner"),
            other => panic!("the release of a lost permit: {other:?}"),
        }
    }
    assert!(!next.is_lost());
    next.release().await.unwrap();
    assert!(a.inspect("partner").await.unwrap().is_none());
}

/// A permit whose holder never gives it back (a killed process: its guard
/// is forgotten, so nothing releases or renews it) returns when its fixed
/// lease ends: a waiter gets it without any release.
async fn a_permit_never_released_returns_when_its_lease_ends(store: &Store) {
    if !semaphores(store).await {
        return;
    }
    let (a, b) = (store.client().await, store.client().await);
    let lease = Duration::from_secs(1);
    let kept = a
        .semaphore("import", 1)
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    let name = kept.name().to_owned();
    std::mem::forget(kept);
    let next = b.semaphore(&name, 1).wait(WITHIN).acquire().await.unwrap();
    assert!(!next.is_lost());
    next.release().await.unwrap();
    assert!(b.inspect(&name).await.unwrap().is_none());
}

/// Waiters that time out or are dropped leave neither a place in line nor
/// a permit: once the holder releases, the name is free.
async fn a_dropped_permit_waiter_leaves_nothing_behind(store: &Store) {
    if !semaphores(store).await {
        return;
    }
    let (a, b) = (store.client().await, store.client().await);
    let held = a.semaphore("shard", 1).acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.semaphore("shard", 1).acquire().await }
    });
    store
        .until_waiting(Kind::Semaphore(1), "shard", 1, WITHIN)
        .await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    let timed_out = b
        .semaphore("shard", 1)
        .wait(Duration::from_millis(100))
        .acquire()
        .await;
    assert!(matches!(timed_out, Err(LockError::Timeout { .. })));
    store
        .until_waiting(Kind::Semaphore(1), "shard", 0, WITHIN)
        .await;
    held.release().await.unwrap();
    eventually("the semaphore is free", WITHIN, || async {
        a.inspect("shard").await.unwrap().is_none()
    })
    .await;
    let again = b.semaphore("shard", 1).try_acquire().await.unwrap();
    again.expect("a free permit").release().await.unwrap();
}

/// In a permit's scope, an acquisition of the same semaphore re-enters the
/// permit (a call chain never deadlocks on its own permits, even on a
/// semaphore of one); outside it, in the same task, it is a new permit.
async fn a_permit_is_reentered_in_its_scope_and_only_there(store: &Store) {
    if !semaphores(store).await {
        return;
    }
    let client = store.client().await;
    let outer = client.semaphore("tenant", 1).acquire().await.unwrap();
    let inner = outer
        .scope(client.semaphore("tenant", 1).wait(Duration::ZERO).acquire())
        .await
        .expect("a re-entry in the permit's scope");
    assert_eq!(inner.holder_id(), outer.holder_id());
    assert!(inner.token() > outer.token());
    assert!(
        client
            .semaphore("tenant", 1)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    inner.release().await.unwrap();
    // The permit is still held by the outer guard.
    assert!(
        client
            .semaphore("tenant", 1)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let info = client.inspect("tenant").await.unwrap().expect("held");
    assert_eq!(info.holders.len(), 1);
    outer.release().await.unwrap();
    assert!(client.inspect("tenant").await.unwrap().is_none());
}

/// Sixteen tasks on two clients, on a semaphore of three: never more than
/// three inside at once, and every task gets in (none starves).
async fn many_tasks_on_few_permits_never_exceed_the_bound_and_all_get_in(store: &Store) {
    if !semaphores(store).await {
        return;
    }
    let clients = [store.client().await, store.client().await];
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..8 {
            let client = client.clone();
            let (inside, most) = (inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..3 {
                    let permit = client.semaphore("pool", 3).wait(WITHIN).acquire().await?;
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // An await point inside: a fourth holder would get in.
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await?;
                }
                Ok::<_, LockError>(())
            }));
        }
    }
    for task in tasks {
        finish(Duration::from_secs(60), task).await;
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders of 3 permits inside at once");
    assert!(clients[0].inspect("pool").await.unwrap().is_none());
}

/// A call of at most two at once: counts itself inside, then waits until
/// the test lets it go.
#[distributed_lock(key = "partner:<partner>", permits = 2, wait = "20s", client = locks)]
async fn call_partner(
    locks: &LockClient,
    partner: &str,
    inside: &AtomicUsize,
    go: &tokio::sync::Semaphore,
) -> Result<(), LockError> {
    inside.fetch_add(1, Ordering::SeqCst);
    let _go = go.acquire().await.expect("the test's gate");
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

/// `#[distributed_lock(permits = 2)]`: two calls run at once, the third
/// waits for one of them to return.
async fn the_attribute_with_permits_admits_that_many_calls(store: &Store) {
    if !semaphores(store).await {
        return;
    }
    let (a, b) = (store.client().await, store.client().await);
    let inside = Arc::new(AtomicUsize::new(0));
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    let calls: Vec<_> = [&a, &a, &b]
        .into_iter()
        .map(|client| {
            let (client, inside, go) = (client.clone(), inside.clone(), go.clone());
            tokio::spawn(async move { call_partner(&client, "acme", &inside, &go).await })
        })
        .collect();
    eventually("two calls inside", WITHIN, || async {
        inside.load(Ordering::SeqCst) == 2
    })
    .await;
    store
        .until_waiting(Kind::Semaphore(2), "partner:acme", 1, WITHIN)
        .await;
    assert_eq!(inside.load(Ordering::SeqCst), 2, "a third call got in");
    let info = a.inspect("partner:acme").await.unwrap().expect("held");
    assert_eq!(info.kind, LockKind::Semaphore);
    assert_eq!(info.holders.len(), 2);
    go.add_permits(3);
    for call in calls {
        finish(WITHIN, call).await;
    }
    assert!(a.inspect("partner:acme").await.unwrap().is_none());
}

/// A permit without a fixed lease is renewed by the watchdog: held three
/// leases long, never lost, and not renewed once released.
async fn the_watchdog_keeps_a_permit_past_its_lease(store: &Store) {
    if !semaphores(store).await {
        return;
    }
    let lease = Duration::from_secs(2);
    let a = store.client_with(|c| c.watchdog_timeout(lease)).await;
    let b = store.client().await;
    let permit = a.semaphore("kept", 1).acquire().await.unwrap();
    assert_eq!(a.renewed_locks(), 1);
    match b.semaphore("kept", 1).wait(lease * 3).acquire().await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("the permit was free within three leases: {other:?}"),
    }
    assert!(!permit.is_lost());
    assert!(permit.remaining() > Duration::ZERO);
    permit.release().await.unwrap();
    assert_eq!(a.renewed_locks(), 0, "a released permit is not renewed");
}

/// `hold_at_least`: a permit released early stays taken until its minimum
/// ends, then frees itself.
async fn hold_at_least_keeps_a_permit_taken_after_an_early_release(store: &Store) {
    if !semaphores(store).await {
        return;
    }
    let (a, b) = (store.client().await, store.client().await);
    let permit = a
        .semaphore("run-once", 1)
        .hold_at_least(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let token = permit.token();
    permit.release().await.unwrap();
    assert!(
        b.semaphore("run-once", 1)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let later = b
        .semaphore("run-once", 1)
        .wait(WITHIN)
        .acquire()
        .await
        .unwrap();
    assert!(later.token() > token);
    later.release().await.unwrap();
}

/// A name held as a lock gives no permit, and a name with permits held
/// gives no lock: whichever way the store refuses (busy, or the typed
/// [`LockError::WrongType`]), one is never read as the other.
async fn a_name_is_one_kind_never_read_as_another(store: &Store) {
    if !semaphores(store).await {
        return;
    }
    let (a, b) = (store.client().await, store.client().await);
    let refused = |tried: Result<Option<lock_runtime::LockGuard>, LockError>| match tried {
        Ok(None) | Err(LockError::WrongType { .. }) => {}
        other => panic!("one kind read as another: {other:?}"),
    };
    let lock = a.lock("mixed").acquire().await.unwrap();
    refused(b.semaphore("mixed", 5).try_acquire().await);
    lock.release().await.unwrap();
    let permit = a.semaphore("mixed", 5).acquire().await.unwrap();
    refused(b.lock("mixed").try_acquire().await);
    refused(b.fair_lock("mixed").try_acquire().await);
    refused(b.read_write_lock("mixed").read().try_acquire().await);
    let info = b.inspect("mixed").await.unwrap().expect("held");
    assert_eq!(info.kind, LockKind::Semaphore);
    permit.release().await.unwrap();
    assert!(b.inspect("mixed").await.unwrap().is_none());
}

/// `semaphore(name, 0)` is [`LockError::Config`], and takes nothing.
async fn a_semaphore_of_zero_permits_is_a_config_error(store: &Store) {
    if !semaphores(store).await {
        return;
    }
    let client = store.client().await;
    match client.semaphore("none", 0).try_acquire().await {
        Err(LockError::Config(text)) => assert!(text.contains("0 permits"), "{text}"),
        other => panic!("a semaphore of 0 permits: {other:?}"),
    }
    assert!(client.inspect("none").await.unwrap().is_none());
}
