//! One hold in Redis: what it is on (its [`Request`](crate::request::Request)), the scripts that take
//! it and give it back (the handoff script in `reentrant`, a fair
//! waiter's leaving in `fair`; `handoff` for handoffs inside a client), and how an
//! attempt whose answer was lost is settled ([`reconcile`]).
//!
//! Below the acquire loop (`lock`, which takes holds through it) and the
//! guard (`guard`, which gives them back through it).

pub(crate) mod fair;
pub(crate) mod handoff;
pub(crate) mod reentrant;

mod attempt;
mod layout;
mod reconcile;

pub(crate) use attempt::{Unsettled, attempt_once, needs_reconcile};
pub(crate) use reconcile::reconcile;

use std::time::Duration;
use tokio::time::Instant;

use crate::engine::redis::keys;
use crate::error::LockError;
use crate::request::Kind;

/// The answer of one acquire script.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attempt {
    /// Taken (or re-entered); the fencing token of this acquisition.
    Acquired { token: u64 },
    /// Someone else has it: when to try again.
    Busy(Busy),
    /// A re-entry found the hold of its scope gone: nothing was taken.
    Gone,
}

/// What an unlock script's answer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The hold was given back (or handed to a waiter of this client).
    Given,
    /// The holder held nothing there: the lock expired or was taken away.
    NotHeld,
}

impl Released {
    /// An unlock script's answer (-1: not held; else the holds left, or 1
    /// for a handoff) as a [`Released`].
    pub(crate) fn from_code(code: i64) -> Released {
        if code == -1 {
            Released::NotHeld
        } else {
            Released::Given
        }
    }
}

/// What a busy lock's answer says of when to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Busy {
    /// The holder's lease ends in this many milliseconds.
    For(u64),
    /// The holder set no lease: only a release message tells.
    NoLease,
    /// Free again already (it went since the script looked, or the attempt
    /// was abandoned before it ran): at once.
    Now,
    /// Between two holders of a fair queue, or after a fault that may heal:
    /// soon, with backoff.
    Soon,
}

impl Busy {
    /// The script's remaining-lease answer (`PTTL`'s: -1 none, -2 gone, -3
    /// a fair lock between holders) as a [`Busy`].
    fn from_ttl(ttl_ms: i64) -> Busy {
        match ttl_ms {
            -2 => Busy::Now,
            -3 => Busy::Soon,
            ms if ms < 0 => Busy::NoLease,
            ms => Busy::For(ms as u64),
        }
    }
}

/// Which of its holder's holds a release gives back. The scripts that count
/// a holder's holds in one field name each of them once the holder
/// re-enters (`scripts/holds.lua`): a release counts only while its hold is
/// live, so a copy of it that reaches Redis late (past its unlock latch)
/// changes nothing. A read hold is found by its token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Which {
    token: u64,
    reentry: bool,
}

impl Which {
    /// The holder's first hold (taken by a new holder), with fencing `token`
    /// (0 when unknown: a lost answer's; such a holder has no other hold).
    pub(crate) fn first(token: u64) -> Which {
        Which {
            token,
            reentry: false,
        }
    }

    /// A re-entry, with fencing `token`.
    pub(crate) fn reentry(token: u64) -> Which {
        Which {
            token,
            reentry: true,
        }
    }

    /// The hold the attempt `how` took, with fencing `token`.
    pub(crate) fn taken(how: &Try, token: u64) -> Which {
        if how.reenter {
            Which::reentry(token)
        } else {
            Which::first(token)
        }
    }

    /// As the unlock scripts of a lock of `kind` name it: a read hold by its token
    /// (0: any one hold of the holder); any other hold `0` for the holder's
    /// first, else its re-entry's token.
    fn arg(self, kind: Kind) -> u64 {
        match kind {
            Kind::Read => self.token,
            _ => self.counted(),
        }
    }

    /// As the scripts of the layouts that count a holder's holds in one
    /// field name it: `0` for the holder's first, else the re-entry's token.
    fn counted(self) -> u64 {
        if self.reentry { self.token } else { 0 }
    }
}

/// One unlock request: the id that names its latch (a retry sends the same),
/// and whether this call is its first send. A first send on a connection
/// that never resends a command (not a cluster's) does not read the latch:
/// no copy of the request can have run before it (`scripts/unlock.lua`,
/// ARGV\[6\]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unlock<'a> {
    /// Names the request's unlock latch.
    pub(crate) id: &'a str,
    first: bool,
}

impl<'a> Unlock<'a> {
    /// The first send of request `id`.
    pub(crate) fn first(id: &'a str) -> Unlock<'a> {
        Unlock { id, first: true }
    }

    /// A send of request `id` that may follow another (a retry, a give-back
    /// whose request may have been sent before).
    pub(crate) fn again(id: &'a str) -> Unlock<'a> {
        Unlock { id, first: false }
    }

    /// The scripts' first-send argument on `conn`: `'1'` only for a first
    /// send on a connection that does not resend (a cluster's resends a
    /// command whose answer was lost, and the resend must read the latch).
    pub(crate) fn first_arg(self, conn: &crate::engine::redis::conn::Conn) -> &'static str {
        if self.first && !conn.resends() {
            "1"
        } else {
            "0"
        }
    }
}

/// What one acquire script call is asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Try {
    /// The holder id written into the lock.
    pub(crate) holder: String,
    /// The lease the new hold is promised.
    pub(crate) lease: Duration,
    /// Re-entering a hold of the caller's scope: the holder must still hold
    /// the lock (else [`Attempt::Gone`]), and a taken hold is recorded in
    /// the latch so that a lost answer can be reconciled.
    pub(crate) reenter: bool,
    /// This attempt's id: names its latch, and is the request id of every
    /// give-back of what it took, so that the unlock latch lets only one of
    /// them count (a give-back retried by [`reconcile`] counts once).
    pub(crate) attempt: String,
}

impl Try {
    /// `'1'` / `'0'`, the scripts' re-entry argument.
    pub(crate) fn reenter_arg(&self) -> &'static str {
        if self.reenter { "1" } else { "0" }
    }

    /// This attempt's latch key on lock `name` (see
    /// `scripts/acquire_latch.lua`).
    pub(crate) fn latch(&self, name: &str) -> String {
        keys::acquire_latch(name, &self.attempt)
    }

    /// The lease in whole milliseconds, for the scripts.
    pub(crate) fn lease_ms(&self) -> u64 {
        crate::config::millis(self.lease)
    }
}

/// Decodes an acquire script's `{code, value}` answer.
fn answer(name: &str, (code, value): (i64, i64)) -> Result<Attempt, LockError> {
    match code {
        1 => Ok(Attempt::Acquired {
            token: value as u64,
        }),
        0 => Ok(Attempt::Busy(Busy::from_ttl(value))),
        3 => Ok(Attempt::Gone),
        // Abandoned before it ran: nothing taken, try again at once.
        4 => Ok(Attempt::Busy(Busy::Now)),
        _ => Err(LockError::NotHeld {
            name: name.to_owned(),
            reason: "this call chain holds a read lock and asked for the write lock: upgrading \
                     a read lock is not supported (two readers upgrading would wait for each \
                     other for ever); release the read lock first, or take the write lock \
                     first and read under it"
                .to_owned(),
        }),
    }
}

/// What a last release leaves behind (`hold_at_least`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keep {
    /// The lock stays taken this many ms more; 0: it is freed.
    pub(crate) ms: u64,
    /// The lease is fixed and bounds the minimum: a key that expires sooner
    /// is left to expire as it is, never lengthened.
    pub(crate) within_lease: bool,
}

impl Keep {
    /// Free the lock.
    pub(crate) const NONE: Keep = Keep {
        ms: 0,
        within_lease: false,
    };

    /// What a release now leaves of `hold_at_least` (until when the lock
    /// stays taken), in whole ms rounded up; `fixed`: the lease is fixed and
    /// bounds it.
    pub(crate) fn left(hold_at_least: Option<Instant>, fixed: bool) -> Keep {
        let left = hold_at_least.map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        });
        Keep {
            ms: u64::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
            within_lease: fixed,
        }
    }
}
