//! Two engines on 127.0.7.x probing each other over real UDP sockets, without a controller.

#[allow(dead_code)]
mod common;

use rocemesh_agent::Counters;
use rocemesh_agent::{Command, EngineHandle, EngineIdentity};
use rocemesh_agent::{Marks, ResultBuffer};
use rocemesh_agent::{UdpOptions, UdpTransport};
use rocemesh_proto::api::{PingTarget, ProbeList};
use rocemesh_proto::batch::{BatchHeader, decode_batch};
use rocemesh_proto::{ProbeClass, ProbeResult, ProbeStatus, TimestampSource};
use std::collections::HashMap;
use std::net::{IpAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

struct Node {
    ip: IpAddr,
    qpn: u32,
    engine: EngineHandle,
    counters: Arc<Counters>,
    results: Arc<ResultBuffer>,
}

fn node(ip: &str, port: u16, qpn: u32, rnic_id: u32) -> Node {
    let ip: IpAddr = ip.parse().unwrap();
    let counters = Arc::new(Counters::default());
    let results = Arc::new(ResultBuffer::new(100_000, counters.clone()));
    let opts = UdpOptions {
        ip,
        port,
        dscp: None,
        hardware_timestamps_on: None,
        max_send_sockets: 16,
    };
    let transport = UdpTransport::open(opts, counters.clone()).unwrap();
    let id = EngineIdentity {
        name: format!("test-{ip}"),
        qpn,
        token: rand_token(qpn),
        port,
        max_outstanding: 1024,
        trace: None,
        service_timeouts: None,
    };
    let engine = EngineHandle::spawn(id, transport, counters.clone(), results.clone()).unwrap();
    engine.send(Command::RnicId(rnic_id)).unwrap();
    Node {
        ip,
        qpn,
        engine,
        counters,
        results,
    }
}

fn rand_token(seed: u32) -> u64 {
    0x9e37_79b9_7f4a_7c15u64.wrapping_mul(seed as u64 + 1)
}

fn target(to: &Node, rnic_id: u32, port: u16, qpn: u32, src_port: u16) -> PingTarget {
    PingTarget {
        rnic_id,
        ip: to.ip,
        port,
        qpn,
        src_port,
    }
}

fn results(buffer: &ResultBuffer) -> Vec<ProbeResult> {
    let h = BatchHeader {
        host_id: 0,
        epoch: 0,
        batch_seq: 0,
        dropped: 0,
    };
    let body = buffer.encode_front(h, Marks::ALL, usize::MAX).body;
    decode_batch(&body).unwrap().records().collect()
}

#[test]
fn two_rnics_probe_each_other_with_software_stamps() {
    let port = 47_931;
    let a = node("127.0.7.1", port, 0x11, 1);
    let b = node("127.0.7.2", port, 0x22, 2);
    let list = |to: &Node, id, base: u16| ProbeList {
        class: ProbeClass::TorMesh,
        pps: 100.0,
        entries: vec![
            target(to, id, port, to.qpn, base),
            target(to, id, port, to.qpn, base + 1),
        ],
    };
    a.engine
        .send(Command::Lists(
            vec![list(&b, 2, 50_100)],
            Duration::from_millis(500),
        ))
        .unwrap();
    b.engine
        .send(Command::Lists(
            vec![list(&a, 1, 50_200)],
            Duration::from_millis(500),
        ))
        .unwrap();
    // The kernel enables RX timestamping through deferred work; until then results are
    // (correctly) flagged App. Every result after the first Software one must be Software.
    let settled = [&a, &b].map(|n| {
        let mut first = 0;
        common::wait_for("a software-stamped result", || {
            let rs = results(&n.results);
            rs.iter()
                .position(|r| r.ts_source == TimestampSource::Software)
                .map(|i| first = i + 1)
                .is_some()
        });
        (first, Instant::now())
    });
    std::thread::sleep(Duration::from_millis(2_000));
    let (ra, rb) = (results(&a.results), results(&b.results));
    for ((n, rs, base), (skip, from)) in [(&a, &ra, 50_100u16), (&b, &rb, 50_200)]
        .into_iter()
        .zip(settled)
    {
        let rs = &rs[skip..];
        let secs = from.elapsed().as_secs_f64();
        let mut per_port: HashMap<u16, usize> = HashMap::new();
        for r in rs {
            assert_eq!(r.status, ProbeStatus::Ok, "{r:?}");
            assert_eq!(r.ts_source, TimestampSource::Software, "{r:?}");
            assert!(
                r.network_rtt_ns > 0 && r.network_rtt_ns < r.app_rtt_ns,
                "{r:?}"
            );
            assert!(
                r.responder_delay_ns > 0 && r.app_rtt_ns < 50_000_000,
                "{r:?}"
            );
            *per_port.entry(r.src_port).or_default() += 1;
        }
        // 50 pps per target over the seconds measured, give or take a few probes in flight
        // at either end (a loaded machine oversleeps; it does not send faster).
        for p in [base, base + 1] {
            let c = per_port.get(&p).copied().unwrap_or(0) as f64;
            assert!(
                c >= 40.0 * secs - 5.0 && c <= 50.0 * secs + 5.0,
                "src port {p}: {c} results in {secs:.2} s"
            );
        }
        assert_eq!(n.counters.unmatched_ack.load(Relaxed), 0);
        assert_eq!(n.counters.stale_qpn.load(Relaxed), 0);
    }
    a.engine.stop().unwrap();
    b.engine.stop().unwrap();
}

#[test]
fn a_stale_qpn_gets_no_answer() {
    let port = 47_932;
    let a = node("127.0.7.3", port, 0x33, 3);
    let b = node("127.0.7.4", port, 0x44, 4);
    let list = ProbeList {
        class: ProbeClass::InterTor,
        pps: 50.0,
        entries: vec![target(&b, 4, port, 0x45, 50_300)],
    };
    a.engine
        .send(Command::Lists(vec![list], Duration::from_millis(200)))
        .unwrap();
    // A stalled thread skips missed slots, so wait for the counts rather than a fixed time.
    common::wait_for("30 timeouts at A and 40 stale probes at B", || {
        results(&a.results).len() >= 30 && b.counters.stale_qpn.load(Relaxed) >= 40
    });
    a.engine.stop().unwrap();
    let rs = results(&a.results);
    assert!(rs.len() >= 30, "{} results", rs.len());
    assert!(rs.iter().all(|r| r.status == ProbeStatus::Timeout
        && r.network_rtt_ns == 0
        && r.target_qpn == 0x45));
    assert!(b.counters.stale_qpn.load(Relaxed) >= 40);
    assert_eq!(b.counters.acks_sent.load(Relaxed), 0);
    b.engine.stop().unwrap();
}

#[test]
fn garbage_is_counted_and_never_answered() {
    let port = 47_933;
    let b = node("127.0.7.6", port, 0x66, 6);
    // ACKs go to the prober's main port, so the fake prober listens there.
    let sock = UdpSocket::bind(("127.0.7.5", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let probe = rocemesh_proto::Packet::probe(ProbeClass::TorMesh, 1, 5, 0x55, 6, 0x66, 9).encode();
    let mut bad_version = probe;
    bad_version[2] = 7;
    let mut bad_kind = probe;
    bad_kind[3] = 9;
    let oversized = [probe.as_slice(), &[0u8; 100]].concat();
    let dest = format!("127.0.7.6:{port}");
    for d in [
        &b"hello world"[..],
        &probe[..20],
        &oversized,
        &bad_version,
        &bad_kind,
        &[],
    ] {
        sock.send_to(d, &dest).unwrap();
    }
    let mut buf = [0u8; 256];
    let err = sock.recv_from(&mut buf).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{err}"
    );
    let s = b.counters.snapshot(0);
    let drops = |r: &str| s.drops_by_reason[r];
    assert_eq!(
        (drops("foreign"), drops("truncated"), drops("oversized")),
        (1, 2, 1)
    );
    assert_eq!((drops("version"), drops("malformed")), (1, 1));
    assert_eq!(s.acks_sent, 0);
    // A valid probe from the same socket IS answered: the silence above was meaningful.
    sock.send_to(&probe, &dest).unwrap();
    let (n, _) = sock.recv_from(&mut buf).unwrap();
    assert_eq!(n, 64);
    b.engine.stop().unwrap();
}

/// Three RNICs on ONE event loop (as in the agent): each probes the next, every probe is
/// answered within the loop's own wake-ups, and stopping one engine leaves the others
/// running (its peer's probes to it then time out).
#[test]
fn engines_sharing_one_loop_probe_each_other_and_stop_independently() {
    use rocemesh_agent::EventLoop;
    let port = 47_941;
    let counters = Arc::new(Counters::default());
    let buffer = Arc::new(ResultBuffer::new(100_000, counters.clone()));
    let mut event_loop = EventLoop::new("test-shared");
    let ips: Vec<IpAddr> = (1..=3)
        .map(|i| format!("127.0.7.{}", 10 + i).parse().unwrap())
        .collect();
    let qpn = |i: usize| 0x100 + i as u32;
    let handles: Vec<EngineHandle> = ips
        .iter()
        .enumerate()
        .map(|(i, ip)| {
            let opts = UdpOptions {
                ip: *ip,
                port,
                dscp: None,
                hardware_timestamps_on: None,
                max_send_sockets: 16,
            };
            let t = UdpTransport::open(opts, counters.clone()).unwrap();
            let id = EngineIdentity {
                name: format!("shared-{i}"),
                qpn: qpn(i),
                token: rand_token(qpn(i)),
                port,
                max_outstanding: 1024,
                trace: None,
                service_timeouts: None,
            };
            event_loop.add(id, t, counters.clone(), buffer.clone())
        })
        .collect();
    assert_eq!(event_loop.len(), 3);
    event_loop.spawn().unwrap();
    for (i, h) in handles.iter().enumerate() {
        let j = (i + 1) % 3;
        h.send(Command::RnicId(i as u32 + 1)).unwrap();
        let list = ProbeList {
            class: ProbeClass::TorMesh,
            pps: 200.0,
            entries: vec![PingTarget {
                rnic_id: j as u32 + 1,
                ip: ips[j],
                port,
                qpn: qpn(j),
                src_port: 50_300 + i as u16,
            }],
        };
        h.send(Command::Lists(vec![list], Duration::from_millis(200)))
            .unwrap();
    }
    let ok = |all: &[ProbeResult], from: usize| {
        all.iter()
            .filter(|r| r.prober_rnic == from as u32 + 1 && r.status == ProbeStatus::Ok)
            .count()
    };
    // 200 pps each: every engine gets answers from the next.
    common::wait_for("answers to every engine", || {
        let all = results(&buffer);
        (0..3).all(|i| ok(&all, i) >= 150)
    });
    let mut handles = handles.into_iter();
    let first = handles.next().unwrap();
    first.stop().unwrap();
    let before = ok(&results(&buffer), 1);
    // Both survivors keep going: engine 1 is still answered, and engine 2's probes to
    // the stopped engine 0 now time out.
    common::wait_for("engine 1 answered, engine 2 timing out", || {
        let all = results(&buffer);
        let timeouts = all
            .iter()
            .filter(|r| r.prober_rnic == 3 && r.status == ProbeStatus::Timeout)
            .count();
        ok(&all, 1) >= before + 150 && timeouts >= 100
    });
    let all = results(&buffer);
    for h in handles {
        h.stop().unwrap();
    }
    // The kernel enables RX timestamping through deferred work: results before the first
    // Software one may (correctly) be App, none after it.
    let stamped = all
        .iter()
        .position(|r| r.ts_source == TimestampSource::Software)
        .expect("software-stamped results");
    assert!(
        all[stamped..]
            .iter()
            .filter(|r| r.status == ProbeStatus::Ok)
            .all(|r| r.ts_source == TimestampSource::Software)
    );
    assert_eq!(counters.unmatched_ack.load(Relaxed), 0);
}
