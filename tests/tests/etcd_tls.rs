//! `etcds://`: the etcd engine over TLS, trusting the system's certificate
//! store. The test server's certificate is a throwaway one of its own; the
//! trusting half runs in a child process of this test binary with
//! `SSL_CERT_FILE` (which the store is read through) naming it, as an
//! operator would add a cluster's CA to the machine's store.

use std::process::Command;
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError};
use tests::etcd::Etcd;

/// Set in the child process: the `etcds://` URL to lock through.
const URL: &str = "ETCD_TLS_URL";

#[tokio::test]
async fn etcds_urls_trust_the_systems_certificate_store() {
    if let Ok(url) = std::env::var(URL) {
        // The child: the certificate is trusted.
        let client = LockClient::connect(Config::new(url)).await.unwrap();
        let guard = client.lock("over-tls").acquire().await.unwrap();
        assert!(guard.token() > 0);
        guard.release().await.unwrap();
        return;
    }
    let etcd = Etcd::start_tls();
    let ca = etcd.ca().expect("a TLS server").to_owned();
    // Not in the store: the connection is refused, as a typed error.
    let untrusted =
        LockClient::connect(Config::new(etcd.url()).connect_timeout(Duration::from_secs(2))).await;
    assert!(
        matches!(untrusted, Err(LockError::Connect { engine: "etcd", .. })),
        "{untrusted:?}"
    );
    // A plain `etcd://` client cannot talk to it either.
    let plain = LockClient::connect(
        Config::new(format!("etcd://127.0.0.1:{}", etcd.port()))
            .connect_timeout(Duration::from_secs(2)),
    )
    .await;
    assert!(plain.is_err());
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "etcds_urls_trust_the_systems_certificate_store"])
        .env(URL, etcd.url())
        .env("SSL_CERT_FILE", &ca)
        .env_remove("SSL_CERT_DIR")
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "the child failed:\n{}\n{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
    // The child ran the case (not zero tests).
    assert!(String::from_utf8_lossy(&child.stdout).contains("1 passed"));
}
