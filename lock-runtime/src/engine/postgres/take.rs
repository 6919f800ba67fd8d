//! Taking a hold on PostgreSQL: the process queue, the row taken in one
//! statement (made, or a free one's taken over), the wait for an
//! announcement of the name or the holder's lease's end, and the undoing
//! of all that when the acquisition fails or is dropped.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use tokio::time::Instant;

use super::made::Made;
use super::{ENGINE, Interval, Pg, Prepared, layout};
use crate::engine::sql::queue::Line;
use crate::engine::sql::take::{SqlTaking, Taken};
use crate::error::LockError;
use crate::holder::Who;
use crate::request::{Kind, Request, within};

/// How long a waiter sleeps at most while it cannot count on an
/// announcement: the listener is not listening, or the holder is not one
/// of ours (ShedLock frees its row by an update and announces nothing).
const DEAF: Duration = Duration::from_millis(500);

impl SqlTaking for Pg {
    type Made = Made;
    const ENGINE: &'static str = ENGINE;

    fn made(self: &Arc<Self>, who: &Arc<Who>) -> Made {
        Made {
            pg: self.clone(),
            who: who.clone(),
            until: None,
            strays: Vec::new(),
            stray: None,
            registered: None,
            conn: None,
            line: Line::default(),
            permit: None,
        }
    }

    fn check_lock_name(&self, name: &str) -> Result<(), LockError> {
        layout::check_name(name, self.longest)
    }

    type Heed = Option<super::listen::Wake>;

    fn heed(&self, made: &Made, name: &str) -> Option<super::listen::Wake> {
        made.registered.map(|_| self.listener.wake(name))
    }

    async fn pause(
        &self,
        made: &mut Made,
        heed: Option<super::listen::Wake>,
        name: &str,
        holder: &str,
        pause: Duration,
    ) -> Result<(), LockError> {
        // Registered (for the watchdog's lease, made longer before it runs
        // out), then a look again before any sleep: an announcement before
        // the registration went to nobody.
        let ttl = self.config.watchdog_timeout;
        let registered = made
            .registered
            .is_some_and(|until| until.saturating_duration_since(Instant::now()) > ttl / 2);
        let Some(mut wake) = heed.filter(|_| registered) else {
            made.registered = Some(Instant::now() + ttl);
            made.on(|s| &s.wait, &[&name, &holder, &Interval(ttl)])
                .await?;
            return Ok(());
        };
        // Announced, the line is looked at again at once; unannounced (a
        // waiter died, a lease ran out), at least every half second.
        let sleep = match wake.listening() {
            true => pause.max(DEAF),
            false => pause,
        };
        tokio::select! {
            () = wake.changed() => {}
            () = tokio::time::sleep(sleep.min(ttl / 2)) => {}
        }
        Ok(())
    }

    fn line_ready(&self) -> Result<(), LockError> {
        match self.lined {
            true => Ok(()),
            false => Err(self.no_line()),
        }
    }

    fn line(made: &mut Made) -> &mut Line {
        &mut made.line
    }

    async fn enqueue(
        &self,
        made: &mut Made,
        name: &str,
        holder: &str,
        side: Kind,
        ttl: Duration,
    ) -> Result<i64, LockError> {
        let rows = made
            .on_line(
                |l| &l.enqueue,
                &[&name, &holder, &side.code(), &Interval(ttl)],
            )
            .await?;
        rows.first()
            .map(|r| r.get(0))
            .ok_or_else(|| no_answer(name))
    }

    async fn look(
        &self,
        made: &mut Made,
        name: &str,
        seq: i64,
        side: Kind,
        ttl: Duration,
    ) -> Result<Option<bool>, LockError> {
        let reader = side == Kind::Read;
        let rows = made
            .on_line(|l| &l.look, &[&name, &seq, &reader, &Interval(ttl)])
            .await?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    async fn take_turn(
        &self,
        made: &mut Made,
        name: &str,
        holder: &str,
        seq: i64,
        lease: Duration,
    ) -> Result<Option<u64>, LockError> {
        let rows = made
            .on_line(|l| &l.take_turn, &[&name, &holder, &Interval(lease), &seq])
            .await?;
        Ok(rows.first().map(token))
    }

    async fn join(
        &self,
        made: &mut Made,
        name: &str,
        seq: i64,
        lease: Duration,
    ) -> Result<Option<u64>, LockError> {
        let rows = made
            .on_line(|l| &l.join, &[&name, &seq, &Interval(lease)])
            .await?;
        Ok(rows.first().map(token))
    }

    async fn mark(&self, made: &mut Made, seq: i64, lease: Duration) -> Result<(), LockError> {
        made.on_line(|l| &l.mark, &[&seq, &Interval(lease)]).await?;
        Ok(())
    }

    async fn drop_ticket(
        &self,
        made: &mut Made,
        name: &str,
        holder: &str,
    ) -> Result<bool, LockError> {
        let rows = made.on_line(|l| &l.drop_ticket, &[&name, &holder]).await?;
        Ok(!rows.is_empty())
    }

    async fn readers_left(
        &self,
        made: &mut Made,
        name: &str,
    ) -> Result<Option<(i64, bool)>, LockError> {
        let rows = made.on_line(|l| &l.readers_left, &[&name]).await?;
        Ok(rows.first().map(|r| (r.get(0), r.get(1))))
    }

    async fn free_readers(
        &self,
        made: &mut Made,
        name: &str,
        fence: i64,
    ) -> Result<bool, LockError> {
        let rows = made.on_line(|l| &l.free_readers, &[&name, &fence]).await?;
        Ok(!rows.is_empty())
    }

    async fn hand_to_readers(
        &self,
        made: &mut Made,
        name: &str,
        holder: &str,
    ) -> Result<bool, LockError> {
        let rows = made
            .on_line(|l| &l.hand_to_readers, &[&name, &holder])
            .await?;
        Ok(!rows.is_empty())
    }

    async fn release_row(
        &self,
        made: &mut Made,
        name: &str,
        holder: &str,
    ) -> Result<bool, LockError> {
        let rows = made.on(|s| &s.release, &[&name, &holder]).await?;
        Ok(!rows.is_empty())
    }

    fn take<'a>(
        self: &'a Arc<Self>,
        request: &'a Request,
        holder: &'a str,
        made: &'a mut Made,
    ) -> impl Future<Output = Result<Taken, LockError>> + Send + 'a {
        match request.kind {
            Kind::Semaphore(permits) => {
                Either::Left(take_permit(self, request, holder, made, permits))
            }
            _ => Either::Right(take(self, request, holder, made)),
        }
    }

    fn owned(made: &mut Made) {
        made.until = None;
        made.permit = None;
    }
}

/// A token from a row's first column.
fn token(row: &tokio_postgres::Row) -> u64 {
    u64::try_from(row.get::<_, i64>(0)).unwrap_or(0)
}

/// A statement that answered no row where one was due.
fn no_answer(name: &str) -> LockError {
    LockError::Store {
        engine: ENGINE,
        message: format!("lock `{name}`: a statement on the line answered nothing"),
        transient: true,
    }
}

/// Which statement an acquisition's next try sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    /// `claim`: a row made where none is.
    Claim,
    /// `first_try`: a row made, or a free one (or its own) taken over.
    First,
    /// `acquire`: as `first_try`, or else the held row marked and its
    /// holder's lease read.
    Look,
}

/// One try at the hold: the row taken in one statement, or, while it is
/// held, a sleep until the name is announced free, the holder's lease ends
/// by the database's clock, or the deadline. A row made by an earlier try
/// whose answer was lost is taken over by the next upsert (its holder id
/// is ours): `first_try` or `acquire`, not a `claim`.
async fn take(
    pg: &Arc<Pg>,
    request: &Request,
    holder_id: &str,
    made: &mut Made,
) -> Result<Taken, LockError> {
    let name = request.name.as_str();
    layout::check_name(name, pg.longest)?;
    let lease = request.lease.length;
    let lease_param = Interval(lease);
    // An acquisition not registered as a waiter tries first with a
    // statement that only takes: `claim` (a row made where none is, for
    // the watchdog's lease, written into it) when releases delete rows and
    // the watchdog renews the hold, else `first_try` (a free row also
    // taken over; for any lease). Uncontended, that is all it needs. Busy,
    // a waiting one looks again with `acquire`, which also takes a row that
    // is free (or its own) and reads the holder's lease to sleep on; a
    // one-attempt call after a `claim` that found a row tries `first_try`
    // once (the row may be free by its lease, or its own), then is done.
    let mut step = match made.registered {
        Some(_) => Step::Look,
        None if pg.site.keep_rows || !request.lease.renewed => Step::First,
        None => Step::Claim,
    };
    loop {
        // Made before the look (no announcement after it is missed), once
        // registered: a plain lock's release announces a row that a look
        // marked, the others' only to registered waiters; a waiter sleeps
        // only once registered.
        let wake = made.registered.is_some().then(|| pg.listener.wake(name));
        let conn = made.conn().await?;
        let sent = Instant::now();
        made.until = Some(sent + lease);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&name, &holder_id, &lease_param];
        let (statement, params): (fn(&Prepared) -> &tokio_postgres::Statement, _) = match step {
            // The claim's lease is the watchdog's, written in.
            Step::Claim => (|s| &s.claim, &params[..2]),
            Step::First => (|s| &s.first_try, &params[..]),
            Step::Look => (|s| &s.acquire, &params[..]),
        };
        let tried = std::mem::replace(&mut step, Step::Look);
        let rows = pg.query_on(&conn, statement, params).await?;
        let (token, left, holder) = match rows.first() {
            // A first try's or a claim's answer: the token alone.
            Some(row) if row.len() == 1 => (row.get::<_, Option<i64>>(0), None, None),
            Some(row) => (
                row.get::<_, Option<i64>>(0),
                row.get::<_, Option<i64>>(1),
                row.get::<_, Option<String>>(2),
            ),
            None => (None, None, None),
        };
        if let Some(token) = token {
            // The statement that took it also dropped its registration.
            made.registered = None;
            return Ok(Taken {
                token: u64::try_from(token).unwrap_or(0),
                sent,
                more: (),
            });
        }
        // Not taken: no row of ours is there (an earlier try's would have
        // been taken over by this one: it ran before this one, on this
        // connection or on one whose backend was ended since), unless one
        // sent where the backend could not be ended lands later. A claim
        // takes nothing over: the row it found may be an earlier try's of
        // ours, kept for the undo (which frees only a row of this holder
        // id) until a later try answers.
        if tried != Step::Claim {
            made.until = made.stray;
        }
        if request.once() {
            if tried == Step::Claim {
                step = Step::First;
                continue;
            }
            return Err(request.timed_out());
        }
        let Some(left) = left else {
            // Freed between the statement's two looks, or a first try's
            // statement, which does not look: look again.
            continue;
        };
        // The look marked the held row (its holder's release announces the
        // name); `force_unlock` and a fair lock's or writer's release
        // announce it only to registered waiters: this one registers (for
        // the watchdog's lease, made longer before it runs out), then looks
        // again before it sleeps, as a release that came before its
        // registration announced nothing.
        let registered = made.registered.is_some_and(|until| {
            until.saturating_duration_since(Instant::now()) > pg.config.watchdog_timeout / 2
        });
        let Some(mut wake) = wake.filter(|_| registered) else {
            let ttl = pg.config.watchdog_timeout;
            let sent = Instant::now();
            made.registered = Some(sent + ttl);
            pg.query_on(&conn, |s| &s.wait, &[&name, &holder_id, &Interval(ttl)])
                .await?;
            continue;
        };
        let left = Duration::from_micros(u64::try_from(left).unwrap_or(0));
        // A holder that announces nothing (ShedLock's, which frees its row
        // by an update) is looked at again now and then; so is every
        // holder while the listener is not listening.
        let announced = holder.as_deref().is_some_and(layout::announces);
        let sleep = if wake.listening() && announced {
            left
        } else {
            left.min(DEAF)
        };
        // Awake again before the registration runs out.
        let sleep = sleep.min(pg.config.watchdog_timeout / 2);
        let until = Instant::now() + sleep;
        let _waiting = pg.waiting(name);
        let wait = async {
            tokio::select! {
                () = wake.changed() => {}
                () = tokio::time::sleep_until(until) => {}
            }
        };
        within!(wait, request.deadline, request)?;
    }
}

/// One try at a permit of semaphore `name` of `permits` (see
/// `engine::sql::permits`): a slot and the permits' row taken in one
/// statement, or, while every slot below the bound is held (or another
/// kind holds the name), a sleep until the name is announced, the first
/// permit's lease ends by the database's clock, or the deadline. This
/// client's waiters of the name take turns (arrival order); a one-attempt
/// call does not wait for one.
async fn take_permit(
    pg: &Arc<Pg>,
    request: &Request,
    holder_id: &str,
    made: &mut Made,
    permits: u32,
) -> Result<Taken, LockError> {
    let name = request.name.as_str();
    layout::check_name(name, pg.longest)?;
    if !pg.permitted {
        return Err(pg.no_permits());
    }
    let lease = request.lease.length;
    let ttl = pg.config.watchdog_timeout;
    // A bound past the largest slot is as good as none.
    let bound = i32::try_from(permits).unwrap_or(i32::MAX);
    let _turn = match request.once() {
        true => None,
        false => {
            let _waiting = pg.waiting(name);
            Some(pg.permit_turns.turn(request).await?)
        }
    };
    let mut races = 0;
    loop {
        // Made before the look, once registered (see `take`).
        let wake = made.registered.is_some().then(|| pg.listener.wake(name));
        let conn = made.conn().await?;
        let sent = Instant::now();
        made.permit = Some(sent + lease);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&name, &holder_id, &Interval(lease), &bound];
        let rows = pg.query_permits_on(&conn, |p| &p.take, &params).await?;
        let row = rows.first().ok_or_else(|| no_answer(name))?;
        if let Some(token) = row.get::<_, Option<i64>>(0) {
            // The statement that took it also dropped its registration.
            made.registered = None;
            return Ok(Taken {
                token: u64::try_from(token).unwrap_or(0),
                sent,
                more: (),
            });
        }
        let looked_free: bool = row.get(1);
        let other: Option<i64> = row.get(2);
        let first_end: Option<i64> = row.get(3);
        if !looked_free {
            // No slot of its own either (the statement would have taken
            // it over): nothing of this try's to undo, but a stray's.
            made.permit = made.stray;
        }
        // A slot looked free to the statement, but another took it first:
        // look again at once.
        if looked_free && other.is_none() && races < crate::engine::sql::permits::RACES {
            races += 1;
            continue;
        }
        races = 0;
        if request.once() {
            return Err(request.timed_out());
        }
        // Registered (for the watchdog's lease, made longer before it runs
        // out), then a look again before any sleep: a release before the
        // registration announced nothing to it.
        let registered = made
            .registered
            .is_some_and(|until| until.saturating_duration_since(Instant::now()) > ttl / 2);
        let Some(mut wake) = wake.filter(|_| registered) else {
            made.registered = Some(Instant::now() + ttl);
            pg.query_on(&conn, |s| &s.wait, &[&name, &holder_id, &Interval(ttl)])
                .await?;
            continue;
        };
        let micros = |us: i64| Duration::from_micros(u64::try_from(us).unwrap_or(0));
        // A permit's release announces the name; a lock of another kind
        // on it may not (a ShedLock holder's, a plain lock's release that
        // no waiter marked): looked at again now and then, as is every
        // name while the listener is not listening.
        let left = other.or(first_end).map_or(DEAF, micros);
        let sleep = if wake.listening() && other.is_none() {
            left
        } else {
            left.min(DEAF)
        };
        let until = Instant::now() + sleep.min(ttl / 2);
        let _waiting = pg.waiting(name);
        let wait = async {
            tokio::select! {
                () = wake.changed() => {}
                () = tokio::time::sleep_until(until) => {}
            }
        };
        within!(wait, request.deadline, request)?;
    }
}
