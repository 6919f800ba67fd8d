//! `lockctl`: inspect, list, watch and force-unlock locks from a shell. See
//! `lockctl --help` and the crate docs of `lock_runtime::cli`.

fn main() -> std::process::ExitCode {
    lock_runtime::cli::main()
}
