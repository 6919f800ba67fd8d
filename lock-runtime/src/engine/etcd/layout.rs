//! Where a lock's contenders live in etcd's key space, and which of them
//! keep which out.
//!
//! Every key of lock `name` is under `<name>/`, and every contender is
//! served in create-revision order:
//!
//! | contender | key | waits for every earlier key that is |
//! | --- | --- | --- |
//! | mutex (`lock`, `etcdctl lock`) | `<name>/<lease hex>` | any |
//! | fair waiter (`fair_lock`) | `<name>/<lease hex>-<n>` | any |
//! | writer of a read-write lock | `<name>/write/<lease hex>-<n>` | any |
//! | reader of a read-write lock | `<name>/read/<lease hex>-<n>` | not a reader's |
//! | a semaphore's permit (`semaphore`) | `<name>/<lease hex>-<n>` | see below |
//!
//! A permit's key is a fair waiter's, its value the holder id followed by
//! ` permits <N>` (its acquisition's bound). It holds once fewer than its N
//! keys were created before it, all of them permits' (a lock's key before
//! it keeps it out, as it keeps every other contender out): the keys before
//! a permit that waits hold or wait themselves, so with one bound for the
//! name that is "fewer than N of them hold" (DESIGN §11), and whatever the
//! bounds, at most N hold when a permit of bound N is admitted. A lock's
//! contender sees a permit's key as any other key: it waits for it.
//!
//! `<n>` is the holder number (the second half of the holder id), so each
//! read-write and fair acquisition has a key of its own, known before its
//! create is sent. A plain mutex key is one per client and name: the
//! client's acquisitions queue in the process. A fair key is a mutex key
//! (it keeps every other out) with a place in line of its own, so arrival
//! order holds across one client's tasks too. `etcdctl lock <name>` sees the
//! read-write keys as contenders like its own, so it excludes readers and
//! writers alike, and they it.

use etcd_client::{GetOptions, SortOrder, SortTarget};

use crate::error::LockError;
use crate::kept::Access;
use crate::request::Kind;

// A contender key's side is an `Access`: a reentrant or fair lock's
// mutex key (as `etcdctl lock`'s), a reader's, a writer's.

/// The key of a contender on `side`: a mutex key of its own (a fair
/// waiter's) when `own`.
pub(crate) fn key(side: Access, name: &str, lease: i64, number: &str, own: bool) -> String {
    match side {
        Access::Mutex if own => format!("{name}/{lease:x}-{number}"),
        Access::Mutex => format!("{name}/{lease:x}"),
        Access::Read => format!("{name}/read/{lease:x}-{number}"),
        Access::Write => format!("{name}/write/{lease:x}-{number}"),
    }
}

/// The key ranges `[start, end)` whose earlier keys a contender on `side`
/// waits for.
pub(crate) fn blockers(side: Access, name: &str) -> Vec<(String, String)> {
    match side {
        Access::Mutex | Access::Write => vec![(prefix(name), prefix_end(name))],
        // Everything but the readers: before `<name>/read/`, and from
        // just after its range (`/` + 1 is `0`).
        Access::Read => vec![
            (prefix(name), format!("{name}/read/")),
            (format!("{name}/read0"), prefix_end(name)),
        ],
    }
}

/// The side of a contender key under `<name>/` (`rest` is what follows
/// the prefix); `None` for a key that is not a contender's.
pub(crate) fn side_of_key(rest: &str) -> Option<Access> {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    if let Some(own) = rest.strip_prefix("read/") {
        return own
            .split_once('-')
            .filter(|(l, _)| hex(l))
            .map(|_| Access::Read);
    }
    if let Some(own) = rest.strip_prefix("write/") {
        return own
            .split_once('-')
            .filter(|(l, _)| hex(l))
            .map(|_| Access::Write);
    }
    // A plain mutex key, or a fair waiter's.
    let lease = rest.split_once('-').map_or(rest, |(lease, number)| {
        match !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
            true => lease,
            false => "",
        }
    });
    hex(lease).then_some(Access::Mutex)
}

/// The side of any key under `<name>/` (`rest` is what follows the
/// prefix) as acquisitions see it: a contender's own, else what its place
/// in the key space makes it. A key that is no contender's (`app/settings`
/// under lock `app`, put by hand or by another program) keeps every
/// acquisition out as a mutex key would, or, under `<name>/read/`,
/// writers only: `inspect` and `force_unlock` show it and clear it as
/// such, so the tools and acquisition agree on what blocks a lock.
pub(crate) fn side_of_any(rest: &str) -> Access {
    match side_of_key(rest) {
        Some(side) => side,
        None if rest.starts_with("read/") => Access::Read,
        None => Access::Mutex,
    }
}

/// What a contender's key holds: its holder id, and for a semaphore's
/// permit, the acquisition's bound after it (` permits <N>`).
pub(crate) fn value(holder: &str, kind: Kind) -> String {
    match kind {
        Kind::Semaphore(permits) => format!("{holder}{PERMITS}{permits}"),
        _ => holder.to_owned(),
    }
}

/// The end of a key's value (its holder id) while the key is kept only by
/// a `hold_at_least` minimum.
pub(crate) const KEPT: &str = " kept";

/// What marks a permit's key value (see [`value`]).
const PERMITS: &str = " permits ";

/// The holder id and, for a permit's key, the bound of a key's value
/// written by [`value`] (its `hold_at_least` mark taken off first).
pub(crate) fn holder_and_permits(value: &str) -> (&str, Option<u32>) {
    match value.rsplit_once(PERMITS) {
        Some((holder, permits)) => match permits.parse() {
            Ok(permits) => (holder, Some(permits)),
            Err(_) => (value, None),
        },
        None => (value, None),
    }
}

/// Whether a permit of bound `permits` whose key's earlier keys have the
/// values `before` holds (see the module docs): fewer than `permits` of
/// them, every one a permit's.
pub(crate) fn admitted<'a>(
    mut before: impl ExactSizeIterator<Item = &'a [u8]>,
    permits: u32,
) -> bool {
    let fewer = u32::try_from(before.len()).is_ok_and(|n| n < permits);
    fewer && before.all(|value| bound_of(value).is_some())
}

/// The bound of a key's value when it is a permit's (see [`value`]),
/// kept by a `hold_at_least` minimum or not; `None` for any other key's.
pub(crate) fn bound_of(value: &[u8]) -> Option<u32> {
    let value = std::str::from_utf8(value).ok()?;
    holder_and_permits(strip_kept(value)).1
}

/// A key's value without its `hold_at_least` mark.
pub(crate) fn strip_kept(value: &str) -> &str {
    value.strip_suffix(KEPT).unwrap_or(value)
}

/// Refuses a name etcd cannot tell apart from another's.
pub(crate) fn check_name(name: &str) -> Result<(), LockError> {
    crate::request::check_name(name)?;
    if name.contains('/') {
        return Err(LockError::BadName {
            name: name.to_owned(),
            reason: "a name on etcd must not contain `/` (lock `a`'s keys `a/...` would \
                     include lock `a/b`'s)",
        });
    }
    Ok(())
}

/// The prefix under which lock `name`'s contenders live.
pub(crate) fn prefix(name: &str) -> String {
    [name, "/"].concat()
}

/// The end of [`prefix`]'s range (`/` + 1 is `0`).
fn prefix_end(name: &str) -> String {
    [name, "0"].concat()
}

/// Reads the first (`Ascend`) or last (`Descend`) created key of
/// `range`, only among keys created at or before `max_create` if set.
pub(crate) fn one_of(
    range: &(String, String),
    order: SortOrder,
    max_create: Option<i64>,
) -> (String, GetOptions) {
    let options = GetOptions::new()
        .with_range(range.1.as_str())
        .with_sort(SortTarget::Create, order)
        .with_limit(1);
    let options = match max_create {
        Some(max) => options.with_max_create_revision(max),
        None => options,
    };
    (range.0.clone(), options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contender_keys_and_their_sides() {
        assert_eq!(key(Access::Mutex, "a", 0x1f, "7", false), "a/1f");
        assert_eq!(key(Access::Mutex, "a", 0x1f, "7", true), "a/1f-7");
        assert_eq!(key(Access::Read, "a", 0x1f, "7", false), "a/read/1f-7");
        assert_eq!(side_of_key("1f"), Some(Access::Mutex));
        assert_eq!(side_of_key("1f-7"), Some(Access::Mutex));
        assert_eq!(side_of_key("read/1f-7"), Some(Access::Read));
        assert_eq!(side_of_key("write/1f-7"), Some(Access::Write));
        for foreign in ["settings", "1f-", "1f-x", "-7", "read/x"] {
            assert_eq!(side_of_key(foreign), None, "{foreign}");
        }
        assert_eq!(side_of_any("settings"), Access::Mutex);
        assert_eq!(side_of_any("read/x"), Access::Read);
    }

    #[test]
    fn a_permits_value_carries_its_bound_and_admits_by_the_keys_before_it() {
        let v = value("c:7", Kind::Semaphore(3));
        assert_eq!(v, "c:7 permits 3");
        assert_eq!(holder_and_permits(&v), ("c:7", Some(3)));
        assert_eq!(holder_and_permits("c:7"), ("c:7", None));
        assert_eq!(value("c:7", Kind::Fair), "c:7");
        let permit: &[u8] = b"a:1 permits 3";
        let kept: &[u8] = b"a:2 permits 3 kept";
        let lock: &[u8] = b"a:3";
        assert!(admitted([].into_iter(), 1));
        assert!(admitted([permit, kept].into_iter(), 3));
        assert!(!admitted([permit, kept, permit].into_iter(), 3));
        assert!(
            !admitted([permit, lock].into_iter(), 3),
            "a lock's key keeps it out"
        );
        assert!(
            !admitted([b"".as_slice()].into_iter(), 3),
            "etcdctl's key keeps it out"
        );
    }
}
