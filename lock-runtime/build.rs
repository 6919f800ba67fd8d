//! One cfg from the engine features: `no_engine`, a build of the shared
//! layers alone (which CI checks): most of the crate is then unused, and
//! `lib.rs` allows it.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(no_engine)");
    let engines = ["REDIS", "ETCD", "ZOOKEEPER", "POSTGRES", "MYSQL"]
        .iter()
        .filter(|engine| std::env::var_os(format!("CARGO_FEATURE_{engine}")).is_some())
        .count();
    if engines == 0 {
        println!("cargo::rustc-cfg=no_engine");
    }
}
