//! Fair and read-write locks on the SQL engines (DESIGN §10): a line of
//! tickets beside the lock table, written once for both databases; each
//! engine gives the statements ([`SqlTaking`]'s line part, and
//! [`Rows`]'s renewal of tickets).
//!
//! # Layout
//!
//! Beside the lock table `<table>` is its line, `<table>_queue` (a hash of
//! the name when that is longer than an identifier):
//!
//! | column | what |
//! | --- | --- |
//! | `seq` | an identity column: the order of arrival |
//! | `name` | the lock's name |
//! | `holder` | the acquisition's holder id |
//! | `side` | `f` a fair lock, `w` a writer, `r` a reader |
//! | `held` | the ticket's acquisition holds the lock |
//! | `ticket_until` | until when the ticket counts (by the database's clock): a waiter's renewed by its polls, a holder's by the watchdog; one that ran out is no one's and is swept |
//!
//! What keeps everyone else out is still the lock row: a fair lock's or a
//! writer's row has its holder id, as a plain lock's does (so plain locks,
//! fair locks, writers and ShedLock exclude each other on one name); the
//! readers share a row whose holder is [`READERS`], whose end is the
//! latest of theirs, and whose token rises with every reader let in.
//!
//! - **Fair and writers.** An acquisition takes a ticket, then, while a
//!   live ticket before it is in line (of any side), or the row is held,
//!   polls; first in line, it takes the row as a plain lock does, in the
//!   statement that marks its ticket held. Its release frees the row and
//!   drops the ticket.
//! - **Readers.** A reader takes a ticket, waits while a fair lock's or a
//!   writer's live ticket is before it, then joins the readers' row (made,
//!   taken over when free, or shared when the readers hold it) in the
//!   statement that marks its ticket held. Its release drops its ticket;
//!   the last reader's frees the row: it reads the row's token and whether
//!   a held reader is left, and frees the row only if its token is still
//!   that one (a reader let in meanwhile raised it), looking again if not.
//! - **Downgrade.** A read taken in the scope of this client's write hold
//!   is held at once (its ticket marked held, the write's row's token
//!   raised); the write's release then hands the row to the readers
//!   instead of freeing it, so a writer queued behind the write waits for
//!   the read too.
//! - **Waiting.** On MySQL, fair and read-write waiters poll with the
//!   backoff of its plain waiters (from 4 ms, doubling up to
//!   [`Config::poll_cap`](crate::Config::poll_cap)). On PostgreSQL they
//!   register as the plain waiters do, and a release, a readers' row
//!   freed or a ticket dropped announces the name to them; they look
//!   again at an announcement, and at least every half second (a ticket
//!   whose waiter died runs out unannounced).
//! - **Faults.** A ticket whose waiter died runs out at its
//!   `ticket_until` (the watchdog timeout). A waiter whose ticket was
//!   deleted takes a new one, at the back of the line. An acquisition
//!   dropped or failed drops its ticket and frees what it took, through
//!   the connection of its tries (so after a try whose answer was lost).

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use super::record::Record;
pub(crate) use super::side::Line;
use super::taking::{SqlTaking, Taken};
use crate::error::LockError;
use crate::holder::Who;
use crate::info::{HolderInfo, LockInfo, LockKind, RwMode};
use crate::request::{Kind, Request, within};

/// The holder id of a row the readers hold (no holder id of ours starts
/// with a space, and ShedLock writes a host name).
pub(crate) const READERS: &str = " readers";

/// The first pause of a polling waiter; each next one is twice as long,
/// up to [`Config::poll_cap`](crate::Config::poll_cap).
pub(crate) const FIRST_POLL: Duration = Duration::from_millis(4);

/// A ticket, as `inspect` reads the line: holder id, side code, held.
pub(crate) type Ticket = (String, String, bool);

/// The error of a fair or read-write lock on a client whose line
/// (`quoted`, made with `ddl`) is missing and may not be made by its role.
pub(crate) fn no_line(quoted: &str, ddl: &str) -> LockError {
    LockError::Config(format!(
        "fair and read-write locks keep a line beside the lock table: the table {quoted} is \
         missing and this role may not create it; have it made with:\n{ddl}"
    ))
}

/// One try at a fair or read-write hold: a ticket (kept from an earlier
/// try), then polls until it is first in line and takes the row (or
/// joins the readers'), within the deadline.
pub(crate) async fn take_in_line<S: SqlTaking>(
    s: &Arc<S>,
    request: &Request,
    holder: &str,
    under: Option<&Arc<Record<S>>>,
    made: &mut S::Made,
) -> Result<Taken, LockError> {
    let name = request.name.as_str();
    s.check_lock_name(name)?;
    s.line_ready()?;
    let common = s.common();
    let lease = request.lease.length;
    let ttl = common.config.watchdog_timeout;
    let side = request.kind;
    S::line(made).side = side;
    let seq = match S::line(made).seq {
        Some(seq) => seq,
        None => {
            // Undone from now on: an answer lost still made a ticket.
            S::line(made).ticket = Some(Instant::now() + ttl.max(lease));
            let seq = s.enqueue(made, name, holder, side, ttl).await?;
            S::line(made).seq = Some(seq);
            seq
        }
    };
    // A read under this client's write: held at once (the write keeps
    // everyone else out), with a token of its own.
    if let Some(write) = under {
        let sent = Instant::now();
        S::line(made).ticket = Some(sent + lease.max(ttl));
        s.mark(made, seq, lease).await?;
        let Some(token) = s.reenter(&write.who.name, write.holder()).await? else {
            return Err(crate::kept::lost(name));
        };
        return Ok(Taken {
            token,
            sent,
            more: (),
        });
    }
    let mut pause = FIRST_POLL.min(common.config.poll_cap);
    let mut waiting = None;
    loop {
        let heed = s.heed(made, name);
        let Some(first) = s.look(made, name, seq, side, ttl).await? else {
            // Deleted (`force_unlock` meanwhile, or it ran out while this
            // waiter stalled): a new one, at the back of the line.
            S::line(made).seq = None;
            return Err(LockError::Store {
                engine: S::ENGINE,
                message: format!("lock `{name}`: the waiter's ticket was deleted"),
                transient: true,
            });
        };
        S::line(made).ticket = Some(Instant::now() + ttl.max(lease));
        if first {
            let sent = Instant::now();
            let taken = match side {
                Kind::Read => s.join(made, name, seq, lease).await?,
                _ => s.take_turn(made, name, holder, seq, lease).await?,
            };
            if let Some(token) = taken {
                return Ok(Taken {
                    token,
                    sent,
                    more: (),
                });
            }
        }
        if request.once() {
            return Err(request.timed_out());
        }
        if waiting.is_none() {
            waiting = Some(common.waiting(name));
        }
        let paused = s.pause(made, heed, name, holder, pause);
        within!(paused, request.deadline, request)??;
        pause = (pause * 2).min(common.config.poll_cap);
    }
}

/// Gives back what the acquisition by `holder` of `name` on `side` holds
/// or took in line, through `made`'s connection: its ticket dropped, and
/// a fair lock's or writer's row freed, or handed to the readers when
/// `reads_under` (this client's reads taken under the write) and one of
/// them holds; or the readers' row freed by the last reader. Whether the
/// holder still held (its ticket, or its row).
pub(crate) async fn leave<S: SqlTaking>(
    s: &Arc<S>,
    made: &mut S::Made,
    name: &str,
    holder: &str,
    side: Kind,
    reads_under: bool,
) -> Result<bool, LockError> {
    let had = s.drop_ticket(made, name, holder).await?;
    if side == Kind::Read {
        free_readers(s, made, name).await?;
        return Ok(had);
    }
    if reads_under && s.hand_to_readers(made, name, holder).await? {
        return Ok(true);
    }
    s.release_row(made, name, holder).await
}

/// Leaves the line an acquisition `who` joined through `made` and was
/// never let in from (so no reads are under it), if it took a ticket.
pub(crate) async fn leave_untaken<S: SqlTaking>(
    s: &Arc<S>,
    made: &mut S::Made,
    who: &Who,
) -> Result<(), LockError> {
    let line = S::line(made);
    if line.ticket.is_none() {
        return Ok(());
    }
    let side = line.side;
    leave(s, made, &who.name, &who.holder, side, false).await?;
    S::line(made).ticket = None;
    Ok(())
}

/// Frees the readers' row of `name` when no held reader is left: only if
/// its token is still the one read with that (a reader let in meanwhile
/// raised it), looking again if not.
async fn free_readers<S: SqlTaking>(
    s: &Arc<S>,
    made: &mut S::Made,
    name: &str,
) -> Result<(), LockError> {
    for _ in 0..16 {
        let Some((fence, others)) = s.readers_left(made, name).await? else {
            return Ok(());
        };
        if others || s.free_readers(made, name, fence).await? {
            return Ok(());
        }
    }
    Ok(())
}

/// What `inspect` shows of a held row of `name` (`locked_by` its holder,
/// `left_us` its time left) with the live `tickets` of its line (in
/// order): the readers, when they hold it; a writer's or fair lock's
/// holder, with the fair lock's waiters; else the row's holder.
pub(crate) fn describe<S: SqlTaking>(
    common: &super::Common<S>,
    name: &str,
    locked_by: &str,
    left_us: i64,
    tickets: &[Ticket],
) -> LockInfo {
    let ttl = Some(Duration::from_micros(u64::try_from(left_us).unwrap_or(0)));
    let holder = |id: &str, kept: bool, write: bool| HolderInfo {
        guards: common.own.guards(name, id),
        count: crate::kept::holds_of(&common.records, name, id, kept),
        id: id.to_owned(),
        write,
        token: None,
        lease_left: None,
    };
    if locked_by == READERS {
        return LockInfo {
            name: name.to_owned(),
            kind: LockKind::ReadWrite,
            mode: Some(RwMode::Read),
            holders: tickets
                .iter()
                .filter(|(_, side, held)| side == Kind::Read.code() && *held)
                .map(|(id, _, _)| holder(id, false, false))
                .collect(),
            ttl,
            queue: Vec::new(),
        };
    }
    let (id, kept) = match locked_by.strip_suffix(super::KEPT) {
        Some(id) => (id, true),
        None => (locked_by, false),
    };
    let side = tickets
        .iter()
        .find(|(holder, _, _)| holder == id)
        .map(|(_, side, _)| side.as_str());
    let write = side == Some(Kind::Write.code());
    let fair = side == Some(Kind::Fair.code());
    let (kind, mode) = match () {
        () if write => (LockKind::ReadWrite, Some(RwMode::Write)),
        () if fair => (LockKind::Fair, None),
        () => (LockKind::Reentrant, None),
    };
    let queue = match fair {
        true => tickets
            .iter()
            .filter(|(holder, side, held)| side == Kind::Fair.code() && !*held && holder != id)
            .map(|(holder, _, _)| holder.clone())
            .collect(),
        false => Vec::new(),
    };
    LockInfo {
        name: name.to_owned(),
        kind,
        mode,
        holders: vec![holder(id, kept, write)],
        ttl,
        queue,
    }
}
