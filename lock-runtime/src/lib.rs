//! Distributed locks on Redis for async Rust, compatible with Redisson.
//!
//! ```
//! use std::time::Duration;
//! use lock_runtime::{distributed_lock, Config, LockClient, LockError};
//!
//! #[derive(Debug)]
//! enum ShopError { Lock(LockError), SoldOut }
//! impl From<LockError> for ShopError {
//!     fn from(e: LockError) -> Self { ShopError::Lock(e) }
//! }
//!
//! // Only one caller in the fleet runs this body for a given `id` at a time.
//! #[distributed_lock(key = "stock:<id>", wait = "2s")]
//! async fn deduct(id: u64, qty: u32) -> Result<u32, ShopError> {
//!     // read-modify-write the stock of `id` here
//!     if qty > 10 { return Err(ShopError::SoldOut); }
//!     Ok(10 - qty)
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let Some(server) = doc_server::start() else { return Ok(()) };
//! # let url = server.url.clone();
//! # tokio::runtime::Runtime::new()?.block_on(async move {
//! // The global client the attribute uses (else it reads REDIS_URL).
//! lock_runtime::init(Config::new(&url)).await?;
//! assert_eq!(deduct(42, 3).await.map_err(|e| format!("{e:?}"))?, 7);
//!
//! // The same lock through the builder.
//! let client = LockClient::connect(Config::new(&url)).await?;
//! let guard = client.lock("stock:42").wait(Duration::from_secs(2)).acquire().await?;
//! assert!(guard.token() > 0);
//! guard.release().await?;
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # })
//! # }
//! # mod doc_server {
//! #     pub struct Server { child: std::process::Child, pub url: String }
//! #     impl Drop for Server { fn drop(&mut self) { let _ = self.child.kill(); let _ = self.child.wait(); } }
//! #     /// A throwaway redis-server on a free loopback port, if one is installed.
//! #     pub fn start() -> Option<Server> {
//! #         let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
//! #         let child = std::process::Command::new("redis-server")
//! #             .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
//! #             .stdout(std::process::Stdio::null()).spawn().ok()?;
//! #         let server = Server { child, url: format!("redis://127.0.0.1:{port}") };
//! #         for _ in 0..200 {
//! #             if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() { return Some(server); }
//! #             std::thread::sleep(std::time::Duration::from_millis(10));
//! #         }
//! #         None
//! #     }
//! # }
//! ```
//!
//! # What you get
//!
//! - [`LockClient`]: one connection to Redis, one pub/sub path, one watchdog.
//!   [`LockClient::lock`] gives a reentrant lock (Redisson's `RLock`).
//! - [`LockGuard`]: proof of holding. [`LockGuard::token`] is a fencing token,
//!   strictly increasing per lock name; [`LockGuard::lost`] resolves when the
//!   lease is lost; [`LockGuard::release`] says whether the lease held.
//! - `#[distributed_lock]`: takes the lock around an `async fn`, with the key
//!   built from the function's parameters and checked at compile time.
//! - [`SegmentedLock`] ([`LockClient::segmented_lock`]) and [`Inventory`]: a
//!   hot resource, such as the stock of one SKU in a flash sale, split into
//!   `n` segments with a lock each, so `n` buyers proceed at once;
//!   `segmented_lock!` declares one once, with a typed key template.
//! - Operations: [`LockClient::inspect`], [`LockClient::locks`],
//!   [`LockClient::force_unlock`], [`LockGuard::remaining`],
//!   [`LockGuard::extend`]; the `lockctl` command line (feature `cli`) and
//!   metrics (feature `metrics`). See [Operations](#operations).
//!
//! # Jobs and busy paths
//!
//! A scheduled job that must run on one instance per slot: the instance that
//! takes the lock runs it, the others skip, and `hold_at_least` keeps the
//! lock after a short job so that instances whose timers fire late skip too
//! (ShedLock's `lockAtLeastFor`). `fallback` answers from elsewhere while the
//! lock is busy, and `client` picks the [`LockClient`] (a service with two
//! Redis deployments, or a test).
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use lock_runtime::{distributed_lock, Config, LockClient, LockError};
//!
//! #[distributed_lock(key = "report:<slot>", on_busy = "skip", hold_at_least = "1m", client = locks)]
//! async fn nightly(locks: &LockClient, slot: u64, runs: &AtomicUsize) -> Result<(), LockError> {
//!     runs.fetch_add(1, Ordering::SeqCst);
//!     Ok(())
//! }
//!
//! // While the lock is busy (one attempt: no `wait`), serve the cached value.
//! #[distributed_lock(key = "price:<id>", fallback = cached_price, client = locks)]
//! async fn price(locks: &LockClient, id: u64) -> Result<String, LockError> {
//!     Ok(format!("fresh price of {id}"))
//! }
//! async fn cached_price(_locks: &LockClient, id: u64) -> Result<String, LockError> {
//!     Ok(format!("cached price of {id}"))
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let Some(server) = doc_server::start() else { return Ok(()) };
//! # let url = server.url.clone();
//! # tokio::runtime::Runtime::new()?.block_on(async move {
//! // Two instances fire the same slot: one runs it, the other skips.
//! let (a, b) = (LockClient::connect(Config::new(&url)).await?, LockClient::connect(Config::new(&url)).await?);
//! let runs = AtomicUsize::new(0);
//! nightly(&a, 7, &runs).await?;
//! nightly(&b, 7, &runs).await?; // the lock is kept 1 min: skipped
//! assert_eq!(runs.load(Ordering::SeqCst), 1);
//!
//! let held = b.lock("price:1").acquire().await?;
//! assert_eq!(price(&a, 1).await?, "cached price of 1");
//! held.release().await?;
//! assert_eq!(price(&a, 1).await?, "fresh price of 1");
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # })
//! # }
//! # mod doc_server {
//! #     pub struct Server { child: std::process::Child, pub url: String }
//! #     impl Drop for Server { fn drop(&mut self) { let _ = self.child.kill(); let _ = self.child.wait(); } }
//! #     pub fn start() -> Option<Server> {
//! #         let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
//! #         let child = std::process::Command::new("redis-server")
//! #             .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
//! #             .stdout(std::process::Stdio::null()).spawn().ok()?;
//! #         let server = Server { child, url: format!("redis://127.0.0.1:{port}") };
//! #         for _ in 0..200 {
//! #             if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() { return Some(server); }
//! #             std::thread::sleep(std::time::Duration::from_millis(10));
//! #         }
//! #         None
//! #     }
//! # }
//! ```
//!
//! - **Busy** means the lock was not taken within `wait`
//!   ([`LockError::Timeout`]); with `on_busy = "skip"` or `fallback` and no
//!   `wait`, one attempt is made. Redis failures are still errors. A lock
//!   that tasks of the same client already wait for is busy without asking
//!   Redis (FIFO inside a client): a one-attempt call then skips or falls
//!   back at once.
//! - **`hold_at_least`** ([`LockBuilder::hold_at_least`] on the builder)
//!   counts from the acquire's answer. The release of the last hold before
//!   the minimum keeps the lock's hash with the holder's count at 0 and sets
//!   it to expire when the minimum ends (a count of 0 is no hold: it is
//!   never renewed, re-entered or handed over; a Redisson client sees a
//!   held lock). When that is sooner than the lease waiters were told, they
//!   are woken to retry (`1` on the channel; a fair lock's head on its
//!   own); otherwise nothing is published and they retry when it expires. A watchdog lease is lengthened or shortened to the minimum; a
//!   fixed lease is only shortened, and a minimum over it is refused with
//!   [`LockError::Config`]. Such a release never hands the lock to a local
//!   waiter. A release after the minimum frees the lock at once. Reentrant
//!   and fair locks only. The minimum belongs to the call chain: a re-entry
//!   shares its scope's, and whichever hold of the chain is given back last
//!   (released or dropped, in any order) applies the latest minimum any of
//!   them asked for; the others just count down.
//! - **Skipping with the builder** is [`LockBuilder::try_acquire`] (or a
//!   `wait` and `Ok(None)` on [`LockError::Timeout`]).
//!
//! # Features
//!
//! - `tls`: `rediss://` URLs (rustls with the ring provider).
//! - `cli`: the `lockctl` binary (`cargo install --path lock-runtime
//!   --features cli`) and its module `cli`.
//! - `metrics`: metrics through the `metrics` 0.24 facade. Off, nothing of
//!   it is compiled in: the recording functions are empty and the types
//!   that carry it are zero-sized.
//!
//! # Operations
//!
//! ```no_run
//! # async fn demo(client: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
//! // Who holds it, how often, for how long still; a fair lock's queue.
//! if let Some(info) = client.inspect("stock:42").await? {
//!     for holder in &info.holders {
//!         println!("{} x{} (client {})", holder.id, holder.count, holder.client_id());
//!     }
//!     println!("lease left: {:?}, queue: {:?}", info.ttl, info.queue);
//! }
//! // Free a stuck lock and wake every waiter (its holder learns the loss).
//! let freed: bool = client.force_unlock("stock:42").await?;
//! # let _ = freed;
//! # Ok(())
//! # }
//! ```
//!
//! - **Recognising a lock.** [`LockClient::inspect`] reads the layout: a
//!   hash with a `mode` field is a read-write lock; with a fair queue or
//!   waiter deadlines beside it, a fair lock; else a reentrant lock (a fair
//!   lock nobody waits for has the same layout and reads as reentrant). A
//!   hash whose fields are not holder ids (`<id>:<n>`, `<id>:<n>:write`)
//!   with counts is not a lock: [`LockError::WrongType`].
//! - **Force-unlock** deletes the lock's hash, a read-write lock's read-hold
//!   keys and a fair lock's queue, and publishes "wake all" (`1`, as
//!   Redisson's `forceUnlock`) on every channel a waiter may listen on; the
//!   fencing counter stays. The holder is not told at once: its guard finds
//!   the loss at its next renewal or release.
//! - **Extend** is for fixed leases; like every renewal it never shortens a
//!   lease, and it never revives a lost one.
//! - **Metrics** (see the README's "Operating it" for what to alert on):
//!   `lock_acquire_seconds` (histogram; `kind`, `outcome`),
//!   `lock_held_seconds` (histogram; `kind`), `lock_lost_total` (counter;
//!   `kind`; once per lost hold: by the watchdog when it finds the loss, else
//!   by the release that reports it), `lock_renewals_total` (counter),
//!   `lock_replica_sync_skipped_total` (counter: acquisitions that did not
//!   wait for a replica in [`ReplicaSync::Auto`] because the lock's master
//!   had replicas, none of them healthy; see Replica sync below),
//!   `lock_held` and `lock_waiters` (gauges; `kind`). A multi or quorum
//!   lock's acquisition is one sample of its kind, and each of its holds
//!   counts under that kind in the others; a segmented lock's segments are
//!   reentrant locks. Descriptions are given to the recorder when the first
//!   client connects, so install the recorder before.
//! - **Errors say where and why.** A failed connect is
//!   [`LockError::Connect`]: the server's `host:port` (or the sentinels, or
//!   the cluster seeds), where the address came from (`from Config`, `from
//!   REDIS_URL`, or the default when `REDIS_URL` is not set), and the reason
//!   in words (refused, no answer within the connect timeout, authentication
//!   failed, or a server that does not speak Redis). A URL that does not
//!   parse says what is wrong (no scheme, a scheme such as `http://`, a port
//!   that is no port). No message shows a password. A timeout after a zero
//!   wait reads "busy (one attempt)".
//! - **A failed `init` stays the configuration.** [`client`] then tries the
//!   configured server again (and reports its error); it never falls back
//!   to `REDIS_URL`. `init` may be called again after a failure.
//!
//! # Decisions
//!
//! - **Who holds a lock.** Re-entry follows the call chain, not the task. A
//!   hold belongs to the future run in its guard's
//!   [`scope`](LockGuard::scope) (and the body of a `#[distributed_lock]`
//!   function, which runs in its hold's scope): an acquisition of the same
//!   lock on the same client awaited inside re-enters it. Everything else is
//!   another holder, with a holder id of its own (`<client id>:<n>`, `n` new
//!   for each acquisition): other tasks (a spawned task does not inherit a
//!   scope) and other futures of the same task, so `join!`, `select!` and
//!   `join_all` of locked calls exclude each other. A re-entry inside the
//!   scope of a hold that is gone fails with [`LockError::Lost`] instead of
//!   taking the lock anew, so a stale guard never shares a holder id with a
//!   newer hold. [`SegmentedLock::any`] never picks a segment its caller's
//!   scope holds while another is left.
//! - **One hold, one lease.** Re-entries and watchdog renewals keep the
//!   longest remaining lease of the key (scripts `PEXPIRE` only to extend), so
//!   a nested short lease never cuts an outer hold short. Releasing a guard
//!   gives back that hold only: a count on the hash, or, for a read hold, the
//!   hold key whose value is the guard's token.
//! - **Loss by the guard's clock.** A guard counts as lost at the send time
//!   of the last call that confirmed its lease (the acquire, or the
//!   watchdog's last renewal) plus the lease, less a safety margin of 1% of
//!   the lease + 2 ms (Redlock's clock-drift allowance). The server counts
//!   from when it ran that call, so it expires the key later than the guard
//!   gives up, even when renewals stall without an error. [`LockGuard::lost`],
//!   [`LockGuard::is_lost`], release and `on_lost = "cancel"` follow that
//!   clock; a renewal confirmed too late does not revive the guard.
//! - **Lost answers.** An acquire whose answer is lost (response timeout,
//!   broken connection) may have run. Every attempt carries a latch key
//!   (`redisson_lock_acquire_latch:{name}:<attempt id>`, 30 s); before the
//!   error is returned the client marks it `abandoned` (`SET NX`), so an
//!   attempt still on its way takes nothing, and gives back the hold if the
//!   attempt did run (a new holder's hold shows by its unique holder id; a
//!   re-entry records its token in the latch). Every give-back of one
//!   attempt uses one unlock request id, so it counts once. The error waits
//!   for the first try (at most twice the response timeout); while Redis is
//!   unreachable the rest goes on in the background for 16 minutes (past
//!   TCP's retransmission limit; the `abandoned` mark lasts as long). One
//!   case is left to the lease: a re-entry whose answer was lost in a
//!   partition longer than its 30 s record keeps its count until the lease
//!   ends. When the reconcile settled in time (so the attempt provably holds
//!   nothing) and the error was a lost connection, the attempt is made once
//!   more on the client's own connection, which reconnects: a connection
//!   closed while idle (an idle timeout, a proxy, `CLIENT KILL`, a server
//!   restart) costs the caller nothing.
//! - **Local handoff.** Tasks of one client waiting for the same lock queue
//!   locally (FIFO); only the head contends in Redis, and the queue keeps
//!   the channel subscription between heads. An acquisition of a lock that
//!   tasks of its client already wait for joins their queue without trying
//!   first, so a task that just released the lock does not take it back
//!   ahead of them (and `try_acquire` then answers `None` at once). Each waiter of a reentrant lock
//!   (not a re-entry, a fair or read/write lock, or part of a multi lock)
//!   offers to take the lock over; a task of the same client that releases
//!   it takes the oldest offer and hands the lock over in the unlock script
//!   itself (`handoff.lua`): one round trip, no message, a new holder id and
//!   a new fencing token, the waiter's own lease. A handover is an
//!   acquisition of its own (its own latch and holder id), so one whose
//!   answer is lost, or that reaches a waiter who went away, or that no
//!   replica confirmed, is reconciled like a lost acquire answer and given
//!   back. After 16 handovers in a row a release frees the lock and
//!   announces it, so that waiters of other clients (and Redisson's) get
//!   their turn. The count goes with the holds, not with the queue (which
//!   empties whenever its one waiter is handed the lock), and this
//!   client's waiters, woken by that announcement, stand back before they
//!   try: twice as long as the announcement took to reach them, at most
//!   5 ms. Their threads are awake where other clients' often sleep, and
//!   without the pause they won every such race (two tasks handing a lock
//!   back and forth kept every other client out). (16 rather than 8: with
//!   tiny sections, one hot name served by two clients did 5-20% more
//!   sections per second, and tasks' shares stayed as even; BENCHMARKS.md.)
//! - **Scripts check before they write.** A fencing counter that `INCR` would
//!   refuse, a negative one, or one at 2^53 − 1 or more (Lua numbers are
//!   exact below 2^53, and tokens must stay exact), is an error reply naming
//!   the counter, with nothing written. (The reentrant lock's acquisition
//!   and handover and the read lock's acquisition learn it from the
//!   counter's `INCR` itself, their first write, and put a negative counter
//!   or one that went past 2^53 − 1 back with `DECR`: one call per
//!   acquisition instead of a `GET` before and an `INCR` after. A handover
//!   refused so frees the lock instead.)
//!   Leases, and every
//!   [`Config`] timeout, longer than [`MAX_DURATION`] (100 years) are
//!   [`LockError::Config`]; a `wait` whose deadline the clock cannot
//!   represent (`Duration::MAX`) waits without a deadline.
//! - **Fencing tokens: bounded and monotonic.** The counter
//!   `redisson_lock_token:{name}` lives one to two leases past its last
//!   acquisition (an acquisition that finds less than its lease left gives
//!   it two leases, never less than it has, so acquisitions less than a
//!   lease apart do not each pay an expiry write), so Redis keeps no key per
//!   name once a name's locks are over. When missing, it is made again at the server's clock in
//!   microseconds (`TIME`), then `INCR`ed. Why tokens still only increase
//!   per name:
//!   - *While the counter exists*, every acquisition `INCR`s it: strictly
//!     increasing, and interleaved with Redisson's `RFencedLock`, which
//!     `INCR`s the same key.
//!   - *After it expired*, it restarts at the clock `c1`. It had been made at
//!     a clock `c0` and counted `k` times; it expired at least one lease
//!     after its last acquisition, measured on the same server's clock
//!     (Redis keeps expiries as absolute times, and replicas, AOF and RDB
//!     carry them so). So `c1 - c0` is at least the counter's whole life in
//!     microseconds, and `c1 > c0 + k` whenever the name averaged fewer than
//!     10^6 acquisitions per second over that life. One Redis server runs
//!     far fewer scripts than that, so this holds. Every earlier token
//!     (`≤ c0 + k`) is then below every new one.
//!   - *Across a restart with persistence* the counter comes back with its
//!     expiry, or has expired: one of the two cases above. A restart without
//!     persistence loses it, and the clock still starts above what it gave.
//!   - *Across a failover* a promoted replica has the counter (replicated
//!     with its absolute expiry) or, when the master's last writes were lost
//!     with it, an older value or none. Replica sync (`WAIT`) covers the
//!     acquisition itself. A counter the replica never saw is made at the
//!     replica's clock, which must not lag the old master's by more than the
//!     time between that counter's creation and the failover. NTP-synced
//!     hosts are milliseconds apart.
//!   - *A counter without an expiry* was made by Redisson's `RFencedLock`
//!     (which starts a missing one at 1) or by an older version of this
//!     crate. It is raised to the clock if it is below it (never lowered),
//!     then expires like ours. So the one interop effect: when a Redisson
//!     `RFencedLock` re-creates a counter that expired, its tokens start at
//!     1 and storage that fences refuses them until an acquisition of ours
//!     raises the counter again.
//!   - *Quorum locks* raise every granting node's counter to the largest
//!     token (see [`QuorumLock`]). Across one node's counter expiry, the
//!     nodes' clocks must agree to within the counter's life.
//!
//!   Tokens are 16-digit numbers (the clock in µs, then counted) below 2^53
//!   until the year 2255.
//! - **Footprint.** After every lock is released, Redis keeps only latches:
//!   unlock latches (each answer kept for its retries: three response
//!   timeouts + 1 s, 16 s with the defaults), acquire latches (30 s, on a
//!   cluster and for re-entries) and `abandoned` marks of attempts whose
//!   answer was lost (16 min). The counter goes one to two leases after its last
//!   acquisition. A fair lock's queue and deadline keys expire at the latest
//!   deadline in them, so a waiter that died leaves nothing for good. The
//!   record of re-entered holds (`redisson_lock_holds:{name}`) goes with
//!   the re-entries it names, and a holder that died while re-entered
//!   leaves it to expire with the lock. Every key the library writes has an
//!   expiry.
//! - **No leaked subscriptions.** A `SUBSCRIBE` that timed out can still be
//!   confirmed later, and the connection makes every confirmed subscription
//!   again after a reconnect. So a channel whose subscribe or unsubscribe
//!   failed, and that no waiter wants, is unsubscribed again until that
//!   succeeds. A fair waiter that leaves while Redis is unreachable retries
//!   leaving the queue until its place would have been evicted anyway.
//! - **Waiting.** `wait` left out waits until acquired; `Duration::ZERO` makes
//!   one attempt. The first attempt is one script round trip. Waiters then
//!   subscribe to the lock's unlock channel and sleep until a message or the
//!   holder's remaining lease; within one client only the first waiter per
//!   name contends in Redis, the others queue locally in arrival order. A lost
//!   message costs at most one lease, never a hang. A waiter queued behind
//!   another holds little besides its own task: no subscription, no timer
//!   unless it has a `wait`, and one offer to take the lock over
//!   (`lock_bench` row 6 measures the memory per waiter; BENCHMARKS.md).
//! - **Faults while waiting.** Within its `wait`, an acquisition rides out
//!   faults that may heal: an attempt (or a subscription) that fails on a
//!   timeout, a lost or refused connection, `LOADING`, `TRYAGAIN`,
//!   `CLUSTERDOWN` or `MASTERDOWN` is made again, with backoff (5 ms
//!   doubling up to 1 s), and the caller gets the lock or
//!   [`LockError::Timeout`] when the wait runs out. Each new attempt has a
//!   new attempt id and is made only once the failed one's reconcile has
//!   ended (until then it could still take a hold under the same holder
//!   id, which the reconcile gives back by that id alone); should the
//!   reconcile give up, the acquisition fails rather than risk it. A
//!   re-entry tries again in place (it never queues behind this client's
//!   other waiters, who may be waiting for its own call chain). Errors that
//!   will not heal (authentication, permissions, a key of another type, a
//!   bad name, configuration) fail at once, and a `try_acquire` (no wait)
//!   returns its attempt's error. With `wait` left out the acquisition
//!   retries until Redis answers and says so in a `tracing` warning. A
//!   fair waiter whose attempt's answer was lost may rejoin the queue at
//!   its back: the reconcile of that attempt leaves the queue, as for a
//!   caller that gave up.
//! - **Fair locks.** [`LockClient::fair_lock`] keeps Redisson's queue and
//!   deadlines. A waiter joins the queue at its first failed attempt (so order
//!   is by first attempt, across tasks and clients alike) and keeps its place
//!   on every retry; fair waiters do not also queue locally, since a local
//!   order could only disagree with the Redis one. Unlock wakes only the head,
//!   on its own channel. Deadlines use the Redis server's clock (`TIME` in
//!   the scripts), so Rust clients with skewed clocks agree; each retry pushes
//!   the waiter's deadline to the lock's lease end plus
//!   [`Config::fair_wait_timeout`], so a live waiter is never evicted, and a
//!   head that stops retrying (its process died) is evicted after that wait.
//!   Waiters behind the head sleep until the holder's lease ends (a holder
//!   whose lease runs out publishes nothing) or the head's eviction, and
//!   while the lock is free between two holders they retry soon (5 ms,
//!   doubling up to 1 s) until the next holder's lease tells them when: the
//!   queue advances at every lease end, in arrival order.
//!   A waiter whose `wait` ends, or whose acquire is dropped, leaves the queue
//!   and moves those behind it up. A `try_acquire` that finds the lock busy,
//!   or an acquire whose `wait` ends, has left the queue when it returns, so
//!   the next caller never finds that place ahead of it (only while Redis is
//!   unreachable is leaving retried in the background); a dropped acquire
//!   cannot wait, and leaves in the background.
//! - **Read-write locks.** [`LockClient::read_write_lock`]: readers share,
//!   writers exclude; the writer may also read (downgrade), a reader asking
//!   to write gets [`LockError::NotHeld`] at once (no upgrade, no deadlock).
//!   Each read hold has its own lease key; one that ran out stops counting
//!   (the next writer clears it) and the hash lives as long as its longest
//!   hold. Releasing the write lock wakes every waiting reader; a client's
//!   readers take turns only to try, never to hold. The watchdog renews only
//!   its own client's holds. A holder's holds on one read-write lock (a hold
//!   and its re-entries) share their renewal: while one is renewed, its
//!   other holds are too.
//! - **Multi locks.** [`LockClient::multi_lock`] (names on one client) and
//!   [`MultiLock`] (locks of any kind on any clients) take all or none. The
//!   locks are taken in a fixed order (server address, then name; repeats
//!   once), and no lock is held while waiting: when one is busy, the others
//!   are given back, the caller waits for the busy one, takes it and tries
//!   the rest again. So overlapping sets in any order cannot deadlock. The
//!   guard's name is the names joined by `+`; its token is the largest of
//!   the locks' tokens (strictly increasing per set of names). With several
//!   keys, `#[distributed_lock(keys = [...])]` is a multi lock of the
//!   attribute's kind over the global client.
//! - **Quorum locks.** [`QuorumLock`] is Redlock over independent masters,
//!   one client each: attempts on all of them at once, each bounded by a node
//!   timeout; it holds with `N/2 + 1` grants and validity left (lease −
//!   elapsed − 1% of the lease − 2 ms; for watchdog locks the lease is the
//!   smallest `watchdog_timeout`), else every grant is given back and, while
//!   `wait` lasts, it retries after a random pause. Failure is
//!   [`LockError::NoQuorum`], naming each node that was busy, timed out or
//!   failed. Each client's watchdog renews its node; the guard is lost when
//!   fewer than a majority of holds remain. Redlock trusts time: a holder
//!   paused past its validity, or a node whose clock jumps, can overlap with
//!   the next holder. Fencing covers that: the guard's token is the largest of
//!   the granting nodes' tokens, and the others are raised to it before the
//!   guard is returned, so any later majority (it shares a node) counts past
//!   it; storage that refuses older tokens refuses the stale holder.
//! - **Segmented locks.** Segment `i` of `name` is the reentrant lock
//!   `{name:seg:i}`: each segment is its own hash tag, so the segments spread
//!   over cluster slots, and each segment's derived keys share its slot. A
//!   name with `{` or `}` is refused. [`SegmentedLock::any`] tries each
//!   segment once from a start that rotates with every call, skipping those
//!   this client's tasks already hold or wait for, then waits on the segment
//!   where the fewest of them wait; [`SegmentedLock::all`] takes the segments
//!   in ascending order. Guards say which segment they hold, and each
//!   segment has its own fencing tokens.
//! - **Segmented stock.** [`Inventory::deduct`] deducts under one segment's
//!   lock when that segment has enough. Otherwise it releases that lock,
//!   reads every segment without locks (a sum short of the request answers
//!   [`InventoryError::Insufficient`]: stock only falls between restocks),
//!   retries under the lock of a segment that seemed to have enough, and
//!   else merges under every segment's lock, taken in ascending order. No
//!   buyer holds one segment while it waits for all of them, so merging
//!   buyers never deadlock. Counts are written only under their segment's
//!   lock, with its fencing token passed to the [`SegmentStore`];
//!   [`RedisSegmentStore`] keeps them as plain strings beside the locks.
//!   An inventory remembers which segments it last saw empty (a hint, never
//!   the basis of a sale or a refusal): buyers skip them, stop queueing for
//!   a segment another buyer emptied, and share one lock-free read of the
//!   segments, so a sold-out flood costs little. Share one [`Inventory`]
//!   per item (e.g. in an `Arc`) to share those hints.
//! - **Leases.** `lease` left out: the watchdog renews the lock every third of
//!   [`Config::watchdog_timeout`] (default 30 s) until release. A fixed
//!   `lease` is never renewed; the guard counts it from before the acquire
//!   call, less the safety margin, so it reports the loss before Redis
//!   expires the key.
//! - **Release.** Unlock is idempotent (Redisson's unlock latch) and retried on
//!   a connection error. A release counts once however late a copy of it
//!   reaches Redis (a request held in a partition can arrive long after its
//!   latch expired): while a holder has more than its first hold, its live
//!   holds are named beside the lock, in the HASH
//!   `redisson_lock_holds:{name}` (ours; field: the holder's field in the
//!   lock, value `' 0 t1 t2 '`: `0` its first hold, then each re-entry's
//!   fencing token), and a release names the hold it gives back and changes
//!   nothing when that hold is gone. No record means the first hold alone:
//!   its release counts, and a late copy of it finds no count (holder ids
//!   are never used again); a late copy of a re-entry's release finds its
//!   hold gone. The lock's own hash stays Redisson's layout throughout. The
//!   record lives at least as long as the lock (every script that lengthens
//!   the lock's life lengthens it too, the watchdog's renewals included) and
//!   goes with the holder's re-entries, so a lock nobody re-entered leaves
//!   none. The same holds for the give-backs of a reconcile, which resend
//!   under one request id for 16 minutes. Releasing a lock whose lease was lost returns
//!   [`LockError::Lost`] and never touches another holder's lock (a guard
//!   that counts as lost by its clock but whose hold the server still has
//!   gives it back, and still reports [`LockError::Lost`]). A dropped
//!   guard is released on the client's background thread; at process exit,
//!   a release still under way is abandoned and the lease expires on its own.
//! - **No thread hop, and cancellation.** Acquire and release calls run in
//!   the caller's task on the near connection of the caller's runtime
//!   (multi-thread and current-thread alike; one per runtime, made on its
//!   first lock call, on a single server and on a cluster): a round trip
//!   then wakes no other thread. Everything else (pub/sub, the watchdog,
//!   Sentinel's calls, a runtime's first call) runs on the client's own
//!   runtime thread. Either way a call whose caller
//!   left is finished without it, so dropping an acquire future never strands
//!   a half-taken lock: a hold that arrives for a caller who left is given
//!   back at once, and the local queue place and pub/sub interest go with the
//!   dropped future. What is left of such a call runs on the client's own
//!   runtime, never on the caller's (which nothing need drive again: a sync
//!   wrapper's current-thread runtime between two `block_on`s): a request it
//!   had in flight on the near connection counts as lost and is settled over
//!   the client's own connection (an acquire reconciled, a release retried
//!   with the same request id). The replica view (see Replica sync) is looked
//!   up on the client's own runtime and connection too, by one task, and no
//!   client-wide lock is held across a call on a caller's connection.
//!   As with any I/O driven by a current-thread runtime, do not block that
//!   runtime's thread on a lock call (`futures::executor::block_on` inside
//!   it): the near connection needs the thread to make progress.
//! - **The attribute.** The function's error type takes a [`LockError`]
//!   (`E: From<LockError>`). When the body succeeded but the release reports a
//!   lost lease, the call returns `Err(LockError::Lost)`: the body ran without
//!   the exclusion it relied on. A failed body keeps its own error.
//! - **Protocol.** The client speaks RESP3 (Redis 6 or newer): pub/sub
//!   messages arrive as push frames on the one multiplexed connection.
//!
//! # Topologies
//!
//! [`Config::new`] (one server), [`Config::sentinel`] (a master found and
//! followed through Sentinel) and [`Config::cluster`] (Redis Cluster) give the
//! same client, locks, builder knobs and `init`/`client()`.
//!
//! - **Sentinel.** The client asks the sentinels for the master and connects
//!   to it; when that connection breaks or the node answers `READONLY` (it was
//!   demoted), it asks them again, with backoff, until they name a master that
//!   answers as one. Commands meanwhile wait up to the connect timeout, then
//!   fail with [`LockError::Redis`]; subscriptions are made again on the new
//!   master.
//! - **Cluster.** Every key and channel of a lock shares the lock's slot
//!   (derived names wrap the name in `{}` unless it has a hash tag; a name
//!   with a brace but no usable tag is refused with [`LockError::BadName`]).
//!   Commands follow `MOVED`/`ASK` and are retried through a failover (about
//!   ten seconds, then an error). Because a command whose answer was lost is
//!   sent again, each acquisition on a cluster leaves an acquire latch
//!   (`redisson_lock_acquire_latch:{name}:<attempt id>`, 30 s) holding its
//!   token: a resent attempt answers the same instead of taking the lock a
//!   second time (unlocks have Redisson's unlock latch for the same reason).
//!   The watchdog renews per slot, all slots at once. Waiters use sharded pub/sub (`SSUBSCRIBE`, unlocks `SPUBLISH`) when
//!   every node runs Redis 7 or newer, classic pub/sub otherwise
//!   ([`Config::sharded_pubsub`] picks one, so that a fleet mixing Rust and
//!   Redisson clients agrees). A subscription follows its slot: it is made
//!   again when a node is lost (on the shard's promoted replica) and when a
//!   node drops it because the slot moved.
//! - **Replica sync.** After each acquisition the client waits (Redis
//!   `WAIT`) until one replica has it, when the lock's master has a healthy
//!   replica ([`ReplicaSync::Auto`], the default: online, and acknowledged
//!   within the last 2 s); none in
//!   [`Config::replica_sync_timeout`] gives the hold back and returns
//!   [`LockError::NotReplicated`]. A master whose replicas are all in
//!   trouble (a first sync, a partition, a stopped process) does not stop
//!   locking in Auto mode: the acquisition does not wait, is counted in
//!   `lock_replica_sync_skipped_total`, and a warning is logged once when a
//!   master's replicas turn unhealthy ([`ReplicaSync::Always`] refuses
//!   then). This closes the common hole (a failover
//!   right after an acquire promoting a replica that never saw it), not every
//!   one: [`Config::replica_sync`] lists what can still be lost. A lost lock
//!   is reported: the guard's [`LockGuard::lost`] resolves at the first
//!   renewal on the new master, and release returns [`LockError::Lost`].
//!
//! # Redis layout
//!
//! The keys, fields and channels are Redisson's (see the README), so Rust and
//! Java holders exclude each other and wake each other.

// Modules import downwards only. From the bottom up:
// - error, config, keys, holder, own, telemetry, background: plain parts;
// - conn (one file per topology, the near connections), then scripts (the
//   Lua files), pubsub and retry on top of it;
// - local (the in-process queues) and watchdog (the renewal registry and its
//   task, on a connection it is given);
// - client: `LockClient` and what its tasks share (`Core`);
// - hold: what one hold is on, the scripts that take and give it back,
//   handovers, and the reconciling of lost answers;
// - guard: a hold's lease and release (through `hold`);
// - lock: the builders and the acquire loop (which turns a taken hold into a
//   guard), and the kinds built on guards (multi, quorum, segmented);
// - inspect, inventory, global, private, cli: what users and the macros
//   call. The entry points (`LockClient::lock`, `::inspect`, ...) are
//   defined beside what they return, so `client` needs none of these.
// Data flows builder -> acquire loop -> script -> guard -> watchdog -> release.
mod background;
#[cfg(feature = "cli")]
pub mod cli;
mod client;
mod config;
mod conn;
mod engine;
mod error;
mod global;
mod guard;
mod hold;
mod holder;
mod inspect;
mod inventory;
mod keys;
mod local;
mod lock;
mod own;
mod pubsub;
mod request;
mod retry;
mod scripts;
mod telemetry;
mod watchdog;

#[doc(hidden)]
pub mod __private {
    //! Used by the macros' expansions; not a public API.
    pub use crate::private::*;
}
mod private;

pub use client::LockClient;
pub use config::{Config, DEFAULT_URL, MAX_DURATION, ReplicaSync};
pub use error::LockError;
pub use global::{client, init};
pub use guard::LockGuard;
pub use inspect::{HolderInfo, LockInfo, LockKind, RwMode};
pub use inventory::{
    Deduction, Inventory, InventoryError, RedisSegmentStore, SegmentKey, SegmentStore, StoreError,
};
pub use lock::LockBuilder;
pub use lock::multi::MultiLock;
pub use lock::quorum::QuorumLock;
pub use lock::read_write::ReadWriteLock;
pub use lock::segmented::{
    AllSegmentsBuilder, SegmentBuilder, SegmentGuard, SegmentedLock, SegmentsGuard,
};
pub use lock_macros::distributed_lock;
pub use lock_macros::segmented_lock;
pub use own::OwnGuard;
