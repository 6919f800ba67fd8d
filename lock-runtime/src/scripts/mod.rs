//! The Lua scripts, one `.lua` file each (KEYS/ARGV documented at the top of
//! every file). They run by EVALSHA; `redis::Script` reloads a script when the
//! server lost its cache (restart, `SCRIPT FLUSH`) and retries once.

use std::sync::LazyLock;

use redis::{Script, ScriptInvocation};

use crate::conn::Conn;

/// Every script the runtime runs.
pub(crate) struct Scripts {
    pub(crate) reentrant_acquire: Script,
    pub(crate) unlock: Script,
    pub(crate) renew: Script,
    pub(crate) fair_acquire: Script,
    pub(crate) fair_unlock: Script,
    pub(crate) fair_give_up: Script,
    pub(crate) rw_read_acquire: Script,
    pub(crate) rw_write_acquire: Script,
    pub(crate) rw_read_unlock: Script,
    pub(crate) rw_write_unlock: Script,
    pub(crate) rw_renew: Script,
    /// The acquire scripts made idempotent under retry (`acquire_latch.lua`),
    /// for cluster connections, which resend a command whose answer was lost.
    pub(crate) latched: LatchedAcquires,
}

/// Each acquire script wrapped by `acquire_latch.lua`: one more key (the
/// latch) and one more argument (its lifetime in ms) after its own.
pub(crate) struct LatchedAcquires {
    pub(crate) reentrant_acquire: Script,
    pub(crate) fair_acquire: Script,
    pub(crate) rw_read_acquire: Script,
    pub(crate) rw_write_acquire: Script,
}

/// `acquire_latch.lua` around one acquire script's text.
macro_rules! latched {
    ($($file:literal),+) => {
        Script::new(concat!(
            "local function acquire()\n",
            $(include_str!($file),)+
            "\nend\n",
            include_str!("acquire_latch.lua")
        ))
    };
}

/// Built once per process: building hashes the source.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    reentrant_acquire: Script::new(include_str!("reentrant_acquire.lua")),
    unlock: Script::new(include_str!("unlock.lua")),
    renew: Script::new(include_str!("renew.lua")),
    fair_acquire: Script::new(include_str!("fair_acquire.lua")),
    fair_unlock: Script::new(include_str!("fair_unlock.lua")),
    fair_give_up: Script::new(include_str!("fair_give_up.lua")),
    rw_read_acquire: Script::new(include_str!("rw_read_acquire.lua")),
    // rw_holds.lua defines `live_reads`, shared by the scripts it heads.
    rw_write_acquire: Script::new(concat!(
        include_str!("rw_holds.lua"),
        include_str!("rw_write_acquire.lua")
    )),
    rw_read_unlock: Script::new(concat!(
        include_str!("rw_holds.lua"),
        include_str!("rw_read_unlock.lua")
    )),
    rw_write_unlock: Script::new(concat!(
        include_str!("rw_holds.lua"),
        include_str!("rw_write_unlock.lua")
    )),
    rw_renew: Script::new(include_str!("rw_renew.lua")),
    latched: LatchedAcquires {
        reentrant_acquire: latched!("reentrant_acquire.lua"),
        fair_acquire: latched!("fair_acquire.lua"),
        rw_read_acquire: latched!("rw_read_acquire.lua"),
        // rw_holds.lua's `live_reads` becomes local to the wrapped function.
        rw_write_acquire: latched!("rw_holds.lua", "rw_write_acquire.lua"),
    },
});

/// How long an acquire latch is kept: well past a cluster client's resends
/// of one command through a failover (about ten seconds in all).
const ACQUIRE_LATCH_TTL_MS: u64 = 30_000;

/// The acquire script to run on `conn`: on a cluster, which resends a
/// command whose answer it lost, the `latched` one, so that a resent attempt
/// cannot take the lock twice; elsewhere `plain`.
pub(crate) fn acquire_script<'s>(
    conn: &Conn,
    plain: &'s Script,
    latched: &'s Script,
) -> &'s Script {
    if conn.is_cluster() { latched } else { plain }
}

/// Adds the acquire latch of a fresh attempt at lock `name` to `call`, when
/// [`acquire_script`] picked a latched script. Call it after the script's own
/// keys and arguments.
pub(crate) fn add_acquire_latch(call: &mut ScriptInvocation<'_>, conn: &Conn, name: &str) {
    if conn.is_cluster() {
        let attempt = uuid::Uuid::new_v4().to_string();
        call.key(crate::keys::acquire_latch(name, &attempt))
            .arg(ACQUIRE_LATCH_TTL_MS);
    }
}
