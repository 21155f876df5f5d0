//! Fabric construction, routing, ECMP, traceroute and teardown, with real traffic (root only).

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use common::{Fixture, namespaces_of, root_or_skip};
use rocemesh_testbed::{Fabric, FabricSpec, Fault, FiveTuple, management, netns};
use socket2::{Domain, Protocol, Socket, Type};

#[test]
fn every_rnic_reaches_every_other() {
    if !root_or_skip() {
        return;
    }
    let f = Fixture::default("tbconn");
    let names: Vec<String> = f.0.rnics().map(|r| r.name.clone()).collect();
    assert_eq!(names.len(), 4);
    for a in &names {
        for b in names.iter().filter(|b| *b != a) {
            assert_eq!(
                f.deliver(a, 5000, b, 6000, 5, Duration::ZERO),
                5,
                "{a} -> {b}"
            );
        }
    }
    // Addresses only from the RFC 2544 range.
    for l in f.0.links() {
        for ip in [l.a.ip, l.b.ip] {
            assert!(
                Ipv4Addr::new(198, 18, 0, 0) <= ip && ip <= Ipv4Addr::new(198, 19, 255, 255),
                "{ip}"
            );
        }
    }
}

#[test]
fn ecmp_spreads_source_ports_and_is_deterministic() {
    if !root_or_skip() {
        return;
    }
    let f = Fixture::default("tbecmp");
    let (src, dst) = (f.ip("h0r0"), f.ip("h2r0"));
    let spine = |sport| {
        f.0.spine_for(&FiveTuple {
            src: src.into(),
            dst: dst.into(),
            sport,
            dport: 4791,
        })
        .unwrap()
        .unwrap()
    };
    let first: Vec<String> = (10000..10032).map(spine).collect();
    assert!(
        first.iter().any(|s| s == "s0") && first.iter().any(|s| s == "s1"),
        "{first:?}"
    );
    let again: Vec<String> = (10000..10032).map(spine).collect();
    assert_eq!(first, again, "same 5-tuple, same spine");
    // Same-ToR flows use no spine.
    let local = FiveTuple {
        src: src.into(),
        dst: f.ip("h1r0").into(),
        sport: 1,
        dport: 2,
    };
    assert_eq!(f.0.spine_for(&local).unwrap(), None);

    // The kernel's forwarding agrees with its answer: count packets arriving at each spine.
    for want in ["s0", "s1"] {
        let sport = f.sports_via("h0r0", "h2r0", 4791, want, 20000, 1)[0];
        let ns = |s: &str| format!("tbecmp-{s}");
        let before: Vec<u64> = ["s0", "s1"]
            .iter()
            .map(|s| f.if_counter(&ns(s), "t0", "rx_packets"))
            .collect();
        assert_eq!(
            f.deliver("h0r0", sport, "h2r0", 4791, 50, Duration::ZERO),
            50
        );
        let after: Vec<u64> = ["s0", "s1"]
            .iter()
            .map(|s| f.if_counter(&ns(s), "t0", "rx_packets"))
            .collect();
        let via: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let (hit, other) = if want == "s0" {
            (via[0], via[1])
        } else {
            (via[1], via[0])
        };
        assert!(
            hit >= 50 && other < 10,
            "flow for {want}: per-spine packets {via:?}"
        );
    }
}

/// Sends UDP with TTL 1..=4 from h0r0:33000 to h2r0:33434 (one 5-tuple, so one ECMP path,
/// as R-Pingmesh's traceroute does) and returns (ICMP source, type) per TTL.
fn traceroute(f: &Fixture) -> Vec<Option<(Ipv4Addr, u8)>> {
    let (src, dst) = (f.ip("h0r0"), f.ip("h2r0"));
    let icmp = icmp_socket(f, "h0r0");
    let probe = f.socket("h0r0", 33000);
    (1..=4u32)
        .map(|ttl| {
            let dport = 33434;
            probe.set_ttl(ttl).unwrap();
            probe
                .send_to(b"trace", SocketAddrV4::new(dst, dport))
                .unwrap();
            icmp_answer(&icmp, (src, dport), Instant::now() + Duration::from_secs(1))
        })
        .collect()
}

/// A raw socket reading the ICMP errors that reach `rnic`'s host.
fn icmp_socket(f: &Fixture, rnic: &str) -> Socket {
    let icmp = netns::in_netns(&f.netns_of(rnic), || {
        Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))
    })
    .unwrap()
    .unwrap();
    icmp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    icmp
}

/// The first ICMP error read on `icmp` before `deadline` that quotes a UDP packet from
/// `src` to port `dport`: (its sender, its type).
fn icmp_answer(
    icmp: &Socket,
    (src, dport): (Ipv4Addr, u16),
    deadline: Instant,
) -> Option<(Ipv4Addr, u8)> {
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1500];
    while Instant::now() < deadline {
        let Ok(n) = icmp.recv(&mut buf) else { continue };
        // SAFETY: recv initialised the first n bytes.
        let pkt: Vec<u8> = buf[..n]
            .iter()
            .map(|b| unsafe { b.assume_init() })
            .collect();
        let ihl = usize::from(pkt[0] & 0xf) * 4;
        let from = Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
        let kind = pkt[ihl];
        // Quoted packet: IP header (20 bytes here) then the UDP header of our probe.
        let quoted = ihl + 8;
        let q_src = Ipv4Addr::new(
            pkt[quoted + 12],
            pkt[quoted + 13],
            pkt[quoted + 14],
            pkt[quoted + 15],
        );
        let q_dport = u16::from_be_bytes([pkt[quoted + 22], pkt[quoted + 23]]);
        if q_src == src && q_dport == dport {
            return Some((from, kind));
        }
    }
    None
}

#[test]
fn ttl_limited_udp_gets_time_exceeded_from_each_hop() {
    if !root_or_skip() {
        return;
    }
    let f = Fixture::default("tbtrace");
    let spine =
        f.0.spine_for(&FiveTuple {
            src: f.ip("h0r0").into(),
            dst: f.ip("h2r0").into(),
            sport: 33000,
            dport: 33434,
        })
        .unwrap()
        .unwrap();
    let t = f.0.topology();
    let up = t.link(&format!("t0-{spine}")).unwrap();
    let hops = traceroute(&f);
    let tor0 = t.link("h0r0-t0").unwrap().b.ip;
    assert_eq!(
        hops[0],
        Some((tor0, 11)),
        "hop 1 is ToR t0 (its port facing h0r0)"
    );
    assert_eq!(
        hops[1],
        Some((up.b.ip, 11)),
        "hop 2 is {spine} (its port facing t0)"
    );
    let down = t.link(&format!("t1-{spine}")).unwrap();
    assert_eq!(
        hops[2],
        Some((down.a.ip, 11)),
        "hop 3 is ToR t1 (its port facing {spine})"
    );
    assert_eq!(
        hops[3],
        Some((f.ip("h2r0"), 3)),
        "hop 4: destination answers port unreachable"
    );
}

/// A spine whose link to the destination's ToR is down has no route there: it answers each
/// TTL-limited packet it gets for that ToR with "unreachable", however many its sender
/// had before (the host-wide budget of route errors is lifted while a fabric is up), so a
/// trace sees the spine and the break after it.
#[test]
fn a_spine_without_a_route_answers_every_packet_with_unreachable() {
    if !root_or_skip() {
        return;
    }
    let f = Fixture::default("tbunreach");
    let (src, dst, sport, dport) = (f.ip("h0r0"), f.ip("h2r0"), 33001, 33434);
    let spine =
        f.0.spine_for(&FiveTuple {
            src: src.into(),
            dst: dst.into(),
            sport,
            dport,
        })
        .unwrap()
        .unwrap();
    f.0.apply(&Fault::LinkDown {
        link: format!("t1-{spine}"),
    })
    .unwrap();
    let answering = f.0.topology().link(&format!("t0-{spine}")).unwrap().b.ip;
    let icmp = icmp_socket(&f, "h0r0");
    let probe = f.socket("h0r0", sport);
    probe.set_ttl(2).unwrap();
    let sent = 20;
    let answers: Vec<Option<(Ipv4Addr, u8)>> = (0..sent)
        .map(|_| {
            probe
                .send_to(b"trace", SocketAddrV4::new(dst, dport))
                .unwrap();
            icmp_answer(&icmp, (src, dport), Instant::now() + Duration::from_secs(1))
        })
        .collect();
    let unreachable = answers
        .iter()
        .filter(|a| **a == Some((answering, 3)))
        .count();
    assert_eq!(
        unreachable, sent,
        "{spine} (port {answering}) must answer each TTL-2 packet with unreachable: {answers:?}"
    );
}

#[test]
fn two_prefixes_coexist_and_down_removes_everything() {
    if !root_or_skip() {
        return;
    }
    let a = Fixture::default("tbpa");
    let b = Fixture::default("tbpb");
    assert_eq!(namespaces_of("tbpa").len(), 8);
    assert_eq!(a.deliver("h0r0", 5000, "h3r0", 6000, 5, Duration::ZERO), 5);
    assert_eq!(b.deliver("h0r0", 5000, "h3r0", 6000, 5, Duration::ZERO), 5);

    // A running helper process and a process started inside a host namespace.
    let delay = rocemesh_testbed::Fault::Delay {
        link: "t0-s0".into(),
        direction: rocemesh_testbed::Direction::Both,
        ms: 5,
    };
    a.0.apply(&delay).unwrap();
    let flap = rocemesh_testbed::Fault::LinkFlap {
        link: "t1-s1".into(),
        period_ms: 1000,
    };
    a.0.apply(&flap).unwrap();
    let started: Vec<u32> =
        a.0.active_faults()
            .unwrap()
            .iter()
            .flat_map(|f| f.undo.clone())
            .filter_map(|u| match u {
                rocemesh_testbed::state::Undo::Kill(p) => Some(p.pid),
                _ => None,
            })
            .collect();
    assert_eq!(started.len(), 2, "NFQUEUE helper and flapper");
    let mut sleeper = netns::command("tbpa-h1", "sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let helper_pids = netns::pids("tbpa-s0").unwrap();
    assert_eq!(helper_pids.len(), 1, "one NFQUEUE helper in tbpa-s0");

    // up() again is idempotent: it rebuilds the same fabric from scratch.
    let again = Fabric::up(a.0.spec()).unwrap();
    assert!(again.active_faults().unwrap().is_empty());
    assert!(
        std::fs::metadata(format!("/proc/{}", helper_pids[0])).is_err(),
        "helper killed by rebuild"
    );
    assert_eq!(namespaces_of("tbpa").len(), 8);

    Fabric::down("tbpa").unwrap();
    assert!(namespaces_of("tbpa").is_empty());
    assert!(
        sleeper.wait().is_ok(),
        "process inside the fabric was killed"
    );
    assert!(!std::path::Path::new("/run/rocemesh-testbed/tbpa.json").exists());
    // The other fabric is untouched.
    assert_eq!(namespaces_of("tbpb").len(), 8);
    assert_eq!(b.deliver("h3r0", 5000, "h0r0", 6000, 5, Duration::ZERO), 5);
    Fabric::down("tbpa").unwrap();
}

#[test]
fn multi_rnic_rail_optimized_hosts_route_by_source() {
    if !root_or_skip() {
        return;
    }
    let spec = FabricSpec {
        prefix: "tbrail".into(),
        rnics_per_host: 2,
        rail_optimized: true,
        ..FabricSpec::default()
    };
    let f = Fixture::up(spec);
    assert_eq!(f.0.hosts().len(), 2);
    let t = f.0.topology();
    assert_eq!(t.rnic("h1r1").unwrap().1.tor, 1);
    // Same rail: through ToR t1 only; cross rail: through a spine. Every pair works.
    for (a, b) in [
        ("h0r0", "h1r0"),
        ("h0r1", "h1r1"),
        ("h0r0", "h1r1"),
        ("h1r1", "h0r0"),
    ] {
        assert_eq!(
            f.deliver(a, 5000, b, 6000, 5, Duration::ZERO),
            5,
            "{a} -> {b}"
        );
    }
    // Traffic from r1 leaves through r1 (policy routing), not the main-table default via r0.
    let before = f.if_counter("tbrail-h0", "r1", "tx_packets");
    assert_eq!(
        f.deliver("h0r1", 5000, "h1r1", 6000, 20, Duration::ZERO),
        20
    );
    assert!(f.if_counter("tbrail-h0", "r1", "tx_packets") - before >= 20);
}

#[test]
fn a_hosts_own_rnics_talk_through_their_tor_and_job_traffic_stays_local() {
    if !root_or_skip() {
        return;
    }
    let f = Fixture::up(FabricSpec {
        prefix: "tbself".into(),
        rnics_per_host: 2,
        ..FabricSpec::default()
    });
    let (ns, job) = ("tbself-h0", rocemesh_testbed::job::JOB_PORT);
    // Probe-like traffic from r0 to r1 of the same host leaves on r0 and comes back on
    // r1 through ToR t0, as between two real RNICs: a fault on either RNIC's link hits it.
    let (tx, rx) = (
        f.if_counter(ns, "r0", "tx_packets"),
        f.if_counter(ns, "r1", "rx_packets"),
    );
    assert_eq!(
        f.deliver("h0r0", 5000, "h0r1", 6000, 20, Duration::ZERO),
        20
    );
    assert_eq!(
        f.deliver("h0r1", 5000, "h0r0", 6000, 20, Duration::ZERO),
        20
    );
    assert!(f.if_counter(ns, "r0", "tx_packets") - tx >= 20);
    assert!(f.if_counter(ns, "r1", "rx_packets") - rx >= 20);
    // A training job's traffic between them stays in the host (NVLink's place).
    let tx = f.if_counter(ns, "r0", "tx_packets");
    assert_eq!(f.deliver("h0r0", job, "h0r1", job, 20, Duration::ZERO), 20);
    assert!(f.if_counter(ns, "r0", "tx_packets") - tx < 20);
}

#[test]
fn management_network_reaches_the_root_namespace_and_is_removed() {
    if !root_or_skip() {
        return;
    }
    let spec = FabricSpec {
        prefix: "tbmg".into(),
        management: true,
        ..FabricSpec::default()
    };
    let fabric = Fabric::up(&spec).unwrap();
    let host = &fabric.hosts()[3];
    assert_eq!(
        connect_from_host(&fabric, &host.netns),
        IpAddr::V4(host.mgmt_ip)
    );
    // A fabric with another prefix has its own management subnet and runs beside it.
    let beside = FabricSpec {
        prefix: "tbmh".into(),
        management: true,
        ..FabricSpec::default()
    };
    let second = Fabric::up(&beside).unwrap();
    assert_ne!(second.management_ip(), fabric.management_ip());
    assert_eq!(
        connect_from_host(&second, &second.hosts()[0].netns),
        IpAddr::V4(second.hosts()[0].mgmt_ip)
    );
    Fabric::down("tbmh").unwrap();
    // A prefix that hashes to a subnet in use is refused and leaves nothing behind.
    let clash = (0..100_000)
        .map(|i| format!("tbx{i}"))
        .find(|p| management::subnet_octet(p) == management::subnet_octet("tbmg"))
        .expect("some short prefix shares tbmg's subnet");
    let other = FabricSpec {
        prefix: clash.clone(),
        management: true,
        ..FabricSpec::default()
    };
    let err = format!("{:#}", Fabric::up(&other).unwrap_err());
    assert!(err.contains("management subnet"), "{err}");
    assert!(
        namespaces_of(&clash).is_empty(),
        "a refused fabric left namespaces behind"
    );
    Fabric::down("tbmg").unwrap();
    let links = netns::run("ip", &["-o", "link", "show"]).unwrap();
    assert!(
        !links.contains("tbmg-"),
        "management bridge or veth left behind: {links}"
    );
}

/// Connects over TCP from host namespace `netns` to a listener on the fabric's management
/// address; returns the peer address the listener saw.
fn connect_from_host(fabric: &Fabric, netns_name: &str) -> IpAddr {
    let listener = std::net::TcpListener::bind((fabric.management_ip(), 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::thread::spawn(move || listener.accept().map(|(_, peer)| peer.ip()));
    let target = format!("{}:{port}", fabric.management_ip());
    let out = netns::exec(
        netns_name,
        &[
            "bash",
            "-c",
            &format!(
                "exec 3<>/dev/tcp/{}/{port} && echo connected",
                fabric.management_ip()
            ),
        ],
    );
    assert!(
        out.unwrap().contains("connected"),
        "{netns_name} cannot reach {target}"
    );
    accepted.join().unwrap().unwrap()
}
