//! The Lua scripts, one `.lua` file each (KEYS/ARGV documented at the top of
//! every file). They run by EVALSHA; a script the server lost from its cache
//! (restart, `SCRIPT FLUSH`) is loaded again and the call retried once, by
//! `redis::Script` or, for the calls every acquire and release makes, by
//! [`Eval`].

use std::sync::LazyLock;

use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs};

use crate::engine::redis::conn::Conn;

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
    pub(crate) semaphore_acquire: AcquireScript,
    pub(crate) semaphore_unlock: Script,
    pub(crate) semaphore_renew: Script,
    pub(crate) inspect: Script,
    pub(crate) force_unlock: Script,
}

/// An acquire script wrapped by `acquire_latch.lua`: one more key (the latch
/// of the attempt) and one more argument (how long to keep a record of a
/// taken hold) after its own.
pub(crate) struct AcquireScript {
    latched: Script,
}

/// The text of one acquire script (its files, in order, headed by
/// `counter.lua`) wrapped by `acquire_latch.lua`; with, before `;`, the
/// files of its common cases, which run first of all: before the latch's
/// read and before any of the full script's helpers is defined
/// (`reentrant_fast.lua`).
macro_rules! acquire_text {
    ($($fast:literal),*; $($file:literal),+) => {
        concat!(
            $(include_str!($fast),)*
            "local function acquire()\n",
            include_str!("counter.lua"),
            $(include_str!($file),)+
            "\nend\n",
            include_str!("acquire_latch.lua")
        )
    };
    // No common cases of its own.
    ($($file:literal),+) => {
        acquire_text!(; $($file),+)
    };
}

/// The texts of the scripts every reentrant acquisition, release and
/// handoff runs, as the client sends them (also what the tests run:
/// `lock_runtime::__scripts`).
pub(crate) mod texts {
    /// A reentrant acquisition. `fast_token.lua` defines `quick_token`,
    /// which `reentrant_fast.lua` uses for the common cases.
    pub const REENTRANT_ACQUIRE: &str = acquire_text!(
        "fast_token.lua", "reentrant_fast.lua";
        "holds_of.lua", "reentered.lua", "reentrant_acquire.lua"
    );
    /// A reentrant release. `fast_release.lua` defines `only_hold`, which
    /// `unlock_fast.lua` uses for the common release; `keep_taken.lua`
    /// defines `keep_taken` (hold_at_least), shared by both unlocks.
    pub const UNLOCK: &str = concat!(
        include_str!("fast_release.lua"),
        include_str!("unlock_fast.lua"),
        include_str!("holds_of.lua"),
        include_str!("holds.lua"),
        include_str!("keep_taken.lua"),
        include_str!("unlock.lua")
    );
    /// A reentrant release that may hand the lock to a waiter of its client.
    pub const HANDOFF: &str = concat!(
        include_str!("fast_token.lua"),
        include_str!("fast_release.lua"),
        include_str!("handoff_fast.lua"),
        include_str!("counter.lua"),
        include_str!("holds_of.lua"),
        include_str!("holds.lua"),
        include_str!("handoff.lua")
    );
}

/// How long an acquire latch is kept: well past a cluster client's resends
/// of one command through a failover (about ten seconds in all), and past
/// any time a request whose answer was lost may still reach the server.
pub(crate) const ACQUIRE_LATCH_TTL: std::time::Duration = std::time::Duration::from_secs(30);

impl AcquireScript {
    /// The script of `text` (see [`acquire_text`]).
    fn new(text: &'static str) -> AcquireScript {
        AcquireScript {
            latched: Script::new(text),
        }
    }

    /// One attempt at a lock: the script's own `keys`, then the attempt's
    /// `latch`; the arguments `args` adds, then whether to record a taken
    /// hold in the latch. A taken hold is recorded when `record` is set: on
    /// a cluster (whose client resends a command whose answer was lost, and
    /// must not take the lock twice) and for re-entries (so that a lost
    /// answer can be reconciled: a new holder's hold shows by itself).
    pub(crate) fn call(
        &'static self,
        conn: &Conn,
        keys: &[&str],
        latch: &str,
        record: bool,
        args: impl FnOnce(&mut Eval),
    ) -> Eval {
        let mut call = Eval::new(&self.latched, keys.len() + 1);
        keys.iter().for_each(|key| call.key(key));
        call.key(latch);
        args(&mut call);
        call.arg(latch_record(conn, record));
        call
    }
}

/// One script call written straight into its `EVALSHA` command: the number
/// of keys first, then the keys, then the arguments. `redis::Script`'s
/// invocations buffer each key and argument apart and copy them into the
/// command when sent; every acquire and release makes one of these, so the
/// difference shows (issue 11).
pub(crate) struct Eval {
    script: &'static Script,
    cmd: Cmd,
    /// Keys still to come before the arguments.
    keys_left: usize,
}

impl Eval {
    /// A call of `script` with `keys` keys, which [`key`](Self::key) adds
    /// before any argument.
    pub(crate) fn new(script: &'static Script, keys: usize) -> Eval {
        let mut cmd = Cmd::with_capacity(3 + keys + 8, 256);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        Eval {
            script,
            cmd,
            keys_left: keys,
        }
    }

    /// A call of `script` with `keys`.
    pub(crate) fn with_keys(script: &'static Script, keys: &[&str]) -> Eval {
        let mut call = Eval::new(script, keys.len());
        keys.iter().for_each(|key| call.key(key));
        call
    }

    /// The next key (`KEYS[i]`).
    pub(crate) fn key(&mut self, key: &str) {
        debug_assert!(self.keys_left > 0, "more keys than the call was made for");
        self.keys_left -= 1;
        self.cmd.arg(key);
    }

    /// The next argument (`ARGV[i]`), after every key.
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Eval {
        debug_assert_eq!(self.keys_left, 0, "an argument before every key");
        self.cmd.arg(arg);
        self
    }

    /// Runs the script on `conn`; loads it first when the server has lost it.
    pub(crate) async fn invoke<T: FromRedisValue>(&self, conn: &Conn) -> RedisResult<T> {
        let mut conn = conn.clone();
        match self.cmd.query_async(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(&mut conn).await?;
                self.cmd.query_async(&mut conn).await
            }
            answer => answer,
        }
    }
}

/// How long an acquire latch keeps the token of a hold it saw taken, in ms
/// (0: no record). Always on a cluster, whose client resends a command
/// whose answer was lost, so that the resend answers as the first call did;
/// elsewhere when `record` is asked for.
pub(crate) fn latch_record(conn: &Conn, record: bool) -> u64 {
    if record || conn.resends() {
        ACQUIRE_LATCH_TTL.as_millis() as u64
    } else {
        0
    }
}

/// Built once per process: building hashes the source.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    // holds.lua names a holder's holds while it has re-entered, so that a
    // release counts once however late a copy of it arrives: shared by the
    // unlocks of the locks that count holds in one field (reentrant, fair,
    // write); reentered.lua by their acquires and by every script that
    // lengthens a lock's life (the record must live as long).
    reentrant_acquire: AcquireScript::new(texts::REENTRANT_ACQUIRE),
    unlock: Script::new(texts::UNLOCK),
    handoff: Script::new(texts::HANDOFF),
    renew: Script::new(concat!(
        include_str!("counter.lua"),
        include_str!("reentered.lua"),
        include_str!("renew.lua")
    )),
    fair_acquire: AcquireScript::new(acquire_text!(
        "holds_of.lua",
        "reentered.lua",
        "fair_acquire.lua"
    )),
    fair_unlock: Script::new(concat!(
        include_str!("holds_of.lua"),
        include_str!("holds.lua"),
        include_str!("keep_taken.lua"),
        include_str!("fair_unlock.lua")
    )),
    fair_give_up: Script::new(include_str!("fair_give_up.lua")),
    rw_read_acquire: AcquireScript::new(acquire_text!("reentered.lua", "rw_read_acquire.lua")),
    // rw_holds.lua defines `live_reads`, shared by the scripts it heads.
    rw_write_acquire: AcquireScript::new(acquire_text!(
        "holds_of.lua",
        "reentered.lua",
        "rw_holds.lua",
        "rw_write_acquire.lua"
    )),
    rw_read_unlock: Script::new(concat!(
        include_str!("reentered.lua"),
        include_str!("rw_holds.lua"),
        include_str!("rw_read_unlock.lua")
    )),
    rw_write_unlock: Script::new(concat!(
        include_str!("holds_of.lua"),
        include_str!("holds.lua"),
        include_str!("rw_holds.lua"),
        include_str!("rw_write_unlock.lua")
    )),
    rw_renew: Script::new(concat!(
        include_str!("counter.lua"),
        include_str!("reentered.lua"),
        include_str!("rw_renew.lua")
    )),
    // permits.lua: what a semaphore's scripts read of its permits ZSET.
    semaphore_acquire: AcquireScript::new(acquire_text!(
        "holds_of.lua",
        "reentered.lua",
        "permits.lua",
        "semaphore_acquire.lua"
    )),
    semaphore_unlock: Script::new(concat!(
        include_str!("holds_of.lua"),
        include_str!("holds.lua"),
        include_str!("permits.lua"),
        include_str!("semaphore_unlock.lua")
    )),
    semaphore_renew: Script::new(concat!(
        include_str!("reentered.lua"),
        include_str!("permits.lua"),
        include_str!("semaphore_renew.lua")
    )),
    inspect: Script::new(concat!(
        include_str!("permits.lua"),
        include_str!("inspect.lua")
    )),
    force_unlock: Script::new(concat!(
        include_str!("permits.lua"),
        include_str!("force_unlock.lua")
    )),
});
