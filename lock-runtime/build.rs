//! Two cfgs from the engine features, for what depends on how many a build
//! has: `no_engine` (the shared layers alone, which CI checks: the enums of
//! the engines a client or a guard may be on then get an uninhabited
//! variant, so that every match over them still compiles) and
//! `several_engines` (an acquisition's future is then one of several, in
//! nested `Either`s).

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(no_engine, several_engines)");
    let engines = ["REDIS", "ETCD", "ZOOKEEPER", "POSTGRES", "MYSQL"]
        .iter()
        .filter(|engine| std::env::var_os(format!("CARGO_FEATURE_{engine}")).is_some())
        .count();
    if engines == 0 {
        println!("cargo::rustc-cfg=no_engine");
    }
    if engines > 1 {
        println!("cargo::rustc-cfg=several_engines");
    }
}
