//! Return types whose last path segment is `Result`: an `anyhow`-style
//! alias, full paths, and a crate-local alias in a module.

use lock_runtime::{LockError, distributed_lock};

#[derive(Debug)]
struct MyErr;

impl From<LockError> for MyErr {
    fn from(_: LockError) -> Self {
        MyErr
    }
}

type Result<T> = std::result::Result<T, MyErr>;

mod errors {
    pub type Result<T, E = lock_runtime::LockError> = std::result::Result<T, E>;
}

#[distributed_lock(key = "a:<id>")]
async fn alias(id: u64) -> Result<u64> {
    Ok(id)
}

#[distributed_lock(key = "b:<id>")]
async fn std_path(id: u64) -> std::result::Result<u64, MyErr> {
    Ok(id)
}

#[distributed_lock(key = "c:<id>")]
async fn core_path(id: u64) -> ::core::result::Result<(), LockError> {
    let _ = id;
    Ok(())
}

#[distributed_lock(key = "d:<id>")]
async fn module_alias(id: u64) -> errors::Result<u64> {
    Ok(id)
}

fn main() {
    drop(alias(1));
    drop(std_path(1));
    drop(core_path(1));
    drop(module_alias(1));
}
