//! The function keeps its doc comments, other attributes and visibility.

#![deny(missing_docs)]

use lock_runtime::{LockError, distributed_lock};

/// Documented, public and `must_use`: all kept.
#[distributed_lock(key = "a:<id>")]
#[must_use = "the call does nothing until awaited"]
#[allow(clippy::unused_async)]
pub async fn documented(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

pub(crate) mod inner {
    use super::*;

    /// Restricted visibility is kept.
    #[distributed_lock(key = "b:<id>")]
    pub(crate) async fn restricted(id: u64) -> Result<u64, LockError> {
        Ok(id)
    }
}

fn main() {
    drop(documented(1));
    drop(inner::restricted(2));
}
