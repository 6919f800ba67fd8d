//! The etcd engine's benchmark: the etcd rows of `lock_bench` on their own
//! (see `benches::rows` for what each row measures, `benches::etcd_rows`
//! for etcd's floor).
//!
//! ```text
//! cargo run --release -p benches --example etcd_bench
//! cargo run --release -p benches --example etcd_bench -- --rounds 5 --ops 200
//! ```
//!
//! Uses `LOCK_URL` when it names an etcd; otherwise starts a throwaway
//! `etcd`. BENCHMARKS.md explains the figures.

benches::bench_main!(benches::etcd_rows::EtcdFloor, "etcd_bench");
