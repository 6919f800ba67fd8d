//! The operations on any lock on etcd, foreign holders included:
//! `inspect`, `locks` (lockctl's list) and `force_unlock`.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp,
};

use super::Etcd;
use super::layout::{self, KEPT, check_name, prefix, side_of_any};
use crate::error::LockError;
use crate::info::LockInfo;
use crate::kept::{Access, line};

/// The contenders of lock `name` in arrival order (lowest create revision
/// first), each with its side: the holders, then the waiters. Every key
/// under `<name>/` is one, as acquisitions wait for every key there (as
/// etcd's own `concurrency.Mutex` does): a key that is no contender's
/// counts as what it blocks (see [`side_of_any`]).
async fn contenders(etcd: &Etcd, name: &str) -> Result<Vec<(Access, KeyValue)>, LockError> {
    let mut kv = etcd.client().kv_client();
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let mut found = etcd.call(kv.get(prefix(name), Some(options))).await?;
    let prefix = prefix(name);
    Ok(found
        .take_kvs()
        .into_iter()
        .filter_map(|kv| {
            let rest = kv.key().strip_prefix(prefix.as_bytes())?;
            // A key that is not UTF-8 blocks as any foreign key does.
            let side = std::str::from_utf8(rest).map_or(Access::Mutex, side_of_any);
            Some((side, kv))
        })
        .collect())
}

/// A contender's holder id: the value we write (without a permit's
/// bound), else (`etcdctl`) the key.
fn holder_of(kv: &KeyValue) -> String {
    match kv.value_str() {
        Ok(value) if !value.is_empty() => {
            let value = value.strip_suffix(KEPT).unwrap_or(value);
            layout::holder_and_permits(value).0.to_owned()
        }
        _ => String::from_utf8_lossy(kv.key()).into_owned(),
    }
}

/// Whether a contender's key is a semaphore's permit.
fn permit(kv: &KeyValue) -> bool {
    layout::bound_of(kv.value()).is_some()
}

/// How many of a line of permits' keys (oldest first) hold: each holds
/// while fewer than its bound came before it, all permits' (see
/// `layout`'s docs); the first that does not ends the holders.
fn permits_holding(contenders: &[(Access, KeyValue)]) -> usize {
    let values: Vec<&[u8]> = contenders.iter().map(|(_, kv)| kv.value()).collect();
    (0..values.len())
        .take_while(|&at| {
            layout::bound_of(values[at])
                .is_some_and(|bound| layout::admitted(values[..at].iter().copied(), bound))
        })
        .count()
}

/// Whether a contender's key is kept only by a `hold_at_least` minimum.
fn kept(kv: &KeyValue) -> bool {
    kv.value_str().is_ok_and(|v| v.ends_with(KEPT))
}

/// What lock `name` looks like on etcd; `None` when nobody holds it. The
/// holders are the first contender, or the readers before the first
/// contender that is not one; the queue is the rest, in order.
pub(crate) async fn inspect(etcd: &Etcd, name: &str) -> Result<Option<LockInfo>, LockError> {
    check_name(name)?;
    let contenders = contenders(etcd, name).await?;
    let Some((_, first)) = contenders.first() else {
        return Ok(None);
    };
    let ttl = if first.lease() == 0 {
        None
    } else {
        let mut leases = etcd.client().lease_client();
        let left = etcd.call(leases.time_to_live(first.lease(), None)).await?;
        Some(Duration::from_secs(left.ttl().max(0) as u64))
    };
    if permit(first) {
        return semaphore(etcd, name, &contenders).await;
    }
    let line = contenders
        .iter()
        .map(|(side, kv)| line::Contender {
            side: *side,
            id: holder_of(kv),
            kept: kept(kv),
        })
        .collect();
    Ok(line::info(name, line, &etcd.records, &etcd.own, ttl))
}

/// What a semaphore looks like: its permits that hold (each with what is
/// left of its lease), and the permits' waiters behind them.
async fn semaphore(
    etcd: &Etcd,
    name: &str,
    contenders: &[(Access, KeyValue)],
) -> Result<Option<LockInfo>, LockError> {
    let held = permits_holding(contenders);
    let mut leases: std::collections::HashMap<i64, Option<Duration>> = Default::default();
    let mut holders = Vec::with_capacity(held);
    for (_, kv) in &contenders[..held] {
        let left = match leases.get(&kv.lease()) {
            Some(left) => *left,
            None if kv.lease() == 0 => None,
            None => {
                let mut client = etcd.client().lease_client();
                let ttl = etcd
                    .call(client.time_to_live(kv.lease(), None))
                    .await?
                    .ttl();
                let left = Some(Duration::from_secs(ttl.max(0) as u64));
                leases.insert(kv.lease(), left);
                left
            }
        };
        holders.push(line::Permit {
            id: holder_of(kv),
            kept: kept(kv),
            token: None,
            lease_left: left,
        });
    }
    let queue = contenders[held..]
        .iter()
        .map(|(_, kv)| holder_of(kv))
        .collect();
    Ok(line::permits(
        name,
        holders,
        queue,
        &etcd.records,
        &etcd.own,
    ))
}

/// The held locks whose names match `pattern` (`*` and `?` wildcards):
/// the names with a contender key of this layout (ours, `etcdctl lock`'s).
/// In an etcd that other programs share, any key with a `/` would
/// otherwise list as a lock; `inspect` of a name shows every key that
/// blocks it, foreign ones included.
pub(crate) async fn locks(etcd: &Etcd, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
    let literal = pattern.split(['*', '?']).next().unwrap_or_default();
    let mut kv = etcd.client().kv_client();
    let options = GetOptions::new().with_keys_only();
    let options = if literal.is_empty() {
        options.with_all_keys()
    } else {
        options.with_prefix()
    };
    let found = etcd.call(kv.get(literal, Some(options))).await?;
    let mut names: Vec<String> = found
        .kvs()
        .iter()
        .filter_map(|kv| kv.key_str().ok())
        .filter_map(|key| key.split_once('/'))
        .filter(|(name, rest)| {
            layout::side_of_key(rest).is_some()
                && crate::request::glob(pattern.as_bytes(), name.as_bytes())
        })
        .map(|(name, _)| name.to_owned())
        .collect();
    names.sort();
    names.dedup();
    let mut infos = Vec::with_capacity(names.len());
    for name in names {
        if let Some(info) = inspect(etcd, &name).await? {
            infos.push(info);
        }
    }
    Ok(infos)
}

/// Deletes the holder's key of lock `name`: the next in line becomes
/// holder, and the old holder's guard reports the loss. Whether there was
/// a holder.
pub(crate) async fn force_unlock(etcd: &Etcd, name: &str) -> Result<bool, LockError> {
    check_name(name)?;
    loop {
        let contenders = contenders(etcd, name).await?;
        // A semaphore's permits that hold, all of them; else the holder.
        let held = match contenders.first() {
            Some((_, first)) if permit(first) => permits_holding(&contenders),
            _ => line::holding(contenders.iter().map(|(side, _)| *side)),
        };
        if held == 0 {
            return Ok(false);
        }
        let holders = &contenders[..held];
        let delete = Txn::new()
            .when(
                holders
                    .iter()
                    .map(|(_, kv)| {
                        Compare::create_revision(kv.key(), CompareOp::Equal, kv.create_revision())
                    })
                    .collect::<Vec<_>>(),
            )
            .and_then(
                holders
                    .iter()
                    .map(|(_, kv)| TxnOp::delete(kv.key(), None::<DeleteOptions>))
                    .collect::<Vec<_>>(),
            );
        let mut kv = etcd.client().kv_client();
        if etcd.call(kv.txn(delete)).await?.succeeded() {
            let deleted: Vec<(&[u8], i64)> = holders
                .iter()
                .map(|(_, kv)| (kv.key(), kv.create_revision()))
                .collect();
            etcd.deleted(name, &deleted);
            return Ok(true);
        }
    }
}
