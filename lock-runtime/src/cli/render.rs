//! lockctl's output: tables for people, JSON for scripts.

use std::fmt::Write;
use std::time::Duration;

use serde_json::{Value, json};

use crate::info::LockInfo;

/// `inspect --json`'s object (the schema of DESIGN §3).
pub(super) fn info_json(name: &str, info: Option<&LockInfo>) -> Value {
    let Some(info) = info else {
        return json!({ "name": name, "held": false });
    };
    let holders: Vec<Value> = info
        .holders
        .iter()
        .map(|h| {
            let mut holder = json!({ "id": h.id, "count": h.count, "write": h.write });
            // A semaphore's permit, where the store keeps them per holder.
            if let Some(token) = h.token {
                holder["token"] = json!(token);
            }
            if let Some(left) = h.lease_left {
                holder["lease_ms"] = json!(left.as_millis() as u64);
            }
            holder
        })
        .collect();
    json!({
        "name": info.name,
        "held": true,
        "kind": info.kind.as_str(),
        "mode": info.mode.map(|m| m.as_str()),
        "holders": holders,
        "ttl_ms": info.ttl.map(|t| t.as_millis() as u64),
        "queue": info.queue,
    })
}

/// `list --json`'s array.
pub(super) fn list_json(locks: &[LockInfo]) -> Value {
    Value::Array(
        locks
            .iter()
            .map(|info| info_json(&info.name, Some(info)))
            .collect(),
    )
}

/// A lease for people: `28.4s`, `2m05s`, or `no expiry`.
pub(super) fn ttl(ttl: Option<Duration>) -> String {
    match ttl {
        None => "no expiry".to_owned(),
        Some(t) if t < Duration::from_secs(60) => format!("{:.1}s", t.as_secs_f64()),
        Some(t) => format!("{}m{:02}s", t.as_secs() / 60, t.as_secs() % 60),
    }
}

/// What kind and mode, in words: `reentrant`, `read_write (write)`.
fn kind(info: &LockInfo) -> String {
    match info.mode {
        Some(mode) => format!("{} ({mode})", info.kind),
        None => info.kind.to_string(),
    }
}

/// `inspect`'s table.
pub(super) fn info_text(name: &str, info: Option<&LockInfo>) -> String {
    let Some(info) = info else {
        return format!("{name}: free\n");
    };
    let mut out = String::new();
    let _ = writeln!(out, "lock     {name}");
    let _ = writeln!(out, "kind     {}", kind(info));
    let _ = writeln!(out, "lease    {}", ttl(info.ttl));
    let width = info
        .holders
        .iter()
        .map(|h| h.id.len())
        .max()
        .unwrap_or(0)
        .max("HOLDER".len());
    // A semaphore's permits: each holder's token and lease, where kept.
    let permits = info
        .holders
        .iter()
        .any(|h| h.token.is_some() || h.lease_left.is_some());
    let _ = match permits {
        true => writeln!(
            out,
            "holders  {:<width$}  COUNT  {:>10}  {:>10}",
            "HOLDER", "TOKEN", "LEASE"
        ),
        false => writeln!(out, "holders  {:<width$}  COUNT  SIDE", "HOLDER"),
    };
    for holder in &info.holders {
        let side = match (info.mode, holder.write) {
            _ if permits => format!(
                "{:>10}  {:>10}",
                holder.token.map_or("-".to_owned(), |t| t.to_string()),
                holder.lease_left.map_or("-".to_owned(), |l| ttl(Some(l)))
            ),
            (None, _) => String::new(),
            (Some(_), true) => "write".to_owned(),
            (Some(_), false) => "read".to_owned(),
        };
        let _ = writeln!(
            out,
            "         {:<width$}  {:<5}  {side}",
            holder.id, holder.count
        );
    }
    if !info.queue.is_empty() {
        let _ = writeln!(out, "queue    {} waiting, head first", info.queue.len());
        for (i, waiter) in info.queue.iter().enumerate() {
            let _ = writeln!(out, "         {}. {waiter}", i + 1);
        }
    }
    out
}

/// `list`'s table: a line per lock.
pub(super) fn list_text(locks: &[LockInfo]) -> String {
    if locks.is_empty() {
        return "no held lock matches\n".to_owned();
    }
    let width = locks
        .iter()
        .map(|l| l.name.len())
        .max()
        .unwrap_or(0)
        .max("NAME".len());
    let mut out = format!(
        "{:<width$}  {:<18}  {:>7}  {:>5}  {:>10}\n",
        "NAME", "KIND", "HOLDERS", "QUEUE", "LEASE"
    );
    for info in locks {
        let _ = writeln!(
            out,
            "{:<width$}  {:<18}  {:>7}  {:>5}  {:>10}",
            info.name,
            kind(info),
            info.holders.len(),
            info.queue.len(),
            ttl(info.ttl)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_read_as_people_write_them() {
        assert_eq!(ttl(None), "no expiry");
        assert_eq!(ttl(Some(Duration::from_millis(28_449))), "28.4s");
        assert_eq!(ttl(Some(Duration::from_secs(125))), "2m05s");
    }

    #[test]
    fn a_semaphores_holders_show_their_tokens_and_leases() {
        use crate::info::{HolderInfo, LockKind};
        let permit = |id: &str, token: u64, left_ms: u64| HolderInfo {
            id: id.to_owned(),
            count: 1,
            write: false,
            guards: Vec::new(),
            token: Some(token),
            lease_left: Some(Duration::from_millis(left_ms)),
        };
        let info = LockInfo {
            name: "partner:acme".to_owned(),
            kind: LockKind::Semaphore,
            mode: None,
            holders: vec![permit("c:1", 7, 29_500), permit("d:4", 9, 12_000)],
            ttl: Some(Duration::from_millis(29_500)),
            queue: vec!["e:2".to_owned()],
        };
        let shown = info_json("partner:acme", Some(&info));
        assert_eq!(shown["kind"], "semaphore");
        assert_eq!(
            shown["holders"],
            json!([
                {"id": "c:1", "count": 1, "write": false, "token": 7, "lease_ms": 29_500},
                {"id": "d:4", "count": 1, "write": false, "token": 9, "lease_ms": 12_000},
            ])
        );
        let text = info_text("partner:acme", Some(&info));
        assert!(text.contains("kind     semaphore"), "{text}");
        assert!(text.contains("TOKEN"), "{text}");
        let line = text.lines().find(|l| l.contains("d:4")).unwrap();
        assert!(line.contains(" 9 ") && line.ends_with("12.0s"), "{line}");
    }

    #[test]
    fn a_free_lock_is_one_line_and_one_small_object() {
        assert_eq!(info_text("a", None), "a: free\n");
        assert_eq!(
            info_json("a\"b", None).to_string(),
            r#"{"held":false,"name":"a\"b"}"#
        );
    }
}
