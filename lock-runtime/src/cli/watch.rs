//! `lockctl watch`: the lock's state, then a line per change.

use std::io::Write;
use std::time::{Duration, Instant};

use super::render;
use crate::client::LockClient;
#[cfg(feature = "redis")]
use crate::engine::redis::keys;
use crate::error::LockError;
use crate::info::LockInfo;

/// Prints `name`'s state, then each change until Ctrl-C (or the output
/// closes): read every `interval`, and at once after an unlock message.
pub(super) async fn watch(
    client: &LockClient,
    name: &str,
    interval: Duration,
    out: &mut impl Write,
) -> Result<(), super::Failure> {
    crate::request::check_name(name)?;
    // On Redis, unlock messages of reentrant and fair locks, and of
    // read-write locks, wake the watch at once; other engines are read
    // every interval.
    let (mut lock_channel, mut rw_channel): (Option<Channel>, Option<Channel>) =
        match client.engine() {
            #[cfg(feature = "redis")]
            crate::engine::Connected::Redis(core) => (
                Some(core.pubsub.subscribe(keys::lock_channel(name)).await?),
                Some(core.pubsub.subscribe(keys::rw_channel(name)).await?),
            ),
            // Every other engine (none in a build of Redis alone).
            #[allow(unreachable_patterns)]
            _ => (None, None),
        };
    let mut state = client.inspect(name).await?;
    let started = Instant::now();
    writeln!(out, "watching {name} (Ctrl-C ends)")?;
    write!(out, "{}", render::info_text(name, state.as_ref()))?;
    out.flush()?;
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        for channel in [&mut lock_channel, &mut rw_channel].into_iter().flatten() {
            seen(channel);
        }
        let mut events = Vec::new();
        tokio::select! {
            _ = &mut stop => return Ok(()),
            () = changed(lock_channel.as_mut()) => events.push("unlock message: waiters woken".to_owned()),
            () = changed(rw_channel.as_mut()) => events.push("read-write unlock message: waiters woken".to_owned()),
            () = tokio::time::sleep(interval) => {}
        }
        let now = match client.inspect(name).await {
            Ok(now) => now,
            // Taken by something that is not a lock: say so and go on.
            Err(e @ LockError::WrongType { .. }) => {
                events.push(e.to_string());
                None
            }
            Err(e) => return Err(e.into()),
        };
        events.extend(changes(state.as_ref(), now.as_ref()));
        let at = started.elapsed().as_secs_f64();
        for event in events {
            writeln!(out, "+{at:.3}s  {event}")?;
        }
        out.flush()?;
        state = now;
    }
}

/// A channel whose messages wake the watch: Redis' unlock messages.
#[cfg(feature = "redis")]
type Channel = crate::engine::redis::pubsub::Subscription;
/// No engine but Redis has one.
#[cfg(not(feature = "redis"))]
type Channel = std::convert::Infallible;

/// Marks `channel`'s messages so far as seen.
fn seen(channel: &mut Channel) {
    #[cfg(feature = "redis")]
    channel.mark_seen();
    #[cfg(not(feature = "redis"))]
    match *channel {}
}

/// Resolves when `channel` has a message; never without a channel.
async fn changed(channel: Option<&mut Channel>) {
    match channel {
        #[cfg(feature = "redis")]
        Some(channel) => channel.changed().await,
        #[cfg(not(feature = "redis"))]
        Some(never) => match *never {},
        None => std::future::pending().await,
    }
}

/// What changed from `before` to `after`, a line each.
fn changes(before: Option<&LockInfo>, after: Option<&LockInfo>) -> Vec<String> {
    let mut lines = Vec::new();
    let no_holders = Vec::new();
    let old = before.map_or(&no_holders, |i| &i.holders);
    let new = after.map_or(&no_holders, |i| &i.holders);
    let lease = after.map(|i| render::ttl(i.ttl)).unwrap_or_default();
    for holder in new {
        let side = if holder.write { " (write)" } else { "" };
        match old
            .iter()
            .find(|h| h.id == holder.id && h.write == holder.write)
        {
            None => lines.push(format!(
                "acquired{side} by {} (count {}, lease {lease})",
                holder.id, holder.count
            )),
            Some(was) if holder.count > was.count => lines.push(format!(
                "re-entered{side} by {} (count {})",
                holder.id, holder.count
            )),
            Some(was) if holder.count < was.count => lines.push(format!(
                "released once{side} by {} (count {})",
                holder.id, holder.count
            )),
            Some(_) => {}
        }
    }
    for holder in old {
        if !new
            .iter()
            .any(|h| h.id == holder.id && h.write == holder.write)
        {
            let side = if holder.write { " (write)" } else { "" };
            lines.push(format!("released{side} by {}", holder.id));
        }
    }
    if before.is_some() && after.is_none() {
        lines.push("free".to_owned());
    }
    let no_queue = Vec::new();
    let queue_before = before.map_or(&no_queue, |i| &i.queue);
    let queue_after = after.map_or(&no_queue, |i| &i.queue);
    for waiter in queue_after {
        if !queue_before.contains(waiter) {
            lines.push(format!("queued: {waiter}"));
        }
    }
    for waiter in queue_before {
        if !queue_after.contains(waiter) {
            lines.push(format!("left the queue: {waiter}"));
        }
    }
    lines
}
