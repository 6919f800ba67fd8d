//! Settling an attempt whose answer was lost, so that it leaves no hold
//! behind.

use std::time::Duration;

use super::{Keep, Released, Try, Unlock, Which};
use crate::engine::redis::Core;
use crate::engine::redis::retry;
use crate::error::LockError;
use crate::request::Request;

/// How long [`reconcile`] keeps trying, and how long its `abandoned` mark
/// lasts: past TCP's retransmission limit (about 15 minutes with Linux's
/// defaults), so a request held up in a partition cannot arrive after both.
const RECONCILE_FOR: Duration = Duration::from_secs(16 * 60);

/// Settles an attempt whose answer was lost, so that it leaves no hold
/// behind: marks its latch abandoned (`SET NX`), which keeps the attempt from
/// taking anything if it has not run yet (it may still be on its way). If it
/// had run, the hold it took is given back: a re-entry recorded its token in
/// the latch; a new holder's hold shows by itself (the holder id is new, so
/// any hold under it is this attempt's). Retried with backoff while Redis is
/// unreachable, for [`RECONCILE_FOR`].
///
/// One case is left to the lease: a re-entry whose record in the latch
/// (30 s) expired before the reconcile reached Redis (a partition longer
/// than that, after the re-entry ran) keeps its count until the lease ends.
///
/// Returns whether it settled: the attempt holds nothing and never will.
pub(crate) async fn reconcile(core: std::sync::Arc<Core>, lock: Request, how: Try) -> bool {
    let settled =
        retry::while_unreachable(RECONCILE_FOR, || reconcile_once(&core, &lock, &how)).await;
    if let Err(e) = &settled {
        tracing::warn!(lock = lock.name.as_str(), error = %e, "could not reconcile a lost acquire answer; the lease will end it");
    }
    settled.is_ok()
}

async fn reconcile_once(core: &Core, lock: &Request, how: &Try) -> Result<(), LockError> {
    let name = lock.name.as_str();
    let latch = how.latch(name);
    let mut conn = core.conn.clone();
    let marked: Option<String> = redis::cmd("SET")
        .arg(&latch)
        .arg("abandoned")
        .arg("NX")
        .arg("PX")
        .arg(RECONCILE_FOR.as_millis() as u64)
        .query_async(&mut conn)
        .await
        .map_err(|e| LockError::from_redis(name, e))?;
    let token = if marked.is_some() {
        if how.reenter {
            // A re-entry records what it took: nothing recorded, nothing taken.
            return Ok(());
        }
        0
    } else {
        let recorded: Option<String> = redis::cmd("GET")
            .arg(&latch)
            .query_async(&mut conn)
            .await
            .map_err(|e| LockError::from_redis(name, e))?;
        match recorded.as_deref().map(str::parse::<u64>) {
            Some(Ok(token)) => token,
            // A new holder's hold shows by itself, whatever the latch says:
            // `abandoned` may be our own earlier `SET` whose answer was lost,
            // sent after the attempt had run.
            _ if !how.reenter => 0,
            // A re-entry that ran recorded its token before any `SET NX` of
            // ours could land: `abandoned` (or an expired latch) means it
            // took nothing.
            _ => return Ok(()),
        }
    };
    let freed = lock
        .unlock(
            core,
            &core.conn,
            &how.holder,
            Unlock::again(&how.attempt),
            Which::taken(how, token),
            Keep::NONE,
        )
        .await?;
    if freed == Released::Given {
        tracing::debug!(
            lock = name,
            "gave back a hold whose acquire answer was lost"
        );
    }
    if !how.reenter
        && let Some(cleanup) = lock.give_up(core, &how.holder)
    {
        cleanup.retrying().await;
    }
    Ok(())
}
