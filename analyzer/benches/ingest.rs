//! Ingest throughput on one core: realistic batches from a 10,000-RNIC / 500-ToR
//! cluster through `Analyzer::ingest`, then one `tick` that finalizes and stores
//! the period. A JSON decode of the same records is measured as a baseline.
//!
//! `cargo bench -p rocemesh-analyzer --bench ingest`

use rand::{Rng, SeedableRng, rngs::StdRng};
use rocemesh_analyzer::{Analyzer, AnalyzerConfig};
use rocemesh_proto::batch::{BatchHeader, encode_batch};
use rocemesh_proto::{ProbeClass, ProbeResult, ProbeStatus, TimestampSource};
use rocemesh_store::Db;
use serde::{Deserialize, Serialize};
use std::time::Instant;

const RNICS: u32 = 10_000;
const TORS: u32 = 500;
const RNICS_PER_HOST: u32 = 8;
const BATCH_RECORDS: usize = 5_000;
const DISTINCT_BATCHES: usize = 100;
const TOTAL_BATCHES: usize = 1_200; // 6 M records
/// Batches sent through the durable path (write-ahead log + aggregation): 1 M records.
const DURABLE_BATCHES: usize = 200;
const INTER_TOR_NEIGHBOURS: u32 = 8;

/// The same record as JSON would carry it (the baseline).
#[derive(Serialize, Deserialize)]
struct JsonRecord {
    prober_rnic: u32,
    target_rnic: u32,
    seq: u32,
    target_qpn: u32,
    send_unix_ns: u64,
    network_rtt_ns: u32,
    prober_delay_ns: u32,
    responder_delay_ns: u32,
    app_rtt_ns: u32,
    src_port: u16,
    dst_port: u16,
    class: u8,
    status: u8,
    ts_source: u8,
}

impl From<&ProbeResult> for JsonRecord {
    fn from(r: &ProbeResult) -> Self {
        Self {
            prober_rnic: r.prober_rnic,
            target_rnic: r.target_rnic,
            seq: r.seq,
            target_qpn: r.target_qpn,
            send_unix_ns: r.send_unix_ns,
            network_rtt_ns: r.network_rtt_ns,
            prober_delay_ns: r.prober_delay_ns,
            responder_delay_ns: r.responder_delay_ns,
            app_rtt_ns: r.app_rtt_ns,
            src_port: r.src_port,
            dst_port: r.dst_port,
            class: r.class as u8,
            status: r.status as u8,
            ts_source: r.ts_source as u8,
        }
    }
}

fn tor_of(rnic: u32) -> u32 {
    (rnic - 1) / (RNICS / TORS)
}

fn host_of(rnic: u32) -> u32 {
    (rnic - 1) / RNICS_PER_HOST + 1
}

/// RNIC ids are 1..=RNICS; 20 RNICs per ToR, 8 per host.
async fn registry_db(path: &std::path::Path) -> anyhow::Result<Db> {
    let db = Db::connect(path.to_str().expect("utf-8 temp path")).await?;
    let mut tx = db.pool().begin().await?;
    for host in 1..=RNICS / RNICS_PER_HOST {
        sqlx::query("INSERT INTO hosts (id, name, epoch, registrations, registered_at_ms) VALUES ($1, $2, 1, 1, 0)")
            .bind(i64::from(host))
            .bind(format!("host-{host}"))
            .execute(&mut *tx)
            .await?;
    }
    for rnic in 1..=RNICS {
        sqlx::query(
            "INSERT INTO rnics (id, host_id, ifname, ip, qpn, port, tor, epoch, registered_at_ms) \
             VALUES ($1, $2, $3, $4, 1, 4791, $5, 1, 0)",
        )
        .bind(i64::from(rnic))
        .bind(i64::from(host_of(rnic)))
        .bind(format!("eth{}", rnic % RNICS_PER_HOST))
        .bind(format!(
            "10.{}.{}.{}",
            rnic >> 16,
            (rnic >> 8) & 255,
            rnic & 255
        ))
        .bind(format!("tor-{}", tor_of(rnic)))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(db)
}

/// One agent upload: the host's RNICs probing ToR-mesh peers (80 %) and RNICs of
/// neighbouring ToRs (20 %); 95 % ok with microsecond RTTs and a slow tail.
fn make_batch(rng: &mut StdRng, host: u32, now_ms: i64) -> (Vec<ProbeResult>, BatchHeader) {
    let records = (0..BATCH_RECORDS)
        .map(|i| {
            let prober = (host - 1) * RNICS_PER_HOST + 1 + rng.random_range(0..RNICS_PER_HOST);
            let tor = if rng.random_bool(0.8) {
                tor_of(prober)
            } else {
                (tor_of(prober) + rng.random_range(1..=INTER_TOR_NEIGHBOURS)) % TORS
            };
            let target = tor * (RNICS / TORS) + 1 + rng.random_range(0..RNICS / TORS);
            let ok = rng.random_bool(0.95);
            let rtt = if rng.random_bool(0.01) {
                rng.random_range(50_000..2_000_000)
            } else {
                rng.random_range(4_000..15_000)
            };
            let (pd, rd) = (
                rng.random_range(2_000..20_000),
                rng.random_range(1_000..8_000),
            );
            ProbeResult {
                prober_rnic: prober,
                target_rnic: target,
                seq: i as u32,
                target_qpn: 1,
                send_unix_ns: (now_ms - rng.random_range(0..9_000)) as u64 * 1_000_000,
                network_rtt_ns: if ok { rtt } else { 0 },
                prober_delay_ns: pd,
                responder_delay_ns: rd,
                app_rtt_ns: rtt + pd + rd,
                src_port: rng.random_range(49_152..65_535),
                dst_port: 4791,
                class: if tor == tor_of(prober) {
                    ProbeClass::TorMesh
                } else {
                    ProbeClass::InterTor
                },
                status: if ok {
                    ProbeStatus::Ok
                } else {
                    ProbeStatus::Timeout
                },
                ts_source: TimestampSource::Software,
            }
        })
        .collect();
    (
        records,
        BatchHeader {
            host_id: host,
            epoch: 1,
            batch_seq: 0,
            dropped: 0,
        },
    )
}

fn human(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else {
        format!("{:.0}k", v / 1e3)
    }
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let dir = std::env::temp_dir().join(format!("rocemesh-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = rt.block_on(bench(&dir.join("bench.db")));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn bench(db_path: &std::path::Path) -> anyhow::Result<()> {
    let db = registry_db(db_path).await?;
    let cfg = AnalyzerConfig::default();
    let period = cfg.period_ms as i64;
    let now = rocemesh_proto::now_unix_ms() / period * period + 10_000;
    let analyzer = Analyzer::new(db, cfg.clone()).await?;

    let mut rng = StdRng::seed_from_u64(42);
    let hosts = RNICS / RNICS_PER_HOST;
    let mut batches = Vec::with_capacity(DISTINCT_BATCHES);
    let mut json_records = Vec::new();
    for i in 0..DISTINCT_BATCHES {
        let (records, header) = make_batch(&mut rng, 1 + (i as u32 * 37) % hosts, now);
        if i == 0 {
            json_records = records.iter().map(JsonRecord::from).collect();
        }
        batches.push(encode_batch(header, &records));
    }

    // Hot path: every upload a new batch_seq so none is a duplicate.
    let start = Instant::now();
    let mut accepted = 0;
    for n in 0..TOTAL_BATCHES {
        let body = &mut batches[n % DISTINCT_BATCHES];
        body[24..32].copy_from_slice(&(n as u64).to_le_bytes());
        let ack = analyzer.ingest(body, now)?;
        accepted += ack.accepted;
    }
    let ingest_s = start.elapsed().as_secs_f64();
    let total = (TOTAL_BATCHES * BATCH_RECORDS) as u64;
    anyhow::ensure!(
        accepted == total,
        "only {accepted} of {total} records accepted"
    );

    // The durable path of `POST /results`: each batch committed to the write-ahead log
    // (SQLite) before it is aggregated.
    let start = Instant::now();
    let mut durable = 0;
    for n in 0..DURABLE_BATCHES {
        let body = &mut batches[n % DISTINCT_BATCHES];
        body[24..32].copy_from_slice(&((TOTAL_BATCHES + n) as u64).to_le_bytes());
        let ack = analyzer
            .accept(axum::body::Bytes::copy_from_slice(body), now)
            .await?;
        durable += ack.accepted;
    }
    let durable_rps = durable as f64 / start.elapsed().as_secs_f64();

    let start = Instant::now();
    analyzer.diagnose(now).await?;
    let diagnose_ms = start.elapsed().as_secs_f64() * 1e3;

    let start = Instant::now();
    analyzer.tick(now + period + cfg.grace_ms as i64).await?;
    let finalize_ms = start.elapsed().as_secs_f64() * 1e3;
    let rows = analyzer.latest().len();

    let json = serde_json::to_vec(&json_records)?;
    let rounds = 40;
    let start = Instant::now();
    let mut decoded = 0;
    for _ in 0..rounds {
        decoded += serde_json::from_slice::<Vec<JsonRecord>>(&json)?.len();
    }
    let json_rps = decoded as f64 / start.elapsed().as_secs_f64();
    let rps = total as f64 / ingest_s;

    println!("| metric | value | target |");
    println!("|---|---|---|");
    println!(
        "| ingest+aggregate results/s (1 core) | {} | >= 1,000,000 |",
        human(rps)
    );
    println!("| records ingested | {total} in {ingest_s:.2} s | >= 5,000,000 |");
    println!(
        "| durable ingest (write-ahead log commit + aggregate) results/s | {} | ({:.0} % of ingest alone) |",
        human(durable_rps),
        100.0 * durable_rps / rps
    );
    println!(
        "| finalize+store {RNICS}-RNIC period ms ({rows} rows) | {finalize_ms:.0} | < period ({period} ms) |"
    );
    println!(
        "| diagnose a window of {} results ms | {diagnose_ms:.0} | < tick ({} ms) |",
        cfg.diagnosis.max_records, cfg.diagnosis.tick_ms
    );
    println!(
        "| baseline: JSON decode records/s (serde_json) | {} | (binary / JSON = {:.1}x) |",
        human(json_rps),
        rps / json_rps
    );
    println!(
        "| batch bytes per record: binary / JSON | 48 / {} | |",
        json.len() / json_records.len()
    );
    Ok(())
}
