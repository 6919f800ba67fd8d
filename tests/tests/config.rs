//! Connection settings against real servers: ACL users, passwords, database
//! numbers, TLS; and the errors that say where and why a connection failed.

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient, LockError};
use redis::AsyncCommands;
use tests::Server;

#[tokio::test]
async fn password_user_and_database_from_the_url() {
    let server = Server::start_with(&[
        "--requirepass",
        "s3cret",
        "--user",
        "alice",
        "on",
        ">alicepw",
        "~*",
        "&*",
        "+@all",
    ]);
    let port = server.port();

    // Password only (the default user), database 3.
    let client = LockClient::connect(Config::new(format!("redis://:s3cret@127.0.0.1:{port}/3")))
        .await
        .unwrap();
    let guard = client.lock("in-db-3").acquire().await.unwrap();
    let mut raw = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{port}/3"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    assert!(
        raw.exists::<_, bool>("in-db-3").await.unwrap(),
        "the lock lives in db 3"
    );
    guard.release().await.unwrap();

    // An ACL user given through the builder.
    let alice = LockClient::connect(
        Config::new(format!("redis://127.0.0.1:{port}"))
            .username("alice")
            .password("alicepw"),
    )
    .await
    .unwrap();
    tests::take_and_release(alice.lock("acl")).await;

    // A wrong password is a typed error, not a panic or a hang.
    let wrong = LockClient::connect(
        Config::new(format!("redis://:nope@127.0.0.1:{port}"))
            .connect_timeout(Duration::from_secs(2)),
    )
    .await;
    let Err(wrong) = wrong else {
        panic!("connected with a wrong password")
    };
    assert!(matches!(wrong, LockError::Connect { .. }), "{wrong:?}");
    let text = wrong.to_string();
    assert!(text.contains("authentication failed"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("nope"), "never the password: {text}");
}

/// A TLS-only redis-server with a throwaway self-signed certificate.
struct TlsServer {
    dir: TempDir,
    keeper: std::process::Child,
    port: u16,
}

impl TlsServer {
    /// The server's directory: `ca.pem`, `cert.pem` and `key.pem` are in it.
    fn dir(&self) -> &std::path::Path {
        &self.dir.0
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        drop(self.keeper.stdin.take());
        let _ = self.keeper.wait();
    }
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tls_server() -> TlsServer {
    let dir = std::env::temp_dir().join(format!(
        "lock-tls-{}-{}",
        std::process::id(),
        tests::free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = TempDir(dir);
    let tests::Certificates { ca, cert, key } = tests::certificates(&dir.0);
    let port = tests::free_port();
    let args: Vec<String> = vec![
        "--port".into(),
        "0".into(),
        "--tls-port".into(),
        port.to_string(),
        "--bind".into(),
        "127.0.0.1".into(),
        "--tls-cert-file".into(),
        cert.display().to_string(),
        "--tls-key-file".into(),
        key.display().to_string(),
        "--tls-ca-cert-file".into(),
        ca.display().to_string(),
        "--tls-auth-clients".into(),
        "no".into(),
        "--save".into(),
        "".into(),
        "--appendonly".into(),
        "no".into(),
    ];
    let keeper = tests::keep(&args).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the TLS server never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    TlsServer { dir, keeper, port }
}

#[tokio::test]
async fn rediss_urls_connect_over_tls() {
    let server = tls_server();
    // `#insecure`: trust the throwaway self-signed certificate.
    let url = format!("rediss://127.0.0.1:{}/#insecure", server.port);
    let client = LockClient::connect(Config::new(&url)).await.unwrap();
    let guard = client.lock("over-tls").acquire().await.unwrap();
    assert!(guard.token() > 0);
    guard.release().await.unwrap();

    // A plain client cannot talk to it: a typed error within the timeout.
    let plain = LockClient::connect(
        Config::new(format!("redis://127.0.0.1:{}", server.port))
            .connect_timeout(Duration::from_secs(1)),
    )
    .await;
    assert!(plain.is_err());
}

#[tokio::test]
async fn rediss_sentinel_urls_reach_the_master_over_tls() {
    let master = tls_server();
    let (ca, cert, key) = (
        master.dir().join("ca.pem"),
        master.dir().join("cert.pem"),
        master.dir().join("key.pem"),
    );
    // One sentinel, speaking TLS to its clients (on `tls_port`) and to the
    // TLS-only master; its plain port is for this test's checks.
    let (plain, tls_port) = (tests::free_port(), tests::free_port());
    let conf = master.dir().join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {plain}\ntls-port {tls_port}\nbind 127.0.0.1\ndir {dir}\n\
             tls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca}\n\
             tls-auth-clients no\ntls-replication yes\n\
             sentinel monitor tlsmaster 127.0.0.1 {port} 1\n",
            dir = master.dir().display(),
            ca = ca.display(),
            cert = cert.display(),
            key = key.display(),
            port = master.port,
        ),
    )
    .unwrap();
    let mut sentinel = tests::keep(&[conf.display().to_string(), "--sentinel".into()]).unwrap();
    let sentinel_client = redis::Client::open(format!("redis://127.0.0.1:{plain}")).unwrap();
    tests::eventually(
        "the sentinel sees the master up",
        Duration::from_secs(20),
        || {
            let sentinel_client = sentinel_client.clone();
            async move {
                let Ok(mut conn) = sentinel_client.get_multiplexed_async_connection().await else {
                    return false;
                };
                let flags: redis::RedisResult<Vec<String>> = redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg("tlsmaster")
                    .query_async(&mut conn)
                    .await;
                // A flat list of field, value: `flags` is exactly `master` once
                // the sentinel reaches it (not `s_down` or `disconnected`).
                flags.is_ok_and(|fields| {
                    fields
                        .chunks(2)
                        .any(|pair| pair[0] == "flags" && pair[1] == "master")
                })
            }
        },
    )
    .await;

    let config = Config::sentinel(
        [format!("rediss://127.0.0.1:{tls_port}/#insecure")],
        "tlsmaster",
    );
    let client = LockClient::connect(config).await.unwrap();
    let guard = client.lock("sentinel-tls").acquire().await.unwrap();
    assert!(guard.token() > 0);
    guard.release().await.unwrap();

    drop(sentinel.stdin.take());
    let _ = sentinel.wait();
}

/// A listener that answers whatever it is sent like a web server would.
async fn http_endpoint() -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = socket.read(&mut buf).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    port
}

#[tokio::test]
async fn connection_errors_say_where_and_why() {
    // Nobody listens: refused, with the address and where it came from.
    let closed = tests::free_port();
    let Err(refused) = LockClient::connect(
        Config::new(format!("redis://:hunter2@127.0.0.1:{closed}"))
            .connect_timeout(Duration::from_secs(2)),
    )
    .await
    else {
        panic!("connected to a closed port")
    };
    let text = refused.to_string();
    assert_eq!(
        text,
        format!(
            "cannot connect to redis at 127.0.0.1:{closed} (from Config): connection refused \
             (is redis-server running there, on that port?)"
        )
    );
    assert!(!format!("{refused:?}").contains("hunter2"));

    // A web server on the port: said so, not a parser's complaint.
    let http = http_endpoint().await;
    let Err(not_redis) = LockClient::connect(
        Config::new(format!("redis://127.0.0.1:{http}")).connect_timeout(Duration::from_secs(2)),
    )
    .await
    else {
        panic!("a web server passed for Redis")
    };
    let text = not_redis.to_string();
    assert!(
        text.starts_with(&format!(
            "cannot connect to redis at 127.0.0.1:{http} (from Config): "
        )),
        "{text}"
    );
    assert!(text.contains("did not answer as Redis"), "{text}");

    // URLs that do not parse say what is wrong.
    for (url, says) in [
        (
            "127.0.0.1:6379",
            "the scheme is missing; write redis://127.0.0.1:6379",
        ),
        ("http://127.0.0.1:6379", "the scheme http:// is not Redis's"),
        ("redis://127.0.0.1:99999", "\"99999\" is not a port number"),
        ("redis://:pw@127.0.0.1:abc", "\"abc\" is not a port number"),
        ("not a url", "it is not a URL"),
    ] {
        let Err(e) = LockClient::connect(Config::new(url)).await else {
            panic!("{url} was taken")
        };
        assert!(matches!(e, LockError::Config(_)), "{e:?}");
        let text = e.to_string();
        assert!(text.contains(says), "{url}: {text}");
        assert!(!text.contains(":pw@"), "{text}");
    }
}

#[tokio::test]
async fn a_zero_wait_timeout_reads_as_one_attempt() {
    let server = Server::start();
    let client = server.client().await;
    let held = client.lock("busy").acquire().await.unwrap();
    let once = client
        .lock("busy")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert_eq!(once.to_string(), "lock `busy` is busy (one attempt)");
    let waited = client
        .lock("busy")
        .wait(Duration::from_millis(50))
        .acquire()
        .await
        .unwrap_err();
    assert_eq!(
        waited.to_string(),
        "lock `busy` was still held by another holder after waiting 50ms"
    );
    held.release().await.unwrap();
}
