//! The ZooKeeper engine's benchmark: the ZooKeeper rows of `lock_bench` on
//! their own (see `benches::rows` for what each row measures,
//! `benches::zk_rows` for ZooKeeper's floor).
//!
//! ```text
//! cargo run --release -p benches --example zk_bench
//! cargo run --release -p benches --example zk_bench -- --rounds 5 --ops 200
//! ```
//!
//! Uses `LOCK_URL` when it names a ZooKeeper (`zk://`); otherwise starts a
//! throwaway ZooKeeper. BENCHMARKS.md explains the figures.

benches::bench_main!(benches::zk_rows::ZkFloor, "zk_bench");
