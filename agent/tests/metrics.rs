//! A real agent with `metrics_listen` probing itself (and an address nobody answers) on
//! loopback: its `/metrics` listener is scraped over TCP and must show what the agent did.

#[allow(dead_code)]
mod common;

use common::{Request, Response, serve};
use rocemesh_agent::{AgentConfig, RnicConfig, ServiceTracing, start};
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::*;
use rocemesh_proto::batch::decode_batch;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const HOST_ID: u32 = 3;
const RNIC_ID: u32 = 5;
const PORT: u16 = 47_961;
const BUFFER: usize = 4_321;

/// Stand-in controller + analyzer: the RNIC probes itself and a silent address.
fn stand_in(registered: Arc<Mutex<Option<RegisterRequest>>>) -> impl Fn(&Request) -> Response {
    move |req| match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/api/v1/agents/register") => {
            let r: RegisterRequest = serde_json::from_slice(&req.body).unwrap();
            let reply = common::register_reply(&r, HOST_ID, RNIC_ID, None, 200, 100);
            *registered.lock().unwrap() = Some(r);
            Response::json(200, reply)
        }
        ("GET", p) if p.starts_with("/api/v1/pinglists/3") => {
            let reg = registered.lock().unwrap().clone().unwrap();
            let me = &reg.rnics[0];
            let target = |rnic_id, ip: &str, src_port| PingTarget {
                rnic_id,
                ip: ip.parse().unwrap(),
                port: me.port,
                qpn: me.qpn,
                src_port,
            };
            Response::json(
                200,
                Pinglist {
                    host_id: HOST_ID,
                    version: "v1".into(),
                    timeout_ms: 200,
                    probe_auth: None,
                    rnics: vec![RnicPinglist {
                        rnic_id: RNIC_ID,
                        lists: vec![ProbeList {
                            class: ProbeClass::TorMesh,
                            pps: 100.0,
                            entries: vec![
                                target(RNIC_ID, &me.ip.to_string(), 50_610),
                                target(RNIC_ID + 1, "127.0.7.62", 50_611),
                            ],
                        }],
                    }],
                },
            )
        }
        ("POST", "/api/v1/results")
            if req.header("Content-Type") == Some(rocemesh_proto::batch::CONTENT_TYPE) =>
        {
            let n = decode_batch(&req.body).map_or(0, |b| b.len() as u64);
            Response::json(
                200,
                UploadAck {
                    accepted: n,
                    dropped: 0,
                    duplicate: false,
                    instance: 0,
                },
            )
        }
        _ => Response::empty(404),
    }
}

/// One raw HTTP exchange; returns (status line, head, body).
fn exchange(addr: SocketAddr, request: &str) -> (String, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a full response");
    let status = head.lines().next().unwrap_or_default().to_string();
    (status, head.to_string(), body.to_string())
}

/// Sample name and labels -> value.
fn samples(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn metrics_listener_serves_the_agents_counters() {
    let url = serve(stand_in(Arc::new(Mutex::new(None))));
    let mut cfg = AgentConfig::new(
        url,
        vec![RnicConfig::parse("r1=127.0.7.61,tor=tor-a").unwrap()],
    );
    cfg.host = "metrics-host".into();
    cfg.port = PORT;
    cfg.buffer_capacity = BUFFER;
    cfg.service_tracing = ServiceTracing::Off;
    cfg.trace_enabled = false;
    cfg.sampling_enabled = false;
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let agent = start(cfg).unwrap();
    let addr = agent.metrics_addr().expect("metrics listener bound");

    // Wait for probes, answers and a timeout of the silent target.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let s = agent.stats();
        if s.results_by_status["ok"] >= 20
            && s.results_by_status["timeout"] >= 2
            && s.batches_uploaded >= 1
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = agent.stats();
    let (status, head, body) = exchange(
        addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let after = agent.stats();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"));
    // A scraper asking for the classic text format gets it.
    let (status, head, classic) = exchange(
        addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain;version=0.0.4;q=1,*/*;q=0.1\r\n\r\n",
    );
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert!(
        classic.contains("# TYPE rocemesh_agent_probes_sent_total counter\n")
            && !classic.contains("# EOF"),
        "{classic}"
    );
    let m = samples(&body);
    let within = |name: &str, lo: u64, hi: u64| {
        let v = m
            .get(name)
            .copied()
            .unwrap_or_else(|| panic!("no {name} in\n{body}")) as u64;
        assert!((lo..=hi).contains(&v), "{name} = {v}, expected {lo}..={hi}");
        v
    };
    let sent = within(
        "rocemesh_agent_probes_sent_total",
        before.probes_sent,
        after.probes_sent,
    );
    let ok = within(
        "rocemesh_agent_probe_results_total{status=\"ok\"}",
        before.results_by_status["ok"],
        after.results_by_status["ok"],
    );
    assert!(ok >= 20 && sent > ok, "sent {sent}, ok {ok}");
    within(
        "rocemesh_agent_probe_results_total{status=\"timeout\"}",
        before.results_by_status["timeout"].max(2),
        after.results_by_status["timeout"],
    );
    // Self-probes: every ok probe got its ACK1 and ACK2, which our own responder sent.
    let acks = within(
        "rocemesh_agent_acks_received_total",
        before.acks_received,
        after.acks_received,
    );
    assert!(acks >= 2 * ok, "{acks} ACKs for {ok} ok probes");
    within(
        "rocemesh_agent_responder_acks_sent_total",
        before.acks_sent.max(2 * ok),
        after.acks_sent,
    );
    within(
        "rocemesh_agent_uploads_total{result=\"ok\"}",
        before.batches_uploaded.max(1),
        after.batches_uploaded,
    );
    within("rocemesh_agent_uploads_total{result=\"failed\"}", 0, 0);
    within(
        "rocemesh_agent_result_buffer_capacity",
        BUFFER as u64,
        BUFFER as u64,
    );
    within("rocemesh_agent_result_buffer_results", 0, BUFFER as u64);
    within(
        "rocemesh_agent_malformed_packets_total{reason=\"foreign\"}",
        0,
        0,
    );
    within(
        "rocemesh_agent_rnic_info{rnic=\"r1\",transport=\"udp\"}",
        1,
        1,
    );
    within("rocemesh_agent_service_tracing_info{route=\"off\"}", 1, 1);
    within(
        &format!(
            "rocemesh_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        ),
        1,
        1,
    );
    within("process_open_fds", 3, 1 << 20);

    // Anything else is refused without disturbing the listener.
    assert_eq!(
        exchange(addr, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n").0,
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        exchange(
            addr,
            "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .0,
        "HTTP/1.1 405 Method Not Allowed"
    );
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nX: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(10_000)
    );
    assert_eq!(
        exchange(addr, &huge).0,
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    assert_eq!(
        exchange(addr, "GET /metrics?x=1 HTTP/1.0\r\n\r\n").0,
        "HTTP/1.0 200 OK"
    );

    agent.shutdown().unwrap();
    assert!(
        TcpStream::connect(addr).is_err(),
        "listener closed at shutdown"
    );
}

#[test]
fn dripping_and_silent_clients_delay_no_scrape() {
    let counters = Arc::new(rocemesh_agent::Counters::default());
    let buffer = Arc::new(rocemesh_agent::ResultBuffer::new(100, counters.clone()));
    let server = rocemesh_agent::MetricsServer::spawn(
        "127.0.0.1:0".parse().unwrap(),
        rocemesh_agent::Sources {
            counters,
            buffer,
            buffer_capacity: 100,
        },
    )
    .unwrap();
    let addr = server.local_addr();
    let started = Instant::now();
    // Four clients send a request head one byte every 1.5 s; four more say nothing.
    let drips: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                // Once the server has closed, the next byte draws a reset and the one
                // after fails.
                for b in b"GET /metrics HTTP/1.1\r\nX-Slow: abcdefghijklmnopqrstuvwxyz" {
                    if s.write_all(&[*b]).is_err() {
                        return Some(started.elapsed());
                    }
                    std::thread::sleep(Duration::from_millis(1_500));
                }
                None
            })
        })
        .collect();
    let silent: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // Meanwhile four scrapers scrape every 0.5 s, each answered at once.
    let scrapers: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut worst = Duration::ZERO;
                for _ in 0..6 {
                    let t = Instant::now();
                    let (status, _, body) = exchange(
                        addr,
                        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    );
                    assert_eq!(status, "HTTP/1.1 200 OK");
                    assert!(body.ends_with("# EOF\n"), "{body}");
                    worst = worst.max(t.elapsed());
                    std::thread::sleep(Duration::from_millis(500));
                }
                worst
            })
        })
        .collect();
    let worst = scrapers
        .into_iter()
        .map(|s| s.join().unwrap())
        .max()
        .unwrap();
    let during = started.elapsed();
    eprintln!("24 scrapes beside 4 dripping and 4 silent clients: {worst:?} at worst");
    // A blocked server would answer only once the held connections time out (seconds
    // more); a loaded machine's fresh connection and call take well under 3 s.
    assert!(worst < Duration::from_secs(3), "{worst:?}");
    // The scrapes ran while the slow clients were still held.
    assert!(during < Duration::from_secs(5), "scrapes took {during:?}");
    // The slow clients are cut off at the header deadline (5 s), not held for good.
    for d in drips {
        let cut = d
            .join()
            .unwrap()
            .expect("a dripping client was never cut off");
        assert!(
            cut >= Duration::from_secs(5) && cut < Duration::from_secs(30),
            "{cut:?}"
        );
    }
    for mut s in silent {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let read = s.read(&mut [0u8; 64]);
        assert!(
            matches!(&read, Ok(0))
                || read
                    .as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "a silent client is still held: {read:?}"
        );
    }
    server.stop().unwrap();
}
