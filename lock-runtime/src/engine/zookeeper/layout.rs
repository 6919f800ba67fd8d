//! Where a lock's contenders live in ZooKeeper, as Curator's recipes lay
//! them out, and which of them keep which out.
//!
//! Lock `name` is the node `<root>/<name>`; every contender is an
//! `EPHEMERAL_SEQUENTIAL` child of it, served in sequence order:
//!
//! | contender | child | waits for every earlier child that is |
//! | --- | --- | --- |
//! | mutex (`lock`, `fair_lock`; Curator's `InterProcessMutex`) | `_c_<uuid>-lock-<seq>` | any |
//! | writer (Curator's `InterProcessReadWriteLock`) | `_c_<uuid>-__WRIT__<seq>` | any |
//! | reader (the same) | `_c_<uuid>-__READ__<seq>` | a writer |
//!
//! `<seq>` is the ten digits ZooKeeper appends; `_c_<uuid>-` is Curator's
//! "protected" prefix, a fresh one per create: a create whose answer was
//! lost is found again by it. Curator sorts children on what follows the
//! marker (`lock-`, `__READ__`, `__WRIT__`), which is the sequence; so do we.
//!
//! A semaphore `name` is Curator's `InterProcessSemaphoreV2` at the same
//! node `<root>/<name>`: two children of it, made as containers,
//!
//! | child | what | its children |
//! | --- | --- | --- |
//! | `locks` | the mutex that lets one acquisition at a time add a lease (an `InterProcessMutex`) | `_c_<uuid>-lock-<seq>`, as a lock's mutex contenders |
//! | `leases` | the permits | `_c_<uuid>-lease-<seq>`, one per permit held, and one for the acquisition that holds the mutex while it waits for room |
//!
//! Neither name is a contender's, so a lock's contenders and a
//! semaphore's children never pass for each other.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::LockError;
use crate::kept::Access;

/// The mutex marker (Curator's `InterProcessMutex` lock name).
const MUTEX: &str = "lock-";
/// The reader marker of Curator's `InterProcessReadWriteLock`.
const READ: &str = "__READ__";
/// The writer marker of Curator's `InterProcessReadWriteLock`.
const WRITE: &str = "__WRIT__";

// A contender child's side is an `Access`: a reentrant or fair lock's
// mutex (and Curator's `InterProcessMutex`'s), a reader, a writer.

/// The marker of a contender on `side` (Curator's lock names).
fn marker(side: Access) -> &'static str {
    match side {
        Access::Mutex => MUTEX,
        Access::Read => READ,
        Access::Write => WRITE,
    }
}

/// The path a contender on `side` is created at (ZooKeeper appends the
/// sequence), under `lock`'s node, with the protected `id`.
pub(crate) fn create_path(side: Access, lock: &str, id: &str) -> String {
    format!("{lock}/{}{id}-{}", PROTECTED, marker(side))
}

/// Whether a contender on `side` waits for an earlier one on `other`:
/// readers share only with readers.
pub(crate) fn waits_for(side: Access, other: Access) -> bool {
    side != Access::Read || other != Access::Read
}

/// Curator's protected prefix, before the create's id.
const PROTECTED: &str = "_c_";

/// The child of a semaphore's node that is its mutex (Curator's
/// `InterProcessSemaphoreV2`).
pub(crate) const LOCKS: &str = "locks";
/// The child of a semaphore's node whose children are its leases.
pub(crate) const LEASES: &str = "leases";
/// The name of a lease before its sequence (Curator's).
const LEASE: &str = "lease-";

/// The path a lease is created at under `leases` (the semaphore's
/// `leases` node), with the protected `id`.
pub(crate) fn lease_path(leases: &str, id: &str) -> String {
    format!("{leases}/{PROTECTED}{id}-{LEASE}")
}

/// The leases among `children` (of a semaphore's `leases` node), in
/// sequence order: a child whose name does not end in `lease-<digits>` is
/// none (Curator writes nothing else there).
pub(crate) fn leases(children: &[String]) -> Vec<&str> {
    let sequence = |child: &str| {
        let at = child.rfind(LEASE)?;
        let digits = &child[at + LEASE.len()..];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse::<i64>().ok()
    };
    let mut found: Vec<(i64, &str)> = children
        .iter()
        .filter_map(|c| Some((sequence(c)?, c.as_str())))
        .collect();
    found.sort_unstable();
    found.into_iter().map(|(_, c)| c).collect()
}

/// One contender: its child name, side and sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Contender {
    pub(crate) child: String,
    pub(crate) side: Access,
    pub(crate) sequence: i64,
}

impl Contender {
    /// The contender a child name is, if it is one (its side from the
    /// marker before the sequence; a child with no known marker is none).
    pub(crate) fn of(child: &str) -> Option<Contender> {
        let (side, at) = [Access::Write, Access::Read, Access::Mutex]
            .into_iter()
            .filter_map(|side| child.rfind(marker(side)).map(|at| (side, at)))
            .max_by_key(|(_, at)| *at)?;
        let digits = &child[at + marker(side).len()..];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Contender {
            child: child.to_owned(),
            side,
            sequence: digits.parse().ok()?,
        })
    }
}

/// Whether `child` (a contender, a lease, any protected child) was made by
/// the create with protected `id`.
pub(crate) fn made_by(child: &str, id: &str) -> bool {
    child
        .strip_prefix(PROTECTED)
        .and_then(|rest| rest.strip_prefix(id))
        .is_some_and(|rest| rest.starts_with('-'))
}

/// The contenders among `children`, in sequence order.
pub(crate) fn contenders(children: &[String]) -> Vec<Contender> {
    let mut found: Vec<Contender> = children.iter().filter_map(|c| Contender::of(c)).collect();
    found.sort_by_key(|c| c.sequence);
    found
}

/// The last contender before `ours` (by sequence) that keeps it out, if
/// any: the one to watch.
pub(crate) fn blocker<'a>(contenders: &'a [Contender], ours: &Contender) -> Option<&'a Contender> {
    contenders
        .iter()
        .take_while(|c| c.sequence < ours.sequence)
        .filter(|c| waits_for(ours.side, c.side))
        .last()
}

/// What a contender's node says of its hold after the holder id (its
/// data is `<holder id> <what>`), so that any client's `inspect` can tell
/// how long the lock lasts: ZooKeeper keeps no expiry of its own for a
/// node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Term {
    /// Kept by its session: freed at most this long after its holder
    /// stops (the session timeout the server granted).
    Session(Duration),
    /// A fixed lease, given back by its holder at this time (wall clock).
    Until(SystemTime),
    /// Released, kept by a `hold_at_least` minimum until this time.
    Kept(SystemTime),
}

/// A node's data: the holder id and its [`Term`].
pub(crate) fn data(holder: &str, term: Term) -> Vec<u8> {
    let ms = |at: SystemTime| at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    match term {
        Term::Session(timeout) => format!("{holder} session={}", timeout.as_millis()),
        Term::Until(at) => format!("{holder} until={}", ms(at)),
        Term::Kept(at) => format!("{holder} kept={}", ms(at)),
    }
    .into_bytes()
}

/// What a node's data says: the holder id (when it is this crate's:
/// Curator writes the host's address) and the [`Term`], if any.
pub(crate) fn read_data(data: &[u8]) -> (Option<&str>, Option<Term>) {
    let Ok(text) = std::str::from_utf8(data) else {
        return (None, None);
    };
    let (holder, term) = text.split_once(' ').unwrap_or((text, ""));
    let holder = is_holder_id(holder).then_some(holder);
    let at = |ms: &str| {
        ms.parse::<u64>()
            .ok()
            .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms)))
    };
    let term = match term.split_once('=') {
        Some(("session", ms)) => ms
            .parse::<u64>()
            .ok()
            .map(|ms| Term::Session(Duration::from_millis(ms))),
        Some(("until", ms)) => at(ms).map(Term::Until),
        Some(("kept", ms)) => at(ms).map(Term::Kept),
        _ => None,
    };
    (holder, term)
}

/// Whether `s` is a holder id as this crate writes them (`<uuid>:<n>`).
fn is_holder_id(s: &str) -> bool {
    s.split_once(':').is_some_and(|(client, n)| {
        uuid::Uuid::parse_str(client).is_ok()
            && !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// Refuses a name ZooKeeper cannot tell apart from another's.
pub(crate) fn check_name(name: &str) -> Result<(), LockError> {
    crate::request::check_name(name)?;
    let bad = |reason: &'static str| {
        Err(LockError::BadName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.contains('/') {
        return bad(
            "a name on ZooKeeper must not contain `/` (lock `a/b`'s node would be a child of \
             lock `a`'s)",
        );
    }
    if name == "." || name == ".." || name == "zookeeper" {
        return bad("ZooKeeper refuses `.`, `..` and `zookeeper` as node names");
    }
    if name.chars().any(refused) {
        return bad(
            "ZooKeeper refuses control characters, U+E000-U+F8FF, U+FFF0-U+FFFF and every \
             character past U+FFFF (emoji, say) in node names",
        );
    }
    Ok(())
}

/// Whether ZooKeeper's path check refuses `c` in a node's name. The Java
/// server checks UTF-16 units: a character past U+FFFF is a surrogate
/// pair there, and surrogates are refused.
pub(crate) fn refused(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_read_as_curator_writes_them() {
        let mutex = Contender::of("_c_0f3c-9a-lock-0000000012").unwrap();
        assert_eq!((mutex.side, mutex.sequence), (Access::Mutex, 12));
        assert!(made_by(&mutex.child, "0f3c-9a"));
        assert!(!made_by(&mutex.child, "0f3c-9b"));
        let read = Contender::of("_c_ab-__READ__0000000003").unwrap();
        assert_eq!((read.side, read.sequence), (Access::Read, 3));
        let write = Contender::of("_c_ab-__WRIT__0000000004").unwrap();
        assert_eq!((write.side, write.sequence), (Access::Write, 4));
        // An unprotected Curator child (protection off) still counts.
        assert_eq!(Contender::of("lock-0000000007").unwrap().sequence, 7);
        assert_eq!(Contender::of("leases"), None);
        assert_eq!(Contender::of(LOCKS), None);
        assert_eq!(Contender::of("_c_ab-lease-0000000002"), None);
        assert_eq!(Contender::of("_c_ab-lock-"), None);
    }

    #[test]
    fn leases_are_read_as_curator_writes_them() {
        let children: Vec<String> = [
            "_c_b-lease-0000000011",
            "_c_a-lease-0000000002",
            "lease-0000000007",
            "stray",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            leases(&children),
            [
                "_c_a-lease-0000000002",
                "lease-0000000007",
                "_c_b-lease-0000000011"
            ]
        );
        assert_eq!(
            lease_path("/locks/api/leases", "ab"),
            "/locks/api/leases/_c_ab-lease-"
        );
        assert!(made_by("_c_ab-lease-0000000002", "ab"));
    }

    #[test]
    fn node_data_carries_the_holder_and_the_term() {
        let holder = "0b9e5d1c-4f7e-4e55-9d43-2c1c6f0c8a11:7";
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        for term in [
            Term::Session(Duration::from_secs(30)),
            Term::Until(at),
            Term::Kept(at),
        ] {
            assert_eq!(read_data(&data(holder, term)), (Some(holder), Some(term)));
        }
        // Curator's data: the host's address.
        assert_eq!(read_data(b"127.0.1.1"), (None, None));
    }

    #[test]
    fn names_zookeeper_refuses_are_bad_names() {
        for name in [
            "a/b",
            ".",
            "..",
            "zookeeper",
            "tab\there",
            "\u{e000}",
            "stock:🍕",
            "\u{10000}",
        ] {
            assert!(
                matches!(check_name(name), Err(LockError::BadName { .. })),
                "{name:?}"
            );
        }
        assert!(check_name("stock:42").is_ok());
        assert!(check_name("Bestand:Größe").is_ok());
        assert!(check_name("\u{ffef}").is_ok());
    }

    #[test]
    fn readers_wait_for_writers_only() {
        let children: Vec<String> = [
            "_c_a-__READ__0000000001",
            "_c_b-__WRIT__0000000002",
            "_c_c-__READ__0000000003",
            "_c_d-__READ__0000000004",
        ]
        .map(String::from)
        .into();
        let all = contenders(&children);
        assert_eq!(crate::kept::line::holding(all.iter().map(|c| c.side)), 1);
        assert_eq!(blocker(&all, &all[3]).unwrap().sequence, 2);
        assert_eq!(blocker(&all, &all[1]).unwrap().sequence, 1);
        assert_eq!(blocker(&all, &all[0]), None);
        let readers: Vec<String> = ["_c_a-__READ__0000000001", "_c_b-__READ__0000000002"]
            .map(String::from)
            .into();
        let readers = contenders(&readers);
        assert_eq!(
            crate::kept::line::holding(readers.iter().map(|c| c.side)),
            2
        );
        assert_eq!(blocker(&readers, &readers[1]), None);
    }
}
