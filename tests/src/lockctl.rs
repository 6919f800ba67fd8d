//! What `lockctl` shows, checked the same way on every engine.

use std::process::Stdio;
use std::time::Duration;

use lock_runtime::LockClient;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Generous bound on one line of output (it asserts no speed).
const WITHIN: Duration = Duration::from_secs(20);

/// `lockctl --url <url> watch stock:7` (`lockctl` is the command to run)
/// prints the lock free, then an acquire by `client` naming its holder,
/// then the release.
pub async fn watch_prints_an_acquire_and_a_release(
    mut lockctl: Command,
    url: &str,
    client: &LockClient,
) {
    let mut child = lockctl
        .args(["--url", url, "watch", "stock:7"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut until = async |what: &str| -> String {
        loop {
            let line = tokio::time::timeout(WITHIN, lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("watch never printed {what:?}"))
                .unwrap()
                .unwrap_or_else(|| panic!("watch ended before {what:?}"));
            if line.contains(what) {
                return line;
            }
        }
    };
    until("stock:7: free").await;

    let guard = client.lock("stock:7").acquire().await.unwrap();
    let acquired = until("acquired").await;
    assert!(acquired.contains(guard.holder_id()), "{acquired}");
    let holder = guard.holder_id().to_owned();
    guard.release().await.unwrap();
    let released = until("released").await;
    assert!(released.contains(&holder), "{released}");
    child.kill().await.unwrap();
}
