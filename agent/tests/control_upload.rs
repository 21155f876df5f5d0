//! The whole agent against a small real HTTP controller/analyzer on 127.0.0.1:
//! registration, ETag polling, re-registration, uploads, analyzer outages.

mod common;

use common::{Request, Response, serve, wait_for};
use rocemesh_agent::{AgentConfig, RnicConfig, ServiceTracing, start};
use rocemesh_proto::api::*;
use rocemesh_proto::batch::{BatchHeader, decode_batch};
use rocemesh_proto::path::TracedPath;
use rocemesh_proto::{ProbeClass, ProbeStatus};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Controller {
    registrations: Vec<RegisterRequest>,
    polls: usize,
    not_modified: usize,
    bad_queries: usize,
    /// `x-rocemesh-analyzer` of every pinglist answer (scale-out moving the agent).
    analyzer_header: Option<String>,
}

/// One upload the analyzer saw: header, record count, OK records, traced paths, HTTP
/// status answered.
#[derive(Debug, Clone)]
struct Upload {
    header: BatchHeader,
    records: usize,
    ok: usize,
    paths: Vec<TracedPath>,
    status: u16,
}

const HOST_ID: u32 = 7;
const RNIC_ID: u32 = 11;

/// A controller whose first pinglist poll answers 409 (so the agent re-registers) and whose
/// pinglist makes the RNIC probe itself; `analyzer` is handed out in the registration.
fn controller(
    state: Arc<Mutex<Controller>>,
    analyzer: Option<String>,
    pps: f64,
) -> impl Fn(&Request) -> Response {
    move |req| {
        let mut st = state.lock().unwrap();
        match (req.method.as_str(), req.path.as_str()) {
            ("POST", "/api/v1/agents/register") => {
                let Ok(r) = serde_json::from_slice::<RegisterRequest>(&req.body) else {
                    return Response::json(
                        400,
                        ErrorBody {
                            error: "bad register body".into(),
                        },
                    );
                };
                let resp = common::register_reply(&r, HOST_ID, RNIC_ID, analyzer.clone(), 200, 100);
                st.registrations.push(r);
                Response::json(200, resp)
            }
            ("GET", p) if p.starts_with("/api/v1/pinglists/7?epoch=") => {
                let reg = st.registrations.last().cloned().unwrap();
                if p != format!("/api/v1/pinglists/7?epoch={}", reg.epoch) {
                    st.bad_queries += 1;
                }
                st.polls += 1;
                let moved = st
                    .analyzer_header
                    .clone()
                    .map(|url| (ANALYZER_HEADER.to_string(), url));
                if st.polls == 1 {
                    return Response::json(
                        409,
                        ErrorBody {
                            error: "stale epoch".into(),
                        },
                    );
                }
                if req.header("If-None-Match") == Some("\"v1\"") {
                    st.not_modified += 1;
                    let mut r = Response::empty(304);
                    r.headers.extend(moved);
                    return r;
                }
                let me = &reg.rnics[0];
                let list = Pinglist {
                    host_id: HOST_ID,
                    version: "v1".into(),
                    timeout_ms: 300,
                    probe_auth: None,
                    rnics: vec![RnicPinglist {
                        rnic_id: RNIC_ID,
                        lists: vec![ProbeList {
                            class: ProbeClass::TorMesh,
                            pps,
                            entries: vec![PingTarget {
                                rnic_id: RNIC_ID,
                                ip: me.ip,
                                port: me.port,
                                qpn: me.qpn,
                                src_port: 50_400,
                            }],
                        }],
                    }],
                };
                let mut r = Response::json(200, list);
                r.headers.push(("ETag".into(), "\"v1\"".into()));
                r.headers.extend(moved);
                r
            }
            _ => Response::json(
                404,
                ErrorBody {
                    error: format!("no route {}", req.path),
                },
            ),
        }
    }
}

/// Mode of the fake analyzer: 0 = down (503), 1 = accepts, 2 = refuses (400).
fn analyzer(log: Arc<Mutex<Vec<Upload>>>, mode: Arc<AtomicU8>) -> impl Fn(&Request) -> Response {
    analyzer_instance(log, mode, Arc::new(AtomicU64::new(0)))
}

/// [`analyzer`] answering with the process instance id `instance` holds.
fn analyzer_instance(
    log: Arc<Mutex<Vec<Upload>>>,
    mode: Arc<AtomicU8>,
    instance: Arc<AtomicU64>,
) -> impl Fn(&Request) -> Response {
    move |req| {
        if req.path != "/api/v1/results"
            || req.header("Content-Type") != Some(rocemesh_proto::batch::CONTENT_TYPE)
        {
            return Response::json(
                404,
                ErrorBody {
                    error: "wrong route or type".into(),
                },
            );
        }
        let Ok(b) = decode_batch(&req.body) else {
            return Response::json(
                400,
                ErrorBody {
                    error: "undecodable batch".into(),
                },
            );
        };
        let status = match mode.load(SeqCst) {
            0 => 503,
            1 => 200,
            _ => 400,
        };
        let ok = b.records().filter(|r| r.status == ProbeStatus::Ok).count();
        log.lock().unwrap().push(Upload {
            header: b.header,
            records: b.len(),
            ok,
            paths: b.paths.clone(),
            status,
        });
        match status {
            200 => Response::json(
                200,
                UploadAck {
                    accepted: b.len() as u64,
                    dropped: 0,
                    duplicate: false,
                    instance: instance.load(SeqCst),
                },
            ),
            400 => Response::json(
                400,
                ErrorBody {
                    error: "refused for the test".into(),
                },
            ),
            s => Response::empty(s),
        }
    }
}

fn config(controller_url: String, ip: &str, port: u16) -> AgentConfig {
    let mut cfg = AgentConfig::new(
        controller_url,
        vec![RnicConfig::parse(&format!("r1={ip},tor=tor-a,rail=2")).unwrap()],
    );
    cfg.host = "test-host".into();
    cfg.port = port;
    cfg.dscp = Some(26);
    // These tests time uploads around shutdown; the service tracer (tested in service.rs)
    // would add its start-up time to the shutdown.
    cfg.service_tracing = ServiceTracing::Off;
    cfg
}

#[test]
fn registers_polls_with_etag_and_uploads_to_the_controller_url() {
    let state = Arc::new(Mutex::new(Controller::default()));
    let uploads = Arc::new(Mutex::new(Vec::new()));
    let ctl = controller(state.clone(), None, 100.0);
    let ana = analyzer(uploads.clone(), Arc::new(AtomicU8::new(1)));
    // One server plays both roles: with no analyzer URL anywhere, results go to the controller.
    let url = serve(move |req| {
        if req.path == "/api/v1/results" {
            ana(req)
        } else {
            ctl(req)
        }
    });
    let agent = start(config(url, "127.0.7.10", 47_941)).unwrap();
    let both_paths = |ups: &[Upload]| {
        let paths = ups.iter().flat_map(|u| &u.paths);
        let acks: Vec<bool> = paths.map(|p| p.ack_direction).collect();
        acks.contains(&false) && acks.contains(&true)
    };
    wait_for(
        "re-registration, ETag polls, probes, uploads and both traced paths",
        || {
            let ups = uploads.lock().unwrap();
            state.lock().unwrap().not_modified >= 3
                && agent.stats().probes_sent >= 80
                && ups.len() >= 3
                && both_paths(&ups)
                && ups.iter().map(|u| u.ok).sum::<usize>() >= 80
        },
    );
    let stats = agent.stats();
    assert_eq!(agent.host_id(), Some(HOST_ID));
    {
        let st = state.lock().unwrap();
        assert_eq!(
            st.registrations.len(),
            2,
            "409 must trigger a new registration"
        );
        let r = &st.registrations[0];
        assert_eq!((r.host.as_str(), r.epoch), ("test-host", agent.epoch()));
        let n = &r.rnics[0];
        assert_eq!(
            (n.ifname.as_str(), n.ip.to_string().as_str(), n.port),
            ("r1", "127.0.7.10", 47_941)
        );
        assert_eq!((n.tor.as_deref(), n.rail), (Some("tor-a"), Some(2)));
        assert!(n.qpn > 0 && n.qpn <= 0xff_ffff);
        assert!(
            st.not_modified >= 3,
            "ETag polling: {} 304s",
            st.not_modified
        );
        assert_eq!(st.bad_queries, 0);
    }
    assert_eq!((stats.registrations, stats.pinglist_updates), (2, 1));
    assert_eq!(stats.pinglist_version.as_deref(), Some("v1"));
    assert!(stats.probes_sent >= 80, "{stats:?}");
    let before_shutdown = uploads.lock().unwrap().len();
    agent.shutdown().unwrap();
    let ups = uploads.lock().unwrap().clone();
    // One last upload at stop (a periodic one may have been under way when it came).
    assert!(
        before_shutdown >= 3 && (1..=2).contains(&(ups.len() - before_shutdown)),
        "{} then {}",
        before_shutdown,
        ups.len()
    );
    for (i, u) in ups.iter().enumerate() {
        assert_eq!(
            (u.header.host_id, u.header.batch_seq, u.header.dropped),
            (HOST_ID, i as u64 + 1, 0)
        );
    }
    assert!(ups.iter().all(|u| u.header.epoch == ups[0].header.epoch));
    let ok: usize = ups.iter().map(|u| u.ok).sum();
    assert!(ok >= 80, "{ok} OK results uploaded");
    // The RNIC probes itself: its probe 5-tuple and the ACK 5-tuple learned from answering
    // are traced and ride the batches (loopback has no router, so never "reached").
    let paths: Vec<&TracedPath> = ups.iter().flat_map(|u| &u.paths).collect();
    for ack in [false, true] {
        let p = paths
            .iter()
            .find(|p| p.ack_direction == ack)
            .unwrap_or_else(|| panic!("ack={ack}: {paths:?}"));
        assert_eq!(
            (p.src.to_string(), p.dst.to_string(), p.src_port, p.dst_port),
            ("127.0.7.10".into(), "127.0.7.10".into(), 50_400, 47_941)
        );
        assert!(!p.reached && p.hops.iter().all(Option::is_none), "{p:?}");
    }
}

#[test]
fn analyzer_outage_keeps_probing_bounds_the_buffer_and_retries_the_same_batch() {
    let state = Arc::new(Mutex::new(Controller::default()));
    let uploads = Arc::new(Mutex::new(Vec::new()));
    let mode = Arc::new(AtomicU8::new(0));
    let ana_url = serve(analyzer(uploads.clone(), mode.clone()));
    // The controller names a dead analyzer; the configured URL overrides it.
    let ctl_url = serve(controller(state, Some("http://127.0.0.1:9".into()), 200.0));
    let mut cfg = config(ctl_url, "127.0.7.11", 47_942);
    cfg.analyzer_url = Some(ana_url);
    cfg.buffer_capacity = 40;
    let agent = start(cfg).unwrap();
    wait_for("failed uploads, a full buffer and probing", || {
        let s = agent.stats();
        s.upload_failures >= 2 && s.records_dropped > 0 && s.probes_sent >= 100
    });
    let s = agent.stats();
    assert!(s.upload_failures >= 2 && s.batches_uploaded == 0, "{s:?}");
    assert!(s.buffer_len <= 40 && s.records_dropped > 0, "{s:?}");
    let sent_during_outage = s.probes_sent;
    assert!(sent_during_outage >= 100, "probing continues: {s:?}");
    {
        let ups = uploads.lock().unwrap();
        assert!(
            ups.iter()
                .all(|u| u.status == 503 && u.header.batch_seq == 1),
            "{ups:?}"
        );
    }
    // Uploads back off (with jitter) while they fail: wait for the answers, not a time.
    let answered = |status: u16| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !uploads.lock().unwrap().iter().any(|u| u.status == status) {
            assert!(
                std::time::Instant::now() < deadline,
                "no upload answered {status}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    mode.store(1, SeqCst);
    answered(200);
    // Let accepted batches carry the traced paths before refusing again.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let taken: usize = uploads
            .lock()
            .unwrap()
            .iter()
            .filter(|u| u.status == 200)
            .map(|u| u.paths.len())
            .sum();
        if taken >= 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no paths accepted");
        std::thread::sleep(Duration::from_millis(20));
    }
    mode.store(2, SeqCst);
    answered(400);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while agent.stats().batches_rejected == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the 400 was not counted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = agent.stats();
    agent.shutdown().unwrap();
    let ups = uploads.lock().unwrap().clone();
    let first_ok = ups
        .iter()
        .position(|u| u.status == 200)
        .expect("an accepted upload");
    assert_eq!(
        ups[first_ok].header.batch_seq, 1,
        "the retried batch keeps its number"
    );
    assert!(ups[first_ok].header.dropped > 0 && ups[first_ok].records <= 40);
    // After that every attempt gets a new number, accepted or refused alike.
    for w in ups[first_ok..].windows(2) {
        assert_eq!(w[1].header.batch_seq, w[0].header.batch_seq + 1, "{ups:?}");
    }
    assert!(s.batches_uploaded >= 1 && s.batches_rejected >= 1, "{s:?}");
    // Paths of a failed batch are kept for its retry, and every path is counted once accepted.
    let retried: Vec<usize> = ups
        .iter()
        .filter(|u| u.header.batch_seq == 1)
        .map(|u| u.paths.len())
        .collect();
    assert!(retried.windows(2).all(|w| w[0] == w[1]), "{retried:?}");
    let accepted_paths: usize = ups
        .iter()
        .filter(|u| u.status == 200)
        .map(|u| u.paths.len())
        .sum();
    assert!(
        accepted_paths >= 2 && s.paths_uploaded == accepted_paths as u64,
        "{accepted_paths} {s:?}"
    );
    assert!(s.probes_sent > sent_during_outage);
}

#[test]
fn uploads_follow_the_analyzer_a_pinglist_answer_names() {
    let state = Arc::new(Mutex::new(Controller::default()));
    let (old_log, new_log) = (
        Arc::new(Mutex::new(Vec::new())),
        Arc::new(Mutex::new(Vec::new())),
    );
    let old = serve(analyzer(old_log.clone(), Arc::new(AtomicU8::new(1))));
    let new = serve(analyzer(new_log.clone(), Arc::new(AtomicU8::new(1))));
    let ctl_url = serve(controller(state.clone(), Some(old.clone()), 100.0));
    let agent = start(config(ctl_url, "127.0.7.12", 47_944)).unwrap();
    wait_for("an upload at the registered analyzer", || {
        !old_log.lock().unwrap().is_empty()
    });
    // Garbage in the header is ignored: the agent stays where it is.
    state.lock().unwrap().analyzer_header = Some("ftp://nowhere".into());
    std::thread::sleep(Duration::from_millis(500));
    assert!(new_log.lock().unwrap().is_empty());
    // The shard moved: the next poll names the new owner, and uploads go there.
    state.lock().unwrap().analyzer_header = Some(format!("{new}/"));
    wait_for("an upload at the new analyzer", || {
        !new_log.lock().unwrap().is_empty()
    });
    let before = old_log.lock().unwrap().len();
    wait_for("three uploads at the new analyzer", || {
        new_log.lock().unwrap().len() >= 3
    });
    agent.shutdown().unwrap();
    assert_eq!(
        old_log.lock().unwrap().len(),
        before,
        "nothing more to the old analyzer"
    );
    let moved = new_log.lock().unwrap().clone();
    assert!(
        moved.len() >= 3,
        "{} uploads at the new analyzer",
        moved.len()
    );
    // One batch sequence across the move: nothing lost or repeated.
    let mut seqs: Vec<u64> = old_log
        .lock()
        .unwrap()
        .iter()
        .map(|u| u.header.batch_seq)
        .collect();
    seqs.extend(moved.iter().map(|u| u.header.batch_seq));
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert_eq!(
        state.lock().unwrap().registrations.len(),
        2,
        "a move is no re-registration"
    );
}

#[test]
fn a_fresh_analyzer_instance_gets_every_traced_path_again() {
    let state = Arc::new(Mutex::new(Controller::default()));
    let uploads = Arc::new(Mutex::new(Vec::new()));
    let instance = Arc::new(AtomicU64::new(7));
    let ana = serve(analyzer_instance(
        uploads.clone(),
        Arc::new(AtomicU8::new(1)),
        instance.clone(),
    ));
    let ctl_url = serve(controller(state, Some(ana), 100.0));
    let agent = start(config(ctl_url, "127.0.7.13", 47_945)).unwrap();
    let with_paths = |ups: &[Upload]| ups.iter().filter(|u| !u.paths.is_empty()).count();
    let traced = |ups: &[Upload]| ups.iter().map(|u| u.paths.len()).sum::<usize>();
    wait_for("both traced paths uploaded", || {
        traced(&uploads.lock().unwrap()) >= 2
    });
    // Past the traces' own settling: an upload or two more, still no third path.
    let seen = uploads.lock().unwrap().len();
    wait_for("two more uploads", || {
        uploads.lock().unwrap().len() >= seen + 2
    });
    let first: Vec<TracedPath> = uploads
        .lock()
        .unwrap()
        .iter()
        .flat_map(|u| u.paths.clone())
        .collect();
    assert_eq!(
        first.len(),
        2,
        "probe and ACK 5-tuples traced once: {first:?}"
    );
    // Same analyzer: nothing is traced again before the refresh period (60 s).
    let seen = uploads.lock().unwrap().len();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(with_paths(&uploads.lock().unwrap()[seen..]), 0);
    // The analyzer restarted: the next uploads carry both paths again, as traced then.
    instance.store(8, SeqCst);
    let changed = uploads.lock().unwrap().len();
    wait_for("both paths re-sent", || {
        traced(&uploads.lock().unwrap()[changed..]) >= 2
    });
    agent.shutdown().unwrap();
    let ups = uploads.lock().unwrap();
    let mut again: Vec<TracedPath> = ups[changed..]
        .iter()
        .flat_map(|u| u.paths.clone())
        .collect();
    let mut first = first;
    let order = |p: &TracedPath| (p.ack_direction, p.traced_at_unix_ns);
    again.sort_by_key(order);
    first.sort_by_key(order);
    assert_eq!(again, first, "the cached paths, resent once");
}

#[test]
fn an_ip_not_on_this_host_is_a_clear_error() {
    let cfg = config("http://127.0.0.1:9".into(), "192.0.2.55", 47_943);
    let err = format!("{:#}", start(cfg).err().unwrap());
    assert!(
        err.contains("RNIC r1") && err.contains("192.0.2.55") && err.contains("not assigned"),
        "{err}"
    );
}

#[test]
fn a_responder_only_agent_answers_but_sends_no_probes() {
    let state = Arc::new(Mutex::new(Controller::default()));
    let uploads = Arc::new(Mutex::new(Vec::new()));
    let ctl = controller(state.clone(), None, 100.0);
    let ana = analyzer(uploads, Arc::new(AtomicU8::new(1)));
    let url = serve(move |req| {
        if req.path == "/api/v1/results" {
            ana(req)
        } else {
            ctl(req)
        }
    });
    let port = 47_945;
    let mut cfg = config(url, "127.0.7.20", port);
    cfg.probing = false;
    let agent = start(cfg).unwrap();
    // The pinglist (the RNIC probing itself at 100/s) arrives but is not acted on.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while agent.stats().pinglist_updates == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let s = agent.stats();
    assert_eq!((s.pinglist_updates, s.probes_sent), (1, 0), "{s:?}");
    // It still answers: a probe from a peer gets its ACK1 back at the peer's main port.
    let qpn = state.lock().unwrap().registrations.last().unwrap().rnics[0].qpn;
    let peer = std::net::UdpSocket::bind(("127.0.7.21", port)).unwrap();
    peer.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let probe = rocemesh_proto::Packet::probe(ProbeClass::TorMesh, 1, 5, 0x55, RNIC_ID, qpn, 9);
    let mut buf = [0u8; 256];
    let ack = (0..50).find_map(|_| {
        peer.send_to(&probe.encode(), ("127.0.7.20", port)).unwrap();
        let (n, _) = peer.recv_from(&mut buf).ok()?;
        rocemesh_proto::Packet::decode(&buf[..n]).ok()
    });
    let ack = ack.expect("no ACK from the responder-only agent");
    assert_eq!(
        (ack.kind, ack.seq, ack.responder_qpn),
        (rocemesh_proto::PacketKind::Ack1, 1, qpn)
    );
    assert_eq!(agent.stats().probes_sent, 0);
    agent.shutdown().unwrap();
}
