//! `lockctl` for the tests (`tests/tests/lockctl.rs` runs it as a process
//! through `CARGO_BIN_EXE_lockctl`, which cargo only gives a package's own
//! binaries): the same entry point as lock-runtime's `lockctl` binary,
//! `lock_runtime::cli::main`, which holds all of its code.

fn main() -> std::process::ExitCode {
    lock_runtime::cli::main()
}
