//! A loopback TCP proxy for fault tests: a client pointed at
//! [`Proxy::url`] reaches the server behind it, and the test decides when
//! the link between them stalls ([`Proxy::stall`]), flows again
//! ([`Proxy::resume`]) or breaks ([`Proxy::cut`]).
//!
//! The proxy runs its tasks on a runtime of its own (one worker thread), so
//! it keeps forwarding whatever the test's runtime does: a current-thread
//! `#[tokio::test]` awaiting something else, a `block_on`, or a blocked
//! thread. Dropping the proxy stops it: the listener and every connection
//! are closed.
//!
//! Bytes are passed on in the order the proxy read them, across all its
//! connections (one forwarder writes every chunk): after a stall, what was
//! held back reaches the peers in the order it was sent, so a request sent
//! before another on a second connection of the same client also arrives
//! first. That makes a stall's outcome repeatable. (The price: a peer that
//! stops reading holds up every connection; Redis and its clients always
//! read.)
//!
//! ```no_run
//! # async fn demo() {
//! use tests::{Server, proxy::Proxy};
//!
//! let server = Server::start();
//! let proxy = Proxy::start(server.port());
//! let client = lock_runtime::LockClient::connect(lock_runtime::Config::new(proxy.url()))
//!     .await
//!     .unwrap();
//! proxy.stall(); // requests and answers are held back from here on...
//! proxy.resume(); // ...and delivered, in order, from here on.
//! proxy.cut(); // every current connection is closed; new ones are accepted.
//! proxy.refuse(); // cut, and connecting is refused (the port is closed)...
//! proxy.accept(); // ...until this.
//! proxy.stall_on(b"SUBSCRIBE"); // stalls when a chunk with these bytes comes
//! # drop(client);
//! # }
//! ```

use std::sync::{Arc, Weak};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, mpsc, oneshot, watch};

/// A TCP proxy on a free loopback port in front of `127.0.0.1:<upstream>`.
/// See the [module docs](self).
pub struct Proxy {
    port: u16,
    /// `true` while stalled.
    stalled: Arc<watch::Sender<bool>>,
    /// Bytes whose arrival stalls the proxy (see [`stall_on`](Self::stall_on)).
    trigger: Trigger,
    /// `true` while connecting is refused.
    refusing: watch::Sender<bool>,
    /// Bumped by every [`cut`](Self::cut); connections close when it moves,
    /// and when it is dropped (the proxy is stopped).
    cuts: watch::Sender<u64>,
    /// Bytes read from one side and not yet written to the other.
    held: Arc<watch::Sender<usize>>,
    /// `None` once stopped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Proxy {
    /// Starts a proxy in front of `127.0.0.1:<upstream_port>`, listening on
    /// a free loopback port. It accepts connections as soon as this returns.
    /// Each accepted connection gets its own connection to the upstream, and
    /// bytes are forwarded both ways (a half-close is passed on too).
    ///
    /// Panics (failing the test) when no port or runtime can be had.
    pub fn start(upstream_port: u16) -> Proxy {
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port for the proxy");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let port = listener.local_addr().expect("the proxy's address").port();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("test-proxy")
            .enable_all()
            .build()
            .expect("the proxy's runtime");
        let stalled = Arc::new(watch::channel(false).0);
        let trigger = Trigger::default();
        let (refusing, refusing_rx) = watch::channel(false);
        let (cuts, cuts_rx) = watch::channel(0u64);
        let held = Arc::new(watch::channel(0usize).0);
        let (jobs_in, jobs) = mpsc::unbounded_channel();
        runtime.spawn(forwarder(jobs, stalled.clone(), trigger.clone()));
        runtime.spawn(accept_loop(
            listener,
            Accept {
                upstream: upstream_port,
                jobs: jobs_in,
                cuts: cuts_rx,
                held: held.clone(),
                refusing: refusing_rx,
            },
        ));
        Proxy {
            port,
            stalled,
            trigger,
            refusing,
            cuts,
            held,
            runtime: Some(runtime),
        }
    }

    /// `redis://127.0.0.1:<port>`: the proxy's address as a Redis URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The loopback port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops forwarding, in both directions and on every connection
    /// (current and new), without closing anything: the peers see a silent
    /// link. The proxy keeps reading what they send and holds it back; after
    /// [`resume`](Self::resume) it is delivered, in order. A write already
    /// under way when this is called may still complete (like bytes already
    /// on the wire).
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    /// Forwards again, starting with what was held back while stalled.
    pub fn resume(&self) {
        self.stalled.send_replace(false);
    }

    /// Arms a trigger: the first chunk read (either way) that contains
    /// `needle` stalls the proxy before it is written, as
    /// [`stall`](Self::stall) would, so a test can hold back one particular
    /// request (`b"SUBSCRIBE"`, `b"EVALSHA"`) and everything after it. The
    /// trigger fires once; [`resume`](Self::resume) delivers as usual.
    pub fn stall_on(&self, needle: &[u8]) {
        *self.trigger.lock() = Some(needle.to_vec());
    }

    /// Whether an armed [`stall_on`](Self::stall_on) trigger has fired.
    pub fn triggered(&self) -> bool {
        self.trigger.lock().is_none() && *self.stalled.borrow()
    }

    /// Cuts every connection and closes the listening port: connecting is
    /// refused (`ECONNREFUSED`), as with a server that is down, until
    /// [`accept`](Self::accept).
    pub fn refuse(&self) {
        self.refusing.send_replace(true);
        self.cut();
    }

    /// Listens again on the same port after [`refuse`](Self::refuse).
    pub fn accept(&self) {
        self.refusing.send_replace(false);
    }

    /// Closes every current connection, both sides (bytes held back on them
    /// are dropped). Connections accepted afterwards are forwarded as usual.
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// How many bytes the proxy has read and not yet delivered (held back
    /// by a stall, or in transit).
    pub fn held_back(&self) -> usize {
        *self.held.borrow()
    }

    /// Resolves when nothing is held back any more: every byte the proxy has
    /// read has been written on (or dropped by a [`cut`](Self::cut)). After
    /// [`resume`](Self::resume), this is when the requests held by a stall
    /// have reached the server. Bound it with a timeout: it never resolves
    /// while stalled with bytes held.
    pub async fn flushed(&self) {
        let mut held = self.held.subscribe();
        // The sender lives as long as `self`: this cannot fail.
        let _ = held.wait_for(|n| *n == 0).await;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Every connection closes on this; shutting the runtime down
        // (without blocking: this may run inside a runtime) closes the
        // listener.
        self.cuts.send_modify(|n| *n += 1);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("port", &self.port)
            .field("stalled", &*self.stalled.borrow())
            .field("held_back", &self.held_back())
            .finish()
    }
}

/// The sending side of one direction of one connection. Owned by its
/// connection's task: a cut drops it (closing the socket) even while jobs
/// for it wait in the forwarder's queue.
type Outlet = Arc<Mutex<OwnedWriteHalf>>;

/// What the forwarder does next, in the order the proxy read it.
enum Job {
    /// Write these bytes.
    Data(Weak<Mutex<OwnedWriteHalf>>, Chunk),
    /// The other side half-closed: pass it on, then say so.
    End(Weak<Mutex<OwnedWriteHalf>>, oneshot::Sender<()>),
}

/// Bytes read and not yet written; counted in `held` while they live.
struct Chunk {
    bytes: Vec<u8>,
    held: Arc<watch::Sender<usize>>,
}

impl Chunk {
    fn new(bytes: Vec<u8>, held: &Arc<watch::Sender<usize>>) -> Chunk {
        held.send_modify(|n| *n += bytes.len());
        Chunk {
            bytes,
            held: held.clone(),
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        let len = self.bytes.len();
        self.held.send_modify(|n| *n -= len);
    }
}

/// The bytes that stall the proxy when they arrive, while armed.
#[derive(Clone, Default)]
struct Trigger(Arc<std::sync::Mutex<Option<Vec<u8>>>>);

impl Trigger {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<u8>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `bytes` fire the trigger (which disarms it).
    fn fires(&self, bytes: &[u8]) -> bool {
        let mut armed = self.lock();
        let hit = armed
            .as_deref()
            .is_some_and(|needle| bytes.windows(needle.len()).any(|w| w == needle));
        if hit {
            *armed = None;
        }
        hit
    }
}

/// Writes every chunk of every connection, one at a time in the order they
/// were read, and none while stalled.
async fn forwarder(
    mut jobs: mpsc::UnboundedReceiver<Job>,
    stall: Arc<watch::Sender<bool>>,
    trigger: Trigger,
) {
    let mut stalled = stall.subscribe();
    while let Some(job) = jobs.recv().await {
        if let Job::Data(_, chunk) = &job
            && trigger.fires(&chunk.bytes)
        {
            stall.send_replace(true);
        }
        if stalled.wait_for(|stalled| !*stalled).await.is_err() {
            return;
        }
        match job {
            Job::Data(to, chunk) => {
                // Gone: cut (the chunk is dropped).
                if let Some(to) = to.upgrade() {
                    // A failed write means the peer left; its reader ends too.
                    let _ = to.lock().await.write_all(&chunk.bytes).await;
                }
            }
            Job::End(to, done) => {
                if let Some(to) = to.upgrade() {
                    let _ = to.lock().await.shutdown().await;
                }
                let _ = done.send(());
            }
        }
    }
}

/// What the accept loop passes to each connection it accepts.
struct Accept {
    upstream: u16,
    jobs: mpsc::UnboundedSender<Job>,
    cuts: watch::Receiver<u64>,
    held: Arc<watch::Sender<usize>>,
    refusing: watch::Receiver<bool>,
}

async fn accept_loop(listener: std::net::TcpListener, mut with: Accept) {
    let port = listener.local_addr().expect("the proxy's address").port();
    let mut listener = Some(TcpListener::from_std(listener).expect("the proxy's listener"));
    loop {
        let Some(open) = &listener else {
            // Refusing: the port stays closed until told to accept again.
            if with.refusing.wait_for(|refusing| !*refusing).await.is_err() {
                return;
            }
            // The port was ours a moment ago; take it back (SO_REUSEADDR).
            listener = TcpListener::bind(("127.0.0.1", port)).await.ok();
            if listener.is_none() {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            continue;
        };
        let accepted = tokio::select! {
            accepted = open.accept() => accepted,
            refusing = with.refusing.wait_for(|refusing| *refusing) => {
                if refusing.is_err() {
                    return;
                }
                listener = None;
                continue;
            }
        };
        let Ok((downstream, _)) = accepted else {
            continue;
        };
        // Subscribed at accept: a later cut closes this connection.
        let mut cut = with.cuts.clone();
        cut.borrow_and_update();
        tokio::spawn(relay(
            downstream,
            with.upstream,
            with.jobs.clone(),
            cut,
            with.held.clone(),
        ));
    }
}

/// Forwards one accepted connection until both directions have ended and
/// been passed on, or a cut.
async fn relay(
    downstream: TcpStream,
    upstream: u16,
    jobs: mpsc::UnboundedSender<Job>,
    mut cut: watch::Receiver<u64>,
    held: Arc<watch::Sender<usize>>,
) {
    let forward = async {
        let Ok(upstream) = TcpStream::connect(("127.0.0.1", upstream)).await else {
            return;
        };
        let _ = downstream.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let (down_read, down_write) = downstream.into_split();
        let (up_read, up_write) = upstream.into_split();
        let down_write: Outlet = Arc::new(Mutex::new(down_write));
        let up_write: Outlet = Arc::new(Mutex::new(up_write));
        tokio::join!(
            read_side(down_read, &up_write, &jobs, &held),
            read_side(up_read, &down_write, &jobs, &held),
        );
    };
    tokio::select! {
        () = forward => {}
        // A cut, or the proxy dropped: the sockets close with this future.
        _ = cut.changed() => {}
    }
}

/// Reads one side to its end, queueing what it reads for `to`; then waits
/// until the forwarder has passed the end on. Always reading (even while
/// stalled) keeps held-back bytes here, in order, not in the sender's socket.
async fn read_side(
    mut from: OwnedReadHalf,
    to: &Outlet,
    jobs: &mpsc::UnboundedSender<Job>,
    held: &Arc<watch::Sender<usize>>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let chunk = Chunk::new(buf[..n].to_vec(), held);
                if jobs.send(Job::Data(Arc::downgrade(to), chunk)).is_err() {
                    return;
                }
            }
        }
    }
    let (done, passed_on) = oneshot::channel();
    if jobs.send(Job::End(Arc::downgrade(to), done)).is_ok() {
        let _ = passed_on.await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::Proxy;
    use crate::{Server, eventually};

    const WITHIN: Duration = Duration::from_secs(10);

    /// Reads exactly `len` bytes (bounded by [`WITHIN`]).
    async fn read_exactly(stream: &mut TcpStream, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        tokio::time::timeout(WITHIN, stream.read_exact(&mut buf))
            .await
            .expect("the answer never came")
            .expect("read");
        buf
    }

    #[tokio::test]
    async fn a_stall_holds_bytes_back_and_resume_delivers_them_in_order() {
        let server = Server::start();
        let proxy = Proxy::start(server.port());
        let mut link = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        link.write_all(b"PING\r\n").await.unwrap();
        assert_eq!(read_exactly(&mut link, 7).await, b"+PONG\r\n");

        proxy.stall();
        link.write_all(b"ECHO one\r\nECHO two\r\n").await.unwrap();
        let held = &proxy;
        eventually("the proxy holds the requests", WITHIN, || async move {
            held.held_back() > 0
        })
        .await;
        let mut byte = [0u8; 1];
        assert!(
            tokio::time::timeout(Duration::from_millis(300), link.read(&mut byte))
                .await
                .is_err(),
            "nothing passes a stalled proxy"
        );
        proxy.resume();
        assert_eq!(
            read_exactly(&mut link, 18).await,
            b"$3\r\none\r\n$3\r\ntwo\r\n"
        );
        tokio::time::timeout(WITHIN, proxy.flushed())
            .await
            .expect("flushed after resume");
    }

    #[tokio::test]
    async fn a_cut_closes_current_connections_and_new_ones_still_work() {
        let server = Server::start();
        let proxy = Proxy::start(server.port());
        let mut old = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        old.write_all(b"PING\r\n").await.unwrap();
        assert_eq!(read_exactly(&mut old, 7).await, b"+PONG\r\n");

        proxy.cut();
        let mut byte = [0u8; 1];
        let closed = tokio::time::timeout(WITHIN, old.read(&mut byte))
            .await
            .expect("the cut connection was closed");
        assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");

        let mut new = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        new.write_all(b"PING\r\n").await.unwrap();
        assert_eq!(read_exactly(&mut new, 7).await, b"+PONG\r\n");
    }
}
