//! Distributed locks for async Rust on Redis (compatible with Redisson), on
//! etcd (compatible with `etcdctl lock`), on ZooKeeper (compatible with
//! Apache Curator) and on PostgreSQL and MySQL/MariaDB (a table ShedLock
//! shares), with `#[distributed_lock]`.
//!
//! Add the dependency (each engine is a feature: `redis`, the default,
//! `etcd`, `zookeeper`, `postgres`, `mysql`; and `memory`, locks in the
//! process for tests, see the `memory` module), put the attribute on
//! a function, and run it with a client for your store's URL:
//!
//! ```toml
//! [dependencies]
//! # Redis: `lock-runtime = "0.1"`. Another store alone, without a Redis driver:
//! lock-runtime = { version = "0.1", default-features = false, features = ["postgres"] }
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
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
//! - [`LockClient`]: a client of one store (Redis, etcd, ZooKeeper,
//!   PostgreSQL or MySQL/MariaDB, picked by the URL's scheme), with one
//!   watchdog for its holds. [`LockClient::lock`] gives a reentrant lock
//!   (Redisson's `RLock`).
//! - [`LockGuard`]: proof of holding. [`LockGuard::token`] is a fencing token,
//!   strictly increasing per lock name; [`LockGuard::lost`] resolves when the
//!   lease is lost; [`LockGuard::release`] says whether the lease held.
//! - `#[distributed_lock]`: takes the lock around an `async fn`, with the key
//!   built from the function's parameters and checked at compile time.
//! - [`LockClient::semaphore`]: at most N holders of a name at once
//!   (DESIGN §11), on every engine; each permit is a hold as a lock's is
//!   (watchdog lease, loss, fencing token, re-entry in its scope), and
//!   each acquisition is admitted while fewer than its N permits are held.
//!   The attribute's `permits = N` takes one around an `async fn`.
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
//! - `redis` (default): the Redis engine (`redis://`, `rediss://`,
//!   `unix://` URLs, [`Config::sentinel`], [`Config::cluster`]), and what
//!   only Redis has: [`QuorumLock`], [`RedisSegmentStore`],
//!   [`Config::sharded_pubsub`]. `default-features = false` leaves the
//!   Redis driver out of the build.
//! - `etcd`, `zookeeper`, `postgres`, `mysql`: the etcd, ZooKeeper,
//!   PostgreSQL and MySQL/MariaDB engines (`etcd://`, `zk://`,
//!   `postgres://`, `mysql://` URLs; see "Engines").
//! - A URL of an engine the build does not have is [`LockError::Config`]
//!   naming the feature to enable. The shared layers (the lock family, the
//!   attribute, guards, `inspect`) build with any set of engines.
//! - `tls`: `rediss://` URLs (rustls with the ring provider), and with
//!   `etcd`, `etcds://` URLs (trusting the system's certificate store, where
//!   a cluster's private CA goes; `SSL_CERT_FILE` is honoured).
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
//!   [`LockError::Connect`] on every engine: the engine, the server's
//!   `host:port` (or the sentinels, the cluster seeds, the endpoints), where
//!   the address came from (`from Config`, `from REDIS_URL`, or the default
//!   when `REDIS_URL` is not set), and the reason in words (refused, no
//!   answer within the connect timeout, authentication failed, or a server
//!   that does not speak Redis). A URL that does not parse says what is
//!   wrong (no scheme, a scheme such as `http://`, a port that is no port).
//!   No message shows a password. A timeout after a zero wait reads "busy
//!   (one attempt)". [`LockError::is_transient`] tells a fault that may heal
//!   by itself (worth trying again later) from one that will not, and
//!   [`LockError::is_timeout`] a busy lock from a fault.
//! - **A failed `init` stays the configuration.** [`client`] then tries the
//!   configured server again (and reports its error); it never falls back
//!   to `REDIS_URL`. `init` may be called again after a failure.
//!
//! # Engines
//!
//! The URL's scheme picks the store; everything above (builders, guards,
//! the attribute, `inspect`/`force_unlock`, `lockctl`, metrics) is the same:
//!
//! - `redis://`, `rediss://`, [`Config::sentinel`], [`Config::cluster`]:
//!   Redis, in Redisson's layout (below). Fast; replication is
//!   asynchronous, so a failover can, rarely, hand a lock to a second
//!   holder (fence at the resource with [`LockGuard::token`]).
//! - `etcd://h:p,h:p` (`etcds://` with `tls`; feature `etcd`): etcd, in the
//!   layout of etcd's own lock recipe, so `etcdctl lock` and Go's
//!   `concurrency.Mutex` exclude us and we them. A hold survives a leader
//!   failover. Every lock is FIFO; quorum locks and replica sync are
//!   [`LockError::Unsupported`]; a lock name must not contain `/`.
//! - `zk://h:p,h:p/root` (feature `zookeeper`): ZooKeeper, in the layout of
//!   Apache Curator's `InterProcessMutex` and `InterProcessReadWriteLock`
//!   under the root (`/locks` when the URL has no path), so Java services
//!   on Curator exclude us and we them. The session timeout is
//!   [`Config::watchdog_timeout`]; a hold is lost by the guard's clock at
//!   the last answered call plus that timeout, before the server can
//!   expire the session. `lease(d)` is enforced by the holder (a holder
//!   that dies is bounded by the session timeout). Every lock is FIFO;
//!   quorum locks and replica sync are [`LockError::Unsupported`]; a lock
//!   name must not contain `/`, nor (ZooKeeper's own refusal) a character
//!   past U+FFFF such as an emoji. Semaphores keep the layout of Curator's
//!   `InterProcessSemaphoreV2` (its `locks` mutex and its `leases` under
//!   the name's node), so Curator's semaphores and ours share one bound: a
//!   permit is in once the leases number at most its N, and the
//!   acquisition that waits for room keeps the mutex meanwhile, the others
//!   queuing behind it in arrival order. A permit's token is its lease's
//!   `czxid`. `try_acquire` finds no permit while another acquisition
//!   keeps the mutex (as Curator's zero wait does); `inspect` counts a
//!   Curator client's waiting lease as a holder (it looks held). A name is
//!   one kind: a lock's contenders refuse a permit and a semaphore's
//!   leases refuse a lock ([`LockError::WrongType`]).
//! - `postgres://user:password@h:p/db` (`postgresql://` too; feature
//!   `postgres`): PostgreSQL, a row per held lock in one table with
//!   ShedLock's columns plus `fence` (`?table=NAME`, default
//!   `distributed_locks`, made when missing; `lockctl schema` prints its
//!   DDL for a role that may not). Every time is UTC by the database's
//!   clock. A release deletes its row, unless `?keep_rows=true`, which a
//!   table shared with ShedLock's JDBC provider **must** set (ShedLock
//!   inserts a name's row once, then only updates it). Waiters are woken by
//!   `LISTEN`/`NOTIFY`. Fair and read-write locks keep a line of tickets
//!   in a second table beside it (`<table>_queue`, made with it: arrival
//!   order for fair locks and writers, readers sharing one row); a role
//!   that may not make it still takes plain locks, and a fair or read-write
//!   lock then is [`LockError::Config`] with its DDL. Quorum locks and
//!   replica sync are [`LockError::Unsupported`]; a name with a NUL byte or
//!   longer than the `name` column is [`LockError::BadName`].
//! - `mysql://user:password@h:p/db` (`mariadb://` too; feature `mysql`):
//!   MySQL or MariaDB, the same table (times `DATETIME(6)` in UTC, names
//!   `utf8mb4_bin`), the same `table=` and `keep_rows=`. MySQL cannot
//!   notify: a waiter polls, starting at a few milliseconds and doubling up
//!   to [`Config::poll_cap`] (100 ms), so a release is noticed within
//!   about the cap, at about one statement per cap per waiting name and
//!   client. Besides PostgreSQL's bad names, a name ending with a space
//!   (MySQL compares `VARCHAR`s padded with spaces) or with a character
//!   outside the `name` column's character set is [`LockError::BadName`].
//!   A ShedLock table's `TIMESTAMP` columns are read and written in the
//!   server's default time zone, as ShedLock's own sessions do. Fair and
//!   read-write locks keep the same line as on PostgreSQL; their waiters
//!   poll too.
//!
//! The SQL engines share one caveat with Redis: a failover of the database
//! to an asynchronous replica can lose or duplicate a hold; the guard
//! learns it at its next renewal, and the fencing token is the defence.
//!
//! On etcd, ZooKeeper and the SQL engines, a plain `lock`'s acquisitions of one client and
//! name wait in the process behind one record in the store; a fair waiter
//! and a read-write waiter each have a record of their own, so `fair_lock`
//! serves one client's tasks and other clients in one arrival order. A
//! dropped acquisition (a `timeout`, a `select!`, a task aborted, its
//! client's last clone dropped with it, its runtime shut down) has its
//! record deleted by the client's own runtime, which runs until that is
//! done: the next contender gets the lock at once. Taking a lock never
//! writes the lock's own key or node. On etcd, every key under `<name>/`
//! keeps an acquisition out (as with etcd's own recipe), so `inspect` and
//! `force_unlock` show and clear one that no lock client made.
//!
//! [`Config::from_env`] reads `LOCK_URL` (any scheme), then `REDIS_URL`.
//! What each engine does, and why, is in the README's engine table.
//!
//! # Design decisions
//!
//! Why the library behaves as it does (who holds a lock, what a lease
//! means, how waiting, cancellation, faults and replicas are handled) is
//! written down in `docs/DECISIONS.md` in the repository.
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
//!   second time (unlocks have Redisson's unlock latch for the same reason:
//!   on a cluster every send of a release reads it, while on one server or
//!   through Sentinel, whose connections never resend, only a retry does;
//!   a late copy of a first send finds its hold already given back and
//!   changes nothing).
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
// - error, config, clock (the loss clock), holder (call-chain identity and
//   scopes), own, telemetry, background (the client's runtime thread),
//   request (what an acquisition asks for), kept (the hold on a record
//   per client and name, for etcd, ZooKeeper and the SQL engines: the
//   client's turns at a name, the record, the hold and its re-entries,
//   the acquisition, the undo of an abandoned one, one idea per file):
//   plain parts the engines use;
// - engine::seam: the trait every engine implements (`Engine`, its
//   `Hold`), naming only the plain parts above;
// - engine: one module per store behind the seam (`engine::redis`: its
//   connections, scripts, pub/sub, in-process queues, holds, acquire loop
//   and watchdog; `engine::etcd`, `engine::zookeeper`, `engine::postgres`
//   and `engine::mysql`, the last two over `engine::sql`), none importing
//   another; `engine/mod.rs` lists them once and generates the dispatch
//   over them (`Store`, `Connected`, `Held`, `Acquiring`; see
//   docs/ENGINES.md);
// - client: `LockClient`, which holds one `Connected` engine;
// - guard: `LockGuard` over `Held` holds;
// - lock: the builders, the acquisition every single-name kind shares
//   (which routes to the client's engine), and the kinds built on guards
//   (multi, quorum, segmented);
// - inspect, inventory, global, private, cli: what users and the macros
//   call. The entry points (`LockClient::lock`, `::inspect`, ...) are
//   defined beside what they return, so `client` needs none of these.
// Data flows builder -> engine's acquisition -> guard -> release.
#![cfg_attr(docsrs, feature(doc_cfg))]
// A build without any engine only shows that the shared layers compile on
// their own (CI checks it): no client can be made, so what would use the
// values is unreachable there. The builds with engines keep every lint.
#![cfg_attr(no_engine, allow(unused, unreachable_code, unreachable_patterns))]
// A build of the memory engine alone uses none of what only engines with a
// server need.
#![cfg_attr(no_server, allow(dead_code, unused_imports, unused_macros))]

mod background;
#[cfg(feature = "cli")]
#[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
pub mod cli;
mod client;
mod clock;
mod config;
mod engine;
mod error;
mod global;
mod guard;
mod holder;
mod info;
mod inspect;
mod inventory;
#[cfg(turns)]
mod kept;
mod lock;
#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub mod memory;
mod near;
mod own;
mod request;
mod telemetry;

#[doc(hidden)]
pub mod __private {
    //! Used by the macros' expansions; not a public API.
    pub use crate::private::*;

    /// For tests only: how many acquisitions of lock `name` by this
    /// process's clients of the SQL table `url` names (PostgreSQL's or
    /// MySQL's) wait for a release (a waiter there leaves no trace in the
    /// database).
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub fn sql_waiting(url: &str, name: &str) -> usize {
        match url.split_once("://").map(|(scheme, _)| scheme) {
            #[cfg(feature = "postgres")]
            Some("postgres" | "postgresql") => crate::engine::postgres::waiting(url, name),
            #[cfg(feature = "mysql")]
            Some("mysql" | "mariadb") => crate::engine::mysql::waiting(url, name),
            _ => 0,
        }
    }
}
mod private;

#[cfg(feature = "redis")]
#[doc(hidden)]
pub mod __scripts {
    //! The Lua the client runs for a reentrant acquisition, release and
    //! handoff, exactly as it sends it: for tests that call the scripts
    //! directly. Not a public API.
    pub use crate::engine::redis::scripts::texts::{HANDOFF, REENTRANT_ACQUIRE, UNLOCK};
}

pub use client::LockClient;
pub use config::{Config, DEFAULT_URL, MAX_DURATION, ReplicaSync};
pub use error::LockError;
pub use global::{client, init};
pub use guard::LockGuard;
pub use info::{HolderInfo, LockInfo, LockKind, RwMode};
#[cfg(feature = "redis")]
pub use inventory::RedisSegmentStore;
pub use inventory::{Deduction, Inventory, InventoryError, SegmentKey, SegmentStore, StoreError};
pub use lock::LockBuilder;
pub use lock::multi::MultiLock;
#[cfg(feature = "redis")]
pub use lock::quorum::QuorumLock;
pub use lock::read_write::ReadWriteLock;
pub use lock::segmented::{
    AllSegmentsBuilder, SegmentBuilder, SegmentGuard, SegmentedLock, SegmentsGuard,
};
pub use lock_macros::distributed_lock;
pub use lock_macros::segmented_lock;
pub use own::OwnGuard;
