//! What a sound fencing token costs MySQL/MariaDB's uncontended pair:
//! the statement forms of issue 49, each a bare acquire + release pair of
//! prepared statements on one connection, against the floor's pair
//! (`INSERT IGNORE` of a name, `DELETE`), round by round in turn, from a
//! spawned task. BENCHMARKS.md ("Issue 49: the forms a token can take")
//! explains the figures.
//!
//! ```text
//! cargo run --release -p benches --example my_forms
//! cargo run --release -p benches --example my_forms -- 3000   # pairs per form and round
//! ```
//!
//! Uses `LOCK_URL` when it names a MySQL or MariaDB; otherwise starts a
//! throwaway MariaDB, as `my_bench` does.

use mysql_async::prelude::Queryable;
use std::time::{Duration, Instant};

/// The database's clock in µs, read late (as the engine's `LATE_US`).
const LATE: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) \
                    + GREATEST(0, TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)))";
const NOW: &str = "UTC_TIMESTAMP(6)";
const ROW: &str = "INSERT INTO forms (name, lock_until, locked_at, locked_by, fence) VALUES";
const HOLDER: &str = "c1:1";
const LEASE_US: i64 = 30_000_000;

/// A form: its acquisition, whether a second statement follows when the
/// first took nothing (the kept row's first use), and its release.
struct Form {
    name: &'static str,
    sound: &'static str,
    take: String,
    make: Option<String>,
    free: String,
}

fn forms() -> Vec<Form> {
    let row =
        |fence: &str| format!("{ROW} (?, TIMESTAMPADD(MICROSECOND, ?, {NOW}), {NOW}, ?, {fence})");
    let delete = "DELETE FROM forms WHERE name = ? AND locked_by = ?".to_owned();
    let update = format!(
        "UPDATE forms SET fence = LAST_INSERT_ID(GREATEST(fence + 1, {LATE})), \
         locked_at = {NOW}, locked_by = ?, lock_until = TIMESTAMPADD(MICROSECOND, ?, {NOW}) \
         WHERE name = ? AND (lock_until <= {NOW} OR locked_by = ?)"
    );
    vec![
        Form {
            name: "floor",
            sound: "(no token)",
            take: "INSERT IGNORE INTO floor_forms (name) VALUES (?)".to_owned(),
            make: None,
            free: "DELETE FROM floor_forms WHERE name = ?".to_owned(),
        },
        Form {
            name: "late clock",
            sound: "no: went back 1 in 18,137",
            take: row(&format!("LAST_INSERT_ID({LATE})")).replacen("INSERT", "INSERT IGNORE", 1),
            make: None,
            free: delete.clone(),
        },
        Form {
            name: "slot locked",
            sound: "yes (the engine's)",
            take: row(&format!(
                "LAST_INSERT_ID((SELECT {LATE} FROM forms_slots \
                 WHERE slot = CRC32(?) % 1024 FOR UPDATE))"
            ))
            .replacen("INSERT", "INSERT IGNORE", 1),
            make: None,
            free: delete.clone(),
        },
        Form {
            name: "two tuples",
            sound: "yes (clock read under the new row's lock)",
            take: format!(
                "{}, (?, {NOW}, {NOW}, '', -2) ON DUPLICATE KEY UPDATE \
                 fence = IF(VALUES(fence) = -2 AND fence = -1, LAST_INSERT_ID({LATE}), fence)",
                row("-1")
            ),
            make: None,
            free: delete,
        },
        Form {
            name: "kept row",
            sound: "yes while rows stay (an update takes fence + 1)",
            take: update,
            make: Some(row(&format!("LAST_INSERT_ID({LATE})"))),
            free: "UPDATE forms SET lock_until = locked_at WHERE name = ? AND locked_by = ?"
                .to_owned(),
        },
    ]
}

/// `n` pairs of `form` on its own name; the time they took.
async fn pairs(
    opts: mysql_async::Opts,
    form: &Form,
    n: usize,
) -> Result<Duration, mysql_async::Error> {
    let mut conn = mysql_async::Conn::new(opts).await?;
    let name = format!("form-{}", form.name);
    let started = Instant::now();
    for _ in 0..n {
        match form.name {
            "floor" => conn.exec_drop(&form.take, (&name,)).await?,
            "slot locked" | "two tuples" => {
                conn.exec_drop(&form.take, (&name, LEASE_US, HOLDER, &name))
                    .await?
            }
            "kept row" => {
                conn.exec_drop(&form.take, (HOLDER, LEASE_US, &name, HOLDER))
                    .await?
            }
            _ => {
                conn.exec_drop(&form.take, (&name, LEASE_US, HOLDER))
                    .await?
            }
        }
        if conn.affected_rows() == 0 {
            match &form.make {
                Some(make) => conn.exec_drop(make, (&name, LEASE_US, HOLDER)).await?,
                None => panic!("{}: the pair's name was not free", form.name),
            }
        }
        match form.name {
            "floor" => conn.exec_drop(&form.free, (&name,)).await?,
            _ => conn.exec_drop(&form.free, (&name, HOLDER)).await?,
        }
    }
    let took = started.elapsed();
    conn.disconnect().await?;
    Ok(took)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(2000), |a| a.parse())?;
    let server = examples::MariaDb::from_env_or_start()?;
    let opts = benches::my_rows::driver_opts(server.url())?;
    let mut conn = mysql_async::Conn::new(opts.clone()).await?;
    for ddl in [
        "CREATE TABLE IF NOT EXISTS floor_forms (name VARCHAR(255) CHARACTER SET utf8mb4 \
         COLLATE utf8mb4_bin NOT NULL PRIMARY KEY) ENGINE=InnoDB",
        "CREATE TABLE IF NOT EXISTS forms (name VARCHAR(255) CHARACTER SET utf8mb4 \
         COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, lock_until DATETIME(6) NOT NULL, \
         locked_at DATETIME(6) NOT NULL, locked_by VARCHAR(255) NOT NULL, \
         fence BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB",
        "CREATE TABLE IF NOT EXISTS forms_slots (slot SMALLINT NOT NULL PRIMARY KEY) ENGINE=InnoDB",
        "INSERT IGNORE INTO forms_slots (slot) WITH RECURSIVE n (i) AS \
         (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 31) SELECT a.i * 32 + b.i FROM n a, n b",
        "DELETE FROM forms",
    ] {
        conn.query_drop(ddl).await?;
    }
    conn.disconnect().await?;
    let forms = std::sync::Arc::new(forms());
    let mut took = vec![Duration::ZERO; forms.len()];
    // Round 0 warms up; the forms take turns, each round starting elsewhere.
    for round in 0..=5 {
        for i in 0..forms.len() {
            let at = (i + round) % forms.len();
            let (opts, forms) = (opts.clone(), forms.clone());
            let time = tokio::spawn(async move { pairs(opts, &forms[at], n).await }).await??;
            if round > 0 {
                took[at] += time;
            }
        }
    }
    println!(
        "{n} pairs per form and round, 5 rounds; floor/form = the form's pairs per second against the floor's"
    );
    for (form, time) in forms.iter().zip(&took) {
        println!(
            "{:12} {:>8.0} pairs/s  floor/form {:.2}  sound: {}",
            form.name,
            (5 * n) as f64 / time.as_secs_f64(),
            took[0].as_secs_f64() / time.as_secs_f64(),
            form.sound
        );
    }
    Ok(())
}
