//! Who holds a lock: `<client uuid>:<n>`, where `n` names the tokio task.
//!
//! Redisson uses the thread id; async Rust moves tasks between threads, so
//! identity follows the task instead. Code driven by `block_on` (including
//! `#[tokio::main]`'s body) runs outside any task: there `n` names the thread,
//! with the top bit set so it never collides with a task id.

use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_NUMBER: u64 = (1 << 63) | NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// The number of the current task (or thread, outside tasks).
pub(crate) fn current() -> u64 {
    match tokio::task::try_id() {
        // Task ids are process-wide, unique and never reused.
        Some(id) => id.to_string().parse().unwrap_or_else(|_| thread_number()),
        None => thread_number(),
    }
}

fn thread_number() -> u64 {
    THREAD_NUMBER.with(|n| *n)
}
