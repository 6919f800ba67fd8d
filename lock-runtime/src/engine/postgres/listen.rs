//! The client's one `LISTEN` connection, which carries every waiter's
//! wake-up: a release (and `force_unlock`, and a lease given back)
//! announces the lock's name on the table's channel in the statement that
//! frees it. Nothing is replayed after the connection is made again, so a
//! reconnect wakes every local waiter to look again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_postgres::AsyncMessage;

use crate::request::backoff;

/// Per lock name, the wake-ups of this client's waiters.
pub(crate) struct Listener {
    names: Mutex<HashMap<String, Weak<watch::Sender<u64>>>>,
    /// Bumped whenever the connection is (made) listening: every waiter
    /// looks again.
    epoch: watch::Sender<u64>,
    /// Dropped with the listener: its task ends, and its connection.
    _stop: watch::Sender<()>,
}

/// A task aborted when this is dropped.
struct Aborting(tokio::task::JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A waiter's wake-up for one name: changed by an announcement of the
/// name, or by the listener's reconnect.
pub(crate) struct Wake {
    name: watch::Receiver<u64>,
    epoch: watch::Receiver<u64>,
    _sender: Arc<watch::Sender<u64>>,
}

impl Wake {
    /// Resolves at the next announcement of the name, or reconnect, after
    /// this wake-up was made (or last resolved).
    pub(crate) async fn changed(&mut self) {
        tokio::select! {
            changed = self.name.changed() => { let _ = changed; }
            changed = self.epoch.changed() => {
                if changed.is_err() {
                    // The listener is gone (the client is shutting down):
                    // the waiter's own timers end the wait.
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// Whether the listener was listening when this wake-up was made (else
    /// the waiter cannot count on an announcement, and looks again soon).
    pub(crate) fn listening(&self) -> bool {
        *self.epoch.borrow() % 2 == 1
    }
}

impl Listener {
    /// Starts listening on `channel` with connections made by `connect`,
    /// on the current runtime, for as long as the returned listener lives.
    pub(crate) fn start<F, Fut>(channel: String, connect: F) -> Arc<Listener>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<super::Connected, tokio_postgres::Error>> + Send,
    {
        let (stop, mut stopped) = watch::channel(());
        let listener = Arc::new(Listener {
            names: Mutex::default(),
            epoch: watch::channel(0).0,
            _stop: stop,
        });
        let weak = Arc::downgrade(&listener);
        let listening = async move {
            let mut tries = 0;
            loop {
                if weak.strong_count() == 0 {
                    return;
                }
                let connected = connect().await;
                let Ok(super::Connected { client, connection }) = connected else {
                    tries += 1;
                    tokio::time::sleep(backoff(tries).max(Duration::from_millis(100))).await;
                    continue;
                };
                // The connection's messages, forwarded while it lives.
                let (notes, mut heard) = mpsc::unbounded_channel();
                let mut connection = connection;
                let driver = Aborting(tokio::spawn(async move {
                    let mut messages = std::pin::pin!(futures_util::stream::poll_fn(move |cx| {
                        connection.poll_message(cx)
                    }));
                    use futures_util::StreamExt as _;
                    while let Some(Ok(message)) = messages.next().await {
                        if let AsyncMessage::Notification(note) = message
                            && notes.send(note.payload().to_owned()).is_err()
                        {
                            return;
                        }
                    }
                }));
                let quoted = channel.replace('"', "\"\"");
                if client
                    .batch_execute(&format!("LISTEN \"{quoted}\""))
                    .await
                    .is_err()
                {
                    drop(driver);
                    tries += 1;
                    tokio::time::sleep(backoff(tries).max(Duration::from_millis(100))).await;
                    continue;
                }
                tries = 0;
                // Listening (odd): every waiter looks again.
                let Some(alive) = weak.upgrade() else {
                    return;
                };
                alive.epoch.send_modify(|e| *e += 1);
                drop(alive);
                while let Some(name) = heard.recv().await {
                    let Some(alive) = weak.upgrade() else {
                        return;
                    };
                    alive.announced(&name);
                }
                drop(driver);
                // The connection ended: not listening (even) until it is
                // made again.
                if let Some(alive) = weak.upgrade() {
                    alive.epoch.send_modify(|e| *e += 1);
                }
                drop(client);
            }
        };
        tokio::spawn(async move {
            tokio::select! {
                () = listening => {}
                // The listener was dropped (its client is gone).
                _ = stopped.changed() => {}
            }
        });
        listener
    }

    /// A wake-up for lock `name`, made before the waiter looks at the lock
    /// (so that no announcement after its look is missed).
    pub(crate) fn wake(&self, name: &str) -> Wake {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        let sender = match names.get(name).and_then(Weak::upgrade) {
            Some(sender) => sender,
            None => {
                if names.len() >= 64 && names.len().is_power_of_two() {
                    names.retain(|_, s| s.strong_count() > 0);
                }
                let sender = Arc::new(watch::channel(0).0);
                names.insert(name.to_owned(), Arc::downgrade(&sender));
                sender
            }
        };
        Wake {
            name: sender.subscribe(),
            epoch: self.epoch.subscribe(),
            _sender: sender,
        }
    }

    /// Lock `name` was announced free: its waiters look again.
    fn announced(&self, name: &str) {
        let sender = self
            .names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .and_then(Weak::upgrade);
        if let Some(sender) = sender {
            sender.send_modify(|n| *n += 1);
        }
    }
}
