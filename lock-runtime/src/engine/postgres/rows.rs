//! The statements a taken hold's row needs on PostgreSQL (the shared
//! `engine::sql::hold` runs them): renewal of every row of the client in
//! one `UPDATE`, release with its announcement, `hold_at_least`'s keep,
//! re-entry, `extend` and the sweep.

use std::time::Duration;

use super::{Interval, Pg};
use crate::engine::sql::permits::Left;
use crate::engine::sql::{Common, Rows, renewed};
use crate::error::LockError;

impl Rows for Pg {
    fn common(&self) -> &Common<Pg> {
        &self.common
    }

    async fn renew(&self, holds: &[(&str, &str)], lease: Duration) -> Result<Vec<bool>, LockError> {
        let (names, holders) = columns(holds);
        let rows = self
            .query(|s| &s.renew, &[&names, &holders, &Interval(lease)])
            .await?;
        Ok(renewed(holds, &pairs(&rows)))
    }

    async fn release(&self, name: &str, holder: &str, token: i64) -> Result<bool, LockError> {
        let count = self
            .execute(|s| &s.give_back, &[&name, &holder, &token])
            .await?;
        Ok(count > 0)
    }

    async fn keep(&self, name: &str, holder: &str, left: Duration) -> Result<bool, LockError> {
        let rows = self
            .query(|s| &s.keep, &[&name, &holder, &Interval(left)])
            .await?;
        Ok(!rows.is_empty())
    }

    async fn reenter(&self, name: &str, holder: &str) -> Result<Option<u64>, LockError> {
        let rows = self.query(|s| &s.reenter, &[&name, &holder]).await?;
        Ok(rows
            .first()
            .map(|row| u64::try_from(row.get::<_, i64>(0)).unwrap_or(0)))
    }

    async fn extend(&self, name: &str, holder: &str, lease: Duration) -> Result<bool, LockError> {
        let rows = self
            .query(|s| &s.extend, &[&name, &holder, &Interval(lease)])
            .await?;
        Ok(!rows.is_empty())
    }

    async fn renew_tickets(
        &self,
        holds: &[(&str, &str)],
        lease: Duration,
    ) -> Result<Vec<bool>, LockError> {
        let (names, holders) = columns(holds);
        let rows = self
            .query_line(|l| &l.renew_tickets, &[&names, &holders, &Interval(lease)])
            .await?;
        Ok(renewed(holds, &pairs(&rows)))
    }

    async fn reenter_read(&self, name: &str, holder: &str) -> Result<Option<u64>, LockError> {
        let rows = self
            .query_line(|l| &l.reenter_read, &[&name, &holder])
            .await?;
        Ok(rows
            .first()
            .map(|row| u64::try_from(row.get::<_, i64>(0)).unwrap_or(0)))
    }

    async fn renew_permits(
        &self,
        holds: &[(&str, &str)],
        lease: Duration,
    ) -> Result<Vec<bool>, LockError> {
        let (names, holders) = columns(holds);
        let rows = self
            .query_permits(|p| &p.renew, &[&names, &holders, &Interval(lease)])
            .await?;
        Ok(renewed(holds, &pairs(&rows)))
    }

    async fn drop_permit(&self, name: &str, holder: &str) -> Result<(bool, Left), LockError> {
        let rows = self.query_permits(|p| &p.drop, &[&name, &holder]).await?;
        Ok(dropped(&rows))
    }

    async fn permits_left(&self, name: &str) -> Result<Left, LockError> {
        let rows = self.query_permits(|p| &p.left, &[&name]).await?;
        Ok(rows.first().map(|r| (r.get(0), r.get(1))))
    }

    async fn free_permits(&self, name: &str, fence: i64) -> Result<bool, LockError> {
        let rows = self.query_permits(|p| &p.free, &[&name, &fence]).await?;
        Ok(!rows.is_empty())
    }

    async fn keep_permit(
        &self,
        name: &str,
        holder: &str,
        left: Duration,
    ) -> Result<bool, LockError> {
        let rows = self
            .query_permits(|p| &p.keep, &[&name, &holder, &Interval(left)])
            .await?;
        Ok(!rows.is_empty())
    }

    async fn reenter_permit(&self, name: &str, holder: &str) -> Result<Option<u64>, LockError> {
        let rows = self
            .query_permits(|p| &p.reenter, &[&name, &holder])
            .await?;
        Ok(rows
            .first()
            .map(|row| u64::try_from(row.get::<_, i64>(0)).unwrap_or(0)))
    }

    async fn extend_permit(
        &self,
        name: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<bool, LockError> {
        let rows = self
            .query_permits(|p| &p.extend, &[&name, &holder, &Interval(lease)])
            .await?;
        Ok(!rows.is_empty())
    }

    async fn sweep(&self, old: Duration) -> Result<(), LockError> {
        self.query(|s| &s.sweep, &[&Interval(old)]).await?;
        if self.lined {
            self.query_line(|l| &l.sweep_tickets, &[&Interval(old)])
                .await?;
        }
        if self.permitted {
            self.query_permits(|p| &p.sweep, &[&Interval(old)]).await?;
        }
        Ok(())
    }
}

/// The names and the holder ids of `holds`, as two arrays for `unnest`.
fn columns<'a>(holds: &[(&'a str, &'a str)]) -> (Vec<&'a str>, Vec<&'a str>) {
    holds.iter().copied().unzip()
}

/// What a permit's `drop` answered: whether it was there, and its
/// permits' row's token with whether another live permit is left.
pub(super) fn dropped(rows: &[tokio_postgres::Row]) -> (bool, Left) {
    match rows.first() {
        None => (false, None),
        Some(row) => {
            let fence: Option<i64> = row.get(1);
            (true, fence.map(|fence| (fence, row.get(2))))
        }
    }
}

/// The (name, holder id) pairs a renewal answered.
fn pairs(rows: &[tokio_postgres::Row]) -> Vec<(String, String)> {
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}
