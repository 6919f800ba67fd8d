//! The Lua scripts, one `.lua` file each (KEYS/ARGV documented at the top of
//! every file). They run by EVALSHA; `redis::Script` reloads a script when the
//! server lost its cache (restart, `SCRIPT FLUSH`) and retries once.

use std::sync::LazyLock;

use redis::{FromRedisValue, RedisResult, Script, ScriptInvocation};

use crate::conn::Conn;

/// Every script the runtime runs.
pub(crate) struct Scripts {
    pub(crate) reentrant_acquire: AcquireScript,
    pub(crate) unlock: Script,
    pub(crate) renew: Script,
    pub(crate) fair_acquire: AcquireScript,
    pub(crate) fair_unlock: Script,
    pub(crate) fair_give_up: Script,
    pub(crate) rw_read_acquire: AcquireScript,
    pub(crate) rw_write_acquire: AcquireScript,
    pub(crate) rw_read_unlock: Script,
    pub(crate) rw_write_unlock: Script,
    pub(crate) rw_renew: Script,
}

/// An acquire script, as it is and wrapped by `acquire_latch.lua` (one more
/// key, the latch, and one more argument, its lifetime in ms, after its own)
/// for cluster connections, which resend a command whose answer was lost.
pub(crate) struct AcquireScript {
    plain: Script,
    latched: Script,
}

/// The [`AcquireScript`] of one acquire script's text (its files, in order).
macro_rules! acquire_script {
    ($($file:literal),+) => {
        AcquireScript {
            plain: Script::new(concat!($(include_str!($file)),+)),
            latched: Script::new(concat!(
                "local function acquire()\n",
                $(include_str!($file),)+
                "\nend\n",
                include_str!("acquire_latch.lua")
            )),
        }
    };
}

/// How long an acquire latch is kept: well past a cluster client's resends
/// of one command through a failover (about ten seconds in all).
const ACQUIRE_LATCH_TTL_MS: u64 = 30_000;

impl AcquireScript {
    /// Runs one attempt at lock `name` on `conn`, with the keys and
    /// arguments `build` adds. On a cluster the latched script runs, with the
    /// latch of this attempt, so that a resent attempt cannot take the lock
    /// twice; elsewhere the plain one.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        conn: &Conn,
        name: &str,
        build: impl FnOnce(&mut ScriptInvocation<'_>),
    ) -> RedisResult<T> {
        let latch = conn
            .is_cluster()
            .then(|| crate::keys::acquire_latch(name, &uuid::Uuid::new_v4().to_string()));
        let script = if latch.is_some() {
            &self.latched
        } else {
            &self.plain
        };
        let mut call = script.prepare_invoke();
        build(&mut call);
        if let Some(latch) = latch {
            call.key(latch).arg(ACQUIRE_LATCH_TTL_MS);
        }
        call.invoke_async(&mut conn.clone()).await
    }
}

/// Built once per process: building hashes the source.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    reentrant_acquire: acquire_script!("reentrant_acquire.lua"),
    unlock: Script::new(include_str!("unlock.lua")),
    renew: Script::new(include_str!("renew.lua")),
    fair_acquire: acquire_script!("fair_acquire.lua"),
    fair_unlock: Script::new(include_str!("fair_unlock.lua")),
    fair_give_up: Script::new(include_str!("fair_give_up.lua")),
    rw_read_acquire: acquire_script!("rw_read_acquire.lua"),
    // rw_holds.lua defines `live_reads`, shared by the scripts it heads.
    rw_write_acquire: acquire_script!("rw_holds.lua", "rw_write_acquire.lua"),
    rw_read_unlock: Script::new(concat!(
        include_str!("rw_holds.lua"),
        include_str!("rw_read_unlock.lua")
    )),
    rw_write_unlock: Script::new(concat!(
        include_str!("rw_holds.lua"),
        include_str!("rw_write_unlock.lua")
    )),
    rw_renew: Script::new(include_str!("rw_renew.lua")),
});
