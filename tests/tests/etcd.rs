//! The etcd engine against a real etcd server (one member; the failover
//! test starts three): the contract's behaviour on etcd, the layout that
//! `etcdctl lock` shares, and cancellation that leaves no key.

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, LockKind};
use tests::etcd::{Etcd, EtcdCluster, etcdctl, etcdctl_lock};
use tests::eventually;

const LONG: Duration = Duration::from_secs(20);

async fn client(etcd: &Etcd) -> LockClient {
    client_with(etcd, |c| c).await
}

async fn client_with(etcd: &Etcd, tune: impl FnOnce(Config) -> Config) -> LockClient {
    LockClient::connect(tune(Config::new(etcd.url())))
        .await
        .expect("connect to etcd")
}

/// The keys under `<name>/`, oldest first (as `etcdctl` lists them).
fn keys(endpoint: &str, name: &str) -> Vec<String> {
    let out = etcdctl(
        endpoint,
        &[
            "get",
            "--prefix",
            &format!("{name}/"),
            "--keys-only",
            "--sort-by=CREATE",
            "--order=ASCEND",
        ],
    );
    assert!(out.status.success(), "etcdctl get: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

async fn until_keys(etcd: &Etcd, name: &str, n: usize) {
    let endpoint = etcd.endpoint();
    eventually(&format!("{n} keys under {name}/"), LONG, || {
        let endpoint = endpoint.clone();
        async move { keys(&endpoint, name).len() == n }
    })
    .await;
}

#[tokio::test]
async fn reentry_in_scope_writes_no_second_key() {
    let etcd = Etcd::start();
    let c = client(&etcd).await;
    let outer = c.lock("re").acquire().await.unwrap();
    let outer_token = outer.token();
    outer
        .scope(async {
            let inner = c.lock("re").acquire().await.unwrap();
            assert!(inner.token() > outer_token);
            assert_eq!(inner.holder_id(), outer.holder_id());
            assert_eq!(keys(&etcd.endpoint(), "re").len(), 1);
            let info = c.inspect("re").await.unwrap().unwrap();
            assert_eq!(info.holders[0].count, 2);
            inner.release().await.unwrap();
        })
        .await;
    // Still held after the inner release.
    let other = client(&etcd).await;
    assert!(other.lock("re").try_acquire().await.unwrap().is_none());
    outer.release().await.unwrap();
    assert!(other.lock("re").try_acquire().await.unwrap().is_some());
}

#[tokio::test]
async fn force_unlock_hands_the_lock_on_and_the_old_holder_learns_the_loss() {
    let etcd = Etcd::start();
    let (a, b) = (client(&etcd).await, client(&etcd).await);
    let guard = a.lock("stuck").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("stuck").wait(LONG).acquire().await }
    });
    until_keys(&etcd, "stuck", 2).await;
    let info = b.inspect("stuck").await.unwrap().unwrap();
    assert_eq!(info.holders[0].id, guard.holder_id());
    assert_eq!(info.queue.len(), 1);
    assert_eq!(info.kind, LockKind::Fair);
    assert!(b.force_unlock("stuck").await.unwrap());
    tokio::time::timeout(LONG, guard.lost())
        .await
        .expect("the old holder learns the loss");
    assert!(guard.is_lost());
    let next = tests::finish(LONG, waiter).await;
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
    next.release().await.unwrap();
    assert!(!a.force_unlock("stuck").await.unwrap());
}

#[tokio::test]
async fn names_with_a_slash_and_what_etcd_cannot_do_are_refused() {
    let etcd = Etcd::start();
    let c = client(&etcd).await;
    let bad = c.lock("a/b").acquire().await;
    assert!(matches!(bad, Err(LockError::BadName { .. })), "{bad:?}");
    let bad = c.inspect("a/b").await;
    assert!(matches!(bad, Err(LockError::BadName { .. })), "{bad:?}");
    let quorum = lock_runtime::QuorumLock::new("q", &[c.clone(), c.clone(), c.clone()])
        .acquire()
        .await;
    assert!(
        matches!(quorum, Err(LockError::Unsupported { engine: "etcd", .. })),
        "{quorum:?}"
    );
    let always = LockClient::connect(
        Config::new(etcd.url()).replica_sync(lock_runtime::ReplicaSync::Always),
    )
    .await;
    assert!(
        matches!(always, Err(LockError::Unsupported { engine: "etcd", .. })),
        "{always:?}"
    );
}

#[tokio::test]
async fn we_and_etcdctl_exclude_each_other() {
    let etcd = Etcd::start();
    let c = client(&etcd).await;
    // etcdctl holds: we wait.
    let mut theirs = etcdctl_lock(&etcd.endpoint(), "shared");
    let key = theirs.acquired(LONG).await.expect("etcdctl holds");
    assert!(key.starts_with("shared/"), "{key}");
    assert!(c.lock("shared").try_acquire().await.unwrap().is_none());
    let ours = tokio::spawn({
        let c = c.clone();
        async move { c.lock("shared").wait(LONG).acquire().await }
    });
    until_keys(&etcd, "shared", 2).await;
    theirs.release();
    let guard = tests::finish(LONG, ours).await;
    // Our key is the one etcdctl's recipe expects: <name>/<lease id in hex>.
    let ours_key = keys(&etcd.endpoint(), "shared").remove(0);
    let lease = ours_key.strip_prefix("shared/").unwrap();
    assert!(
        !lease.is_empty()
            && lease
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{ours_key}"
    );
    let leases = etcdctl(&etcd.endpoint(), &["lease", "list"]);
    assert!(
        String::from_utf8_lossy(&leases.stdout).contains(lease),
        "our key's lease is a live lease: {leases:?}"
    );
    // We hold: etcdctl waits until we release.
    let mut theirs = etcdctl_lock(&etcd.endpoint(), "shared");
    assert!(theirs.acquired(Duration::from_secs(2)).await.is_none());
    guard.release().await.unwrap();
    assert!(theirs.acquired(LONG).await.is_some());
    theirs.release();
}

#[tokio::test]
async fn the_url_picks_the_engine() {
    let etcd = Etcd::start();
    let c = LockClient::connect(Config::new(etcd.url())).await.unwrap();
    assert_eq!(c.engine_name(), "etcd");
}

#[tokio::test]
async fn holds_and_waiters_survive_a_leader_failover() {
    let mut cluster = EtcdCluster::start();
    let url = cluster.url();
    let connect = || {
        LockClient::connect(
            Config::new(url.clone())
                .watchdog_timeout(Duration::from_secs(6))
                .response_timeout(Duration::from_secs(2)),
        )
    };
    let (a, b) = (connect().await.unwrap(), connect().await.unwrap());
    let guard = a.lock("fo").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("fo").acquire().await }
    });
    let endpoint = cluster.endpoints()[0].clone();
    eventually("the waiter's key", LONG, || {
        let endpoint = endpoint.clone();
        async move { keys(&endpoint, "fo").len() == 2 }
    })
    .await;
    let leader = cluster.leader();
    cluster.stop_member(leader);
    let before = guard.remaining();
    cluster.wait_for_leader(LONG).await;
    // The hold outlives the election: a keep-alive goes through after it,
    // and the hold was never lost nor given to the waiter.
    eventually("a keep-alive after the election", LONG, || async {
        guard.remaining() > before
    })
    .await;
    assert!(!guard.is_lost());
    if waiter.is_finished() {
        let got = waiter.await.expect("the waiter's task");
        panic!(
            "the waiter finished while the hold lived: {:?}",
            got.map(|g| g.token())
        );
    }
    guard.release().await.unwrap();
    let next = tests::finish(LONG, waiter).await;
    next.release().await.unwrap();
    cluster.start_member(leader);
}

/// etcd's read-write layout: a reader queues behind a waiting writer, and
/// a mutex (etcd's own recipe) on the same name excludes both.
#[tokio::test]
async fn read_write_keys_queue_in_arrival_order_with_mutex_keys() {
    let etcd = Etcd::start();
    let (a, b) = (client(&etcd).await, client(&etcd).await);
    let r1 = a.read_write_lock("doc").read().acquire().await.unwrap();
    let r2 = b.read_write_lock("doc").read().acquire().await.unwrap();
    let info = a.inspect("doc").await.unwrap().unwrap();
    assert_eq!(info.kind, LockKind::ReadWrite);
    assert_eq!(info.mode, Some(lock_runtime::RwMode::Read));
    assert_eq!(info.holders.len(), 2);
    // A writer waits for both readers; a reader that comes after the
    // writer waits behind it (no writer starvation).
    assert!(
        b.read_write_lock("doc")
            .write()
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let writer = tokio::spawn({
        let b = b.clone();
        async move { b.read_write_lock("doc").write().wait(LONG).acquire().await }
    });
    until_keys(&etcd, "doc", 3).await;
    let late_reader = tokio::spawn({
        let a = a.clone();
        async move { a.read_write_lock("doc").read().wait(LONG).acquire().await }
    });
    until_keys(&etcd, "doc", 4).await;
    // So is a mutex (etcdctl's recipe) on the same name.
    assert!(a.lock("doc").try_acquire().await.unwrap().is_none());
    r1.release().await.unwrap();
    assert!(!writer.is_finished());
    r2.release().await.unwrap();
    let w = tests::finish(LONG, writer).await;
    let info = a.inspect("doc").await.unwrap().unwrap();
    assert_eq!(info.mode, Some(lock_runtime::RwMode::Write));
    assert!(info.holders[0].write);
    assert!(!late_reader.is_finished());
    // The writer may read in its scope; a reader may not upgrade.
    w.scope(async {
        let inner = b.read_write_lock("doc").read().acquire().await.unwrap();
        inner.release().await.unwrap();
    })
    .await;
    w.release().await.unwrap();
    let r3 = tests::finish(LONG, late_reader).await;
    let upgrade = r3
        .scope(
            a.read_write_lock("doc")
                .write()
                .wait(Duration::ZERO)
                .acquire(),
        )
        .await;
    assert!(
        matches!(upgrade, Err(LockError::NotHeld { .. })),
        "{upgrade:?}"
    );
    r3.release().await.unwrap();
    until_keys(&etcd, "doc", 0).await;
}

#[tokio::test]
async fn a_kept_hold_is_not_taken_over_by_the_same_clients_next_acquisition() {
    let etcd = Etcd::start();
    let c = client(&etcd).await;
    let guard = c
        .lock("kept2")
        .hold_at_least(Duration::from_secs(4))
        .acquire()
        .await
        .unwrap();
    guard.release().await.unwrap();
    // The same client (whose key name is the same) waits like anyone.
    assert!(c.lock("kept2").try_acquire().await.unwrap().is_none());
    let later = c.lock("kept2").wait(LONG).acquire().await.unwrap();
    assert!(!later.is_lost());
    later.release().await.unwrap();
    until_keys(&etcd, "kept2", 0).await;
}

#[tokio::test]
async fn extending_to_a_shorter_lease_keeps_the_longer_one() {
    let etcd = Etcd::start();
    let c = client(&etcd).await;
    let mut guard = c
        .lock("long")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    guard.extend(Duration::from_secs(5)).await.unwrap();
    assert!(guard.remaining() > Duration::from_secs(50));
    let info = c.inspect("long").await.unwrap().unwrap();
    assert!(info.ttl.unwrap() > Duration::from_secs(50), "{info:?}");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_force_unlocked_hold_lets_its_own_clients_waiters_in() {
    let etcd = Etcd::start();
    let (a, b) = (client(&etcd).await, client(&etcd).await);
    let stuck = a
        .lock("own")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let a = a.clone();
        async move { a.lock("own").wait(LONG).acquire().await }
    });
    assert!(b.force_unlock("own").await.unwrap());
    // The stuck guard is neither released nor dropped, yet the waiter of
    // its own client gets the lock.
    let next = tests::finish(LONG, waiter).await;
    assert!(stuck.is_lost());
    next.release().await.unwrap();
    assert!(matches!(stuck.release().await, Err(LockError::Lost { .. })));
}

#[tokio::test]
async fn a_multi_locks_scope_reenters_the_right_name() {
    let etcd = Etcd::start();
    let c = client(&etcd).await;
    let both = c.multi_lock(["ma", "mb"]).acquire().await.unwrap();
    let inner = both.scope(c.lock("ma").acquire()).await.unwrap();
    assert_eq!(inner.name(), "ma");
    inner.release().await.unwrap();
    both.release().await.unwrap();
    until_keys(&etcd, "ma", 0).await;
    until_keys(&etcd, "mb", 0).await;
}

#[tokio::test]
async fn readers_let_in_together_get_tokens_of_their_own_and_force_unlock_frees_them_all() {
    let etcd = Etcd::start();
    let (a, b) = (client(&etcd).await, client(&etcd).await);
    let writer = a.read_write_lock("rw").write().acquire().await.unwrap();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move { b.read_write_lock("rw").read().wait(LONG).acquire().await })
        })
        .collect();
    until_keys(&etcd, "rw", 4).await;
    writer.release().await.unwrap();
    let mut guards = Vec::new();
    for r in readers {
        guards.push(tests::finish(LONG, r).await);
    }
    let mut tokens: Vec<u64> = guards.iter().map(|g| g.token()).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "{tokens:?}");
    assert!(a.force_unlock("rw").await.unwrap());
    assert!(a.inspect("rw").await.unwrap().is_none());
    for g in guards {
        drop(g);
    }
}

#[tokio::test]
async fn one_attempt_reports_a_store_that_does_not_answer() {
    let mut etcd = Etcd::start();
    let c = client_with(&etcd, |c| c.response_timeout(Duration::from_millis(500))).await;
    etcd.stop();
    let tried = c.lock("down").try_acquire().await;
    assert!(matches!(tried, Err(LockError::Store { .. })), "{tried:?}");
    let waited = c.lock("down").wait(Duration::from_secs(1)).acquire().await;
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "{waited:?}"
    );
}

/// The lease id (hex) a key `<name>/<lease hex>` names.
fn lease_of(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or_default()
}

#[tokio::test]
async fn a_key_on_the_clients_session_that_it_does_not_know_is_deleted() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    // Rounds every second.
    let c = client_with(&etcd, |c| c.watchdog_timeout(Duration::from_secs(3))).await;
    let held = c.lock("kept").acquire().await.unwrap();
    let ours = keys(&endpoint, "kept");
    let lease = lease_of(&ours[0]).to_owned();
    // A create that reached etcd after its acquisition had given up (its
    // caller left, its answer was lost): a key on the session's lease that
    // nothing of the client knows, kept alive by its keep-alive.
    let put = etcdctl(
        &endpoint,
        &[
            "put",
            &format!("stray/{lease}"),
            "",
            &format!("--lease={lease}"),
        ],
    );
    assert!(put.status.success(), "etcdctl put: {put:?}");
    until_keys(&etcd, "stray", 0).await;
    // The hold's own key is left alone, and the stray's name is free.
    assert_eq!(keys(&endpoint, "kept"), ours);
    assert!(!held.is_lost());
    let other = client(&etcd).await;
    let free = other.lock("stray").try_acquire().await.unwrap();
    assert!(free.is_some());
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_release_whose_answer_is_lost_moves_the_clients_next_key_to_a_new_lease() {
    let etcd = Etcd::start();
    let proxy = tests::proxy::Proxy::start(etcd.port());
    let url = format!("etcd://127.0.0.1:{}", proxy.port());
    let c = LockClient::connect(Config::new(url).response_timeout(Duration::from_millis(500)))
        .await
        .unwrap();
    let guard = c.lock("late").acquire().await.unwrap();
    let first = keys(&etcd.endpoint(), "late");
    assert_eq!(first.len(), 1);
    // The release's delete is sent, held back on the way, and its caller
    // leaves: the delete may land at any time from now on.
    proxy.stall();
    let release = tokio::spawn(guard.release());
    tests::eventually("the delete is on its way", LONG, || async {
        proxy.held_back() > 0
    })
    .await;
    release.abort();
    let _ = release.await;
    proxy.resume();
    // The client's next key of that name is on another lease: a late copy
    // of the delete cannot take it away.
    let next = c.lock("late").wait(LONG).acquire().await.unwrap();
    let now = keys(&etcd.endpoint(), "late");
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(lease_of(&now[0]), lease_of(&first[0]));
    next.release().await.unwrap();
    until_keys(&etcd, "late", 0).await;
}

#[tokio::test]
async fn a_waiter_whose_key_was_deleted_learns_the_loss_of_the_hold_it_is_handed() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let a = client(&etcd).await;
    let b = client_with(&etcd, |c| c.watchdog_timeout(Duration::from_secs(3))).await;
    let held = a.lock("handed").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("handed").wait(LONG).acquire().await }
    });
    until_keys(&etcd, "handed", 2).await;
    // An operator deletes the waiter's key by hand.
    let waiting = keys(&endpoint, "handed")[1].clone();
    let del = etcdctl(&endpoint, &["del", &waiting]);
    assert!(del.status.success(), "etcdctl del: {del:?}");
    held.release().await.unwrap();
    // Handed the lock on the release's event alone, the waiter's hold has
    // no key: the session's next round tells it.
    let handed = tests::finish(LONG, waiter).await;
    tokio::time::timeout(LONG, handed.lost())
        .await
        .expect("the hold learns that its key is gone");
    assert!(handed.is_lost());
    let other = client(&etcd).await;
    let next = other.lock("handed").wait(LONG).acquire().await.unwrap();
    assert!(next.token() > handed.token());
    assert!(matches!(
        handed.release().await,
        Err(LockError::Lost { .. })
    ));
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_lost_holds_release_leaves_alone_the_key_its_client_made_again() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    // Rounds every second.
    let c = client_with(&etcd, |c| c.watchdog_timeout(Duration::from_secs(3))).await;
    let other = client(&etcd).await;
    let old = c.lock("rebound").acquire().await.unwrap();
    assert!(other.force_unlock("rebound").await.unwrap());
    tokio::time::timeout(LONG, old.lost())
        .await
        .expect("the old hold learns the loss");
    // The same client takes the name again while the lost guard lives: the
    // same key, on the same session.
    let new = c.lock("rebound").wait(LONG).acquire().await.unwrap();
    let key = keys(&endpoint, "rebound");
    assert_eq!(key.len(), 1);
    assert!(matches!(old.release().await, Err(LockError::Lost { .. })));
    // A round runs after that release (it sweeps a stray key of the
    // session), and the new hold's key is still there, its hold not lost.
    let lease = lease_of(&key[0]).to_owned();
    let put = etcdctl(
        &endpoint,
        &[
            "put",
            &format!("marker/{lease}"),
            "",
            &format!("--lease={lease}"),
        ],
    );
    assert!(put.status.success(), "etcdctl put: {put:?}");
    until_keys(&etcd, "marker", 0).await;
    assert_eq!(keys(&endpoint, "rebound"), key);
    assert!(!new.is_lost());
    new.release().await.unwrap();
    until_keys(&etcd, "rebound", 0).await;
}

/// Issue 34: a key under `<name>/` that is no contender's (put by another
/// program) keeps acquisitions out, as etcd's own `concurrency.Mutex`
/// would; `inspect` shows it, and `force_unlock` clears it, so the tools
/// and acquisition agree on what blocks a lock.
#[tokio::test]
async fn a_foreign_key_under_the_prefix_is_shown_and_cleared_by_the_tools() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let c = client(&etcd).await;
    let put = etcdctl(&endpoint, &["put", "app/settings", "dark-mode"]);
    assert!(put.status.success(), "etcdctl put: {put:?}");
    assert!(
        c.lock("app").try_acquire().await.unwrap().is_none(),
        "a key under app/ keeps the lock taken"
    );
    let info = c.inspect("app").await.unwrap().expect("inspect shows it");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(info.holders[0].id, "dark-mode", "{info:?}");
    assert!(
        c.force_unlock("app").await.unwrap(),
        "force_unlock clears it"
    );
    assert!(keys(&endpoint, "app").is_empty());
    let guard = c.lock("app").try_acquire().await.unwrap();
    guard.expect("free once cleared").release().await.unwrap();
    // One under `app/read/` keeps writers out, not readers.
    let put = etcdctl(&endpoint, &["put", "app/read/x", ""]);
    assert!(put.status.success(), "etcdctl put: {put:?}");
    let rw = c.read_write_lock("app");
    assert!(rw.write().try_acquire().await.unwrap().is_none());
    let read = rw
        .read()
        .try_acquire()
        .await
        .unwrap()
        .expect("readers share");
    read.release().await.unwrap();
    let info = c.inspect("app").await.unwrap().expect("a reader holds");
    assert_eq!(info.mode, Some(lock_runtime::RwMode::Read), "{info:?}");
    assert!(c.force_unlock("app").await.unwrap());
    let write = rw.write().try_acquire().await.unwrap();
    write.expect("free once cleared").release().await.unwrap();
}

/// Issue 34, item 11: a fixed-lease hold's key is made on the session's
/// lease and then moved to its own. A keep-alive round whose listing of
/// the session's keys was taken before the move, and judged after it,
/// took the key for a stray and deleted a healthy hold. The sweep of such
/// a listing, forced here, leaves a key that is on another lease alone.
#[tokio::test]
async fn the_sessions_sweep_leaves_a_key_moved_to_another_lease_alone() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let c = client(&etcd).await;
    let other = client(&etcd).await;
    let held = c
        .lock("fixed")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let ours = keys(&endpoint, "fixed");
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert!(
        !c.__sweep_as_listed(&ours[0]).await,
        "the sweep deleted a key on another lease"
    );
    assert_eq!(keys(&endpoint, "fixed"), ours);
    assert!(other.lock("fixed").try_acquire().await.unwrap().is_none());
    assert!(!held.is_lost());
    held.release().await.unwrap();
}

/// A semaphore's permits (DESIGN §11): keys `<name>/<lease hex>-<n>` on
/// the session's lease, as a fair waiter's, valued `<holder id> permits
/// <N>`; `etcdctl lock` on the name waits for every permit, and a permit
/// waits for `etcdctl`'s key (one kind per name).
#[tokio::test]
async fn permits_are_keys_that_etcdctl_lock_waits_for_and_that_wait_for_it() {
    let etcd = Etcd::start();
    let (a, b) = (client(&etcd).await, client(&etcd).await);
    let first = a.semaphore("pool", 2).acquire().await.unwrap();
    let second = b.semaphore("pool", 2).acquire().await.unwrap();
    let out = etcdctl(
        &etcd.endpoint(),
        &[
            "get",
            "--prefix",
            "pool/",
            "--sort-by=CREATE",
            "--order=ASCEND",
        ],
    );
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let number = |holder: &str| holder.rsplit_once(':').unwrap().1.to_owned();
    assert_eq!(listed.len(), 4, "{listed:?}");
    for (at, permit) in [(0, &first), (2, &second)] {
        let key = &listed[at];
        let own = key.strip_prefix("pool/").unwrap();
        let (lease, n) = own.split_once('-').expect("<lease hex>-<n>");
        assert!(lease.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
        assert_eq!(n, number(permit.holder_id()), "{key}");
        assert_eq!(listed[at + 1], format!("{} permits 2", permit.holder_id()));
    }
    let info = a.inspect("pool").await.unwrap().expect("held");
    assert_eq!(info.kind, LockKind::Semaphore);
    assert_eq!(info.holders.len(), 2);
    assert!(info.holders.iter().all(|h| h.lease_left.is_some()));

    // Permits held: etcdctl's lock waits for them all.
    let mut theirs = etcdctl_lock(&etcd.endpoint(), "pool");
    until_keys(&etcd, "pool", 3).await;
    first.release().await.unwrap();
    assert!(theirs.acquired(Duration::from_secs(2)).await.is_none());
    second.release().await.unwrap();
    assert!(theirs.acquired(LONG).await.is_some());

    // etcdctl holds: a permit waits for its key, bound or not.
    assert!(
        a.semaphore("pool", 5)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let waiter = tokio::spawn({
        let a = a.clone();
        async move { a.semaphore("pool", 5).wait(LONG).acquire().await }
    });
    until_keys(&etcd, "pool", 2).await;
    theirs.release();
    let permit = tests::finish(LONG, waiter).await;
    permit.release().await.unwrap();
    until_keys(&etcd, "pool", 0).await;
}
