//! The Lua scripts, one `.lua` file each (KEYS/ARGV documented at the top of
//! every file). They run by EVALSHA; `redis::Script` reloads a script when the
//! server lost its cache (restart, `SCRIPT FLUSH`) and retries once.

use std::sync::LazyLock;

use redis::Script;

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
});
