//! Which kind of contender an acquisition is on the SQL engines
//! ([`Kind`]), and its place in the line of fair and read-write locks
//! ([`Line`]; the line itself is `queue`'s).

use tokio::time::Instant;

use crate::request::Kind;

/// What the SQL engines' statements make of a side.
impl Kind {
    /// Its ticket's `side` column.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Kind::Reentrant => "m",
            Kind::Fair => "f",
            Kind::Read => "r",
            Kind::Write => "w",
            Kind::Semaphore(_) => "s",
        }
    }

    /// Whether it takes a ticket (a semaphore's permit takes a row of
    /// the permits table instead: see `permits`).
    pub(crate) fn in_line(self) -> bool {
        matches!(self, Kind::Fair | Kind::Read | Kind::Write)
    }
}

/// An acquisition's place in line, in its engine's `Made`: undone (the
/// ticket dropped, what it took freed) when the acquisition fails or is
/// dropped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Line {
    pub(crate) side: Kind,
    /// Its ticket's `seq`, once the database gave it.
    pub(crate) seq: Option<i64>,
    /// Until when a ticket it took may count (by this client's clock);
    /// `None` when it has none to undo.
    pub(crate) ticket: Option<Instant>,
}

impl Default for Line {
    fn default() -> Line {
        Line {
            side: Kind::Reentrant,
            seq: None,
            ticket: None,
        }
    }
}
