//! The MySQL/MariaDB engine's benchmark: the MySQL rows of `lock_bench` on
//! their own (see `benches::rows` for what each row measures,
//! `benches::my_rows` for MySQL's floor), then what the engine's polling
//! cost the server while row 4's waiters waited (issue 35 asks for the
//! handoff reported with it).
//!
//! ```text
//! cargo run --release -p benches --example my_bench
//! cargo run --release -p benches --example my_bench -- --rounds 5 --ops 200
//! ```
//!
//! Uses `LOCK_URL` when it names a MySQL or MariaDB (`mysql://`); otherwise
//! starts a throwaway MariaDB (`mariadb-install-db` + `mariadbd` on a free
//! loopback port, never 3306). BENCHMARKS.md explains the figures.

#[global_allocator]
static HEAP: &benches::rows::stats_alloc::StatsAlloc<std::alloc::System> =
    &benches::rows::stats_alloc::INSTRUMENTED_SYSTEM;

fn main() -> std::process::ExitCode {
    let code = benches::rows::main::<benches::my_rows::MyFloor>("my_bench");
    if let Some(polling) = benches::my_rows::polling() {
        println!("\n{polling}");
    }
    code
}
