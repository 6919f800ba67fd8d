//! Semaphores under faults on etcd and ZooKeeper (DESIGN §11, issue 51);
//! Redis's run is `faults.rs` (`permits_under_faults`), PostgreSQL's and
//! MariaDB's `sql_faults.rs`. Worker processes (`src/bin/fault_worker.rs`)
//! take permits of semaphores of 2 on four hot names (and locks on names
//! used once), each through its own loopback proxy, and write every
//! critical section to a ledger on a Redis server the faults never touch.
//! Meanwhile the run cuts a worker's link, refuses its connections, stalls
//! it, freezes a worker (SIGSTOP, past its lease) and kills one (SIGKILL:
//! another takes its place).
//!
//! Then, counted from the holders' side: every time more than 2 sections
//! of a name were open at once, one of their holders was told its permit
//! was lost (but where a killed worker, which can tell nobody, held one);
//! every worker finished its run; and once the leases are over no permit
//! or lock is left.

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};
use tests::etcd::Etcd;
use tests::fault::{Knobs, LinkFault, Worker, on_link, overlaps_reported, sections_of};
use tests::proxy::Proxy;
use tests::zookeeper::ZooKeeper;
use tests::{Server, eventually};

const WORKERS: usize = 3;
const FAULT_EVERY: Duration = Duration::from_secs(2);
const KNOBS: Knobs = Knobs {
    tasks: 6,
    run: Duration::from_secs(24),
    wait: Duration::from_secs(3),
    lease: Duration::from_secs(4),
    response: Duration::from_secs(1),
    permits: 2,
};

/// The faults, in turn (then again from the start).
#[derive(Debug, Clone, Copy)]
enum Fault {
    Link(LinkFault),
    Stop,
    Kill,
}

const FAULTS: [Fault; 5] = [
    Fault::Link(LinkFault::Cut),
    Fault::Stop,
    Fault::Link(LinkFault::Refuse),
    Fault::Kill,
    Fault::Link(LinkFault::Stall),
];

/// The run against the server listening on `port`, whose URL through a
/// proxy on port `p` is `url(p)`.
async fn permits_under_faults(port: u16, url: impl Fn(u16) -> String) {
    let ledger = Server::start();
    let proxies: Vec<Proxy> = (0..WORKERS).map(|_| Proxy::start(port)).collect();
    let program = env!("CARGO_BIN_EXE_fault_worker");
    let spawn = |name: &str, proxy: &Proxy, knobs: &Knobs| {
        Worker::spawn(program, name, &url(proxy.port()), &ledger.url(), knobs)
    };
    let mut workers: Vec<Worker> = proxies
        .iter()
        .enumerate()
        .map(|(i, proxy)| spawn(&format!("w{i}"), proxy, &KNOBS))
        .collect();
    let (mut killed, mut died_in) = (Vec::new(), Vec::new());
    let started = Instant::now();
    let mut injected = Vec::new();
    for (i, fault) in FAULTS.iter().cycle().enumerate() {
        tokio::time::sleep(FAULT_EVERY).await;
        if started.elapsed() + FAULT_EVERY > KNOBS.run {
            break;
        }
        let target = i % WORKERS;
        injected.push((*fault, target));
        match fault {
            Fault::Link(fault) => on_link(&proxies[target], *fault).await,
            Fault::Stop => {
                // Past the lease: its permits end while it is frozen.
                workers[target].signal("-STOP");
                tokio::time::sleep(KNOBS.lease + Duration::from_secs(1)).await;
                workers[target].signal("-CONT");
            }
            Fault::Kill => {
                let open = workers[target].kill(&mut ledger.raw().await).await;
                died_in.extend(open);
                let left = KNOBS.run.saturating_sub(started.elapsed());
                let name = format!("w{target}k{}", killed.len());
                let next = spawn(&name, &proxies[target], &Knobs { run: left, ..KNOBS });
                killed.push(std::mem::replace(&mut workers[target], next));
            }
        }
    }
    println!("injected: {injected:?}");

    let sections = sections_of(&workers, KNOBS.run + Duration::from_secs(60));
    assert!(
        sections > 50,
        "the workers got work done: {sections} sections"
    );
    let excused = |section: &str| died_in.iter().any(|d| d == section);
    let (overlaps, reported, forgiven) = overlaps_reported(&mut ledger.raw().await, &excused).await;
    println!(
        "{sections} sections, {overlaps} times more than 2 open at once, {reported} reported \
         sections, {} workers killed in {} sections ({forgiven} excused)",
        killed.len(),
        died_in.len()
    );

    // Nothing is left once the leases (and a killed worker's session) are
    // over, with every live worker still connected.
    let reader = LockClient::connect(Config::new(url(port)))
        .await
        .expect("a client of the server");
    eventually(
        "no permit or lock is left",
        Duration::from_secs(60),
        || async { reader.locks("*").await.is_ok_and(|held| held.is_empty()) },
    )
    .await;
    for worker in workers {
        worker.finish();
    }
    drop(killed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_permits_under_faults() {
    let etcd = Etcd::start();
    permits_under_faults(etcd.port(), |port| format!("etcd://127.0.0.1:{port}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_permits_under_faults() {
    let zk = ZooKeeper::start();
    permits_under_faults(zk.port(), |port| format!("zk://127.0.0.1:{port}/locks")).await;
}
