//! The PostgreSQL engine's benchmark: the PostgreSQL rows of `lock_bench`
//! on their own (see `benches::rows` for what each row measures,
//! `benches::pg_rows` for PostgreSQL's floor).
//!
//! ```text
//! cargo run --release -p benches --example pg_bench
//! cargo run --release -p benches --example pg_bench -- --rounds 5 --ops 200
//! ```
//!
//! Uses `LOCK_URL` when it names a PostgreSQL (`postgres://`); otherwise
//! starts a throwaway cluster (`initdb` + `postgres` on a free loopback
//! port, never 5432). BENCHMARKS.md explains the figures.

benches::bench_main!(benches::pg_rows::PgFloor, "pg_bench");
