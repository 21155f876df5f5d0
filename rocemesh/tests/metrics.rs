//! `/metrics` of a real server (controller + analyzer) on 127.0.0.1: hosts registered and
//! pinglists polled over its REST API, real result batches uploaded, problems in its
//! database; the exposition is scraped over HTTP and parsed. Also checks that every query
//! of the Grafana dashboard names a metric the server or the agent exports.

use rocemesh::config::ServerConfig;
use rocemesh::server::{Roles, RunningServer, start};
use rocemesh_analyzer::testing::insert_link_problem;
use rocemesh_proto::ProbeResult;
use rocemesh_proto::api::{RegisterRequest, RegisterResponse, RnicRegistration};
use rocemesh_proto::batch::{BatchHeader, CONTENT_TYPE, encode_batch};
use rocemesh_proto::testing::probe_result;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One parsed sample: name, sorted labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed OpenMetrics text exposition.
#[derive(Debug, Default)]
struct Exposition {
    /// Family name -> type (from `# TYPE`).
    types: BTreeMap<String, String>,
    /// Family name -> unit (from `# UNIT`).
    units: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

impl Exposition {
    fn parse(text: &str) -> Self {
        let mut e = Self::default();
        assert!(text.ends_with("# EOF\n"), "exposition must end with # EOF");
        let mut helped = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect("HELP line");
                assert!(!help.trim().is_empty(), "empty HELP of {name}");
                helped.insert(name.to_string());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE line");
                assert!(
                    e.types.insert(name.into(), kind.into()).is_none(),
                    "family {name} described twice"
                );
            } else if let Some(rest) = line.strip_prefix("# UNIT ") {
                let (name, unit) = rest.split_once(' ').expect("UNIT line");
                e.units.insert(name.into(), unit.into());
            } else if line.starts_with('#') || line.is_empty() {
                continue;
            } else {
                e.samples.push(parse_sample(line));
            }
        }
        let unhelped: Vec<_> = e.types.keys().filter(|n| !helped.contains(*n)).collect();
        assert!(unhelped.is_empty(), "families without HELP: {unhelped:?}");
        e
    }

    /// The value of the sample with exactly these labels.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels).unwrap_or_else(|| {
            let same: Vec<_> = self
                .samples
                .iter()
                .filter(|s| s.name == name)
                .map(|s| &s.labels)
                .collect();
            panic!("no sample {name}{labels:?}; there are {same:?}")
        })
    }

    /// Family names, for matching dashboard queries.
    fn names(&self) -> BTreeSet<String> {
        self.samples.iter().map(|s| s.name.clone()).collect()
    }
}

fn parse_sample(line: &str) -> Sample {
    let (head, value) = line.rsplit_once(' ').expect("sample has a value");
    let value = match value {
        "+Inf" => f64::INFINITY,
        v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
    };
    let (name, labels) = match head.split_once('{') {
        None => (head, BTreeMap::new()),
        Some((name, rest)) => {
            let body = rest.strip_suffix('}').expect("labels end with }");
            let labels = body
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once("=\"").expect("label k=\"v\"");
                    (k.to_string(), v.trim_end_matches('"').to_string())
                })
                .collect();
            (name, labels)
        }
    };
    Sample {
        name: name.to_string(),
        labels,
        value,
    }
}

fn rec(prober: u32, target: u32, send_ms: i64, ok: bool, rtt_ns: u32) -> ProbeResult {
    ProbeResult {
        prober_delay_ns: 3_000,
        responder_delay_ns: 700,
        app_rtt_ns: rtt_ns + 4_000,
        dst_port: 4792,
        ..probe_result(prober, target, send_ms, ok, rtt_ns)
    }
}

/// The `Content-Type` of an answer ("" without one).
fn content_type(resp: &ureq::http::Response<ureq::Body>) -> String {
    resp.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// (status, content type, body) of one request.
async fn http(
    method: &str,
    url: String,
    body: Option<(&'static str, Vec<u8>)>,
    etag: Option<String>,
) -> (u16, String, String) {
    let method = method.to_string();
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut resp = match (method.as_str(), body) {
            ("POST", Some((ct, b))) => agent.post(&url).header("Content-Type", ct).send(&b[..]),
            _ => {
                let mut req = agent.get(&url);
                if let Some(tag) = etag {
                    req = req.header("If-None-Match", tag);
                }
                req.call()
            }
        }
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let ct = content_type(&resp);
        (
            resp.status().as_u16(),
            ct,
            resp.body_mut().read_to_string().unwrap(),
        )
    })
    .await
    .unwrap()
}

async fn register(base: &str, host: &str, rnics: &[(&str, &str, &str)]) -> RegisterResponse {
    let req = RegisterRequest {
        host: host.into(),
        epoch: 1,
        rnics: rnics
            .iter()
            .map(|(ifname, ip, tor)| RnicRegistration {
                ifname: ifname.to_string(),
                ip: ip.parse().unwrap(),
                gid: None,
                qpn: 7,
                port: 4792,
                tor: Some(tor.to_string()),
                rail: None,
                gateway: None,
            })
            .collect(),
    };
    let (status, _, body) = http(
        "POST",
        format!("{base}/api/v1/agents/register"),
        Some(("application/json", serde_json::to_vec(&req).unwrap())),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

async fn server(dir: &Path) -> RunningServer {
    let cfg = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        database: format!("sqlite://{}", dir.join("metrics.db").display()),
        ..ServerConfig::default()
    };
    start(cfg, Roles::Both).await.unwrap()
}

/// A server with two hosts on two ToRs, pinglist polls, ingested batches (one retried,
/// one malformed) and three problems; the temp dir is removed by the caller.
async fn loaded_server(dir: &Path) -> RunningServer {
    std::fs::create_dir_all(dir).unwrap();
    let srv = server(dir).await;
    let base = srv.url();

    // Two hosts, three RNICs, two ToRs, registered like agents do.
    let h1 = register(
        &base,
        "host-1",
        &[("r0", "10.9.0.1", "tor-a"), ("r1", "10.9.0.2", "tor-a")],
    )
    .await;
    let h2 = register(&base, "host-2", &[("r0", "10.9.1.1", "tor-b")]).await;
    let (a1, a2, b1) = (h1.rnics[0].id, h1.rnics[1].id, h2.rnics[0].id);
    // One pinglist poll answered 200, one 304, one 404.
    let url = format!("{base}/api/v1/pinglists/{}", h1.host_id);
    let (s, _, body) = http("GET", url.clone(), None, None).await;
    assert_eq!(s, 200, "{body}");
    let version: serde_json::Value = serde_json::from_str(&body).unwrap();
    let etag = format!("\"{}\"", version["version"].as_str().unwrap());
    assert_eq!(http("GET", url, None, Some(etag)).await.0, 304);
    assert_eq!(
        http("GET", format!("{base}/api/v1/pinglists/999"), None, None)
            .await
            .0,
        404
    );

    let analyzer = srv.analyzer.clone().unwrap();
    analyzer.refresh_registry().await.unwrap();
    let now = rocemesh_proto::now_unix_ms();
    // tor-a -> tor-b: 30 ok at 9 µs, 3 timeouts; tor-a -> tor-a: 5 ok at 2 µs, 5 at 4 µs.
    let mut cross: Vec<ProbeResult> = (0..30).map(|_| rec(a1, b1, now, true, 9_000)).collect();
    cross.extend((0..3).map(|_| rec(a2, b1, now, false, 0)));
    let local: Vec<ProbeResult> = (0..10)
        .map(|i| rec(a1, a2, now, true, if i % 2 == 0 { 2_000 } else { 4_000 }))
        .collect();
    let post = |seq: u64, records: Vec<ProbeResult>| {
        let body = encode_batch(
            BatchHeader {
                host_id: h1.host_id,
                epoch: 1,
                batch_seq: seq,
                dropped: 0,
            },
            &records,
        );
        http(
            "POST",
            format!("{base}/api/v1/results"),
            Some((CONTENT_TYPE, body)),
            None,
        )
    };
    assert_eq!(post(1, cross.clone()).await.0, 200);
    assert_eq!(post(2, local).await.0, 200);
    assert_eq!(
        post(2, Vec::new()).await.0,
        200,
        "a retry is answered as a duplicate"
    );
    let (s, _, _) = http(
        "POST",
        format!("{base}/api/v1/results"),
        Some((CONTENT_TYPE, b"nonsense".to_vec())),
        None,
    )
    .await;
    assert_eq!(s, 400);

    // Problems: one active and assessed P1, one active not assessed, one resolved.
    let db = analyzer.db();
    for (component, state, priority) in [
        ("t0-s1", "active", Some("P1")),
        ("t1-s0", "active", None),
        ("t2-s0", "resolved", Some("P0")),
    ] {
        insert_link_problem(db, component, state, priority)
            .await
            .unwrap();
    }
    srv
}

#[tokio::test(flavor = "multi_thread")]
async fn server_exports_tor_pair_histograms_ingest_registry_and_problems() {
    let dir = std::env::temp_dir().join(format!("rocemesh-metrics-{}", std::process::id()));
    let srv = loaded_server(&dir).await;
    let base = srv.url();
    let analyzer = srv.analyzer.clone().unwrap();
    let (status, content_type, text) = http("GET", format!("{base}/metrics"), None, None).await;
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/openmetrics-text; version=1.0.0"),
        "{content_type}"
    );
    let m = Exposition::parse(&text);

    // Histograms: seconds, per ToR pair, bucket counts equal to the ingested ok results.
    for family in [
        "rocemesh_network_rtt_seconds",
        "rocemesh_prober_delay_seconds",
        "rocemesh_responder_delay_seconds",
    ] {
        assert_eq!(m.types[family], "histogram", "{family}");
        assert_eq!(m.units[family], "seconds", "{family}");
    }
    let ab = [("src_tor", "tor-a"), ("dst_tor", "tor-b")];
    let aa = [("src_tor", "tor-a"), ("dst_tor", "tor-a")];
    let bucket = |pair: &[(&str, &str); 2], le: &str| {
        m.get(
            "rocemesh_network_rtt_seconds_bucket",
            &[pair[0], pair[1], ("le", le)],
        )
    };
    assert_eq!(m.get("rocemesh_network_rtt_seconds_count", &ab), 30.0);
    assert_eq!(bucket(&ab, "+Inf"), 30.0);
    assert_eq!(bucket(&ab, "0.0000082"), 0.0, "9 µs is above 8.2 µs");
    assert_eq!(bucket(&ab, "0.00001"), 30.0, "9 µs is at most 10 µs");
    assert!((m.get("rocemesh_network_rtt_seconds_sum", &ab) - 30.0 * 9e-6).abs() < 1e-9);
    // RoCE resolution: the 2 µs and the 4 µs RTTs of one pair are in different buckets.
    assert_eq!(bucket(&aa, "0.0000018"), 0.0);
    assert_eq!(bucket(&aa, "0.0000022"), 5.0, "the 2 µs RTTs");
    assert_eq!(bucket(&aa, "0.0000039"), 5.0, "4 µs is above 3.9 µs");
    assert_eq!(bucket(&aa, "0.0000047"), 10.0, "4 µs is at most 4.7 µs");
    assert_eq!(m.get("rocemesh_responder_delay_seconds_count", &ab), 30.0);
    let prober = |le| {
        m.get(
            "rocemesh_prober_delay_seconds_bucket",
            &[ab[0], ab[1], ("le", le)],
        )
    };
    assert_eq!((prober("0.0000027"), prober("0.0000033")), (0.0, 30.0));
    let buckets: Vec<f64> = m
        .samples
        .iter()
        .filter(|s| {
            s.name == "rocemesh_network_rtt_seconds_bucket" && s.labels["dst_tor"] == "tor-b"
        })
        .map(|s| s.value)
        .collect();
    assert_eq!(
        buckets.len(),
        74,
        "E12 series from 100 ns to 100 ms, plus +Inf"
    );
    let bounds: Vec<f64> = m
        .samples
        .iter()
        .filter(|s| {
            s.name == "rocemesh_network_rtt_seconds_bucket" && s.labels["dst_tor"] == "tor-b"
        })
        .map(|s| s.labels["le"].parse::<f64>().unwrap())
        .collect();
    assert_eq!((bounds[0], bounds[72]), (1e-7, 0.1));
    assert!(
        bounds
            .windows(2)
            .all(|w| w[1] > w[0] && w[1] <= w[0] * 1.25 + 1e-15 || w[1].is_infinite()),
        "every bucket at most 25 % wide: {bounds:?}"
    );
    assert!(
        buckets.windows(2).all(|w| w[0] <= w[1]),
        "cumulative: {buckets:?}"
    );
    assert_eq!(m.get("rocemesh_probes_total", &ab), 33.0);
    assert_eq!(m.get("rocemesh_probe_timeouts_total", &ab), 3.0);
    assert_eq!(m.get("rocemesh_probes_total", &aa), 10.0);
    assert_eq!(
        m.value(
            "rocemesh_probes_total",
            &[("src_tor", "tor-b"), ("dst_tor", "tor-a")]
        ),
        None
    );

    // Ingest counters are the analyzer's own (IngestStats), not a second count.
    let stats = analyzer.stats();
    assert_eq!(
        m.get("rocemesh_ingest_batches_total", &[]),
        stats.batches as f64
    );
    assert_eq!(stats.batches, 2);
    assert_eq!(m.get("rocemesh_ingest_results_total", &[]), 43.0);
    assert_eq!(m.get("rocemesh_ingest_duplicate_batches_total", &[]), 1.0);
    assert_eq!(
        m.get(
            "rocemesh_ingest_rejected_batches_total",
            &[("reason", "bad_magic")]
        ),
        1.0
    );
    assert_eq!(
        m.get(
            "rocemesh_ingest_dropped_results_total",
            &[("reason", "unknown_rnic")]
        ),
        0.0
    );
    assert_eq!(m.get("rocemesh_tor_pair_overflow_results_total", &[]), 0.0);
    assert_eq!(m.get("rocemesh_tor_pairs_exported", &[]), 2.0);
    assert_eq!(m.get("rocemesh_tor_pairs_unexported", &[]), 0.0);
    assert_eq!(m.get("rocemesh_tor_pair_series_limit", &[]), 1024.0);

    // Build, process and webhook delivery families.
    assert_eq!(
        m.get(
            "rocemesh_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert!(m.get("process_resident_memory_bytes", &[]) > 1e6);
    assert!(m.get("process_open_fds", &[]) >= 3.0);
    assert!(m.get("process_cpu_seconds_total", &[]) > 0.0);
    let started = m.get("process_start_time_seconds", &[]);
    let now_s = rocemesh_proto::now_unix_ms() as f64 / 1e3;
    assert!(started <= now_s && started > now_s - 86_400.0, "{started}");
    for outcome in ["delivered", "retried", "failed"] {
        assert_eq!(
            m.get("rocemesh_alert_deliveries_total", &[("outcome", outcome)]),
            0.0,
            "no receivers configured"
        );
    }

    // Controller.
    assert_eq!(m.get("rocemesh_registered_hosts", &[]), 2.0);
    assert_eq!(m.get("rocemesh_registered_rnics", &[]), 3.0);
    assert_eq!(
        m.get("rocemesh_pinglist_polls_total", &[("code", "200")]),
        1.0
    );
    assert_eq!(
        m.get("rocemesh_pinglist_polls_total", &[("code", "304")]),
        1.0
    );
    assert_eq!(
        m.get("rocemesh_pinglist_polls_total", &[("code", "404")]),
        1.0
    );
    assert_eq!(m.get("rocemesh_tasks", &[("phase", "preload")]), 0.0);

    // Problems by priority; resolved ones are not active.
    let problem = |priority| {
        [
            ("kind", "link_fault"),
            ("component_kind", "link"),
            ("priority", priority),
        ]
    };
    assert_eq!(m.get("rocemesh_problems_active", &problem("P1")), 1.0);
    assert_eq!(m.get("rocemesh_problems_active", &problem("unknown")), 1.0);
    assert_eq!(m.value("rocemesh_problems_active", &problem("P0")), None);
    assert_eq!(
        m.types["rocemesh_analysis_tick_duration_seconds"],
        "histogram"
    );

    // Bounded cardinality: no RNIC-, host- or address-level label anywhere.
    for s in &m.samples {
        for k in s.labels.keys() {
            assert!(
                [
                    "src_tor",
                    "dst_tor",
                    "le",
                    "reason",
                    "code",
                    "phase",
                    "kind",
                    "component_kind",
                    "priority",
                    "stage",
                    "version",
                    "outcome"
                ]
                .contains(&k.as_str()),
                "unexpected label {k} on {}",
                s.name
            );
        }
    }
    srv.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// (content type, body) of `GET url` with this `Accept` header.
async fn scrape(url: String, accept: &'static str) -> (String, String) {
    tokio::task::spawn_blocking(move || {
        let mut resp = ureq::get(&url)
            .header("Accept", accept)
            .call()
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let ct = content_type(&resp);
        (ct, resp.body_mut().read_to_string().unwrap())
    })
    .await
    .unwrap()
}

/// `promtool check metrics` on `text`; panics with its findings.
fn promtool_check(what: &str, text: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run promtool ({e}): install it (Debian package `prometheus`)")
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics refuses the {what} exposition:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Prometheus' `Accept` header by default and with OpenMetrics scraping turned off.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
const CLASSIC_ACCEPT: &str = "text/plain;version=0.0.4;q=1,*/*;q=0.1";

/// The server's and the agent's `/metrics`, scraped over HTTP: OpenMetrics for
/// Prometheus' default `Accept`, the classic format when asked, which promtool accepts
/// (lint included: HELP, counter suffixes, units), with the same samples in both.
#[tokio::test(flavor = "multi_thread")]
async fn promtool_accepts_server_and_agent_metrics() {
    let dir =
        std::env::temp_dir().join(format!("rocemesh-metrics-promtool-{}", std::process::id()));
    let srv = loaded_server(&dir).await;
    let server_url = format!("{}/metrics", srv.url());

    let agent =
        rocemesh_agent::MetricsServer::spawn("127.0.0.1:0".parse().unwrap(), agent_sources())
            .unwrap();
    let agent_url = format!("http://{}/metrics", agent.local_addr());

    for (what, url) in [("server", &server_url), ("agent", &agent_url)] {
        let (ct, om) = scrape(url.clone(), PROMETHEUS_ACCEPT).await;
        assert!(
            ct.starts_with("application/openmetrics-text; version=1.0.0"),
            "{what}: {ct}"
        );
        let om = Exposition::parse(&om);
        let (ct, text) = scrape(url.clone(), CLASSIC_ACCEPT).await;
        assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8", "{what}");
        assert!(!text.contains("# EOF"), "{what}");
        promtool_check(what, &text);
        // The same sample names in both formats (values of live counters may move).
        let classic: BTreeSet<String> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| parse_sample(l).name)
            .collect();
        assert_eq!(classic, om.names(), "{what}");
        assert!(classic.contains("rocemesh_build_info"), "{what}");
        assert!(classic.contains("process_cpu_seconds_total"), "{what}");
    }
    agent.stop().unwrap();
    srv.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every metric a dashboard query names is exported by the server or the agent.
#[tokio::test(flavor = "multi_thread")]
async fn grafana_dashboard_queries_name_exported_metrics() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/rocemesh/dashboards/rocemesh.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    assert!(dashboard["title"].is_string() && dashboard["panels"].is_array());
    // The ToR × ToR panels are matrices: an instant table query per (src_tor, dst_tor)
    // turned into rows of source ToRs and columns of destination ToRs.
    let matrices: Vec<&serde_json::Value> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("ToR × ToR"))
        })
        .collect();
    assert_eq!(matrices.len(), 2, "RTT and loss matrices");
    for p in matrices {
        assert_eq!(p["type"], "table", "{}", p["title"]);
        let target = &p["targets"][0];
        assert_eq!(
            (&target["instant"], &target["format"]),
            (&serde_json::json!(true), &serde_json::json!("table"))
        );
        assert!(
            target["expr"]
                .as_str()
                .unwrap()
                .contains("by (src_tor, dst_tor"),
            "{}",
            p["title"]
        );
        let t = &p["transformations"][0];
        assert_eq!(t["id"], "groupingToMatrix");
        assert_eq!(
            (&t["options"]["rowField"], &t["options"]["columnField"]),
            (&serde_json::json!("src_tor"), &serde_json::json!("dst_tor"))
        );
        assert_eq!(
            p["fieldConfig"]["defaults"]["color"]["mode"],
            "continuous-viridis"
        );
    }
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() >= 8, "only {} queries", exprs.len());

    let dir = std::env::temp_dir().join(format!("rocemesh-metrics-grafana-{}", std::process::id()));
    let srv = loaded_server(&dir).await;
    let (_, _, text) = http("GET", format!("{}/metrics", srv.url()), None, None).await;
    let mut exported = Exposition::parse(&text).names();
    srv.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    exported.extend(Exposition::parse(&agent_exposition()).names());

    for expr in &exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "query names no rocemesh metric: {expr}");
        for name in names {
            assert!(
                exported.contains(&name),
                "{name} (in `{expr}`) is not exported"
            );
        }
    }
}

/// The sources of a fresh agent with one RNIC.
fn agent_sources() -> rocemesh_agent::Sources {
    use rocemesh_agent::Counters;
    use rocemesh_agent::ResultBuffer;
    use std::sync::Arc;
    let counters = Arc::new(Counters::default());
    counters
        .transports
        .lock()
        .unwrap()
        .insert("r0".into(), "udp");
    *counters.service_route.lock().unwrap() = "off";
    let buffer = Arc::new(ResultBuffer::new(10, counters.clone()));
    rocemesh_agent::Sources {
        counters,
        buffer,
        buffer_capacity: 10,
    }
}

/// What a fresh agent exports, from its own encoder.
fn agent_exposition() -> String {
    rocemesh_agent::exposition(
        &agent_sources(),
        rocemesh_proto::exposition::Format::OpenMetrics,
    )
    .unwrap()
}

fn collect_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// The `rocemesh_*` identifiers of a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("rocemesh_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        let preceded =
            start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        if !preceded {
            names.push(expr[start..end].to_string());
        }
        i = end;
    }
    names
}
