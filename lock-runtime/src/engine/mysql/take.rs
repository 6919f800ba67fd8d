//! Taking a hold on MySQL: the process queue, the row taken in one
//! statement (made, or a free one's taken over), polling while it is held
//! (a backoff capped by [`Config::poll_cap`](crate::Config::poll_cap),
//! never past the holder's lease or the deadline), and the undoing of all
//! that when the acquisition fails or is dropped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::Row;
use tokio::sync::OwnedMutexGuard;

use super::{ENGINE, Lease, My, Slot};
use crate::engine::sql::micros;
use crate::engine::sql::take::{SqlTaking, Taken};
use crate::error::LockError;
use crate::kept::Undo;
use crate::request::{Options, Target, timed_out, within};

/// The first pause of a polling waiter; each next one is twice as long,
/// up to the cap.
const FIRST_POLL: Duration = Duration::from_millis(4);

/// Who takes the hold.
type How<'a> = crate::engine::sql::take::How<'a, My>;

impl SqlTaking for My {
    type Made = Made;
    const ENGINE: &'static str = ENGINE;

    fn made(self: &Arc<Self>, holder: &str) -> Made {
        Made {
            my: self.clone(),
            name: String::new(),
            holder: holder.to_owned(),
            until: None,
            slot: None,
        }
    }

    fn take<'a>(
        self: &'a Arc<Self>,
        target: &'a Target,
        options: &'a Options,
        how: &'a How<'a>,
        made: &'a mut Made,
    ) -> impl Future<Output = Result<Taken, LockError>> + Send + 'a {
        take(self, target, options, how, made)
    }

    fn owned(made: &mut Made) {
        made.until = None;
    }
}

/// What an acquisition may have made on MySQL: a row under its holder id,
/// from a statement whose answer it did not see (or did not use). The
/// undo frees it (by its holder id: never another's row) while it may
/// still be there.
pub(crate) struct Made {
    my: Arc<My>,
    name: String,
    holder: String,
    /// Until when a row it made may be there (its lease by this client's
    /// clock, from the latest try whose answer is unseen); `None` when
    /// there is none.
    until: Option<Instant>,
    /// The connection every try and the undo go through: statements on
    /// one connection run in the order they are sent (a statement whose
    /// caller left is finished before the next one starts), so the undo
    /// runs after a try whose answer was lost, never before it lands.
    slot: Option<Slot>,
}

impl Made {
    /// The acquisition's connection: the one of its earlier tries, else
    /// one of the pool (kept for the next).
    async fn lease(&mut self) -> Result<Option<Lease>, LockError> {
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
        let until = self.until.take()?;
        Some(Made {
            slot: self.slot.clone(),
            my: self.my.clone(),
            name: self.name.clone(),
            holder: self.holder.clone(),
            until: Some(until),
        })
    }

    async fn clear(&mut self) -> Result<(), LockError> {
        if self.until.is_some() {
            let mut conn = self.lease().await?;
            self.my
                .on::<Row>(
                    &mut conn,
                    &self.my.st.release,
                    (self.name.as_str(), self.holder.as_str()).into(),
                )
                .await?;
            self.until = None;
        }
        Ok(())
    }

    fn may_outlive(&self) -> bool {
        self.until.is_some_and(|until| Instant::now() < until)
    }

    fn what(&self) -> String {
        format!("{} row {}", self.my.target.table.qualified(), self.name)
    }
}

/// One try at the hold: the row taken in one statement, or, while it is
/// held, polling until it is free, the deadline passes or the holder's
/// lease ends by the database's clock. A row made by an earlier try whose
/// answer was lost is taken over by this one (its holder id is ours).
async fn take(
    my: &Arc<My>,
    target: &Target,
    options: &Options,
    how: &How<'_>,
    made: &mut Made,
) -> Result<Taken, LockError> {
    let name = target.name();
    my.check_name(name)?;
    let lease = options.lease.unwrap_or(my.config.watchdog_timeout);
    let lease_us = micros(lease);
    made.name = name.to_owned();
    let mut pause = FIRST_POLL.min(my.config.poll_cap);
    // When the holder's lease ends by this client's clock (looked at
    // once, and again when that comes near): a poll never sleeps past it.
    // A lease only moves later while its holder keeps it; a new holder's
    // row is looked at again once the old end comes near.
    let mut holder_until: Option<Instant> = None;
    loop {
        let sent = Instant::now();
        // A try whose answer is unseen may have made the row: until it
        // ends, the undo frees it.
        let before = made.until;
        made.until = Some(sent + lease);
        let mut conn = made.lease().await?;
        let answer = my
            .on::<Row>(
                &mut conn,
                &my.st.acquire,
                (name, lease_us, how.holder).into(),
            )
            .await?;
        if answer.affected > 0 {
            return Ok(Taken {
                token: answer.last_id.unwrap_or(0),
                sent,
                more: (),
            });
        }
        // Not taken: no row of ours is there (a row an earlier try made
        // would have been taken over by this one).
        made.until = before;
        if options.wait == Some(Duration::ZERO) {
            return Err(timed_out(target, options));
        }
        let near = holder_until.is_none_or(|until| until <= Instant::now() + pause);
        if near {
            let looked = Instant::now();
            let look = my
                .on::<(Option<i64>, String)>(&mut conn, &my.st.look, (name,).into())
                .await?;
            match look.rows.first() {
                Some((Some(left), _)) if *left > 0 => {
                    let left = Duration::from_micros(u64::try_from(*left).unwrap_or(0));
                    holder_until = Some(looked + left);
                }
                // Freed, or its lease ended, since the statement: try again.
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
        within!(tokio::time::sleep(sleep), how.deadline, target, options)?;
    }
}
