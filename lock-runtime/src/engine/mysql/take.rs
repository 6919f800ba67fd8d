//! Taking a hold on MySQL: the process queue, the row taken in one
//! statement (made where none is, else a free one's taken over), polling
//! while it is held (a backoff capped by
//! [`Config::poll_cap`](crate::Config::poll_cap), never past the holder's
//! lease or the deadline), and the undoing of all that when the
//! acquisition fails or is dropped.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use tokio::time::Instant;

use mysql_async::Row;
use tokio::sync::OwnedMutexGuard;

use super::{Answer, ENGINE, My, Pooled, Slot, Stmt};
use crate::engine::sql::Rows;
use crate::engine::sql::micros;
use crate::engine::sql::permits::RACES;
use crate::engine::sql::queue::{FIRST_POLL, Line, leave_untaken};
use crate::engine::sql::take::{SqlTaking, Taken};
use crate::error::LockError;
use crate::holder::Who;
use crate::kept::Undo;
use crate::request::{Kind, Request, within};

impl SqlTaking for My {
    type Made = Made;
    const ENGINE: &'static str = ENGINE;

    fn made(self: &Arc<Self>, who: &Arc<Who>) -> Made {
        Made {
            my: self.clone(),
            who: who.clone(),
            until: None,
            slot: None,
            line: Line::default(),
            permit: None,
        }
    }

    fn check_lock_name(&self, name: &str) -> Result<(), LockError> {
        self.check_name(name)
    }

    type Heed = ();

    fn heed(&self, _made: &Made, _name: &str) {}

    async fn pause(
        &self,
        _made: &mut Made,
        _heed: (),
        _name: &str,
        _holder: &str,
        pause: Duration,
    ) -> Result<(), LockError> {
        tokio::time::sleep(pause).await;
        Ok(())
    }

    fn line_ready(&self) -> Result<(), LockError> {
        match self.lined {
            true => Ok(()),
            false => {
                let table = &self.site.table;
                Err(crate::engine::sql::queue::no_line(
                    &super::layout::queue(table).quoted(super::layout::Q),
                    &super::layout::queue_ddl(table),
                ))
            }
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
        let st = &self.st.line.enqueue;
        let answer = made
            .on(st, (name, holder, side.code(), micros(ttl)).into())
            .await?;
        let seq = answer.last_id.and_then(|id| i64::try_from(id).ok());
        seq.ok_or_else(|| LockError::Store {
            engine: ENGINE,
            message: format!("lock `{name}`: a ticket was made without a number"),
            transient: true,
        })
    }

    async fn look(
        &self,
        made: &mut Made,
        name: &str,
        seq: i64,
        side: Kind,
        ttl: Duration,
    ) -> Result<Option<bool>, LockError> {
        let line = &self.st.line;
        let refreshed = made.on(&line.refresh, (micros(ttl), seq).into()).await?;
        // Nothing changed is no proof it is gone (the same microsecond).
        if refreshed.affected == 0 && made.on(&line.there, (seq,).into()).await?.rows.is_empty() {
            return Ok(None);
        }
        let reader = u8::from(side == Kind::Read);
        let first = made
            .on_rows::<Option<bool>>(&line.first, (name, seq, reader).into())
            .await?;
        Ok(Some(first.into_iter().next().flatten().unwrap_or(false)))
    }

    async fn take_turn(
        &self,
        made: &mut Made,
        name: &str,
        holder: &str,
        seq: i64,
        lease: Duration,
    ) -> Result<Option<u64>, LockError> {
        let lease_us = micros(lease);
        let taken = made
            .on(&self.st.acquire, (name, lease_us, holder, name).into())
            .await?;
        if taken.affected == 0 {
            return Ok(None);
        }
        made.on(&self.st.line.mark, (lease_us, seq).into()).await?;
        Ok(Some(taken.last_id.unwrap_or(0)))
    }

    async fn join(
        &self,
        made: &mut Made,
        name: &str,
        seq: i64,
        lease: Duration,
    ) -> Result<Option<u64>, LockError> {
        // Marked first: a last reader leaving meanwhile sees this one and
        // leaves the row to it (see `engine::sql::queue`).
        let line = &self.st.line;
        let lease_us = micros(lease);
        let marked = made.on(&line.mark, (lease_us, seq).into()).await?;
        if marked.affected == 0 {
            return Ok(None);
        }
        let joined = made.on(&line.join, (name, lease_us, name).into()).await?;
        if joined.affected > 0 {
            return Ok(Some(joined.last_id.unwrap_or(0)));
        }
        made.on(&line.unmark, (seq,).into()).await?;
        Ok(None)
    }

    async fn mark(&self, made: &mut Made, seq: i64, lease: Duration) -> Result<(), LockError> {
        made.on(&self.st.line.mark, (micros(lease), seq).into())
            .await?;
        Ok(())
    }

    async fn drop_ticket(
        &self,
        made: &mut Made,
        name: &str,
        holder: &str,
    ) -> Result<bool, LockError> {
        let answer = made
            .on(&self.st.line.drop_ticket, (name, holder).into())
            .await?;
        Ok(answer.affected > 0)
    }

    async fn readers_left(
        &self,
        made: &mut Made,
        name: &str,
    ) -> Result<Option<(i64, bool)>, LockError> {
        let rows = made
            .on_rows::<(i64, bool)>(&self.st.line.readers_left, (name, name).into())
            .await?;
        Ok(rows.into_iter().next())
    }

    async fn free_readers(
        &self,
        made: &mut Made,
        name: &str,
        fence: i64,
    ) -> Result<bool, LockError> {
        let answer = made
            .on(&self.st.line.free_readers, (name, fence).into())
            .await?;
        Ok(answer.affected > 0)
    }

    async fn hand_to_readers(
        &self,
        made: &mut Made,
        name: &str,
        holder: &str,
    ) -> Result<bool, LockError> {
        let answer = made
            .on(&self.st.line.hand_to_readers, (name, holder, name).into())
            .await?;
        Ok(answer.affected > 0)
    }

    async fn release_row(
        &self,
        made: &mut Made,
        name: &str,
        holder: &str,
    ) -> Result<bool, LockError> {
        let answer = made.on(&self.st.release, (name, holder).into()).await?;
        Ok(answer.affected > 0)
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

/// What an acquisition may have made on MySQL: a row under its holder id,
/// from a statement whose answer it did not see (or did not use). The
/// undo frees it (by its holder id: never another's row) while it may
/// still be there.
pub(crate) struct Made {
    my: Arc<My>,
    /// The hold it is for: the lock's name and the holder id.
    who: Arc<Who>,
    /// Until when a row it made may be there (its lease by this client's
    /// clock, from the latest try whose answer is unseen); `None` when
    /// there is none.
    until: Option<Instant>,
    /// The connection every try and the undo go through: statements on
    /// one connection run in the order they are sent (a statement whose
    /// caller left is finished before the next one starts), so the undo
    /// runs after a try whose answer was lost, never before it lands.
    slot: Option<Slot>,
    /// Its place in line (fair and read-write locks).
    line: Line,
    /// Until when a permit it took may be there (a semaphore's; its lease
    /// by this client's clock); `None` when no try may have taken one.
    permit: Option<Instant>,
}

impl Made {
    /// Runs `statement` on the acquisition's connection.
    async fn on(
        &mut self,
        statement: impl Into<Stmt<'_>>,
        params: mysql_async::Params,
    ) -> Result<Answer<Row>, LockError> {
        let my = self.my.clone();
        let mut conn = self.lease().await?;
        my.on::<Row>(&mut conn, statement, params).await
    }

    /// [`on`](Self::on), for its rows.
    async fn on_rows<T: mysql_async::prelude::FromRow + Send + 'static>(
        &mut self,
        statement: impl Into<Stmt<'_>>,
        params: mysql_async::Params,
    ) -> Result<Vec<T>, LockError> {
        let my = self.my.clone();
        let mut conn = self.lease().await?;
        Ok(my.on::<T>(&mut conn, statement, params).await?.rows)
    }

    /// The acquisition's connection: the one of its earlier tries, else
    /// one of the pool (kept for the next).
    async fn lease(&mut self) -> Result<Option<Pooled>, LockError> {
        let lease = match &self.slot {
            Some(slot) => self.my.lease_on(slot).await?,
            None => self.my.conn().await?,
        };
        self.slot = Some(OwnedMutexGuard::mutex(&lease).clone());
        Ok(Some(lease))
    }
}

impl Undo for Made {
    fn take(&mut self) -> Option<Made> {
        let until = self.until.take();
        let line = std::mem::take(&mut self.line);
        let permit = self.permit.take();
        if until.is_none() && line.ticket.is_none() && permit.is_none() {
            return None;
        }
        Some(Made {
            slot: self.slot.clone(),
            my: self.my.clone(),
            who: self.who.clone(),
            until,
            line,
            permit,
        })
    }

    async fn clear(&mut self) -> Result<(), LockError> {
        if self.until.is_some() {
            let mut conn = self.lease().await?;
            self.my
                .on::<Row>(
                    &mut conn,
                    &self.my.st.release,
                    (self.who.name.as_str(), self.who.holder.as_str()).into(),
                )
                .await?;
            self.until = None;
        }
        if self.permit.is_some() {
            let (my, who) = (self.my.clone(), self.who.clone());
            let params = (who.name.as_str(), who.holder.as_str()).into();
            let dropped = self.on(&my.st.permits.drop, params).await?;
            self.permit = None;
            if dropped.affected > 0 {
                let left = my.permits_left(&who.name).await?;
                crate::engine::sql::permits::settle(&*my, &who.name, left).await?;
            }
        }
        let (my, who) = (self.my.clone(), self.who.clone());
        leave_untaken(&my, self, &who).await
    }

    fn may_outlive(&self) -> bool {
        let now = Instant::now();
        self.until.is_some_and(|until| now < until)
            || self.line.ticket.is_some_and(|until| now < until)
            || self.permit.is_some_and(|until| now < until)
    }

    fn what(&self) -> String {
        format!("{} row {}", self.my.site.table.qualified(), self.who.name)
    }
}

/// One try at the hold: the row made in one statement where none is (or,
/// with `keep_rows`, taken over when free), or, while it is held, polling
/// until it is free, the deadline passes or the holder's lease ends by the
/// database's clock. A row made by an earlier try whose answer was lost is
/// taken over by this one (its holder id is ours).
async fn take(
    my: &Arc<My>,
    request: &Request,
    holder_id: &str,
    made: &mut Made,
) -> Result<Taken, LockError> {
    let name = request.name.as_str();
    my.check_name(name)?;
    let lease = request.lease.length;
    let lease_us = micros(lease);
    let mut pause = FIRST_POLL.min(my.config.poll_cap);
    // When the holder's lease ends by this client's clock (looked at
    // once, and again when that comes near): a poll never sleeps past it.
    // A lease only moves later while its holder keeps it; a new holder's
    // row is looked at again once the old end comes near.
    let mut holder_until: Option<Instant> = None;
    // Until when a row of this acquisition may be there, as the try
    // began: a try that finds none of its own gives that back.
    let before = made.until;
    // The first try makes the row where none is (the cheapest statement);
    // the next ones, and a claim that finds a row, take a free one over.
    let mut claim = my.st.claim.as_ref();
    loop {
        let sent = Instant::now();
        // A try whose answer is unseen may have made the row: until it
        // ends, the undo frees it.
        made.until = Some(sent + lease);
        let mut conn = made.lease().await?;
        let claimed = claim.take();
        let answer = my
            .on::<Row>(
                &mut conn,
                claimed.unwrap_or(&my.st.acquire),
                (name, lease_us, holder_id, name).into(),
            )
            .await?;
        // A claim that made its row with warnings made it with a value
        // MySQL would have refused (IGNORE): not taken, and the upsert
        // next refuses the value. (A claim that found a row has a warning
        // too, the duplicate's, and made nothing.)
        let refused = claimed.is_some() && answer.affected > 0 && answer.warnings > 0;
        if answer.affected > 0 && !refused {
            return Ok(Taken {
                token: answer.last_id.unwrap_or(0),
                sent,
                more: (),
            });
        }
        if claimed.is_some() {
            // The row found may be this acquisition's own (an earlier
            // try's whose answer was lost): the undo stays armed until the
            // look below shows another's, and the upsert takes a row of
            // ours over. One attempt sends it now; a waiter looks first.
            if request.once() || refused {
                continue;
            }
        } else {
            // Not taken: no row of ours is there (a row an earlier try
            // made would have been taken over by this one).
            made.until = before;
            if request.once() {
                return Err(request.timed_out());
            }
        }
        let near = holder_until.is_none_or(|until| until <= Instant::now() + pause);
        if near {
            let looked = Instant::now();
            let look = my
                .on::<(Option<i64>, String)>(&mut conn, &my.st.look, (name,).into())
                .await?;
            match look.rows.first() {
                Some((Some(left), holder)) if *left > 0 && holder != holder_id => {
                    // Another's row: none of ours is there.
                    made.until = before;
                    let left = Duration::from_micros(u64::try_from(*left).unwrap_or(0));
                    holder_until = Some(looked + left);
                }
                // Freed, or its lease ended, since the statement, or this
                // acquisition's own: try again.
                _ => {
                    holder_until = None;
                    continue;
                }
            }
        }
        drop(conn);
        let left = holder_until.map_or(pause, |until| {
            until.saturating_duration_since(Instant::now())
        });
        let sleep = pause.min(left);
        pause = (pause * 2).min(my.config.poll_cap);
        let _waiting = my.waiting(name);
        within!(tokio::time::sleep(sleep), request.deadline, request)?;
    }
}

/// One try at a permit of semaphore `name` of `permits` (see
/// `engine::sql::permits`): a slot taken, then the permits' row (the slot
/// given back when another kind holds the name), then the token written
/// into the permit; or, while every slot below the bound is held (or
/// another kind holds the name), polling as a plain waiter does (never
/// past the first permit's lease or the deadline). This client's waiters
/// of the name take turns (arrival order); a one-attempt call does not
/// wait for one.
async fn take_permit(
    my: &Arc<My>,
    request: &Request,
    holder_id: &str,
    made: &mut Made,
    permits: u32,
) -> Result<Taken, LockError> {
    let name = request.name.as_str();
    my.check_permit_name(name)?;
    let lease_us = micros(request.lease.length);
    let bound = i64::from(permits);
    let _turn = match request.once() {
        true => None,
        false => {
            let _waiting = my.waiting(name);
            Some(my.permit_turns.turn(request).await?)
        }
    };
    let st = &my.st.permits;
    let mut pause = FIRST_POLL.min(my.config.poll_cap);
    let mut races = 0;
    loop {
        let sent = Instant::now();
        // A try whose answer is unseen may have taken a slot: until its
        // lease ends, the undo gives it back.
        made.permit = Some(sent + request.lease.length);
        let (n, h) = (name, holder_id);
        let params = (n, lease_us, h, n, n, h, bound, n, h, n, h).into();
        let taken = made.on(&st.take, params).await?;
        if taken.affected > 0 {
            let shared = made.on(&st.take_row, (name, lease_us, name).into()).await?;
            if shared.affected > 0 {
                let token = shared.last_id.unwrap_or(0);
                let written = made.on(&st.token, (token, name, holder_id).into()).await?;
                if written.affected > 0 {
                    return Ok(Taken {
                        token,
                        sent,
                        more: (),
                    });
                }
                // Freed meanwhile (`force_unlock`): looked at again.
                continue;
            }
            // Another kind holds the name: the slot given back.
            made.on(&st.drop, (name, holder_id).into()).await?;
        }
        // Not taken: no slot of this acquisition's is left (the take would
        // have taken its own over).
        made.permit = None;
        let look = made
            .on_rows::<(Option<i64>, Option<i64>, bool)>(
                &st.look,
                (name, name, name, bound, bound).into(),
            )
            .await?;
        let (other, first_end, free) = look.into_iter().next().unwrap_or((None, None, false));
        // A slot free now that another took first: look again at once.
        if free && other.is_none() && races < RACES {
            races += 1;
            continue;
        }
        races = 0;
        if request.once() {
            return Err(request.timed_out());
        }
        let left = other.or(first_end).map_or(pause, |us| {
            Duration::from_micros(u64::try_from(us).unwrap_or(0))
        });
        let sleep = pause.min(left);
        pause = (pause * 2).min(my.config.poll_cap);
        let _waiting = my.waiting(name);
        within!(tokio::time::sleep(sleep), request.deadline, request)?;
    }
}
