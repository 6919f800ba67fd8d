//! `crate = "..."`: the runtime named by a path, as after renaming the
//! dependency.

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "a:<id>", crate = "lock_runtime")]
async fn plain(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "b:<id>", crate = "::lock_runtime")]
async fn absolute(id: u64) -> Result<(), LockError> {
    let _ = id;
    Ok(())
}

mod renamed {
    // What a `locks = { package = "lock-runtime" }` dependency looks like.
    use ::lock_runtime as locks;
    use locks::{LockError, distributed_lock};

    #[distributed_lock(key = "c:<id>", crate = "locks")]
    pub async fn aliased(id: u64) -> Result<(), LockError> {
        let _ = id;
        Ok(())
    }
}

fn main() {
    drop(plain(1));
    drop(absolute(2));
    drop(renamed::aliased(3));
}
