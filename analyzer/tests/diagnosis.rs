//! Fault diagnosis end to end: real batches (records + path sections) for a
//! synthetic 2x2 Clos, uploaded over HTTP, diagnosed, served under
//! `/api/v1/problems`, stored, and carried over an analyzer restart; on SQLite
//! and PostgreSQL.

mod common;

use common::*;
use rocemesh_analyzer::{Analyzer, AnalyzerConfig, BaselineVote, DiagnosisConfig};
use rocemesh_proto::ProbeResult;
use rocemesh_proto::api::{ComponentKind, Problem, ProblemKind, ProblemState};
use rocemesh_proto::batch::{BatchEncoder, BatchHeader, CONTENT_TYPE};
use rocemesh_proto::path::TracedPath;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;

/// RNICs 1, 2 (hosts 1, 2) under t0; 3, 4 (hosts 3, 4) under t1; spines s0, s1.
const MAP: &str = r#"
[[switch]]
name = "t0"
addresses = ["198.18.0.0", "198.18.0.2", "198.19.0.0", "198.19.0.2"]
[[switch]]
name = "t1"
addresses = ["198.18.1.0", "198.18.1.2", "198.19.0.4", "198.19.0.6"]
[[switch]]
name = "s0"
addresses = ["198.19.0.1", "198.19.0.5"]
[[switch]]
name = "s1"
addresses = ["198.19.0.3", "198.19.0.7"]
[[link]]
name = "t0-s0"
ends = [{ device = "t0", ip = "198.19.0.0" }, { device = "s0", ip = "198.19.0.1" }]
[[link]]
name = "t0-s1"
ends = [{ device = "t0", ip = "198.19.0.2" }, { device = "s1", ip = "198.19.0.3" }]
[[link]]
name = "t1-s0"
ends = [{ device = "t1", ip = "198.19.0.4" }, { device = "s0", ip = "198.19.0.5" }]
[[link]]
name = "t1-s1"
ends = [{ device = "t1", ip = "198.19.0.6" }, { device = "s1", ip = "198.19.0.7" }]
"#;

const RNICS: [u32; 4] = [1, 2, 3, 4];
const DPORT: u16 = 4791;
/// The inter-ToR source port probed as a service flow.
const SERVICE_PORT: u16 = 50_002;
/// Tasks (id, name, RNICs) whose flows the link problem blames.
const TASKS: [(i64, &str, [u32; 2]); 2] = [(1, "a", [1, 3]), (2, "b", [2, 4])];

async fn seed_tasks(db: &rocemesh_store::Db) {
    for (id, name, rnics) in TASKS {
        let endpoints: Vec<(String, String)> = rnics
            .iter()
            .map(|r| (format!("host-{r}"), format!("eth{r}")))
            .collect();
        seed_task(db, id, name, &endpoints).await;
    }
}

/// (name, flows) of what crosses t0-s1 on the service port: spine 1 between the ToRs.
fn blamed_on_t0_s1() -> Vec<(String, u32)> {
    let mut want: std::collections::BTreeMap<String, u32> = Default::default();
    for p in RNICS {
        for t in RNICS.into_iter().filter(|&t| tor(t) != tor(p)) {
            if spine(p, t, SERVICE_PORT) != 1 {
                continue;
            }
            let name = TASKS
                .iter()
                .find(|(_, _, r)| r.contains(&p) && r.contains(&t))
                .map_or_else(
                    || format!("host-{p}/eth{p} -> host-{t}/eth{t} sport {SERVICE_PORT}"),
                    |(_, n, _)| n.to_string(),
                );
            *want.entry(name).or_default() += 1;
        }
    }
    want.into_iter().collect()
}

fn tor(r: u32) -> u32 {
    (r - 1) / 2
}

/// The address `common::seed` registers.
fn ip(r: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, r as u8))
}

/// ECMP stand-in: the spine a 5-tuple hashes onto.
fn spine(src: u32, dst: u32, sport: u16) -> u32 {
    (src * 7 + dst * 3 + u32::from(sport)) / 2 % 2
}

/// Source ports probed between each pair: one ToR-mesh, four inter-ToR.
fn ports(p: u32, t: u32) -> &'static [u16] {
    if tor(p) == tor(t) {
        &[50_000]
    } else {
        &[50_001, 50_002, 50_003, 50_004]
    }
}

/// Traceroute of a 5-tuple from `src` to `dst` (ToR, spine, ToR, destination);
/// `stop` cuts it after that many hops, as a re-trace after a break does.
fn trace(src: u32, dst: u32, sport: u16, ack: bool, at_ns: u64, stop: Option<usize>) -> TracedPath {
    let s = spine(src, dst, sport);
    let (t, u) = (tor(src), tor(dst));
    let mut hops = vec![
        Some(IpAddr::V4(Ipv4Addr::new(
            198,
            18,
            t as u8,
            2 * ((src - 1) % 2) as u8,
        ))),
        Some(IpAddr::V4(Ipv4Addr::new(
            198,
            19,
            0,
            (2 * (2 * t + s) + 1) as u8,
        ))),
        Some(IpAddr::V4(Ipv4Addr::new(
            198,
            19,
            0,
            (2 * (2 * u + s)) as u8,
        ))),
        Some(ip(dst)),
    ];
    if let Some(n) = stop {
        hops.truncate(n);
        hops.push(None);
    }
    TracedPath {
        src: ip(src),
        dst: ip(dst),
        src_port: sport,
        dst_port: DPORT,
        traced_at_unix_ns: at_ns,
        reached: stop.is_none(),
        ack_direction: ack,
        hops,
    }
}

fn config(map: PathBuf) -> AnalyzerConfig {
    AnalyzerConfig {
        fabric_map: Some(map),
        diagnosis: DiagnosisConfig {
            host_down_after_ms: 60_000,
            host_silent_ms: 40_000,
            resolve_after_ms: 1_000,
            // Ticks run on made-up times, every path already in the uploads.
            paths_settle_ms: 0,
            ..DiagnosisConfig::default()
        },
        ..AnalyzerConfig::default()
    }
}

/// What every host uploads for the 7.5 s before `now_ms`, with `t0-s1` down when
/// `broken`: (host id, batch body), the path sections included.
fn uploads(now_ms: i64, broken: bool, seq: u64) -> Vec<(u32, Vec<u8>)> {
    let lost = |src: u32, dst: u32, sport: u16| {
        broken && tor(src) != tor(dst) && spine(src, dst, sport) == 1
    };
    let traced_ns = (now_ms as u64 - 8_000) * 1_000_000;
    let mut out = Vec::new();
    for p in RNICS {
        let header = BatchHeader {
            host_id: p,
            epoch: 1,
            batch_seq: seq,
            dropped: 0,
        };
        let mut e = BatchEncoder::new(header, 1_000);
        let mut paths = Vec::new();
        for t in RNICS.into_iter().filter(|&t| t != p) {
            for &sport in ports(p, t) {
                if tor(p) != tor(t) {
                    // Host p traces the 5-tuple p -> t: as the prober of its own probes,
                    // or as the responder to t's probes (their ACKs use the same ports).
                    let as_responder = sport % 2 == 1;
                    paths.push(trace(p, t, sport, as_responder, traced_ns, None));
                    if lost(p, t, sport) {
                        // Re-traced after the timeout: stops where the link drops.
                        let stop = if tor(p) == 0 { 1 } else { 2 };
                        paths.push(trace(
                            p,
                            t,
                            sport,
                            false,
                            traced_ns + 1_000_000_000,
                            Some(stop),
                        ));
                    }
                }
                let failed = lost(p, t, sport) || lost(t, p, sport);
                for k in 0..75 {
                    let send_ms = now_ms - 9_000 + k * 100;
                    let mut r: ProbeResult = rec(p, t, send_ms, !failed, 30_000);
                    r.src_port = sport;
                    r.dst_port = DPORT;
                    if tor(p) != tor(t) {
                        // One port of each pair is a service flow (flow blame follows it).
                        r.class = if sport == SERVICE_PORT {
                            rocemesh_proto::ProbeClass::Service
                        } else {
                            rocemesh_proto::ProbeClass::InterTor
                        };
                    }
                    e.push(&r);
                }
            }
        }
        out.push((p, e.finish_with_paths(&paths)));
    }
    out
}

async fn upload_all(base: &str, now_ms: i64, broken: bool, seq: u64) {
    for (host, body) in uploads(now_ms, broken, seq) {
        let (status, text) = call(format!("{base}/results"), Some(CONTENT_TYPE), Some(body)).await;
        assert_eq!(status, 200, "host {host}: {text}");
    }
}

fn map_file(name: &str) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("rocemesh-map-{}-{name}.toml", std::process::id()));
    std::fs::write(&path, MAP).unwrap();
    path
}

async fn start(db: &rocemesh_store::Db, map: &std::path::Path) -> (Arc<Analyzer>, String) {
    let a = Analyzer::new(db.clone(), config(map.to_path_buf()))
        .await
        .unwrap();
    let base = serve(a.clone()).await;
    (a, base)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_downed_link_is_found_served_stored_and_survives_a_restart() {
    for (name, db) in rocemesh_store::test_databases().await {
        let map = map_file(name);
        seed(
            &db,
            &[(1, 1, "t0"), (2, 2, "t0"), (3, 3, "t1"), (4, 4, "t1")],
        )
        .await;
        seed_tasks(&db).await;
        let (a, base) = start(&db, &map).await;

        // The agents have been up for a minute (heartbeats); timeouts towards an
        // agent not heard of yet would be start-up, not faults.
        let now = rocemesh_proto::now_unix_ms();
        for host in RNICS {
            let header = BatchHeader {
                host_id: host,
                epoch: 1,
                batch_seq: 0,
                dropped: 0,
            };
            a.ingest(&BatchEncoder::new(header, 0).finish(), now - 60_000)
                .unwrap();
        }
        // Healthy fabric first (a window ending 11 s ago): nothing to report.
        upload_all(&base, now - 11_000, false, 1).await;
        a.diagnose(now - 11_000).await.unwrap();
        let none: Vec<Problem> = get(&base, "/problems").await;
        assert!(none.is_empty(), "{name}: healthy fabric reported {none:?}");

        // Then t0-s1 went down.
        upload_all(&base, now, true, 2).await;
        a.diagnose(now).await.unwrap();
        let active: Vec<Problem> = get(&base, "/problems?state=active").await;
        assert_eq!(active.len(), 1, "{name}: {active:#?}");
        let p = &active[0];
        assert_eq!(
            (
                p.kind,
                p.component_kind,
                p.component.as_str(),
                p.state,
                p.network
            ),
            (
                ProblemKind::LinkFault,
                ComponentKind::Link,
                "t0-s1",
                ProblemState::Active,
                true
            ),
            "{name}"
        );
        assert!(
            p.id > 0 && p.confidence > 0.5 && p.confidence <= 1.0,
            "{name}: {p:?}"
        );
        assert!(
            p.evidence.votes > 0 && !p.evidence.example_paths.is_empty(),
            "{name}: {p:?}"
        );
        // Flow blame: the service flows across the link, by task, as shares of its traffic.
        let blamed: Vec<(String, u32)> = p
            .evidence
            .blamed
            .iter()
            .map(|b| (b.name.clone(), b.flows))
            .collect();
        let mut want = blamed_on_t0_s1();
        want.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
        assert!(!want.is_empty());
        assert_eq!(blamed, want, "{name}: {:?}", p.evidence.blamed);
        let total: f64 = p.evidence.blamed.iter().map(|b| b.share).sum();
        assert!((total - 1.0).abs() < 1e-9, "{name}: {total}");
        let one: Problem = get(&base, &format!("/problems/{}", p.id)).await;
        assert_eq!(one, *p);
        let all: Vec<Problem> = get(
            &base,
            &format!("/problems?state=all&since_ms={}&limit=5", now - 1),
        )
        .await;
        assert_eq!(all.len(), 1, "{name}");
        let resolved: Vec<Problem> = get(&base, "/problems?state=resolved").await;
        assert!(resolved.is_empty(), "{name}");
        let votes: Vec<BaselineVote> = get(&base, "/diagnosis/baseline").await;
        let of = |l: &str| {
            votes
                .iter()
                .find(|v| v.component == l)
                .map_or(0, |v| v.votes)
        };
        assert!(of("t0-s1") > 0 && of("t0-s0") == 0, "{name}: {votes:?}");

        // Bad parameters: 400 with a JSON error, 404 for an unknown id.
        for (path, status, text) in [
            ("/problems?state=bogus", 400, "state"),
            ("/problems?limit=0", 400, "limit"),
            ("/problems?since_ms=soon", 400, "since_ms"),
            ("/problems?colour=red", 400, "colour"),
            ("/problems/abc", 400, ""),
            ("/problems/999999", 404, "999999"),
        ] {
            let (s, body) = call(format!("{base}{path}"), None, None).await;
            assert_eq!(s, status, "{name} {path}: {body}");
            assert!(error_text(&body).contains(text), "{name} {path}: {body}");
        }

        // A restarted analyzer still knows the active problem, under the same id...
        let (b, base_b) = start(&db, &map).await;
        assert_eq!(
            b.problems(ProblemState::Active)
                .iter()
                .map(|q| q.id)
                .collect::<Vec<_>>(),
            [p.id],
            "{name}"
        );
        // ...and resolves it once the symptom has been gone long enough.
        let later = now + 30_000;
        upload_all(&base_b, later, false, 3).await;
        b.diagnose(later).await.unwrap();
        let resolved: Vec<Problem> = get(&base_b, "/problems?state=resolved").await;
        assert_eq!(resolved.len(), 1, "{name}: {resolved:?}");
        assert_eq!(
            (resolved[0].id, resolved[0].resolved_ms),
            (p.id, Some(later)),
            "{name}"
        );
        assert!(b.problems(ProblemState::Active).is_empty(), "{name}");
        let (c, _) = start(&db, &map).await;
        assert!(
            c.problems(ProblemState::Active).is_empty(),
            "{name}: the resolution was stored"
        );
        std::fs::remove_file(&map).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_fabric_map_is_refused_at_start() {
    let (_, db) = rocemesh_store::test_databases().await.remove(0);
    let path = std::env::temp_dir().join(format!("rocemesh-badmap-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "[[switch]]\nname = \"t0\"\naddresses = [\"not an ip\"]\n",
    )
    .unwrap();
    let err = Analyzer::new(db.clone(), config(path.clone()))
        .await
        .err()
        .expect("refused");
    assert!(format!("{err:#}").contains("fabric map"), "{err:#}");
    std::fs::remove_file(&path).unwrap();
}
