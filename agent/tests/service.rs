//! Service tracing end to end (root only): two whole agents (`start()` inside the host
//! namespaces h0 and h2 of a netns fabric), a controller/analyzer stand-in in each
//! namespace sharing one registry, the real eBPF user route on the libibverbs stand-in of
//! `ebpf/tests/fixtures`, and a service process in h0 holding an RC connection to h2's
//! RNIC. h0 must probe the flow's own 5-tuple (class Service) until the QP is destroyed;
//! h2 (another namespace) must ignore the process.

mod common;

use common::{Request, Response, serve};
use rocemesh_agent::{AgentConfig, AgentHandle, RnicConfig, ServiceTracing, TransportKind, start};
use rocemesh_proto::api::*;
use rocemesh_proto::batch::decode_batch;
use rocemesh_proto::{ProbeClass, ProbeResult, ProbeStatus};
use rocemesh_testbed::{Fabric, FabricSpec, netns};
use rocemesh_verbs::flow_label::flow_label_to_udp_sport;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PREFIX: &str = "agsvc";
const PORT: u16 = 4792;
const FLOW_LABEL: u32 = 0x2A5C3;

/// Tears the fabric down even when an assertion fails.
struct FabricGuard(Fabric);

impl Drop for FabricGuard {
    fn drop(&mut self) {
        let _ = Fabric::down(PREFIX);
    }
}

/// Kills the service process if the test fails before it exits.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Registry and uploads shared by the stand-ins of both namespaces.
#[derive(Default)]
struct Cluster {
    hosts: HashMap<String, u32>,
    rnics: HashMap<IpAddr, RnicInfo>,
    /// (uploading host id, record).
    results: Vec<(u32, ProbeResult)>,
}

fn stand_in(cluster: Arc<Mutex<Cluster>>) -> impl Fn(&Request) -> Response {
    move |req| {
        let mut c = cluster.lock().unwrap();
        let path = req.path.as_str();
        if req.method == "POST" && path == "/api/v1/agents/register" {
            let Ok(r) = serde_json::from_slice::<RegisterRequest>(&req.body) else {
                return Response::empty(400);
            };
            let next = c.hosts.len() as u32 + 1;
            let host_id = *c.hosts.entry(r.host.clone()).or_insert(next);
            let reply = common::register_reply(&r, host_id, host_id, None, 200, 200);
            for i in &reply.rnics {
                c.rnics.insert(i.ip, i.clone());
            }
            return Response::json(200, reply);
        }
        if req.method == "GET"
            && let Some(rest) = path.strip_prefix("/api/v1/pinglists/")
        {
            let host_id = rest
                .split('?')
                .next()
                .and_then(|h| h.parse().ok())
                .unwrap_or(0);
            let mut r = Response::json(
                200,
                Pinglist {
                    host_id,
                    version: "v0".into(),
                    timeout_ms: 300,
                    rnics: Vec::new(),
                    probe_auth: None,
                },
            );
            r.headers.push(("ETag".into(), "\"v0\"".into()));
            return r;
        }
        if req.method == "GET"
            && let Some(ip) = path.strip_prefix("/api/v1/rnics/by-ip/")
        {
            return match ip
                .parse()
                .ok()
                .and_then(|ip: IpAddr| c.rnics.get(&ip).cloned())
            {
                Some(info) => Response::json(200, info),
                None => Response::empty(404),
            };
        }
        if req.method == "POST"
            && path == "/api/v1/results"
            && req.header("Content-Type") == Some(rocemesh_proto::batch::CONTENT_TYPE)
        {
            let Ok(b) = decode_batch(&req.body) else {
                return Response::empty(400);
            };
            let host = b.header.host_id;
            let n = b.len() as u64;
            c.results.extend(b.records().map(|r| (host, r)));
            return Response::json(
                200,
                UploadAck {
                    accepted: n,
                    dropped: 0,
                    duplicate: false,
                    instance: 0,
                },
            );
        }
        Response::empty(404)
    }
}

fn build(dir: &Path) -> (PathBuf, PathBuf) {
    let ebpf_fx = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../ebpf/tests/fixtures"
    ));
    let own_fx = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"));
    let lib = dir.join("libibverbs.so.1");
    let app = dir.join("service_app");
    let cc = |args: &[&str]| {
        let out = Command::new("cc").args(args).output().expect("cc");
        assert!(
            out.status.success(),
            "cc {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    cc(&[
        "-shared",
        "-fPIC",
        "-O0",
        "-Wl,-soname,libibverbs.so.1",
        &format!(
            "-Wl,--version-script={}",
            ebpf_fx.join("fakeverbs.map").display()
        ),
        ebpf_fx.join("fakeverbs.c").to_str().unwrap(),
        "-o",
        lib.to_str().unwrap(),
    ]);
    cc(&[
        own_fx.join("service_app.c").to_str().unwrap(),
        "-o",
        app.to_str().unwrap(),
        &format!("-L{}", dir.display()),
        "-l:libibverbs.so.1",
        &format!("-Wl,-rpath,{}", dir.display()),
    ]);
    (lib, app)
}

/// A whole agent started inside `ns`, talking to a stand-in served in the same namespace.
fn agent(
    ns: &str,
    host: &str,
    ip: IpAddr,
    lib: &Path,
    cluster: Arc<Mutex<Cluster>>,
) -> AgentHandle {
    let (host, lib) = (host.to_string(), lib.to_path_buf());
    netns::in_netns(ns, move || {
        let url = serve(stand_in(cluster));
        let mut cfg = AgentConfig::new(url, vec![RnicConfig::parse(&format!("r0={ip}")).unwrap()]);
        cfg.host = host;
        cfg.port = PORT;
        cfg.trace_enabled = false;
        cfg.transport = TransportKind::Auto;
        cfg.service_tracing = ServiceTracing::User;
        cfg.service_libraries = vec![lib];
        start(cfg).expect("agent starts")
    })
    .unwrap()
}

fn read_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.trim().to_string()
}

#[test]
fn service_flow_is_probed_on_its_own_5_tuple_until_destroyed() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipping: a netns fabric and BPF uprobes need root");
        return;
    }
    let dir = std::env::temp_dir().join(format!("rocemesh-agent-svc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (lib, app) = build(&dir);
    let fabric = FabricGuard(
        Fabric::up(&FabricSpec {
            prefix: PREFIX.into(),
            ..FabricSpec::default()
        })
        .expect("fabric up"),
    );
    let topo = fabric.0.topology();
    let (h0, r0) = topo.rnic("h0r0").unwrap();
    let (h2, r2) = topo.rnic("h2r0").unwrap();
    let (ip0, ip2) = (IpAddr::from(r0.ip), IpAddr::from(r2.ip));
    let cluster = Arc::new(Mutex::new(Cluster::default()));
    let a0 = agent(&h0.netns, "h0", ip0, &lib, cluster.clone());
    let a2 = agent(&h2.netns, "h2", ip2, &lib, cluster.clone());
    for a in [&a0, &a2] {
        // No RDMA device here: auto means udp, and it says so.
        assert_eq!(a.stats().transports.get("r0"), Some(&"udp"));
    }
    common::wait_for("registration and the tracers", || {
        [&a0, &a2]
            .iter()
            .all(|a| a.host_id().is_some() && a.stats().service_route == "user")
    });
    // The agents register concurrently, so either may be host 1: take the ids assigned.
    let (h0_info, h2_info) = {
        let c = cluster.lock().unwrap();
        (c.rnics[&ip0].clone(), c.rnics[&ip2].clone())
    };
    let (h0_id, h0_rnic) = (h0_info.host_id, h0_info.id);

    let mut child = ChildGuard(
        netns::command(&h0.netns, app.to_str().unwrap())
            .args([
                &r2.ip.to_string(),
                "0x4242",
                &format!("{FLOW_LABEL:#x}"),
                "0x777",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdin = child.0.stdin.take().unwrap();
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    assert_eq!(read_line(&mut out), "rtr");

    let sport = flow_label_to_udp_sport(FLOW_LABEL);
    let service_ok = |c: &Cluster| {
        c.results
            .iter()
            .filter(|(h, r)| {
                *h == h0_id && r.class == ProbeClass::Service && r.status == ProbeStatus::Ok
            })
            .count()
    };
    common::wait_for("answered service probes uploaded", || {
        service_ok(&cluster.lock().unwrap()) >= 50
    });
    {
        let c = cluster.lock().unwrap();
        let service: Vec<&ProbeResult> = c
            .results
            .iter()
            .filter(|(_, r)| r.class == ProbeClass::Service)
            .map(|(h, r)| {
                assert_eq!(*h, h0_id, "only h0 probes the flow: {r:?}");
                r
            })
            .collect();
        for r in &service {
            assert_eq!(
                (
                    r.prober_rnic,
                    r.target_rnic,
                    r.target_qpn,
                    r.src_port,
                    r.dst_port
                ),
                (h0_rnic, h2_info.id, h2_info.qpn, sport, PORT),
                "{r:?}"
            );
        }
        let ok = service
            .iter()
            .filter(|r| r.status == ProbeStatus::Ok)
            .count();
        assert!(ok * 10 >= service.len() * 9, "{ok} of {} ok", service.len());
    }
    let s0 = a0.stats();
    assert_eq!(s0.service_flows, 1, "{s0:?}");
    assert!(s0.service_events >= 1);
    let s2 = a2.stats();
    assert_eq!(
        (s2.service_flows, s2.service_probes),
        (0, 0),
        "another namespace: {s2:?}"
    );
    assert!(
        s2.service_events >= 1,
        "h2 saw the event and ignored it: {s2:?}"
    );
    assert!(s2.acks_sent > 0, "h2 answered: {s2:?}");
    // Every 10 ms: ~100 probes/s on the flow (over 3 s, so a busy machine's late
    // wake-ups do not decide it).
    let (p1, t1) = (a0.stats().service_probes, Instant::now());
    std::thread::sleep(Duration::from_millis(3000));
    let rate = (a0.stats().service_probes - p1) as f64 / t1.elapsed().as_secs_f64();
    assert!((60.0..=140.0).contains(&rate), "service probes at {rate}/s");

    // Destroy the QP (the process lives on): the probes stop within a second.
    writeln!(stdin, "go").unwrap();
    assert_eq!(read_line(&mut out), "destroyed");
    std::thread::sleep(Duration::from_secs(1));
    let after = a0.stats();
    std::thread::sleep(Duration::from_millis(500));
    let later = a0.stats();
    assert_eq!(
        later.service_probes, after.service_probes,
        "still probing after destroy"
    );
    assert_eq!(later.service_flows, 0);

    writeln!(stdin, "go").unwrap();
    drop(stdin);
    assert!(child.0.wait().unwrap().success());
    a0.shutdown().unwrap();
    a2.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
