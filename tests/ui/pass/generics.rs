//! Generic functions: type and lifetime parameters, `where` clauses,
//! `impl Trait` parameters, and `impl Trait` inside the returned `Result`.

use std::fmt::Display;

use lock_runtime::{LockError, distributed_lock};

#[distributed_lock(key = "item:<id>")]
async fn touch<T: Display + Send + Sync>(id: T) -> Result<T, LockError> {
    Ok(id)
}

#[distributed_lock(key = "pair:<a>:<b>")]
async fn pair<'a, A, B>(a: &'a A, b: B) -> Result<&'a A, LockError>
where
    A: Display + Sync + ?Sized,
    B: Display + Send,
{
    let _ = b;
    Ok(a)
}

#[distributed_lock(key = "label:<name>")]
async fn label(name: impl Display + Send) -> Result<impl Display, LockError> {
    Ok(format!("<{name}>"))
}

struct Repo<K> {
    prefix: K,
}

impl<K: Display + Sync> Repo<K> {
    #[distributed_lock(key = "repo:<self.prefix>:<n>")]
    async fn get<const N: usize>(&self, n: usize) -> Result<[usize; N], LockError> {
        Ok([n; N])
    }
}

fn main() {
    drop(touch(1u8));
    drop(pair("a", 2));
    drop(label("x"));
    let repo = Repo { prefix: "p" };
    drop(repo.get::<3>(4));
}
