//! The stores a lock can live on (DESIGN §9), listed once.
//!
//! Every engine implements the seam ([`seam::Engine`] and its
//! [`seam::Hold`]) in its own folder. The list below is the only place
//! that names them all: from its rows come which engine a URL's scheme
//! names ([`Store`]), what a client is connected to ([`Connected`]), what a
//! guard holds ([`Held`]) and an acquisition's future ([`Acquiring`]), all
//! dispatched statically (nothing boxed on the path of an acquisition). A
//! row whose feature this build lacks stands for [`seam::Absent`], of which
//! no value exists, so no dispatch needs a `cfg`. `docs/ENGINES.md` says
//! what a new engine touches.
//!
//! No engine imports another; the shared layers reach an engine only
//! through the seam and this list.

#[cfg(feature = "etcd")]
pub(crate) mod etcd;
#[cfg(feature = "memory")]
pub(crate) mod memory;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "redis")]
pub(crate) mod redis;
pub(crate) mod seam;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod sql;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::runtime::Handle;

use crate::background::Background;
use crate::config::Config;
use crate::error::LockError;
use crate::holder::ScopedHold;
use crate::info::LockInfo;
use crate::request::Request;
use seam::{Engine, Hold};

/// A future of an operation on whichever engine (`inspect`, `locks`,
/// `force_unlock`: an operator's calls, not an acquisition's path).
type Operation<T> = Pin<Box<dyn Future<Output = Result<T, LockError>> + Send>>;

/// Generates everything that dispatches over the engines from their
/// list: one row per engine, `Variant(FutureParam): module::Type, feature
/// "name", schemes [...]`.
macro_rules! engine_list {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident($param:ident): $module:ident::$ty:ident,
            feature $feature:literal, schemes [$($scheme:literal),+];
    )+) => {
        $(
            $(#[doc = $doc])*
            #[cfg(feature = $feature)]
            pub(crate) type $variant = $module::$ty;
            $(#[doc = $doc])*
            /// (Not in this build.)
            #[cfg(not(feature = $feature))]
            pub(crate) type $variant = seam::Absent;
        )+

        /// Which engine a configuration's URL names (see [`Store::of`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Store {
            $($(#[doc = $doc])* $variant,)+
        }

        impl Store {
            /// Every engine of the list, built in or not.
            const ALL: &'static [Store] = &[$(Store::$variant),+];

            /// The URL schemes that name the engine.
            fn schemes(self) -> &'static [&'static str] {
                match self {
                    $(Store::$variant => &[$($scheme),+],)+
                }
            }

            /// The Cargo feature that brings the engine.
            fn feature(self) -> &'static str {
                match self {
                    $(Store::$variant => $feature,)+
                }
            }

            /// Whether the engine's stores live in this process only (no
            /// other process can reach them).
            #[cfg_attr(not(feature = "cli"), allow(dead_code))]
            pub(crate) fn in_process(self) -> bool {
                match self {
                    $(Store::$variant => <$variant as Engine>::IN_PROCESS,)+
                }
            }

            /// Whether this build has the engine.
            fn built(self) -> bool {
                match self {
                    $(Store::$variant => cfg!(feature = $feature),)+
                }
            }

            /// The statements that make the engine's tables for `config`
            /// (`lockctl schema`).
            #[cfg_attr(not(feature = "cli"), allow(dead_code))]
            fn tables(self, config: &Config) -> Result<String, LockError> {
                match self {
                    $(Store::$variant => <$variant as Engine>::schema(config),)+
                }
            }

            /// Connects to the engine's store.
            pub(crate) async fn connect(
                self,
                config: Config,
                runtime: Handle,
            ) -> Result<Connected, LockError> {
                Ok(match self {
                    $(Store::$variant => {
                        Connected::$variant(<$variant as Engine>::connect(config, runtime).await?)
                    })+
                })
            }
        }

        /// The store a client's locks live on, and what its tasks share there.
        pub(crate) enum Connected {
            $($(#[doc = $doc])* $variant(Arc<$variant>),)+
        }

        impl Connected {
            /// The engine's name (`"redis"`, `"etcd"`, ...).
            pub(crate) fn name(&self) -> &'static str {
                match self {
                    $(Connected::$variant(_) => <$variant as Engine>::NAME,)+
                }
            }

            /// See [`Engine::SEMAPHORES`].
            pub(crate) fn semaphores(&self) -> bool {
                match self {
                    $(Connected::$variant(_) => <$variant as Engine>::SEMAPHORES,)+
                }
            }

            /// See [`Engine::id`].
            pub(crate) fn id(&self) -> &str {
                match self {
                    $(Connected::$variant(e) => Engine::id(&**e),)+
                }
            }

            /// See [`Engine::config`].
            pub(crate) fn config(&self) -> &Config {
                match self {
                    $(Connected::$variant(e) => Engine::config(&**e),)+
                }
            }

            /// See [`Engine::runtime`].
            pub(crate) fn runtime(&self) -> &Handle {
                match self {
                    $(Connected::$variant(e) => Engine::runtime(&**e),)+
                }
            }

            /// See [`Engine::renewed`].
            pub(crate) fn renewed(&self) -> usize {
                match self {
                    $(Connected::$variant(e) => Engine::renewed(&**e),)+
                }
            }

            /// One acquisition on the engine (see [`Engine::acquire`]),
            /// polled where it stands: no box, and the future is the size
            /// of the largest engine's.
            pub(crate) fn acquire(
                &self,
                alive: Arc<Background>,
                request: Request,
            ) -> impl Future<Output = Result<Held, LockError>> + Send + 'static + use<> {
                match self {
                    $(Connected::$variant(e) => Acquiring::$variant {
                        acquiring: Engine::acquire(e.clone(), alive, request).map(map_held(Held::$variant)),
                    },)+
                }
            }

            /// See [`Engine::inspect`].
            pub(crate) fn inspect(&self, name: String) -> Operation<Option<LockInfo>> {
                match self {
                    $(Connected::$variant(e) => Box::pin(Engine::inspect(e.clone(), name)),)+
                }
            }

            /// See [`Engine::locks`].
            pub(crate) fn locks(&self, pattern: String) -> Operation<Vec<LockInfo>> {
                match self {
                    $(Connected::$variant(e) => Box::pin(Engine::locks(e.clone(), pattern)),)+
                }
            }

            /// See [`Engine::force_unlock`].
            pub(crate) fn force_unlock(&self, name: String) -> Operation<bool> {
                match self {
                    $(Connected::$variant(e) => Box::pin(Engine::force_unlock(e.clone(), name)),)+
                }
            }
        }

        /// One hold on one lock by one holder, on whichever engine the
        /// client has.
        // The variants of engines a build lacks have no size, and no value.
        #[allow(clippy::large_enum_variant)]
        pub(crate) enum Held {
            $($(#[doc = $doc])* $variant(<$variant as Engine>::Hold),)+
        }

        impl Held {
            /// See [`Hold::name`].
            pub(crate) fn name(&self) -> &str {
                match self {
                    $(Held::$variant(h) => Hold::name(h),)+
                }
            }

            /// See [`Hold::token`].
            pub(crate) fn token(&self) -> u64 {
                match self {
                    $(Held::$variant(h) => Hold::token(h),)+
                }
            }

            /// See [`Hold::holder`].
            pub(crate) fn holder(&self) -> &str {
                match self {
                    $(Held::$variant(h) => Hold::holder(h),)+
                }
            }

            /// See [`Hold::scoped`].
            pub(crate) fn scoped(&self) -> ScopedHold {
                match self {
                    $(Held::$variant(h) => Hold::scoped(h),)+
                }
            }

            /// See [`Hold::is_lost`].
            pub(crate) fn is_lost(&self) -> bool {
                match self {
                    $(Held::$variant(h) => Hold::is_lost(h),)+
                }
            }

            /// See [`Hold::remaining`].
            pub(crate) fn remaining(&self) -> Duration {
                match self {
                    $(Held::$variant(h) => Hold::remaining(h),)+
                }
            }

            /// See [`Hold::extend`].
            pub(crate) async fn extend(&mut self, lease: Duration) -> Result<(), LockError> {
                match self {
                    $(Held::$variant(h) => Hold::extend(h, lease).await,)+
                }
            }

            /// See [`Hold::lost`].
            pub(crate) async fn lost(&self) {
                match self {
                    $(Held::$variant(h) => Hold::lost(h).await,)+
                }
            }

            /// Gives the hold back (see [`Hold::release`]). Boxed in the
            /// engine's own size (not the largest of the build's
            /// engines'): a caller's task carries a release's future while
            /// it waits for a lock.
            pub(crate) fn release(self) -> Operation<()> {
                match self {
                    $(Held::$variant(h) => Box::pin(Hold::release(h)),)+
                }
            }

            /// See [`Hold::runtime`].
            pub(crate) fn runtime(&self) -> Handle {
                match self {
                    $(Held::$variant(h) => Hold::runtime(h),)+
                }
            }
        }

        pin_project_lite::pin_project! {
            /// An acquisition's future on whichever engine: one variant per
            /// engine, each the engine's own future.
            #[project = AcquiringNow]
            pub(crate) enum Acquiring<$($param),+> {
                $($variant { #[pin] acquiring: $param },)+
            }
        }

        impl<$($param),+> Future for Acquiring<$($param),+>
        where
            $($param: Future<Output = Result<Held, LockError>>,)+
        {
            type Output = Result<Held, LockError>;

            fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
                match self.project() {
                    $(AcquiringNow::$variant { acquiring } => acquiring.poll(cx),)+
                }
            }
        }
    };
}

engine_list! {
    /// Redis (standalone, Sentinel or Cluster; DESIGN §4, §7).
    Redis(R): redis::Core, feature "redis", schemes ["redis", "rediss", "unix", "redis+unix"];
    /// etcd (DESIGN §9).
    Etcd(E): etcd::Etcd, feature "etcd", schemes ["etcd", "etcds"];
    /// ZooKeeper (DESIGN §9).
    ZooKeeper(Z): zookeeper::Zk, feature "zookeeper", schemes ["zk"];
    /// PostgreSQL (DESIGN §10).
    Postgres(P): postgres::Pg, feature "postgres", schemes ["postgres", "postgresql"];
    /// MySQL or MariaDB (DESIGN §10).
    MySql(M): mysql::My, feature "mysql", schemes ["mysql", "mariadb"];
    /// Memory: locks kept in this process, for tests (DESIGN §12).
    Memory(N): memory::Mem, feature "memory", schemes ["memory"];
}

/// An engine's acquisition's answer made a [`Held`] of its variant.
fn map_held<H>(
    variant: fn(H) -> Held,
) -> impl FnOnce(Result<H, LockError>) -> Result<Held, LockError> {
    move |held| held.map(variant)
}

impl Store {
    /// The engine `config` names, by its URL's scheme (Redis for a URL of
    /// no other engine's, when built in). An engine that this build does
    /// not have is [`LockError::Config`] naming the feature to enable.
    pub(crate) fn of(config: &Config) -> Result<Store, LockError> {
        let scheme = config.url().split_once("://").map(|(scheme, _)| scheme);
        let named = Store::ALL
            .iter()
            .copied()
            .find(|store| scheme.is_some_and(|scheme| store.schemes().contains(&scheme)));
        match named {
            Some(store) if store.built() => Ok(store),
            Some(Store::Redis) => Err(LockError::Config(format!(
                "{:?} ({}): redis:// URLs need lock-runtime's `redis` feature (a default \
                 feature); enable it in Cargo.toml, or give the URL of an engine this build has: \
                 {}",
                crate::config::redact(config.url()),
                config.origin(),
                built_in()
            ))),
            Some(store) => Err(LockError::Config(format!(
                "{}:// URLs need lock-runtime's `{}` feature; enable it in Cargo.toml",
                store.schemes()[0],
                store.feature()
            ))),
            None if Store::Redis.built() => Ok(Store::Redis),
            None => Err(LockError::Config(format!(
                "{:?} names no engine this build has: use {}",
                crate::config::redact(config.url()),
                built_in()
            ))),
        }
    }
}

/// The URL schemes of the engines this build has, in words.
fn built_in() -> String {
    let schemes: Vec<String> = Store::ALL
        .iter()
        .filter(|store| store.built())
        .map(|store| format!("{}://", store.schemes()[0]))
        .collect();
    if schemes.is_empty() {
        "a build with an engine: lock-runtime's features `redis` (default), `etcd`, \
         `zookeeper`, `postgres` or `mysql`"
            .into()
    } else {
        schemes.join(", ")
    }
}

/// The statements that make the tables `config`'s URL names (the SQL
/// engines' `lockctl schema`); [`LockError::Config`] for a URL of another
/// engine.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub(crate) fn schema(config: &Config) -> Result<String, LockError> {
    Store::of(config)?.tables(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_of_an_engine_not_built_in_is_a_config_error_naming_its_feature() {
        for (url, feature, built) in [
            ("redis://127.0.0.1:1", "redis", cfg!(feature = "redis")),
            ("unix:///tmp/redis.sock", "redis", cfg!(feature = "redis")),
            ("etcd://127.0.0.1:1", "etcd", cfg!(feature = "etcd")),
            ("zk://127.0.0.1:1", "zookeeper", cfg!(feature = "zookeeper")),
            (
                "postgres://u@127.0.0.1:1/db",
                "postgres",
                cfg!(feature = "postgres"),
            ),
            ("mysql://u@127.0.0.1:1/db", "mysql", cfg!(feature = "mysql")),
        ] {
            match Store::of(&Config::new(url)) {
                Ok(_) => assert!(built, "{url} without the `{feature}` feature"),
                Err(LockError::Config(text)) => {
                    assert!(!built, "{url}: {text}");
                    assert!(text.contains(&format!("`{feature}` feature")), "{text}");
                }
                Err(other) => panic!("{url}: {other:?}"),
            }
        }
    }

    #[cfg(not(feature = "redis"))]
    #[test]
    fn without_redis_an_unknown_scheme_names_the_engines_built_in() {
        let Err(LockError::Config(text)) = Store::of(&Config::new("ftp://u:secret@h/x")) else {
            panic!("an unknown scheme was taken");
        };
        assert!(text.contains("no engine this build has"), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }
}
