//! Self-fault: the database becomes unavailable (issue 8 item 3). A real server on a
//! private PostgreSQL database (`ROCEMESH_TEST_PG_URL`) with two loopback agents; the
//! database stops taking connections (`ALLOW_CONNECTIONS false` and its backends
//! terminated) for 8 s, then comes back. During the outage `/readyz` and the
//! database-backed API answer 503 with a message; afterwards the same process recovers
//! without a restart and every SLA period of the outage is stored (the analyzer's pending
//! buffer), with nothing raised against the network.

mod support;

use rocemesh_proto::api::{ErrorBody, SlaRow};
use sqlx::Connection;
use std::time::{Duration, Instant};
use support::self_fault::{
    assert_no_false_alarm, cluster_periods, register_host, status_of, two_agents_storing,
    wait_ready_again,
};
use support::{scratch_dir, start_server, wait_for};

const PERIOD_MS: i64 = 2_000;
const OUTAGE: Duration = Duration::from_secs(8);

/// Runs `sql`, one statement after the other (`;`-separated, each in its own implicit
/// transaction: `DROP DATABASE` refuses to run inside one), on an admin connection.
fn admin(url: &str, sql: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let mut c = sqlx::PgConnection::connect(url)
            .await
            .expect("admin connection");
        for stmt in sql.split(';').filter(|s| !s.trim().is_empty()) {
            sqlx::raw_sql(stmt)
                .execute(&mut c)
                .await
                .unwrap_or_else(|e| panic!("{stmt}: {e}"));
        }
        c.close().await.expect("close admin connection");
    });
}

/// `admin_url` with its database name replaced by `name`.
fn database_url(admin_url: &str, name: &str) -> String {
    let (server, _) = admin_url.rsplit_once('/').expect("a database URL");
    format!("{server}/{name}")
}

fn close(db: &str) -> String {
    format!(
        "ALTER DATABASE {db} ALLOW_CONNECTIONS false; \
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}';"
    )
}

/// Cluster SLA periods stored from `from_ms` on, oldest first.
/// Drops the test's database however the test ends.
struct DropDatabase<'a> {
    admin_url: &'a str,
    name: &'a str,
}

impl Drop for DropDatabase<'_> {
    fn drop(&mut self) {
        let name = self.name;
        admin(
            self.admin_url,
            &format!("{} DROP DATABASE IF EXISTS {name}", close(name)),
        );
    }
}

#[test]
fn database_outage_is_a_clear_503_and_heals_without_a_restart() {
    let Ok(admin_url) = std::env::var("ROCEMESH_TEST_PG_URL") else {
        println!("skipping self_fault_database: ROCEMESH_TEST_PG_URL not set");
        return;
    };
    let name = format!("rmsf3_{}", std::process::id());
    admin(
        &admin_url,
        &format!("DROP DATABASE IF EXISTS {name}; CREATE DATABASE {name}"),
    );
    let _drop = DropDatabase {
        admin_url: &admin_url,
        name: &name,
    };
    let dir = scratch_dir("selffault-db");
    let config = dir.join("server.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"{}\"\n[controller]\nupload_period = \"1s\"\npinglist_poll = \"1s\"\n[analyzer]\nperiod = \"{PERIOD_MS}ms\"\ngrace = \"1500ms\"\n",
            database_url(&admin_url, &name)
        ),
    )
    .expect("write server.toml");
    let (_server, url) = start_server(&config);
    let (_agents, start_ms) = two_agents_storing(&url, "sf-db", "127.93");

    // --- the database goes away ------------------------------------------------------
    admin(&admin_url, &close(&name));
    let down = Instant::now();
    let down_ms = rocemesh_proto::now_unix_ms();
    let (status, body) = wait_for("/readyz to answer 503", Duration::from_secs(15), || {
        status_of(&format!("{url}/readyz")).filter(|(s, _)| *s == 503)
    });
    eprintln!(
        "self_fault_database: /readyz {status} after {:?}: {body}",
        down.elapsed()
    );
    assert!(body.contains("database"), "{body}");
    let (status, body) = status_of(&format!("{url}/api/v1/sla?scope=cluster")).expect("an answer");
    eprintln!("self_fault_database: GET /api/v1/sla during the outage: {status} {body}");
    assert_eq!(status, 503, "{body}");
    let err: ErrorBody = serde_json::from_str(&body).expect("an ErrorBody");
    assert!(err.error.starts_with("database unavailable"), "{body}");
    // The controller serves reads from memory; a write says why it cannot be done.
    let (status, body) = register_host(&url, "sf-db-late", "127.93.9.1");
    eprintln!("self_fault_database: a registration during the outage: {status} {body}");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("database unavailable"), "{body}");
    std::thread::sleep(OUTAGE.saturating_sub(down.elapsed()));

    // --- it comes back: the same process heals -----------------------------------------
    admin(
        &admin_url,
        &format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"),
    );
    let back = Instant::now();
    let up_ms = rocemesh_proto::now_unix_ms();
    let ready = wait_ready_again(&url, back, Duration::from_secs(30));
    // Every period that ended during the outage, and the next one, is stored.
    let want_through = (up_ms / PERIOD_MS + 1) * PERIOD_MS;
    let rows = wait_for("the outage's SLA periods", Duration::from_secs(20), || {
        let rows = cluster_periods(&url, start_ms);
        rows.last()
            .is_some_and(|r| r.period_start_ms >= want_through)
            .then_some(rows)
    });
    let stored_again = back.elapsed();
    let starts: Vec<i64> = rows.iter().map(|r| r.period_start_ms).collect();
    for w in starts.windows(2) {
        assert_eq!(w[1] - w[0], PERIOD_MS, "a period is missing: {starts:?}");
    }
    let outage_rows: Vec<&SlaRow> = rows
        .iter()
        .filter(|r| r.period_start_ms >= down_ms - PERIOD_MS && r.period_start_ms < up_ms)
        .collect();
    assert!(outage_rows.len() >= 4, "{starts:?}");
    assert!(outage_rows.iter().all(|r| r.probes > 0), "{outage_rows:#?}");
    assert_no_false_alarm(&url, "after the database outage");
    eprintln!(
        "self_fault_database: outage {OUTAGE:?}; ready again {ready:?} after the database returned, \
         the {} periods of the outage stored {stored_again:?} after; periods {starts:?}",
        outage_rows.len()
    );
}
