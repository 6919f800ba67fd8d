//! The statements a taken hold's row needs on MySQL (the shared
//! `engine::sql::hold` runs them): renewal of the client's rows in
//! batches, release, `hold_at_least`'s keep, re-entry, `extend` and the
//! sweep. Each answer is its affected rows (MySQL has no `RETURNING`).

use std::time::Duration;

use mysql_async::{Params, Row, Value};

use super::My;
use crate::engine::sql::permits::Left;
use crate::engine::sql::{Common, Rows, micros};
use crate::error::LockError;

/// How many rows one renewal statement renews at most.
const BATCH: usize = 100;

/// The sizes a renewal statement has: a batch of rows is sent in the next
/// of them, its last pair repeated to fill it, so that a client runs (and
/// its connections keep prepared) a few renewals, not one per count of
/// rows.
pub(crate) const BATCH_SIZES: [usize; 8] = [1, 2, 4, 8, 16, 32, 64, BATCH];

/// The size of renewal that renews `n` rows (at most [`BATCH`]).
fn batch_size(n: usize) -> usize {
    BATCH_SIZES
        .into_iter()
        .find(|&size| size >= n)
        .unwrap_or(BATCH)
}

impl Rows for My {
    fn common(&self) -> &Common<My> {
        &self.common
    }

    async fn renew(&self, holds: &[(&str, &str)], lease: Duration) -> Result<Vec<bool>, LockError> {
        // Those held by their holders since: renewed (a row past its end
        // was not, and is not held).
        self.renew_in_batches(holds, lease, |n| {
            let (renew, held_of) = self.st.renew(n);
            (vec![renew], held_of)
        })
        .await
    }

    /// MySQL announces nothing (its waiters poll): the token is not read.
    async fn release(&self, name: &str, holder: &str, _token: i64) -> Result<bool, LockError> {
        let answer = self
            .query::<Row>(&self.st.release, (name, holder).into())
            .await?;
        Ok(answer.affected > 0)
    }

    async fn keep(&self, name: &str, holder: &str, left: Duration) -> Result<bool, LockError> {
        let answer = self
            .query::<Row>(&self.st.keep, (micros(left), name, holder).into())
            .await?;
        Ok(answer.affected > 0)
    }

    async fn reenter(&self, name: &str, holder: &str) -> Result<Option<u64>, LockError> {
        let answer = self
            .query::<Row>(&self.st.reenter, (name, holder).into())
            .await?;
        Ok((answer.affected > 0).then(|| answer.last_id.unwrap_or(0)))
    }

    async fn extend(&self, name: &str, holder: &str, lease: Duration) -> Result<bool, LockError> {
        let mut conn = None;
        let moved = self
            .on::<Row>(
                &mut conn,
                &self.st.extend,
                (micros(lease), name, holder).into(),
            )
            .await?;
        if moved.affected > 0 {
            return Ok(true);
        }
        // Not moved: a later end already, or not the holder's.
        let held = self
            .on::<u8>(&mut conn, &self.st.holds, (name, holder).into())
            .await?;
        Ok(!held.rows.is_empty())
    }

    async fn renew_tickets(
        &self,
        holds: &[(&str, &str)],
        lease: Duration,
    ) -> Result<Vec<bool>, LockError> {
        self.renew_in_batches(holds, lease, |n| {
            let [tickets, readers, held_of] = self.st.line.renew(n);
            (vec![tickets, readers], held_of)
        })
        .await
    }

    async fn reenter_read(&self, name: &str, holder: &str) -> Result<Option<u64>, LockError> {
        let answer = self
            .query::<Row>(&self.st.line.reenter_read, (name, name, holder).into())
            .await?;
        Ok((answer.affected > 0).then(|| answer.last_id.unwrap_or(0)))
    }

    async fn renew_permits(
        &self,
        holds: &[(&str, &str)],
        lease: Duration,
    ) -> Result<Vec<bool>, LockError> {
        self.renew_in_batches(holds, lease, |n| {
            let [permits, rows, held_of] = self.st.permits.renew(n);
            (vec![permits, rows], held_of)
        })
        .await
    }

    async fn drop_permit(&self, name: &str, holder: &str) -> Result<(bool, Left), LockError> {
        let dropped = self
            .query::<Row>(&self.st.permits.drop, (name, holder).into())
            .await?;
        if dropped.affected == 0 {
            return Ok((false, None));
        }
        Ok((true, self.permits_left(name).await?))
    }

    async fn permits_left(&self, name: &str) -> Result<Left, LockError> {
        let answer = self
            .query::<(i64, bool)>(&self.st.permits.left, (name, name).into())
            .await?;
        Ok(answer.rows.into_iter().next())
    }

    async fn free_permits(&self, name: &str, fence: i64) -> Result<bool, LockError> {
        let answer = self
            .query::<Row>(&self.st.permits.free, (name, fence).into())
            .await?;
        Ok(answer.affected > 0)
    }

    async fn keep_permit(
        &self,
        name: &str,
        holder: &str,
        left: Duration,
    ) -> Result<bool, LockError> {
        // The permits' row first: it never ends before a permit of its.
        let mut conn = None;
        let st = &self.st.permits;
        self.on::<Row>(&mut conn, &st.row_at_least, (micros(left), name).into())
            .await?;
        let kept = self
            .on::<Row>(&mut conn, &st.keep, (micros(left), name, holder).into())
            .await?;
        Ok(kept.affected > 0)
    }

    async fn reenter_permit(&self, name: &str, holder: &str) -> Result<Option<u64>, LockError> {
        let answer = self
            .query::<Row>(&self.st.permits.reenter, (name, name, holder).into())
            .await?;
        Ok((answer.affected > 0).then(|| answer.last_id.unwrap_or(0)))
    }

    async fn extend_permit(
        &self,
        name: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<bool, LockError> {
        let mut conn = None;
        let st = &self.st.permits;
        self.on::<Row>(&mut conn, &st.row_at_least, (micros(lease), name).into())
            .await?;
        let moved = self
            .on::<Row>(&mut conn, &st.extend, (micros(lease), name, holder).into())
            .await?;
        if moved.affected > 0 {
            return Ok(true);
        }
        // Not moved: a later end already, or not the holder's.
        let held = self
            .on::<u8>(&mut conn, &st.holds, (name, holder).into())
            .await?;
        Ok(!held.rows.is_empty())
    }

    async fn sweep(&self, old: Duration) -> Result<(), LockError> {
        if let Some(sweep) = &self.st.sweep {
            self.query::<Row>(sweep, (micros(old),).into()).await?;
        }
        if self.lined {
            self.query::<Row>(&self.st.line.sweep, (micros(old),).into())
                .await?;
        }
        if self.permitted {
            self.query::<Row>(&self.st.permits.sweep, (micros(old),).into())
                .await?;
        }
        Ok(())
    }
}

impl My {
    /// Renews `holds` (name, holder id) to `lease` from now, [`BATCH`] at a
    /// time: for a batch of `n`, `statements(n)` gives the renewals (bound
    /// to the lease, then the pairs) and the look at which pairs are held
    /// since (bound to the pairs). For each, whether it is.
    async fn renew_in_batches(
        &self,
        holds: &[(&str, &str)],
        lease: Duration,
        statements: impl Fn(usize) -> (Vec<String>, String),
    ) -> Result<Vec<bool>, LockError> {
        let mut renewed = Vec::with_capacity(holds.len());
        for batch in holds.chunks(BATCH) {
            let size = batch_size(batch.len());
            let (renewals, held_of) = statements(size);
            // A pair twice renews its row once, and finds it once.
            let last = batch.last().into_iter().cycle();
            let pairs: Vec<Value> = batch
                .iter()
                .chain(last.take(size - batch.len()))
                .flat_map(|(name, holder)| [Value::from(*name), Value::from(*holder)])
                .collect();
            let mut conn = None;
            for renewal in &renewals {
                let mut params = vec![Value::from(micros(lease))];
                params.extend(pairs.iter().cloned());
                self.on::<Row>(&mut conn, renewal, Params::Positional(params))
                    .await?;
            }
            let held = self
                .on::<(String, String)>(&mut conn, &held_of, Params::Positional(pairs))
                .await?
                .rows;
            renewed.extend(crate::engine::sql::renewed(batch, &held));
        }
        Ok(renewed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sql::Table;

    #[test]
    fn a_batch_is_renewed_in_the_next_size() {
        assert_eq!(batch_size(1), 1);
        assert_eq!(batch_size(3), 4);
        assert_eq!(batch_size(64), 64);
        assert_eq!(batch_size(65), BATCH);
        assert_eq!(batch_size(BATCH), BATCH);
    }

    #[test]
    fn every_statement_a_client_runs_stays_prepared() {
        let st = super::super::layout::Statements::new(&Table::parse("locks", 64).unwrap(), false);
        // Its own; renewals of each size (one and a look for plain rows,
        // two and a look for the line, two and a look for permits); the
        // set-up's looks and `ended`'s.
        let runs = st.count + BATCH_SIZES.len() * 8 + 3;
        assert!(runs <= super::super::PREPARED, "{runs}");
    }
}
