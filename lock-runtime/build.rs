//! Two cfgs from the engine features (the list of `engine/mod.rs`, by
//! feature):
//!
//! - `no_engine`: a build of the shared layers alone (which CI checks):
//!   most of the crate is then unused, and `lib.rs` allows it;
//! - `turns`: a build with an engine that keeps its holds in records of
//!   the shared kind (`kept`, `turns`: every engine but Redis), which
//!   those layers need;
//! - `remote_turns`: a build with such an engine that has a server (every
//!   one but the memory engine): what only those need (credentials,
//!   connect errors, records told of a change in the store) is unused
//!   without one;
//! - `no_server`: a build whose only engine is the memory engine (a test
//!   kit's): the parts only engines with a server use (near connections,
//!   credentials, connect errors) are then unused, and `lib.rs` allows it.

/// The engines' features, and whether each keeps records of the shared kind.
const ENGINES: &[(&str, bool)] = &[
    ("REDIS", false),
    ("ETCD", true),
    ("ZOOKEEPER", true),
    ("POSTGRES", true),
    ("MYSQL", true),
    ("MEMORY", true),
];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(no_engine, no_server, turns, remote_turns)");
    let on = |engine: &str| std::env::var_os(format!("CARGO_FEATURE_{engine}")).is_some();
    let built: Vec<bool> = ENGINES
        .iter()
        .filter(|(engine, _)| on(engine))
        .map(|&(_, turns)| turns)
        .collect();
    // The engines built that have a server (all but the memory engine).
    let servers: Vec<bool> = ENGINES
        .iter()
        .filter(|(engine, _)| *engine != "MEMORY" && on(engine))
        .map(|&(_, turns)| turns)
        .collect();
    if built.is_empty() {
        println!("cargo::rustc-cfg=no_engine");
    }
    if !built.is_empty() && servers.is_empty() {
        println!("cargo::rustc-cfg=no_server");
    }
    if servers.contains(&true) {
        println!("cargo::rustc-cfg=remote_turns");
    }
    if built.contains(&true) {
        println!("cargo::rustc-cfg=turns");
    }
}
