//! Probe authentication and the per-source answer limit over real UDP sockets: engines on
//! 127.0.9.x, a fake prober (or attacker) on a plain socket bound to the agent port.

#[allow(dead_code)]
mod common;

use rocemesh_agent::Counters;
use rocemesh_agent::{Auth, GuardSettings};
use rocemesh_agent::{Command, EngineHandle, EngineIdentity};
use rocemesh_agent::{Marks, ResultBuffer};
use rocemesh_agent::{UdpOptions, UdpTransport};
use rocemesh_proto::api::{PingTarget, ProbeList};
use rocemesh_proto::batch::{BatchHeader, decode_batch};
use rocemesh_proto::packet::{PROBE_LEN, Wire};
use rocemesh_proto::probe_auth::{Flow, Keyring};
use rocemesh_proto::{Packet, PacketKind, ProbeClass, ProbeStatus};
use std::net::{IpAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

fn cluster_ring() -> Keyring {
    Keyring::new(3, &[(2, [0x5a; 32]), (3, [0xa5; 32])]).unwrap()
}

fn required(pps: f64, burst: u32) -> Arc<GuardSettings> {
    Arc::new(GuardSettings {
        auth: Auth::Required(Box::new(cluster_ring())),
        source_pps: pps,
        source_burst: burst,
    })
}

struct Node {
    ip: IpAddr,
    qpn: u32,
    engine: EngineHandle,
    counters: Arc<Counters>,
    results: Arc<ResultBuffer>,
}

fn node(ip: &str, port: u16, qpn: u32, rnic_id: u32, guard: Arc<GuardSettings>) -> Node {
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
        name: format!("guard-{ip}"),
        qpn,
        token: u64::from(qpn) << 8,
        port,
        max_outstanding: 1024,
        trace: None,
        service_timeouts: None,
    };
    let engine = EngineHandle::spawn(id, transport, counters.clone(), results.clone()).unwrap();
    engine.send(Command::Guard(guard)).unwrap();
    engine.send(Command::RnicId(rnic_id)).unwrap();
    Node {
        ip,
        qpn,
        engine,
        counters,
        results,
    }
}

/// A fake prober on the agent port of `ip` (ACKs go to the prober's main port).
fn prober_socket(ip: &str, port: u16) -> UdpSocket {
    let sock = UdpSocket::bind((ip, port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    sock
}

/// Every datagram that arrives until the socket stays quiet for its read timeout.
fn received(sock: &UdpSocket) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    while let Ok((n, _)) = sock.recv_from(&mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

fn probe_for(n: &Node, seq: u32) -> Packet {
    Packet::probe(ProbeClass::TorMesh, seq, 99, 0x99, 1, n.qpn, 7)
}

/// The flow from `sock` to `n`'s agent port, as a tag must name it.
fn flow(sock: &UdpSocket, n: &Node, port: u16) -> Flow {
    let from = sock.local_addr().unwrap();
    Flow {
        src: from.ip(),
        src_port: from.port(),
        dst: n.ip,
        dst_port: port,
    }
}

/// The reverse of `f` (how the ACKs of a probe on `f` travel).
fn reverse(f: Flow) -> Flow {
    Flow {
        src: f.dst,
        src_port: f.src_port,
        dst: f.src,
        dst_port: f.dst_port,
    }
}

fn now_ms() -> u64 {
    rocemesh_proto::now_unix_ns() / 1_000_000
}

#[test]
fn a_probe_without_a_valid_tag_gets_no_answer() {
    let port = 47_941;
    let b = node("127.0.9.2", port, 0x22, 1, required(1e6, 1000));
    let sock = prober_socket("127.0.9.1", port);
    let dest = format!("127.0.9.2:{port}");
    let forged = Keyring::new(3, &[(3, [0x01; 32])]).unwrap();
    let f = flow(&sock, &b, port);
    let mut flipped = cluster_ring()
        .seal(&probe_for(&b, 4), &f, now_ms())
        .as_bytes()
        .to_vec();
    flipped[10] ^= 1;
    let stale_key = Keyring::new(9, &[(9, [0x5a; 32])]).unwrap();
    for bad in [
        Wire::new(&probe_for(&b, 1)).as_bytes().to_vec(),
        forged
            .seal(&probe_for(&b, 2), &f, now_ms())
            .as_bytes()
            .to_vec(),
        stale_key
            .seal(&probe_for(&b, 3), &f, now_ms())
            .as_bytes()
            .to_vec(),
        flipped,
    ] {
        sock.send_to(&bad, &dest).unwrap();
    }
    assert!(
        received(&sock).is_empty(),
        "an unauthenticated probe was answered"
    );
    let s = b.counters.snapshot(0);
    let rejected = |r: &str| s.rejected_by_reason[r];
    assert_eq!(
        (
            rejected("untagged"),
            rejected("bad_tag"),
            rejected("unknown_key")
        ),
        (1, 2, 1)
    );
    assert_eq!(s.acks_sent, 0);
    // The same socket with a valid tag gets both ACKs, each tagged with the cluster key.
    let ring = cluster_ring();
    sock.send_to(ring.seal(&probe_for(&b, 5), &f, now_ms()).as_bytes(), &dest)
        .unwrap();
    let acks = received(&sock);
    assert_eq!(acks.len(), 2, "ACK1 + ACK2 expected");
    for a in &acks {
        assert_eq!(ring.verify(a, &reverse(f), now_ms()), Ok(()));
        let p = Packet::decode(a).unwrap();
        assert!(matches!(p.kind, PacketKind::Ack1 | PacketKind::Ack2));
        assert_eq!((p.seq, p.responder_qpn), (5, b.qpn));
    }
    b.engine.stop().unwrap();
}

#[test]
fn a_flood_from_one_source_is_rate_limited() {
    let port = 47_942;
    let (pps, burst) = (100.0, 20u32);
    let b = node("127.0.9.4", port, 0x44, 1, required(pps, burst));
    let sock = prober_socket("127.0.9.3", port);
    let dest = format!("127.0.9.4:{port}");
    let ring = cluster_ring();
    let f = flow(&sock, &b, port);
    let sent = 2_000u32;
    let rate_limited = || b.counters.snapshot(0).rejected_by_reason["rate_limited"];
    let t0 = Instant::now();
    for seq in 0..sent {
        sock.send_to(
            ring.seal(&probe_for(&b, seq), &f, now_ms()).as_bytes(),
            &dest,
        )
        .unwrap();
        // The flood stays within the engine's socket buffer (256-byte PROBEs), so every
        // probe is seen: at most ~50 ahead of what it has answered or refused.
        if seq % 25 == 24 {
            common::wait_for("the engine to keep up", || {
                let acks = b.counters.acks_sent.load(Relaxed);
                rate_limited() + acks + 50 > u64::from(seq)
            });
        }
    }
    // Every probe is answered or counted; the bucket refilled until the last one was.
    let mut ack1 = 0u64;
    common::wait_for("every probe answered or refused", || {
        ack1 += received(&sock)
            .iter()
            .filter(|a| Packet::decode(a).is_ok_and(|p| p.kind == PacketKind::Ack1))
            .count() as u64;
        rate_limited() + ack1 >= u64::from(sent)
    });
    let elapsed = t0.elapsed().as_secs_f64();
    assert_eq!(
        rate_limited() + ack1,
        u64::from(sent),
        "every probe is answered or counted once"
    );
    let ack1 = ack1 as f64;
    // At most the bucket plus its refill while the flood was being handled.
    let bound = f64::from(burst) + pps * elapsed + 1.0;
    assert!(
        ack1 >= f64::from(burst),
        "{ack1} answers: the bucket was not even used"
    );
    assert!(
        ack1 <= bound,
        "{ack1} answers to {sent} probes in {elapsed:.3} s, bound {bound}"
    );
    b.engine.stop().unwrap();
}

fn results(buffer: &ResultBuffer) -> Vec<rocemesh_proto::ProbeResult> {
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
fn legitimate_probing_is_unaffected_and_a_forged_ack_is_not_trusted() {
    let port = 47_943;
    // The default limit: 2 targets at 100 pps are far below it.
    let guard = Arc::new(GuardSettings {
        auth: Auth::Required(Box::new(cluster_ring())),
        ..GuardSettings::open()
    });
    let a = node("127.0.9.5", port, 0x55, 5, guard.clone());
    let b = node("127.0.9.6", port, 0x66, 6, guard);
    let list = |to: &Node, id: u32, src_port: u16| ProbeList {
        class: ProbeClass::TorMesh,
        pps: 200.0,
        entries: vec![PingTarget {
            rnic_id: id,
            ip: to.ip,
            port,
            qpn: to.qpn,
            src_port,
        }],
    };
    let timeout = Duration::from_millis(300);
    a.engine
        .send(Command::Lists(vec![list(&b, 6, 50_900)], timeout))
        .unwrap();
    b.engine
        .send(Command::Lists(vec![list(&a, 5, 50_901)], timeout))
        .unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    // An off-path attacker answering with an untagged ACK for a probe of A is ignored.
    let attacker = UdpSocket::bind(("127.0.9.7", 0)).unwrap();
    let fake = Packet::probe(
        ProbeClass::TorMesh,
        1,
        5,
        0x55,
        6,
        0x66,
        u64::from(0x55u32) << 8,
    )
    .ack1(0x66);
    attacker.send_to(&fake.encode(), (a.ip, port)).unwrap();
    common::wait_for("the untagged ACK refused", || {
        a.counters.snapshot(0).rejected_by_reason["untagged"] >= 1
    });
    let kept = [
        (a.counters.clone(), a.results.clone()),
        (b.counters.clone(), b.results.clone()),
    ];
    a.engine.stop().unwrap();
    b.engine.stop().unwrap();
    for (counters, buffer) in &kept {
        let rs = results(buffer);
        let ok = rs.iter().filter(|r| r.status == ProbeStatus::Ok).count();
        assert!(rs.len() >= 200, "only {} results", rs.len());
        // The last probes may be cut by the stop, and a loaded machine may stall a probe
        // past its timeout; nothing else fails.
        assert!(
            ok + 5 + rs.len() / 50 >= rs.len(),
            "{ok} ok of {}",
            rs.len()
        );
        let s = counters.snapshot(0);
        assert_eq!(s.rejected_by_reason["rate_limited"], 0);
        assert_eq!(s.rejected_by_reason["bad_tag"], 0);
    }
    assert_eq!(kept[0].0.snapshot(0).rejected_by_reason["untagged"], 1);
}

#[test]
fn a_captured_probe_replayed_elsewhere_or_late_gets_no_answer() {
    let port = 47_944;
    let window = Duration::from_secs(2);
    let ring = cluster_ring().with_window(window);
    let guard = Arc::new(GuardSettings {
        auth: Auth::Required(Box::new(ring.clone())),
        ..GuardSettings::open()
    });
    let b = node("127.0.9.11", port, 0x77, 1, guard);
    let dest = format!("127.0.9.11:{port}");
    // The prober's socket, a host elsewhere on the agent port (where ACKs would go), and
    // the prober's host on another source port.
    let prober = prober_socket("127.0.9.12", port);
    let elsewhere = prober_socket("127.0.9.13", port);
    let other_port = prober_socket("127.0.9.12", 0);
    let captured = ring
        .seal(&probe_for(&b, 1), &flow(&prober, &b, port), now_ms())
        .as_bytes()
        .to_vec();
    assert_eq!(captured.len(), PROBE_LEN);
    // (bytes the agent received, bytes it sent) per source address.
    let mut tally = std::collections::BTreeMap::<&str, (usize, usize)>::new();
    let mut replay = |from: &UdpSocket, answers_to: &UdpSocket, name: &'static str| {
        from.send_to(&captured, &dest).unwrap();
        let got = received(answers_to);
        let t = tally.entry(name).or_default();
        t.0 += captured.len();
        t.1 += got.iter().map(Vec::len).sum::<usize>();
        got.len()
    };
    // On its own flow the probe is answered (ACK1 + ACK2), once or replayed at once.
    assert_eq!(replay(&prober, &prober, "127.0.9.12"), 2);
    assert_eq!(replay(&prober, &prober, "127.0.9.12"), 2);
    // From another address, or another port of the same host: nothing.
    assert_eq!(replay(&elsewhere, &elsewhere, "127.0.9.13"), 0);
    assert_eq!(replay(&other_port, &prober, "127.0.9.12"), 0);
    // On its own flow after the window: nothing.
    std::thread::sleep(window + Duration::from_millis(300));
    assert_eq!(replay(&prober, &prober, "127.0.9.12"), 0);
    let s = b.counters.snapshot(0);
    assert_eq!(s.rejected_by_reason["bad_tag"], 2);
    assert_eq!(s.rejected_by_reason["stale"], 1);
    assert_eq!(s.acks_sent, 4);
    // No source gets more bytes back than it sent (a PROBE is two ACKs long).
    for (source, (received, sent)) in &tally {
        eprintln!(
            "{source}: received {received} B, answered {sent} B, ratio {:.2}",
            *sent as f64 / *received as f64
        );
        assert!(
            sent <= received,
            "{source}: {sent} B answered for {received} B"
        );
    }
    b.engine.stop().unwrap();
}
