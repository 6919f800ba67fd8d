//! Compile-time checks of `#[distributed_lock]`: every supported shape
//! compiles (`ui/pass`), every misuse fails with the message and span
//! committed next to it (`ui/fail/*.stderr`).
//!
//! Regenerate the `.stderr` files after an intended change with
//! `TRYBUILD=overwrite cargo test -p tests --test ui`, then read the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
