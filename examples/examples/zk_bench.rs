//! The ZooKeeper engine's benchmark: the ZooKeeper rows of `lock_bench` on their own
//! (see `examples::zk_rows` for what each row measures).
//!
//! ```text
//! cargo run --release -p examples --example zk_bench
//! cargo run --release -p examples --example zk_bench -- --rounds 5 --ops 200
//! ```
//!
//! Uses `LOCK_URL` when it names a ZooKeeper (`zk://`); otherwise starts a throwaway
//! ZooKeeper. BENCHMARKS.md explains the figures.

use std::alloc::System;
use std::process::ExitCode;

use examples::ZooKeeper;
use examples::zk_rows::{Args, run};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static HEAP: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const USAGE: &str =
    "usage: zk_bench [--rounds N] [--ops N] [--handoffs N] [--waiters N] [--names N]
  --rounds N    measured rounds, each running both variants (default 5)
  --ops N       pairs per round of row 1 (default 300; row 2: N/4 per task)
  --handoffs N  handoffs measured in row 3 (default 300)
  --waiters N   waiters of row 4 (default 10000)
  --names N     names they wait on (default 1000)";

fn parse_args() -> Result<Args, String> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--rounds" => args.rounds = examples::positive(&mut it, "--rounds")?,
            "--ops" => args.ops = examples::positive(&mut it, "--ops")?,
            "--handoffs" => args.handoffs = examples::positive(&mut it, "--handoffs")?,
            "--waiters" => args.waiters = examples::positive(&mut it, "--waiters")?,
            "--names" => args.names = examples::positive(&mut it, "--names")?,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let server = match ZooKeeper::from_env_or_start() {
        Ok(server) => server,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Spawned, as a service's handlers run: nothing measured in block_on.
    match runtime.block_on(async { tokio::spawn(async move { run(&server, args, 1).await }).await })
    {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("the benchmark failed: {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("the benchmark panicked: {e}");
            ExitCode::FAILURE
        }
    }
}
