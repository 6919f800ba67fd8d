//! The statements' pieces, checked without a server.

use super::*;

#[test]
fn channels_and_waiting_tables_fit_an_identifier() {
    let t = Table::parse("ops.job_locks", 63).unwrap();
    assert_eq!(t.channel(), "ops.job_locks");
    let long = Table::parse(&format!("{}.{}", "s".repeat(63), "t".repeat(63)), 63).unwrap();
    assert!(long.channel().len() <= 63, "{}", long.channel());
    assert_eq!(long.channel(), long.clone().channel());
    assert!(long.waiting().name.len() <= 63);
    assert_eq!(
        Table::parse("locks", 63).unwrap().waiting().name,
        "locks_waiting"
    );
}

#[test]
fn interval_literals_are_exact_and_their_fields_fit_32_bits() {
    use std::time::Duration;
    assert_eq!(
        interval_literal(Duration::new(30, 0)),
        "interval '0 hours 30 seconds 0 microseconds'"
    );
    assert_eq!(
        interval_literal(Duration::new(7_265, 123_456_789)),
        "interval '2 hours 65 seconds 123456 microseconds'"
    );
    assert_eq!(
        interval_literal(crate::MAX_DURATION),
        "interval '876000 hours 0 seconds 0 microseconds'"
    );
}

#[test]
fn our_holder_ids_announce_and_shedlocks_hosts_do_not() {
    let ours = "0b0e8d5e-3c1f-4a77-9d0e-2f6a1c9b7e11:42";
    assert!(announces(ours));
    assert!(announces(&format!("{ours}{KEPT}")));
    assert!(!announces("batch-host-7"));
    assert!(!announces("10.0.0.5:8080"));
}
