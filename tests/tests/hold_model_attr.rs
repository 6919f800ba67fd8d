//! The hold model through `#[distributed_lock]` and the global client: a
//! locked body runs in its hold's scope, so a locked call awaited inside it
//! re-enters, while locked calls joined beside each other exclude each other.
//!
//! One global client per process: every test here shares one server and one
//! `init` (see [`global`]), each on its own lock names.

use std::sync::OnceLock;
use std::time::Duration;

use lock_runtime::{Config, LockError, distributed_lock};
use redis::AsyncCommands;
use tests::{Section, Server};
use tokio::time::timeout;

/// Generous bound on whole scenarios: a deadlock fails the test instead of
/// hanging it.
const NO_DEADLOCK: Duration = Duration::from_secs(60);

static SERVER: OnceLock<Server> = OnceLock::new();

fn server() -> &'static Server {
    SERVER.get_or_init(Server::start)
}

/// Points the global client at this binary's server (once per process; the
/// tests run in any order, on runtimes of their own).
async fn global() {
    match lock_runtime::init(Config::new(server().url())).await {
        // `Config`: another test initialised it first.
        Ok(()) | Err(LockError::Config(_)) => {}
        Err(e) => panic!("init: {e}"),
    }
}

#[distributed_lock(key = "stock:<id>")]
async fn critical(id: u64, section: &Section) -> Result<(), LockError> {
    section.enter(async {}).await;
    Ok(())
}

/// Old model: both calls ran in the test's task, so both were the same
/// holder and the second re-entered the first's hold: both bodies at once.
#[tokio::test]
async fn locked_calls_joined_in_one_task_never_overlap() {
    global().await;
    let section = Section::new();
    let (a, b) = timeout(NO_DEADLOCK, async {
        tokio::join!(critical(1, &section), critical(1, &section))
    })
    .await
    .expect("the joined calls finished");
    a.expect("first call");
    b.expect("second call");
    assert_eq!(section.max(), 1, "two joined bodies ran at once");
}

/// Calls [`inner`] inside its locked body, in the section.
#[distributed_lock(key = "nest:<id>")]
async fn outer(id: u64, section: &Section) -> Result<Vec<i64>, LockError> {
    section.enter(inner(id)).await
}

/// The lock's hold counts as another program sees them, from inside.
#[distributed_lock(key = "nest:<id>")]
async fn inner(id: u64) -> Result<Vec<i64>, LockError> {
    let mut raw = server().raw().await;
    Ok(raw.hvals(format!("nest:{id}")).await.expect("HVALS"))
}

/// Another locked body on the same key, in the same section.
#[distributed_lock(key = "nest:<id>")]
async fn sibling(id: u64, section: &Section) -> Result<(), LockError> {
    section.enter(async {}).await;
    Ok(())
}

#[tokio::test]
async fn a_locked_call_awaited_in_a_locked_body_reenters_its_hold() {
    global().await;
    let section = Section::new();
    let counts = timeout(NO_DEADLOCK, outer(1, &section))
        .await
        .expect("the nested call re-entered instead of waiting for its caller")
        .expect("both bodies ran");
    assert_eq!(counts, vec![2], "one holder, held twice");
}

/// Old model: the sibling ran in the same task as `outer`, so it re-entered
/// `outer`'s hold and ran beside it.
#[tokio::test]
async fn a_locked_call_joined_beside_a_nesting_one_waits() {
    global().await;
    let section = Section::new();
    let (nested, beside) = timeout(NO_DEADLOCK, async {
        tokio::join!(outer(2, &section), sibling(2, &section))
    })
    .await
    .expect("the joined calls finished");
    assert_eq!(nested.expect("the nesting call"), vec![2]);
    beside.expect("the sibling call");
    assert_eq!(section.max(), 1, "the sibling ran beside the nesting call");
}
