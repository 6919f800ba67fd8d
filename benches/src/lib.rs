//! The rows the benchmarks share for every engine but Redis ([`rows`]), and
//! each engine's floor for them ([`etcd_rows`], [`zk_rows`], [`pg_rows`],
//! [`my_rows`]). The programs are this crate's examples (`lock_bench`,
//! `etcd_bench`, `zk_bench`, `pg_bench`, `my_bench`, `segmented_bench`);
//! BENCHMARKS.md gives their commands and what they measured.

pub mod etcd_rows;
pub mod my_rows;
pub mod pg_rows;
pub mod rows;
pub mod zk_rows;
