//! Redis key and channel names of the Redisson layout (DESIGN §4).
//!
//! Derived keys wrap the lock name in `{}` so that, in a cluster, they share
//! the slot of the lock's own key; a name that already contains `{` carries
//! its own hash tag and is used as it is.

/// `prefix`, then `{name}` (or `name` when it already has a hash tag), then
/// `rest`: one allocation, no formatting machinery (these run on every
/// acquire and release; `format!` cost several times as much, issue 11).
fn key(prefix: &str, name: &str, rest: &[&str]) -> String {
    let tag = !name.contains('{');
    let len = prefix.len() + name.len() + 2 + rest.iter().map(|r| r.len()).sum::<usize>();
    let mut key = String::with_capacity(len);
    key.push_str(prefix);
    if tag {
        key.push('{');
    }
    key.push_str(name);
    if tag {
        key.push('}');
    }
    rest.iter().for_each(|r| key.push_str(r));
    key
}

/// `{name}`, or `name` when it already has a hash tag.
pub(crate) fn tagged(name: &str) -> String {
    key("", name, &[])
}

/// The unlock channel of reentrant and fair locks.
pub(crate) fn lock_channel(name: &str) -> String {
    key("redisson_lock__channel:", name, &[])
}

/// The fencing token counter.
pub(crate) fn token_key(name: &str) -> String {
    key("redisson_lock_token:", name, &[])
}

/// The key that remembers the result of unlock request `request`.
pub(crate) fn unlock_latch(name: &str, request: &str) -> String {
    key("redisson_unlock_latch:", name, &[":", request])
}

/// The latch of acquire attempt `attempt` (see `scripts/acquire_latch.lua`):
/// the token it took, on a cluster and for re-entries, or `abandoned` once
/// its caller gave up on a lost answer. Not part of Redisson's layout;
/// Redisson never reads it.
pub(crate) fn acquire_latch(name: &str, attempt: &str) -> String {
    key("redisson_lock_acquire_latch:", name, &[":", attempt])
}

/// The live holds of holders that re-entered the lock (see
/// `scripts/holds.lua`): a HASH of holder field to the holds it names. Not
/// part of Redisson's layout; Redisson never reads it.
pub(crate) fn holds_key(name: &str) -> String {
    key("redisson_lock_holds:", name, &[])
}

/// The fair lock's waiting queue.
pub(crate) fn fair_queue(name: &str) -> String {
    key("redisson_lock_queue:", name, &[])
}

/// The fair lock's waiter timeouts.
pub(crate) fn fair_timeouts(name: &str) -> String {
    key("redisson_lock_timeout:", name, &[])
}

/// The channel on which fair-lock waiter `holder` is woken.
pub(crate) fn fair_waiter_channel(name: &str, holder: &str) -> String {
    key("redisson_lock__channel:", name, &[":", holder])
}

/// A semaphore's channel (Redisson's name for it): a freed permit is
/// announced there.
pub(crate) fn semaphore_channel(name: &str) -> String {
    key("redisson_sc:", name, &[])
}

/// The read-write lock's channel.
pub(crate) fn rw_channel(name: &str) -> String {
    key("redisson_rwlock:", name, &[])
}

/// The prefix of a read-write lock's per-hold timeout keys:
/// `{name}:<holder>:rwlock_timeout`, followed by `:<k>`.
pub(crate) fn rw_timeout_prefix(name: &str, holder: &str) -> String {
    key("", name, &[":", holder, ":rwlock_timeout"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_keys_share_the_hash_tag() {
        assert_eq!(lock_channel("stock:1"), "redisson_lock__channel:{stock:1}");
        assert_eq!(token_key("a{b}c"), "redisson_lock_token:a{b}c");
        assert_eq!(unlock_latch("n", "r1"), "redisson_unlock_latch:{n}:r1");
        assert_eq!(rw_timeout_prefix("doc", "u:1"), "{doc}:u:1:rwlock_timeout");
        assert_eq!(
            acquire_latch("n", "c:r2"),
            "redisson_lock_acquire_latch:{n}:c:r2"
        );
        assert_eq!(
            fair_waiter_channel("f", "c:3"),
            "redisson_lock__channel:{f}:c:3"
        );
        assert_eq!(fair_queue("x{1}"), "redisson_lock_queue:x{1}");
        assert_eq!(rw_channel("doc"), "redisson_rwlock:{doc}");
        assert_eq!(semaphore_channel("api"), "redisson_sc:{api}");
    }
}
