//! Which kind of contender an acquisition is on the SQL engines
//! ([`Side`]), and its place in the line of fair and read-write locks
//! ([`Line`]; the line itself is `queue`'s).

use tokio::time::Instant;

use crate::kept::Kind;
use crate::request::Target;

/// Which kind of contender an acquisition is on an SQL engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// A reentrant lock's: the row alone, no ticket.
    Mutex,
    /// A fair lock's: a ticket, then the row.
    Fair,
    /// A reader's: a ticket, then the readers' row.
    Read,
    /// A writer's: a ticket, then the row.
    Write,
}

impl Side {
    /// The side `target` takes.
    pub(crate) fn of(target: &Target) -> Side {
        match target {
            Target::Reentrant { .. } => Side::Mutex,
            Target::Fair { .. } => Side::Fair,
            Target::Read { .. } => Side::Read,
            Target::Write { .. } => Side::Write,
        }
    }

    /// What it holds, as re-entry sees it (a fair lock is a mutex).
    pub(crate) fn kind(self) -> Kind {
        match self {
            Side::Mutex | Side::Fair => Kind::Mutex,
            Side::Read => Kind::Read,
            Side::Write => Kind::Write,
        }
    }

    /// Its ticket's `side` column.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Side::Mutex => "m",
            Side::Fair => "f",
            Side::Read => "r",
            Side::Write => "w",
        }
    }

    /// Whether it takes a ticket.
    pub(crate) fn in_line(self) -> bool {
        self != Side::Mutex
    }
}

/// An acquisition's place in line, in its engine's `Made`: undone (the
/// ticket dropped, what it took freed) when the acquisition fails or is
/// dropped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Line {
    pub(crate) side: Side,
    /// Its ticket's `seq`, once the database gave it.
    pub(crate) seq: Option<i64>,
    /// Until when a ticket it took may count (by this client's clock);
    /// `None` when it has none to undo.
    pub(crate) ticket: Option<Instant>,
}

impl Default for Line {
    fn default() -> Line {
        Line {
            side: Side::Mutex,
            seq: None,
            ticket: None,
        }
    }
}
