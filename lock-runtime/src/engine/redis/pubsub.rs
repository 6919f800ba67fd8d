//! One pub/sub path per client: unlock messages arrive as RESP3 push frames on
//! the client's single multiplexed connection, whatever the number of waiters
//! or lock names.
//!
//! A dispatcher task owns the table of subscribed channels, with a reference
//! count per channel: the first subscriber sends `SUBSCRIBE`, the last one to
//! leave sends `UNSUBSCRIBE`. Requests are handled in order, so an unsubscribe
//! and a later subscribe of the same channel cannot overtake each other. Each
//! message bumps a count that the channel's waiters compare with the last one
//! they saw, and wakes them. The
//! connection subscribes again after a reconnect (the cluster connection on
//! the node that now owns the channel's slot, see [`crate::engine::redis::conn`]); a sharded
//! subscription that a cluster node drops because the slot moved away is made
//! again here.
//!
//! **No subscription outlives its waiters.** A `SUBSCRIBE` or `UNSUBSCRIBE`
//! that fails may still have taken effect, or take effect later: a request
//! that timed out can still reach the server and be confirmed, and the
//! connection remembers every confirmed subscription and makes it again
//! after a reconnect. So a channel whose subscribe or unsubscribe failed, and
//! that no waiter wants, is kept as a *stray* and unsubscribed again, every
//! [`STRAY_SWEEP`] until that succeeds (an `UNSUBSCRIBE` of a channel not
//! subscribed is harmless). Requests keep their order, so a stray's
//! unsubscribe never overtakes a later subscribe of the same channel, and a
//! channel wanted again stops being a stray.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use redis::{PushInfo, PushKind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Notify, mpsc, oneshot};

use crate::engine::redis::conn::Conn;
use crate::error::LockError;

enum Request {
    Subscribe {
        channel: String,
        /// The subscription travels back whole: if the subscriber has gone
        /// (now, or before it reads the answer), dropping it unsubscribes.
        reply: oneshot::Sender<Result<Subscription, LockError>>,
    },
    Unsubscribe {
        channel: String,
    },
}

/// The client's handle on its dispatcher.
pub(crate) struct PubSub {
    requests: mpsc::UnboundedSender<Request>,
}

impl PubSub {
    /// Starts the dispatcher on the current (background) runtime.
    pub(crate) fn start(conn: Conn, pushes: mpsc::UnboundedReceiver<PushInfo>) -> PubSub {
        let (requests, inbox) = mpsc::unbounded_channel();
        // Weak: the dispatcher ends when the client's handle and every
        // subscription are gone.
        tokio::spawn(dispatch(conn, inbox, requests.downgrade(), pushes));
        PubSub { requests }
    }

    /// Subscribes to `channel` (or joins the existing subscription). Returns
    /// once the server has confirmed it, so no message sent afterwards is missed.
    pub(crate) async fn subscribe(&self, channel: String) -> Result<Subscription, LockError> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Request::Subscribe { channel, reply })
            .map_err(|_| LockError::Shutdown)?;
        answer.await.map_err(|_| LockError::Shutdown)?
    }
}

/// One waiter's interest in a channel; dropping it releases the interest.
pub(crate) struct Subscription {
    channel: String,
    messages: Arc<Messages>,
    /// The count of messages this subscriber has seen.
    seen: u64,
    requests: mpsc::UnboundedSender<Request>,
}

impl Subscription {
    /// Forgets the messages received so far: [`changed`](Self::changed) then
    /// waits for the next one. Call it before each retry.
    pub(crate) fn mark_seen(&mut self) {
        self.seen = self.messages.count.load(Ordering::Acquire);
    }

    /// Waits for a message published after the last [`mark_seen`](Self::mark_seen).
    /// Never returns when the dispatcher is gone (callers bound it with a timeout).
    pub(crate) async fn changed(&mut self) {
        loop {
            // Registered before the count is read: a message counted after
            // the read also wakes it.
            let message = self.messages.arrived.notified();
            let count = self.messages.count.load(Ordering::Acquire);
            if count != self.seen {
                self.seen = count;
                return;
            }
            message.await;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let _ = self.requests.send(Request::Unsubscribe {
            channel: std::mem::take(&mut self.channel),
        });
    }
}

struct Channel {
    subscribers: usize,
    messages: Arc<Messages>,
}

/// A channel's messages, counted, and the wake-up of its waiters. (Lighter
/// than a `watch` channel, which keeps eight wait lists: one of these is
/// made per subscribed channel.)
#[derive(Default)]
struct Messages {
    count: AtomicU64,
    arrived: Notify,
}

impl Messages {
    /// One more message (or a reason to retry): every waiter wakes.
    fn bump(&self) {
        self.count.fetch_add(1, Ordering::Release);
        self.arrived.notify_waiters();
    }

    /// A new subscriber, which has seen what came before it.
    fn subscriber(self: &Arc<Self>) -> (Arc<Messages>, u64) {
        (self.clone(), self.count.load(Ordering::Acquire))
    }
}

/// How often channels whose unsubscribe is owed are unsubscribed again.
const STRAY_SWEEP: Duration = Duration::from_millis(250);

async fn dispatch(
    mut conn: Conn,
    mut inbox: mpsc::UnboundedReceiver<Request>,
    requests: mpsc::WeakUnboundedSender<Request>,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
) {
    let mut channels: HashMap<String, Channel> = HashMap::new();
    let mut strays = Strays::default();
    loop {
        tokio::select! {
            biased;
            push = pushes.recv() => match push {
                Some(push) if conn.is_lost_subscription(&push) => {
                    resubscribe(&mut conn, &channels, push).await;
                }
                Some(push) if conn.is_lost_node(&push) => {
                    // Listen again wherever each channel's slot is served now
                    // (a duplicate subscription on a live node is harmless).
                    for channel in channels.keys() {
                        if let Err(e) = conn.subscribe(channel).await {
                            tracing::debug!(%channel, error = %e, "could not subscribe again after losing a node");
                        }
                    }
                }
                Some(push) => deliver(&channels, push),
                None => break,
            },
            request = inbox.recv() => match request {
                Some(Request::Subscribe { channel, reply }) => {
                    let messages = match channels.get_mut(&channel) {
                        Some(known) => {
                            known.subscribers += 1;
                            Ok(known.messages.subscriber())
                        }
                        None => {
                            strays.wanted(&channel);
                            match conn.subscribe(&channel).await {
                                Ok(()) => {
                                    let messages = Arc::new(Messages::default());
                                    let subscriber = messages.subscriber();
                                    channels.insert(channel.clone(), Channel { subscribers: 1, messages });
                                    Ok(subscriber)
                                }
                                Err(e) => {
                                    // It may have been (or be) confirmed all the same.
                                    strays.owe(channel.clone());
                                    Err(LockError::Redis(e))
                                }
                            }
                        }
                    };
                    let answer = match (messages, requests.upgrade()) {
                        (Ok((messages, seen)), Some(requests)) => Ok(Subscription {
                            channel: channel.clone(),
                            messages,
                            seen,
                            requests,
                        }),
                        (Ok(_), None) => {
                            // The client is gone: nobody will unsubscribe.
                            leave(&mut conn, &mut channels, &mut strays, channel).await;
                            Err(LockError::Shutdown)
                        }
                        (Err(e), _) => Err(e),
                    };
                    // A subscription the subscriber never takes (it gave up
                    // while we worked for it, or before it reads the answer)
                    // is dropped, which unsubscribes it.
                    let _ = reply.send(answer);
                }
                Some(Request::Unsubscribe { channel }) => {
                    leave(&mut conn, &mut channels, &mut strays, channel).await;
                }
                None => break,
            },
            () = tokio::time::sleep_until(strays.sweep_at), if !strays.owed.is_empty() => {
                strays.sweep(&mut conn).await;
            }
        }
    }
}

async fn leave(
    conn: &mut Conn,
    channels: &mut HashMap<String, Channel>,
    strays: &mut Strays,
    channel: String,
) {
    let Some(known) = channels.get_mut(&channel) else {
        return;
    };
    known.subscribers -= 1;
    if known.subscribers == 0 {
        channels.remove(&channel);
        if let Err(e) = conn.unsubscribe(&channel).await {
            tracing::debug!(%channel, error = %e, "unsubscribe failed; trying again until it succeeds");
            strays.owe(channel);
        }
    }
}

/// Channels no waiter wants whose unsubscribe is owed, and when to try
/// them again.
struct Strays {
    owed: HashSet<String>,
    sweep_at: tokio::time::Instant,
}

impl Default for Strays {
    fn default() -> Self {
        Strays {
            owed: HashSet::new(),
            sweep_at: tokio::time::Instant::now(),
        }
    }
}

impl Strays {
    /// `channel` must be unsubscribed again, at the next sweep.
    fn owe(&mut self, channel: String) {
        if self.owed.is_empty() {
            self.sweep_at = tokio::time::Instant::now() + STRAY_SWEEP;
        }
        self.owed.insert(channel);
    }

    /// `channel` is being subscribed for a waiter: nothing is owed for it.
    fn wanted(&mut self, channel: &str) {
        self.owed.remove(channel);
    }

    /// Unsubscribes the owed channels, until the connection fails (the rest
    /// wait for the next sweep). An unsubscribe that the server answers with
    /// an error (not a lost connection) will not do better later: it is
    /// given up.
    async fn sweep(&mut self, conn: &mut Conn) {
        self.sweep_at = tokio::time::Instant::now() + STRAY_SWEEP;
        let owed: Vec<String> = self.owed.iter().cloned().collect();
        for channel in owed {
            match conn.unsubscribe(&channel).await {
                Ok(()) => {}
                Err(e) if crate::engine::redis::conn::connection_lost(&e) => {
                    tracing::debug!(%channel, error = %e, "unsubscribe still failing; trying again later");
                    return;
                }
                Err(e) => {
                    tracing::warn!(%channel, error = %e, "could not unsubscribe a channel no waiter wants");
                }
            }
            self.owed.remove(&channel);
        }
    }
}

/// A cluster node dropped a sharded subscription we still need (its slot
/// moved): subscribe again, which reaches the slot's new owner, and wake the
/// channel's waiters so they retry there at once.
async fn resubscribe(conn: &mut Conn, channels: &HashMap<String, Channel>, push: PushInfo) {
    let Some(channel) = push
        .data
        .first()
        .and_then(|c| redis::from_redis_value_ref::<String>(c).ok())
    else {
        return;
    };
    let Some(known) = channels.get(&channel) else {
        // Our own unsubscribe, confirmed.
        return;
    };
    tracing::debug!(%channel, "the server dropped a sharded subscription; subscribing again");
    if let Err(e) = conn.subscribe(&channel).await {
        tracing::warn!(%channel, error = %e, "could not subscribe again; waiters poll at the holder's lease");
    }
    known.messages.bump();
}

fn deliver(channels: &HashMap<String, Channel>, push: PushInfo) {
    if !matches!(push.kind, PushKind::Message | PushKind::SMessage) {
        return;
    }
    let Some(message) = redis::Msg::from_push_info(push) else {
        return;
    };
    if let Some(known) = channels.get(message.get_channel_name()) {
        known.messages.bump();
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    #[tokio::test]
    async fn a_subscriber_wakes_once_per_message_it_has_not_seen() {
        let messages = Arc::new(Messages::default());
        messages.bump();
        let (requests, _inbox) = mpsc::unbounded_channel();
        let (shared, seen) = messages.subscriber();
        let mut subscription = Subscription {
            channel: "c".into(),
            messages: shared,
            seen,
            requests,
        };
        assert!(
            subscription.changed().now_or_never().is_none(),
            "a message from before it subscribed is seen"
        );
        messages.bump();
        assert!(subscription.changed().now_or_never().is_some());
        assert!(
            subscription.changed().now_or_never().is_none(),
            "each message wakes once"
        );

        // A message that arrives while it waits wakes it.
        let mut waiting = Box::pin(subscription.changed());
        assert!((&mut waiting).now_or_never().is_none());
        messages.bump();
        assert!(waiting.now_or_never().is_some());

        // mark_seen forgets what arrived before it.
        messages.bump();
        subscription.mark_seen();
        assert!(subscription.changed().now_or_never().is_none());
    }
}
