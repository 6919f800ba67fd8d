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
use crate::request::Kind;

/// Which kind of contender a key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// A reentrant or fair lock's (and `etcdctl lock`'s).
    Mutex,
    /// A read-write lock's reader.
    Read,
    /// A read-write lock's writer.
    Write,
}

impl Side {
    /// The shared name of this side (see `turns::may_reenter`).
    pub(crate) fn access(self) -> crate::kept::Access {
        match self {
            Side::Mutex => crate::kept::Access::Mutex,
            Side::Read => crate::kept::Access::Read,
            Side::Write => crate::kept::Access::Write,
        }
    }

    /// The side a lock of `kind` takes (a fair lock's is a mutex's).
    pub(crate) fn of(kind: Kind) -> Side {
        match kind {
            Kind::Reentrant | Kind::Fair => Side::Mutex,
            Kind::Read => Side::Read,
            Kind::Write => Side::Write,
        }
    }

    /// The key of a contender on this side: a mutex key of its own (a
    /// fair waiter's) when `own`.
    pub(crate) fn key(self, name: &str, lease: i64, number: &str, own: bool) -> String {
        match self {
            Side::Mutex if own => format!("{name}/{lease:x}-{number}"),
            Side::Mutex => format!("{name}/{lease:x}"),
            Side::Read => format!("{name}/read/{lease:x}-{number}"),
            Side::Write => format!("{name}/write/{lease:x}-{number}"),
        }
    }

    /// The key ranges `[start, end)` whose earlier keys this side waits
    /// for.
    pub(crate) fn blockers(self, name: &str) -> Vec<(String, String)> {
        match self {
            Side::Mutex | Side::Write => vec![(prefix(name), prefix_end(name))],
            // Everything but the readers: before `<name>/read/`, and from
            // just after its range (`/` + 1 is `0`).
            Side::Read => vec![
                (prefix(name), format!("{name}/read/")),
                (format!("{name}/read0"), prefix_end(name)),
            ],
        }
    }

    /// The side of a contender key under `<name>/` (`rest` is what follows
    /// the prefix); `None` for a key that is not a contender's.
    pub(crate) fn of_key(rest: &str) -> Option<Side> {
        let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
        if let Some(own) = rest.strip_prefix("read/") {
            return own
                .split_once('-')
                .filter(|(l, _)| hex(l))
                .map(|_| Side::Read);
        }
        if let Some(own) = rest.strip_prefix("write/") {
            return own
                .split_once('-')
                .filter(|(l, _)| hex(l))
                .map(|_| Side::Write);
        }
        // A plain mutex key, or a fair waiter's.
        let lease = rest.split_once('-').map_or(rest, |(lease, number)| {
            match !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
                true => lease,
                false => "",
            }
        });
        hex(lease).then_some(Side::Mutex)
    }
}

/// The side of any key under `<name>/` (`rest` is what follows the
/// prefix) as acquisitions see it: a contender's own, else what its place
/// in the key space makes it. A key that is no contender's (`app/settings`
/// under lock `app`, put by hand or by another program) keeps every
/// acquisition out as a mutex key would, or, under `<name>/read/`,
/// writers only: `inspect` and `force_unlock` show it and clear it as
/// such, so the tools and acquisition agree on what blocks a lock.
pub(crate) fn side_of_any(rest: &str) -> Side {
    match Side::of_key(rest) {
        Some(side) => side,
        None if rest.starts_with("read/") => Side::Read,
        None => Side::Mutex,
    }
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
        assert_eq!(Side::Mutex.key("a", 0x1f, "7", false), "a/1f");
        assert_eq!(Side::Mutex.key("a", 0x1f, "7", true), "a/1f-7");
        assert_eq!(Side::Read.key("a", 0x1f, "7", false), "a/read/1f-7");
        assert_eq!(Side::of_key("1f"), Some(Side::Mutex));
        assert_eq!(Side::of_key("1f-7"), Some(Side::Mutex));
        assert_eq!(Side::of_key("read/1f-7"), Some(Side::Read));
        assert_eq!(Side::of_key("write/1f-7"), Some(Side::Write));
        for foreign in ["settings", "1f-", "1f-x", "-7", "read/x"] {
            assert_eq!(Side::of_key(foreign), None, "{foreign}");
        }
        assert_eq!(side_of_any("settings"), Side::Mutex);
        assert_eq!(side_of_any("read/x"), Side::Read);
    }
}
