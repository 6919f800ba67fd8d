//! The store a demo runs on, whichever engine it is: which one (`--engine`
//! or a URL's scheme), the server (a URL given, or a throwaway one started
//! here), and plain values kept in it next to the locks (a shop's stock).
//!
//! Each engine is a feature of this crate (`redis`, the default, `etcd`,
//! `zookeeper`, `postgres`, `mysql`; `all` for every one), so that the
//! Redis demo's first build compiles no other store's driver.

use std::fmt;

use crate::{Etcd, MariaDb, NoServer, Postgres, Redis, ZooKeeper};

/// The engines a lock (and a demo's data) can live on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// `redis://`
    Redis,
    /// `etcd://`
    Etcd,
    /// `zk://`
    ZooKeeper,
    /// `postgres://`
    Postgres,
    /// `mysql://`, `mariadb://`
    MySql,
}

impl Engine {
    /// The engine `--engine` names: `redis`, `etcd`, `zk` (or `zookeeper`),
    /// `postgres`, `mysql` (or `mariadb`).
    pub fn named(name: &str) -> Result<Engine, String> {
        match name {
            "redis" => Ok(Engine::Redis),
            "etcd" => Ok(Engine::Etcd),
            "zk" | "zookeeper" => Ok(Engine::ZooKeeper),
            "postgres" | "postgresql" => Ok(Engine::Postgres),
            "mysql" | "mariadb" => Ok(Engine::MySql),
            other => Err(format!(
                "--engine {other:?}: expected redis, etcd, zk, postgres or mysql"
            )),
        }
    }

    /// The engine a URL's scheme names.
    pub fn of_url(url: &str) -> Result<Engine, String> {
        match url.split_once("://").map(|(scheme, _)| scheme) {
            Some("redis" | "rediss" | "unix") => Ok(Engine::Redis),
            Some("etcd" | "etcds") => Ok(Engine::Etcd),
            Some("zk") => Ok(Engine::ZooKeeper),
            Some("postgres" | "postgresql") => Ok(Engine::Postgres),
            Some("mysql" | "mariadb") => Ok(Engine::MySql),
            _ => Err(format!(
                "--url: expected a redis://, etcd://, zk://, postgres:// or mysql:// URL, \
                 got {:?}",
                url.split_once("://").map_or(url, |(scheme, _)| scheme)
            )),
        }
    }

    /// This crate's feature that brings the engine.
    pub fn feature(self) -> &'static str {
        match self {
            Engine::Redis => "redis",
            Engine::Etcd => "etcd",
            Engine::ZooKeeper => "zookeeper",
            Engine::Postgres => "postgres",
            Engine::MySql => "mysql",
        }
    }

    /// Whether this build has the engine (its feature is on).
    pub fn built(self) -> bool {
        match self {
            Engine::Redis => cfg!(feature = "redis"),
            Engine::Etcd => cfg!(feature = "etcd"),
            Engine::ZooKeeper => cfg!(feature = "zookeeper"),
            Engine::Postgres => cfg!(feature = "postgres"),
            Engine::MySql => cfg!(feature = "mysql"),
        }
    }

    /// The name `--engine` takes.
    pub fn name(self) -> &'static str {
        match self {
            Engine::ZooKeeper => "zk",
            other => other.feature(),
        }
    }
}

/// The server a demo runs against: the one a URL names, or a throwaway one
/// started here (stopped when this is dropped).
pub enum Server {
    /// Given with `--url`.
    Given(Engine, String),
    /// A throwaway `redis-server` (or the one at `REDIS_URL`).
    Redis(Redis),
    /// A throwaway `etcd` (or the one at `LOCK_URL`).
    Etcd(Etcd),
    /// A throwaway ZooKeeper (or the one at `LOCK_URL`).
    ZooKeeper(ZooKeeper),
    /// A throwaway PostgreSQL (or the one at `LOCK_URL`).
    Postgres(Postgres),
    /// A throwaway MariaDB (or the one at `LOCK_URL`).
    MySql(MariaDb),
}

impl Server {
    /// The server `url` names, or else a throwaway server of `engine` (the
    /// one the environment names, as each starter reads it: `REDIS_URL`
    /// for Redis, `LOCK_URL` for the others). An engine this build lacks is
    /// an error that says how to build it in.
    pub fn find(engine: Engine, url: Option<String>) -> Result<Server, NoServer> {
        if !engine.built() {
            return Err(NoServer(format!(
                "this build of the examples has no {0}: add `--features {1}` (or \
                 `--features all`) after `-p examples`, for example\n  \
                 cargo run --release -p examples --features {1} --example flash_sale -- --engine {0}",
                engine.name(),
                engine.feature()
            )));
        }
        if let Some(url) = url {
            return Ok(Server::Given(engine, url));
        }
        Ok(match engine {
            Engine::Redis => Server::Redis(Redis::from_env_or_start()?),
            Engine::Etcd => Server::Etcd(Etcd::from_env_or_start()?),
            Engine::ZooKeeper => Server::ZooKeeper(ZooKeeper::from_env_or_start()?),
            Engine::Postgres => Server::Postgres(Postgres::from_env_or_start()?),
            Engine::MySql => Server::MySql(MariaDb::from_env_or_start()?),
        })
    }

    /// The engine the server runs.
    pub fn engine(&self) -> Engine {
        match self {
            Server::Given(engine, _) => *engine,
            Server::Redis(_) => Engine::Redis,
            Server::Etcd(_) => Engine::Etcd,
            Server::ZooKeeper(_) => Engine::ZooKeeper,
            Server::Postgres(_) => Engine::Postgres,
            Server::MySql(_) => Engine::MySql,
        }
    }

    /// The lock URL (`Config::new`'s).
    pub fn url(&self) -> &str {
        match self {
            Server::Given(_, url) => url,
            Server::Redis(s) => s.url(),
            Server::Etcd(s) => s.url(),
            Server::ZooKeeper(s) => s.url(),
            Server::Postgres(s) => s.url(),
            Server::MySql(s) => s.url(),
        }
    }

    /// Where the server comes from, for the report (never a password).
    pub fn describe(&self) -> String {
        match self {
            Server::Given(engine, _) => format!("the {} at --url", engine.name()),
            Server::Redis(s) => s.describe(),
            Server::Etcd(s) => s.describe(),
            Server::ZooKeeper(s) => s.describe(),
            Server::Postgres(s) => s.describe(),
            Server::MySql(s) => s.describe(),
        }
    }
}

/// A store's error, in words.
#[derive(Debug)]
pub struct DataError(String);

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DataError {}

/// `e` in words, as a [`DataError`].
fn data(e: impl fmt::Display) -> DataError {
    DataError(e.to_string())
}

/// Plain counts kept in the store the locks are on, each under a key of
/// its own: a Redis string, an etcd key under `shop/`, a ZooKeeper node
/// `/shop-<key>`, a row of the table `shop_stock`. Reads and writes are
/// separate calls (nothing makes a read-modify-write atomic but a lock).
/// One connection each; clones share it.
#[derive(Clone)]
pub enum Counts {
    /// On Redis.
    #[cfg(feature = "redis")]
    Redis(redis::aio::MultiplexedConnection),
    /// On etcd.
    #[cfg(feature = "etcd")]
    Etcd(Box<etcd_client::KvClient>),
    /// On ZooKeeper.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(zookeeper_client::Client),
    /// On PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(std::sync::Arc<PgCounts>),
    /// On MySQL or MariaDB.
    #[cfg(feature = "mysql")]
    MySql(mysql_async::Pool),
}

/// A PostgreSQL connection with the counts' statements prepared on it
/// (a statement sent as text would be prepared anew each time: one round
/// trip more per read or write).
#[cfg(feature = "postgres")]
pub struct PgCounts {
    client: tokio_postgres::Client,
    get: tokio_postgres::Statement,
    set: tokio_postgres::Statement,
    remove: tokio_postgres::Statement,
}

/// The table the SQL stores keep counts in.
#[cfg(any(feature = "postgres", feature = "mysql"))]
const TABLE: &str = "shop_stock";

/// A lock URL as a database driver takes it: without the lock engine's own
/// query parameters (`table=`, `keep_rows=`), and `mariadb://` written
/// `mysql://`.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub fn driver_url(url: &str) -> String {
    let url = url
        .strip_prefix("mariadb://")
        .map_or(url.to_owned(), |rest| format!("mysql://{rest}"));
    let (base, query) = url.split_once('?').unwrap_or((&url, ""));
    let rest: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("table=") && !p.starts_with("keep_rows="))
        .collect();
    match rest.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", rest.join("&")),
    }
}

impl Counts {
    /// A new connection to the store `url` names (of `engine`); the SQL
    /// stores make their table when missing.
    pub async fn connect(engine: Engine, url: &str) -> Result<Counts, DataError> {
        match engine {
            #[cfg(feature = "redis")]
            Engine::Redis => Ok(Counts::Redis(
                redis::Client::open(url)
                    .map_err(data)?
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(data)?,
            )),
            #[cfg(feature = "etcd")]
            Engine::Etcd => {
                let hosts = url.split_once("://").map_or("", |(_, rest)| rest);
                let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, hosts)| hosts);
                let endpoints: Vec<String> = hosts
                    .trim_end_matches('/')
                    .split(',')
                    .map(|host| format!("http://{host}"))
                    .collect();
                let client = etcd_client::Client::connect(endpoints, None)
                    .await
                    .map_err(data)?;
                Ok(Counts::Etcd(Box::new(client.kv_client())))
            }
            #[cfg(feature = "zookeeper")]
            Engine::ZooKeeper => {
                // The hosts alone: the counts live at the root, not under
                // the locks' path.
                let rest = url.trim_start_matches("zk://");
                let rest = rest.split('/').next().unwrap_or_default();
                let hosts = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
                let client = zookeeper_client::Client::connect(hosts)
                    .await
                    .map_err(data)?;
                Ok(Counts::ZooKeeper(client))
            }
            #[cfg(feature = "postgres")]
            Engine::Postgres => {
                let (client, connection) =
                    tokio_postgres::connect(&driver_url(url), tokio_postgres::NoTls)
                        .await
                        .map_err(data)?;
                tokio::spawn(connection);
                client
                    .batch_execute(&format!(
                        "CREATE TABLE IF NOT EXISTS {TABLE} \
                         (name TEXT PRIMARY KEY, count BIGINT NOT NULL)"
                    ))
                    .await
                    .map_err(data)?;
                let prepare = |text: String| {
                    let client = &client;
                    async move { client.prepare(&text).await.map_err(data) }
                };
                let get = prepare(format!("SELECT count FROM {TABLE} WHERE name = $1")).await?;
                let set = prepare(format!(
                    "INSERT INTO {TABLE} (name, count) VALUES ($1, $2) \
                     ON CONFLICT (name) DO UPDATE SET count = EXCLUDED.count"
                ))
                .await?;
                let remove = prepare(format!("DELETE FROM {TABLE} WHERE name = $1")).await?;
                Ok(Counts::Postgres(std::sync::Arc::new(PgCounts {
                    client,
                    get,
                    set,
                    remove,
                })))
            }
            #[cfg(feature = "mysql")]
            Engine::MySql => {
                use mysql_async::prelude::Queryable;
                let url = driver_url(url);
                let pool = mysql_async::Pool::new(mysql_async::Opts::from_url(&url).map_err(data)?);
                my_conn(&pool)
                    .await?
                    .query_drop(format!(
                        "CREATE TABLE IF NOT EXISTS {TABLE} \
                         (name VARCHAR(255) PRIMARY KEY, count BIGINT NOT NULL)"
                    ))
                    .await
                    .map_err(data)?;
                Ok(Counts::MySql(pool))
            }
            #[allow(unreachable_patterns)]
            other => Err(DataError(format!(
                "this build has no {} (feature `{}`)",
                other.name(),
                other.feature()
            ))),
        }
    }

    /// The count under `key` (0 when there is none).
    pub async fn get(&self, key: &str) -> Result<i64, DataError> {
        match self {
            #[cfg(feature = "redis")]
            Counts::Redis(conn) => {
                redis::AsyncCommands::get::<_, Option<i64>>(&mut conn.clone(), key)
                    .await
                    .map(Option::unwrap_or_default)
                    .map_err(data)
            }
            #[cfg(feature = "etcd")]
            Counts::Etcd(kv) => {
                let found = (**kv)
                    .clone()
                    .get(etcd_key(key), None)
                    .await
                    .map_err(data)?;
                match found.kvs().first() {
                    Some(kv) => count_in(key, kv.value_str().map_err(data)?),
                    None => Ok(0),
                }
            }
            #[cfg(feature = "zookeeper")]
            Counts::ZooKeeper(zk) => match zk.get_data(&zk_path(key)).await {
                Ok((bytes, _)) => count_in(key, &String::from_utf8_lossy(&bytes)),
                Err(zookeeper_client::Error::NoNode) => Ok(0),
                Err(e) => Err(data(e)),
            },
            #[cfg(feature = "postgres")]
            Counts::Postgres(pg) => {
                let row = pg.client.query_opt(&pg.get, &[&key]).await.map_err(data)?;
                Ok(row.map_or(0, |row| row.get(0)))
            }
            #[cfg(feature = "mysql")]
            Counts::MySql(pool) => {
                use mysql_async::prelude::Queryable;
                let count: Option<i64> = my_conn(pool)
                    .await?
                    .exec_first(format!("SELECT count FROM {TABLE} WHERE name = ?"), (key,))
                    .await
                    .map_err(data)?;
                Ok(count.unwrap_or_default())
            }
        }
    }

    /// Sets the count under `key`.
    pub async fn set(&self, key: &str, count: i64) -> Result<(), DataError> {
        match self {
            #[cfg(feature = "redis")]
            Counts::Redis(conn) => {
                redis::AsyncCommands::set::<_, _, ()>(&mut conn.clone(), key, count)
                    .await
                    .map_err(data)
            }
            #[cfg(feature = "etcd")]
            Counts::Etcd(kv) => (**kv)
                .clone()
                .put(etcd_key(key), count.to_string(), None)
                .await
                .map(drop)
                .map_err(data),
            #[cfg(feature = "zookeeper")]
            Counts::ZooKeeper(zk) => {
                let path = zk_path(key);
                let text = count.to_string();
                match zk.set_data(&path, text.as_bytes(), None).await {
                    Ok(_) => Ok(()),
                    Err(zookeeper_client::Error::NoNode) => {
                        let persistent = zookeeper_client::CreateMode::Persistent
                            .with_acls(zookeeper_client::Acls::anyone_all());
                        zk.create(&path, text.as_bytes(), &persistent)
                            .await
                            .map(drop)
                            .map_err(data)
                    }
                    Err(e) => Err(data(e)),
                }
            }
            #[cfg(feature = "postgres")]
            Counts::Postgres(pg) => pg
                .client
                .execute(&pg.set, &[&key, &count])
                .await
                .map(drop)
                .map_err(data),
            #[cfg(feature = "mysql")]
            Counts::MySql(pool) => {
                use mysql_async::prelude::Queryable;
                my_conn(pool)
                    .await?
                    .exec_drop(
                        format!(
                            "INSERT INTO {TABLE} (name, count) VALUES (?, ?) \
                             ON DUPLICATE KEY UPDATE count = VALUES(count)"
                        ),
                        (key, count),
                    )
                    .await
                    .map_err(data)
            }
        }
    }

    /// Removes the count under `key` (nothing when there is none).
    pub async fn remove(&self, key: &str) -> Result<(), DataError> {
        match self {
            #[cfg(feature = "redis")]
            Counts::Redis(conn) => redis::AsyncCommands::del::<_, ()>(&mut conn.clone(), key)
                .await
                .map_err(data),
            #[cfg(feature = "etcd")]
            Counts::Etcd(kv) => (**kv)
                .clone()
                .delete(etcd_key(key), None)
                .await
                .map(drop)
                .map_err(data),
            #[cfg(feature = "zookeeper")]
            Counts::ZooKeeper(zk) => match zk.delete(&zk_path(key), None).await {
                Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(()),
                Err(e) => Err(data(e)),
            },
            #[cfg(feature = "postgres")]
            Counts::Postgres(pg) => pg
                .client
                .execute(&pg.remove, &[&key])
                .await
                .map(drop)
                .map_err(data),
            #[cfg(feature = "mysql")]
            Counts::MySql(pool) => {
                use mysql_async::prelude::Queryable;
                my_conn(pool)
                    .await?
                    .exec_drop(format!("DELETE FROM {TABLE} WHERE name = ?"), (key,))
                    .await
                    .map_err(data)
            }
        }
    }
}

/// The count a text value under `key` holds.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
fn count_in(key: &str, text: &str) -> Result<i64, DataError> {
    text.parse()
        .map_err(|_| DataError(format!("{key} holds {text:?}, not a count")))
}

/// A connection of the pool.
#[cfg(feature = "mysql")]
async fn my_conn(pool: &mysql_async::Pool) -> Result<mysql_async::Conn, DataError> {
    pool.get_conn().await.map_err(data)
}

/// The etcd key of `key`: under `shop/`, apart from the locks' prefixes
/// (lock names hold no `/`).
#[cfg(feature = "etcd")]
fn etcd_key(key: &str) -> String {
    format!("shop/{key}")
}

/// The ZooKeeper node of `key` (a `/` in it would name a child).
#[cfg(feature = "zookeeper")]
fn zk_path(key: &str) -> String {
    format!("/shop-{}", key.replace('/', "_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_its_engine_and_engines_their_features() {
        for (url, engine) in [
            ("redis://h:1", Engine::Redis),
            ("etcd://h:1,h:2", Engine::Etcd),
            ("zk://h:1/locks", Engine::ZooKeeper),
            ("postgresql://u@h/db", Engine::Postgres),
            ("mariadb://u@h/db", Engine::MySql),
        ] {
            assert_eq!(Engine::of_url(url), Ok(engine), "{url}");
            assert_eq!(Engine::named(engine.name()), Ok(engine));
        }
        assert!(Engine::of_url("ftp://h").is_err());
        assert!(Engine::named("sqlite").is_err());
        assert!(Engine::Redis.built(), "the default feature");
    }

    #[cfg(any(feature = "postgres", feature = "mysql"))]
    #[test]
    fn a_driver_gets_the_url_without_the_engines_parameters() {
        assert_eq!(
            driver_url("mariadb://u:p@h:3306/db?table=jobs&keep_rows=true"),
            "mysql://u:p@h:3306/db"
        );
        assert_eq!(
            driver_url("postgres://u@h/db?table=jobs&sslmode=disable"),
            "postgres://u@h/db?sslmode=disable"
        );
    }
}
