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
    pub(crate) handoff: Script,
    pub(crate) renew: Script,
    pub(crate) fair_acquire: AcquireScript,
    pub(crate) fair_unlock: Script,
    pub(crate) fair_give_up: Script,
    pub(crate) rw_read_acquire: AcquireScript,
    pub(crate) rw_write_acquire: AcquireScript,
    pub(crate) rw_read_unlock: Script,
    pub(crate) rw_write_unlock: Script,
    pub(crate) rw_renew: Script,
    pub(crate) inspect: Script,
    pub(crate) force_unlock: Script,
}

/// An acquire script wrapped by `acquire_latch.lua`: one more key (the latch
/// of the attempt) and one more argument (how long to keep a record of a
/// taken hold) after its own.
pub(crate) struct AcquireScript {
    latched: Script,
}

/// The [`AcquireScript`] of one acquire script's text (its files, in order),
/// headed by `counter.lua`.
macro_rules! acquire_script {
    ($($file:literal),+) => {
        AcquireScript {
            latched: Script::new(concat!(
                "local function acquire()\n",
                include_str!("counter.lua"),
                $(include_str!($file),)+
                "\nend\n",
                include_str!("acquire_latch.lua")
            )),
        }
    };
}

/// How long an acquire latch is kept: well past a cluster client's resends
/// of one command through a failover (about ten seconds in all), and past
/// any time a request whose answer was lost may still reach the server.
pub(crate) const ACQUIRE_LATCH_TTL: std::time::Duration = std::time::Duration::from_secs(30);

impl AcquireScript {
    /// Runs one attempt at a lock on `conn`, with the keys and arguments
    /// `build` adds and the attempt's `latch`. A taken hold is recorded in
    /// the latch when `record` is set: on a cluster (whose client resends a
    /// command whose answer was lost, and must not take the lock twice) and
    /// for re-entries (so that a lost answer can be reconciled: a new
    /// holder's hold shows by itself).
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        conn: &Conn,
        latch: &str,
        record: bool,
        build: impl FnOnce(&mut ScriptInvocation<'_>),
    ) -> RedisResult<T> {
        let mut call = self.latched.prepare_invoke();
        build(&mut call);
        call.key(latch).arg(latch_record(conn, record));
        call.invoke_async(&mut conn.clone()).await
    }
}

/// How long an acquire latch keeps the token of a hold it saw taken, in ms
/// (0: no record). Always on a cluster, whose client resends a command
/// whose answer was lost, so that the resend answers as the first call did;
/// elsewhere when `record` is asked for.
pub(crate) fn latch_record(conn: &Conn, record: bool) -> u64 {
    if record || conn.is_cluster() {
        ACQUIRE_LATCH_TTL.as_millis() as u64
    } else {
        0
    }
}

/// Built once per process: building hashes the source.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    reentrant_acquire: acquire_script!("reentrant_acquire.lua"),
    // keep_taken.lua defines `keep_taken` (hold_at_least), shared by both unlocks.
    unlock: Script::new(concat!(
        include_str!("keep_taken.lua"),
        include_str!("unlock.lua")
    )),
    handoff: Script::new(concat!(
        include_str!("counter.lua"),
        include_str!("handoff.lua")
    )),
    renew: Script::new(concat!(
        include_str!("counter.lua"),
        include_str!("renew.lua")
    )),
    fair_acquire: acquire_script!("fair_acquire.lua"),
    fair_unlock: Script::new(concat!(
        include_str!("keep_taken.lua"),
        include_str!("fair_unlock.lua")
    )),
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
    rw_renew: Script::new(concat!(
        include_str!("counter.lua"),
        include_str!("rw_renew.lua")
    )),
    inspect: Script::new(include_str!("inspect.lua")),
    force_unlock: Script::new(include_str!("force_unlock.lua")),
});
