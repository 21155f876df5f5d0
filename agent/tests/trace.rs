//! Path tracing across a real routed fabric (root only): two agents' engines and tracers in
//! the host namespaces of a 2-ToR x 2-spine netns fabric (`rocemesh_testbed`, addresses from
//! 198.18.0.0/15, routers with ip_forward, icmp_ratelimit=0 and
//! icmp_errors_use_inbound_ifaddr=1). The traced hops must be exactly the router ingress
//! addresses of the ECMP path the kernel picks for each probe and ACK 5-tuple.

use rocemesh_agent::Counters;
use rocemesh_agent::{Command, EngineHandle, EngineIdentity};
use rocemesh_agent::{Marks, ResultBuffer};
use rocemesh_agent::{TracerHandle, TracerOptions};
use rocemesh_agent::{UdpOptions, UdpTransport};
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::{PingTarget, ProbeList};
use rocemesh_proto::batch::{BatchHeader, decode_batch};
use rocemesh_proto::path::TracedPath;
use rocemesh_testbed::{Fabric, FabricSpec, FiveTuple, netns};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PREFIX: &str = "agtrace";
const PORT: u16 = 4792;

/// Tears the fabric down even when an assertion fails.
struct FabricGuard(Fabric);

impl Drop for FabricGuard {
    fn drop(&mut self) {
        let _ = Fabric::down(PREFIX);
    }
}

struct Agent {
    ip: Ipv4Addr,
    qpn: u32,
    engine: EngineHandle,
    tracer: TracerHandle,
    counters: Arc<Counters>,
    results: Arc<ResultBuffer>,
}

/// An engine plus a tracer, both living in `ns` (their sockets are created there).
fn agent(ns: &str, ip: Ipv4Addr, qpn: u32, rnic_id: u32) -> Agent {
    netns::in_netns(ns, move || {
        let counters = Arc::new(Counters::default());
        let results = Arc::new(ResultBuffer::new(100_000, counters.clone()));
        let opts = UdpOptions {
            ip: ip.into(),
            port: PORT,
            dscp: None,
            hardware_timestamps_on: None,
            max_send_sockets: 16,
        };
        let transport = UdpTransport::open(opts, counters.clone()).unwrap();
        let topts = TracerOptions {
            max_hops: 8,
            pps: 200.0,
            refresh: Duration::from_secs(60),
            dscp: None,
        };
        let tracer = TracerHandle::spawn(topts, counters.clone(), results.clone()).unwrap();
        let id = EngineIdentity {
            name: format!("rnic-{ip}"),
            qpn,
            token: 7,
            port: PORT,
            max_outstanding: 1024,
            trace: Some(tracer.feed()),
            service_timeouts: None,
        };
        let engine = EngineHandle::spawn(id, transport, counters.clone(), results.clone()).unwrap();
        engine.send(Command::RnicId(rnic_id)).unwrap();
        Agent {
            ip,
            qpn,
            engine,
            tracer,
            counters,
            results,
        }
    })
    .unwrap()
}

fn paths(a: &Agent) -> Vec<TracedPath> {
    let h = BatchHeader {
        host_id: 0,
        epoch: 0,
        batch_seq: 0,
        dropped: 0,
    };
    decode_batch(&a.results.encode_front(h, Marks::ALL, 0).body)
        .unwrap()
        .paths
}

/// Router ingress addresses of src -> dst (one RNIC per host, hosts on different ToRs)
/// along the spine the source ToR's kernel picks for this very 5-tuple.
fn expected_hops(
    f: &Fabric,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
) -> Vec<Option<IpAddr>> {
    let t = f.topology();
    let (_, s) = t.rnic_by_ip(src).unwrap();
    let (_, d) = t.rnic_by_ip(dst).unwrap();
    let spine = f
        .spine_for(&FiveTuple {
            src: src.into(),
            dst: dst.into(),
            sport,
            dport,
        })
        .unwrap()
        .expect("crosses a spine");
    let first = t.link(&s.link).unwrap().b.ip;
    let up = t.link(&format!("t{}-{spine}", s.tor)).unwrap().b.ip;
    let down = t.link(&format!("t{}-{spine}", d.tor)).unwrap().a.ip;
    vec![Some(first.into()), Some(up.into()), Some(down.into())]
}

#[test]
fn probe_and_ack_paths_follow_ecmp_and_timeouts_retrace_at_once() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipping: building a netns fabric needs root");
        return;
    }
    let fabric = FabricGuard(
        Fabric::up(&FabricSpec {
            prefix: PREFIX.into(),
            ..FabricSpec::default()
        })
        .expect("fabric up"),
    );
    let f = &fabric.0;
    let topo = f.topology();
    let (ha, ra) = topo.rnic("h0r0").unwrap();
    let (hb, rb) = topo.rnic("h2r0").unwrap();
    let a = agent(&ha.netns, ra.ip, 0x11, 1);
    let b = agent(&hb.netns, rb.ip, 0x22, 2);

    // Two source ports hashed onto different spines, so "hops equal the ECMP path" is tested
    // for both spines, and a third tuple probing a stale QPN (every probe times out).
    let spine_of = |sp| {
        f.spine_for(&FiveTuple {
            src: a.ip.into(),
            dst: b.ip.into(),
            sport: sp,
            dport: PORT,
        })
        .unwrap()
    };
    let p0 = 50_000;
    let p1 = (50_001..50_200)
        .find(|p| spine_of(*p) != spine_of(p0))
        .expect("ECMP spreads ports");
    let stale = p1 + 1;
    let target = |sp, qpn| PingTarget {
        rnic_id: 2,
        ip: b.ip.into(),
        port: PORT,
        qpn,
        src_port: sp,
    };
    let lists = vec![
        ProbeList {
            class: ProbeClass::InterTor,
            pps: 40.0,
            entries: vec![target(p0, b.qpn), target(p1, b.qpn)],
        },
        ProbeList {
            class: ProbeClass::InterTor,
            pps: 20.0,
            entries: vec![target(stale, 0x999)],
        },
    ];
    a.engine
        .send(Command::Lists(lists, Duration::from_millis(200)))
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    let done = |pa: &[TracedPath], pb: &[TracedPath]| {
        let stale_traces = pa.iter().filter(|p| p.src_port == stale).count();
        pa.iter().filter(|p| p.src_port != stale).count() >= 2 && pb.len() >= 2 && stale_traces >= 2
    };
    let (mut pa, mut pb) = (Vec::new(), Vec::new());
    while Instant::now() < deadline && !done(&pa, &pb) {
        std::thread::sleep(Duration::from_millis(200));
        (pa, pb) = (paths(&a), paths(&b));
    }

    // Probe direction, traced by the prober: healthy tuples once each (refresh is 60 s).
    for sp in [p0, p1] {
        let got: Vec<&TracedPath> = pa.iter().filter(|p| p.src_port == sp).collect();
        assert_eq!(got.len(), 1, "{sp}: {pa:?}");
        let p = got[0];
        assert_eq!(
            (p.src, p.dst, p.dst_port, p.ack_direction),
            (IpAddr::from(a.ip), IpAddr::from(b.ip), PORT, false)
        );
        assert_eq!(
            p.hops,
            expected_hops(f, a.ip, b.ip, sp, PORT),
            "probe path of src port {sp}"
        );
        assert!(p.reached, "{p:?}");
    }
    // ACK direction, traced by the responder from the probes it answered.
    let mut ack_ports: Vec<u16> = pb.iter().map(|p| p.src_port).collect();
    ack_ports.sort();
    assert_eq!(ack_ports, vec![p0, p1], "{pb:?}");
    for p in &pb {
        assert_eq!(
            (p.src, p.dst, p.dst_port, p.ack_direction),
            (IpAddr::from(b.ip), IpAddr::from(a.ip), PORT, true)
        );
        assert_eq!(
            p.hops,
            expected_hops(f, b.ip, a.ip, p.src_port, PORT),
            "ACK path of src port {}",
            p.src_port
        );
        assert!(p.reached, "{p:?}");
    }
    // The stale tuple: traced when it appeared and again ahead of the queue after its
    // timeouts, never claiming arrival while its probes time out.
    let stale_paths: Vec<&TracedPath> = pa.iter().filter(|p| p.src_port == stale).collect();
    assert!(stale_paths.len() >= 2, "{stale_paths:?}");
    for p in &stale_paths {
        assert!(!p.reached, "{p:?}");
        assert_eq!(
            p.hops[..3],
            expected_hops(f, a.ip, b.ip, stale, PORT)[..],
            "{p:?}"
        );
    }
    // Every TRACE that passed the last router reached the other agent and was counted there.
    let (sa, sb) = (a.counters.snapshot(0), b.counters.snapshot(0));
    assert!(sb.trace_received >= 2 * 2 + 2, "{sb:?}");
    assert!(sa.trace_received >= 2 * 2, "{sa:?}");
    for s in [&sa, &sb] {
        assert!(s.icmp_answers >= 3 * 2, "{s:?}");
        assert!(s.trace_packets_sent >= s.icmp_answers, "{s:?}");
        assert_eq!(s.trace_drops, 0, "{s:?}");
    }
    assert!(
        sa.traces_started >= 4 && sb.traces_started >= 2,
        "{sa:?} {sb:?}"
    );
    for x in [a, b] {
        x.engine.stop().unwrap();
        x.tracer.stop().unwrap();
    }
}
