//! The seam every engine sits behind (DESIGN §9): what a store must do
//! for the shared layers ([`Engine`]), and what one hold on it is
//! ([`Hold`]). The engines implement both in their own folders; the list
//! in `engine/mod.rs` dispatches to them statically.
//!
//! The signatures name no engine's types: only the crate's shared ones
//! (the configuration, an acquisition's request, `inspect`'s
//! info, the holder's scope), so that the trait could later be made
//! public for engines outside the crate.
//!
//! Imports nothing above it: the engines, the list, the client and the
//! guards all build on this file.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;

use crate::background::Background;
use crate::config::Config;
use crate::error::LockError;
use crate::holder::ScopedHold;
use crate::info::LockInfo;
use crate::request::Request;

/// A store locks can live on: what a client shares there, and the
/// operations the shared layers ask of it.
pub(crate) trait Engine: Sized + Send + Sync + 'static {
    /// The engine's name, as [`LockClient::engine_name`](crate::LockClient::engine_name)
    /// and [`LockError::Unsupported`] give it.
    const NAME: &'static str;

    /// Whether the store lives in this process only: no other process
    /// (`lockctl` among them) can reach it.
    const IN_PROCESS: bool = false;

    /// Whether the engine keeps semaphores (DESIGN §11). An acquisition of
    /// a permit on an engine that does not is refused with
    /// [`LockError::Unsupported`] before anything is sent.
    const SEMAPHORES: bool = false;

    /// One hold of one lock by one holder on this store.
    type Hold: Hold;

    /// Connects to the store `config` names, its background work on the
    /// client's `runtime`.
    fn connect(
        config: Config,
        runtime: Handle,
    ) -> impl Future<Output = Result<Arc<Self>, LockError>> + Send;

    /// The client's id: the first half of the holder ids it writes.
    fn id(&self) -> &str;

    /// The configuration the client was made from.
    fn config(&self) -> &Config;

    /// The client's background runtime.
    fn runtime(&self) -> &Handle;

    /// How many holds the client keeps alive (watchdog leases).
    fn renewed(&self) -> usize;

    /// One acquisition, waiting as `request` says; `alive` keeps the
    /// client's runtime running while a hold lasts.
    fn acquire(
        self: Arc<Self>,
        alive: Arc<Background>,
        request: Request,
    ) -> impl Future<Output = Result<Self::Hold, LockError>> + Send + 'static;

    /// The statements that make the store's tables (`lockctl schema`);
    /// [`LockError::Config`] on a store that has none to make.
    fn schema(_config: &Config) -> Result<String, LockError> {
        Err(LockError::Config(
            "schema is for the SQL engines: give a postgres:// or mysql:// URL (--url or $LOCK_URL)"
                .into(),
        ))
    }

    /// What lock `name` looks like, whatever its kind; `None` when free.
    fn inspect(
        self: Arc<Self>,
        name: String,
    ) -> impl Future<Output = Result<Option<LockInfo>, LockError>> + Send + 'static;

    /// The held locks whose names match the glob `pattern`, by name.
    fn locks(
        self: Arc<Self>,
        pattern: String,
    ) -> impl Future<Output = Result<Vec<LockInfo>, LockError>> + Send + 'static;

    /// Frees lock `name` whoever holds it, and wakes its waiters; whether
    /// it was held.
    fn force_unlock(
        self: Arc<Self>,
        name: String,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'static;
}

/// One hold of one lock by one holder, on its engine.
pub(crate) trait Hold: Send + Sync + 'static {
    /// The lock's name.
    fn name(&self) -> &str;

    /// The hold's fencing token.
    fn token(&self) -> u64;

    /// The holder id written into the store.
    fn holder(&self) -> &str;

    /// What a scope of this hold lets re-enter.
    fn scoped(&self) -> ScopedHold;

    /// Whether the hold is known lost (by the guard's own clock, or told).
    fn is_lost(&self) -> bool;

    /// How long the lease is known to last from now.
    fn remaining(&self) -> Duration;

    /// The lease made `lease` long from now.
    fn extend(&mut self, lease: Duration) -> impl Future<Output = Result<(), LockError>> + Send;

    /// Resolves when the hold is lost.
    fn lost(&self) -> impl Future<Output = ()> + Send;

    /// Gives the hold back; [`LockError::Lost`] when it was lost first.
    fn release(self) -> impl Future<Output = Result<(), LockError>> + Send + 'static;

    /// The client's runtime, where a dropped guard's release runs.
    fn runtime(&self) -> Handle;
}

/// `what` cannot be done on `engine`.
pub(crate) fn unsupported(engine: &'static str, what: impl Into<String>) -> LockError {
    LockError::Unsupported {
        engine,
        what: what.into(),
    }
}

/// Implements [`Hold`] for a hold type by its inherent methods of the
/// same names (each engine's hold keeps its own).
macro_rules! hold_by_inherent {
    (impl [$($generics:tt)*] for $hold:ty) => {
        impl<$($generics)*> $crate::engine::seam::Hold for $hold {
            fn name(&self) -> &str {
                <$hold>::name(self)
            }
            fn token(&self) -> u64 {
                <$hold>::token(self)
            }
            fn holder(&self) -> &str {
                <$hold>::holder(self)
            }
            fn scoped(&self) -> $crate::holder::ScopedHold {
                <$hold>::scoped(self)
            }
            fn is_lost(&self) -> bool {
                <$hold>::is_lost(self)
            }
            fn remaining(&self) -> std::time::Duration {
                <$hold>::remaining(self)
            }
            fn extend(
                &mut self,
                lease: std::time::Duration,
            ) -> impl std::future::Future<Output = Result<(), $crate::error::LockError>> + Send {
                <$hold>::extend(self, lease)
            }
            fn lost(&self) -> impl std::future::Future<Output = ()> + Send {
                <$hold>::lost(self)
            }
            fn release(
                self,
            ) -> impl std::future::Future<Output = Result<(), $crate::error::LockError>> + Send + 'static
            {
                <$hold>::release(self)
            }
            fn runtime(&self) -> tokio::runtime::Handle {
                <$hold>::runtime(self)
            }
        }
    };
}
#[cfg_attr(no_engine, allow(unused_imports))]
pub(crate) use hold_by_inherent;

/// Implements [`Engine`] for an engine's shared state from its parts:
/// its name and hold, how it connects, acquires and counts its renewed
/// holds, its operations, (the SQL engines) its schema, and whether it
/// keeps semaphores. The client's id, configuration and runtime are the
/// fields of those names.
macro_rules! engine_by_parts {
    (
        $engine:ty, name $name:literal, hold $hold:ty,
        connect $connect:path,
        acquire |$me:ident, $alive:ident, $request:ident| $acquire:expr,
        renewed |$it:ident| $renewed:expr,
        inspect $inspect:path, locks $locks:path, force_unlock $force:path
        $(, schema $schema:path)? $(, semaphores $semaphores:literal)? $(,)?
    ) => {
        impl $crate::engine::seam::Engine for $engine {
            const NAME: &'static str = $name;
            $(const SEMAPHORES: bool = $semaphores;)?
            type Hold = $hold;

            fn connect(
                config: $crate::config::Config,
                runtime: tokio::runtime::Handle,
            ) -> impl std::future::Future<
                Output = Result<std::sync::Arc<Self>, $crate::error::LockError>,
            > + Send {
                $connect(config, runtime)
            }

            fn id(&self) -> &str {
                &self.id
            }

            fn config(&self) -> &$crate::config::Config {
                &self.config
            }

            fn runtime(&self) -> &tokio::runtime::Handle {
                &self.runtime
            }

            fn renewed(&self) -> usize {
                let $it = self;
                $renewed
            }

            fn acquire(
                self: std::sync::Arc<Self>,
                $alive: std::sync::Arc<$crate::background::Background>,
                $request: $crate::request::Request,
            ) -> impl std::future::Future<Output = Result<$hold, $crate::error::LockError>>
                   + Send
                   + 'static {
                let $me = self;
                $acquire
            }

            $(
                fn schema(config: &$crate::config::Config) -> Result<String, $crate::error::LockError> {
                    $schema(config)
                }
            )?

            fn inspect(
                self: std::sync::Arc<Self>,
                name: String,
            ) -> impl std::future::Future<
                Output = Result<Option<$crate::info::LockInfo>, $crate::error::LockError>,
            > + Send
                   + 'static {
                async move { $inspect(&self, &name).await }
            }

            fn locks(
                self: std::sync::Arc<Self>,
                pattern: String,
            ) -> impl std::future::Future<
                Output = Result<Vec<$crate::info::LockInfo>, $crate::error::LockError>,
            > + Send
                   + 'static {
                async move { $locks(&self, &pattern).await }
            }

            fn force_unlock(
                self: std::sync::Arc<Self>,
                name: String,
            ) -> impl std::future::Future<Output = Result<bool, $crate::error::LockError>>
                   + Send
                   + 'static {
                async move { $force(&self, &name).await }
            }
        }
    };
}
#[cfg_attr(no_engine, allow(unused_imports))]
pub(crate) use engine_by_parts;

/// The engine of a row of the list whose feature this build lacks: no
/// value of it exists (a URL of that engine is refused before any
/// connect), so every dispatch still has its arm and needs no `cfg`.
// Unused in a build of every engine.
#[allow(dead_code)]
pub(crate) enum Absent {}

impl Engine for Absent {
    const NAME: &'static str = "absent";
    type Hold = Absent;

    async fn connect(_config: Config, _runtime: Handle) -> Result<Arc<Self>, LockError> {
        Err(LockError::Config(
            "this build does not have that engine (see its Cargo feature)".into(),
        ))
    }

    fn id(&self) -> &str {
        match *self {}
    }

    fn config(&self) -> &Config {
        match *self {}
    }

    fn runtime(&self) -> &Handle {
        match *self {}
    }

    fn renewed(&self) -> usize {
        match *self {}
    }

    async fn acquire(
        self: Arc<Self>,
        _alive: Arc<Background>,
        _request: Request,
    ) -> Result<Absent, LockError> {
        match *self {}
    }

    async fn inspect(self: Arc<Self>, _name: String) -> Result<Option<LockInfo>, LockError> {
        match *self {}
    }

    async fn locks(self: Arc<Self>, _pattern: String) -> Result<Vec<LockInfo>, LockError> {
        match *self {}
    }

    async fn force_unlock(self: Arc<Self>, _name: String) -> Result<bool, LockError> {
        match *self {}
    }
}

impl Hold for Absent {
    fn name(&self) -> &str {
        match *self {}
    }

    fn token(&self) -> u64 {
        match *self {}
    }

    fn holder(&self) -> &str {
        match *self {}
    }

    fn scoped(&self) -> ScopedHold {
        match *self {}
    }

    fn is_lost(&self) -> bool {
        match *self {}
    }

    fn remaining(&self) -> Duration {
        match *self {}
    }

    async fn extend(&mut self, _lease: Duration) -> Result<(), LockError> {
        match *self {}
    }

    async fn lost(&self) {
        match *self {}
    }

    async fn release(self) -> Result<(), LockError> {
        match self {}
    }

    fn runtime(&self) -> Handle {
        match *self {}
    }
}
