//! Source-port advice end to end (root only): a 2-ToR x 2-spine namespace fabric with
//! L4-hashed ECMP and real agents; 30 % loss on the spine link t0-s1. Once the analyzer
//! reports a link of s1, every port advised for h0 -> h1 has forward and ACK paths clear of s1, and
//! real UDP exchanges on those very 5-tuples (the probe's way there, the ACK's way back)
//! lose nothing, while the ports crossing the link do lose packets. A training task on the
//! two hosts probes its pair as a service flow: the link problem blames the task exactly
//! when that flow's traced path crosses the link.

mod support;

use rocemesh_analyzer::PortAdvice;
use rocemesh_analyzer::{PathDirection, PathsReply};
use rocemesh_lab::lab::{Lab, LabTiming};
use rocemesh_proto::ProbeClass;
use rocemesh_proto::api::{ComponentKind, HostInfo, Pinglist, Problem, ProblemState};
use rocemesh_testbed::{Direction, FabricSpec, Fault, netns};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// Exchanges per port.
const ROUNDS: u16 = 200;
/// The spine links of the pair's paths over s1: with one host per ToR every path crosses
/// both or neither, so tomography may name either for the loss injected on t0-s1.
const S1_LINKS: [&str; 2] = ["t0-s1", "t1-s1"];

/// Whether `p` is an active verdict this fabric cannot tell from the lossy link: with one
/// host per ToR every path through s1 crosses both its links, so either link or the switch
/// s1 itself explains the loss equally well.
fn covers_the_lossy_link(p: &Problem) -> bool {
    p.state == ProblemState::Active
        && match p.component_kind {
            ComponentKind::Link => S1_LINKS.contains(&p.component.as_str()),
            ComponentKind::Switch => p.component == "s1",
            _ => false,
        }
}

/// Polls `f` every 500 ms until it gives a value or `timeout` passes.
fn wait<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn bind(ns: &str, ip: Ipv4Addr, port: u16) -> UdpSocket {
    netns::in_netns(ns, move || UdpSocket::bind((ip, port)))
        .expect("enter namespace")
        .unwrap_or_else(|e| panic!("bind {ip}:{port} in {ns}: {e}"))
}

/// Sends `ROUNDS` datagrams on each (source port, destination port, ACK destination port)
/// 5-tuple from `src` to `dst`, echoed back from the same source port as the agents' ACKs
/// are; returns the answers received per source port.
fn exchange(
    (src_ns, src): (&str, Ipv4Addr),
    (dst_ns, dst): (&str, Ipv4Addr),
    tuples: &[(u16, u16, u16)],
) -> BTreeMap<u16, u16> {
    let dports: BTreeSet<u16> = tuples.iter().map(|t| t.1).collect();
    let aports: BTreeSet<u16> = tuples.iter().map(|t| t.2).collect();
    let listen: Vec<UdpSocket> = dports.iter().map(|&p| bind(dst_ns, dst, p)).collect();
    let answers: Vec<UdpSocket> = aports.iter().map(|&p| bind(src_ns, src, p)).collect();
    let out: BTreeMap<u16, (UdpSocket, UdpSocket, u16)> = tuples
        .iter()
        .map(|&(sport, _, aport)| {
            (
                sport,
                (bind(src_ns, src, sport), bind(dst_ns, dst, sport), aport),
            )
        })
        .collect();
    let echo: BTreeMap<u16, (UdpSocket, u16)> = out
        .iter()
        .map(|(p, (_, back, aport))| (*p, (back.try_clone().unwrap(), *aport)))
        .collect();
    for s in listen.iter().chain(&answers) {
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let echoer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for s in &listen {
                    while let Ok((n, from)) = s.recv_from(&mut buf) {
                        // The responder answers from the probe's own source port.
                        if let Some((back, aport)) = echo.get(&from.port()) {
                            let _ = back.send_to(&buf[..n], SocketAddrV4::new(src, *aport));
                        }
                    }
                }
            }
        })
    };
    // Answers are read while sending: a socket buffer holds a few hundred at most.
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let collector = {
        let sent = sent.clone();
        std::thread::spawn(move || {
            let mut got: BTreeMap<u16, BTreeSet<u16>> = BTreeMap::new();
            let mut buf = [0u8; 64];
            let mut quiet_since: Option<Instant> = None;
            loop {
                let mut any = false;
                for s in &answers {
                    while let Ok((4, _)) = s.recv_from(&mut buf) {
                        any = true;
                        let port = u16::from_be_bytes([buf[0], buf[1]]);
                        got.entry(port)
                            .or_default()
                            .insert(u16::from_be_bytes([buf[2], buf[3]]));
                    }
                }
                // After the last send, wait for stragglers until 3 s pass without an answer.
                if sent.load(std::sync::atomic::Ordering::Relaxed) {
                    let since = *quiet_since.get_or_insert_with(Instant::now);
                    if any {
                        quiet_since = Some(Instant::now());
                    } else if since.elapsed() > Duration::from_secs(3) {
                        return got;
                    }
                }
            }
        })
    };
    for round in 0..ROUNDS {
        for (&sport, (tx, _, _)) in &out {
            let dport = tuples.iter().find(|t| t.0 == sport).unwrap().1;
            let msg = [sport.to_be_bytes(), round.to_be_bytes()].concat();
            tx.send_to(&msg, SocketAddrV4::new(dst, dport)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    sent.store(true, std::sync::atomic::Ordering::Relaxed);
    let got = collector.join().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    echoer.join().unwrap();
    tuples
        .iter()
        .map(|t| (t.0, got.get(&t.0).map_or(0, |s| s.len() as u16)))
        .collect()
}

#[test]
fn probes_on_advised_ports_avoid_a_lossy_spine_link() {
    if !support::is_root() {
        eprintln!("skipping advice_e2e: needs root (network namespaces)");
        return;
    }
    let spec = FabricSpec {
        prefix: "rmadv".into(),
        tors: 2,
        spines: 2,
        hosts_per_tor: 1,
        rnics_per_host: 1,
        ..FabricSpec::default()
    };
    // Plenty of inter-ToR 5-tuples, so the one pair has a catalog over both spines.
    let mut lab = Lab::up_with(spec, &LabTiming::default(), |cfg| {
        cfg.controller.parallel_paths = Some(8);
    })
    .expect("lab up");
    lab.wait_ready(Duration::from_secs(30))
        .expect("agents ready");
    let hosts = lab.fabric.hosts().to_vec();
    let (h0, h1) = (&hosts[0], &hosts[1]);
    let (src, dst) = (
        format!("{}/{}", h0.name, h0.rnics[0].ifname),
        format!("{}/{}", h1.name, h1.rnics[0].ifname),
    );
    // A task on both RNICs: its pair is probed (and traced) as a service flow.
    let ends = [(h0, &src), (h1, &dst)];
    let task: serde_json::Value = lab
        .post(
            "/api/v1/tasks",
            &serde_json::json!({"name": "job", "endpoints": ends.iter().map(|(h, _)| {
                serde_json::json!({"host": h.name, "rnic": h.rnics[0].ifname})
            }).collect::<Vec<_>>()}),
        )
        .expect("create task");
    let task_id = task["id"].as_u64().expect("task id");
    for (h, _) in ends {
        let body = serde_json::json!({"host": h.name, "rnic": h.rnics[0].ifname});
        let _: serde_json::Value = lab
            .post(&format!("/api/v1/tasks/{task_id}/ready"), &body)
            .expect("endpoint ready");
    }
    // (prober RNIC name, target RNIC name, source port) of the task's service flow.
    let service_flow = wait(Duration::from_secs(30), || {
        let hosts: Vec<HostInfo> = lab.get("/api/v1/hosts").ok()?;
        ends.iter().find_map(|(h, name)| {
            let id = hosts.iter().find(|x| x.host == h.name)?.id;
            let list: Pinglist = lab.get(&format!("/api/v1/pinglists/{id}")).ok()?;
            let t = list
                .rnics
                .iter()
                .flat_map(|r| &r.lists)
                .filter(|l| l.class == ProbeClass::Service)
                .flat_map(|l| &l.entries)
                .next()?;
            let other = if *name == &src { &dst } else { &src };
            Some(((*name).clone(), other.clone(), t.src_port))
        })
    })
    .expect("the task's pair in a service pinglist");
    eprintln!("task service flow: {service_flow:?}");
    let advice = |lab: &Lab| -> PortAdvice {
        lab.get(&format!("/api/v1/paths/advice?src={src}&dst={dst}"))
            .expect("advice")
    };
    let spread = wait(Duration::from_secs(40), || {
        let a = advice(&lab);
        (a.spines.len() == 2 && a.ports.len() >= 4).then_some(a)
    })
    .unwrap_or_else(|| panic!("no catalog over both spines: {:#?}", advice(&lab)));
    eprintln!(
        "healthy: {} ports advised over {:?}",
        spread.ports.len(),
        spread.spines
    );

    lab.fabric
        .apply(&Fault::Loss {
            link: "t0-s1".into(),
            direction: Direction::Both,
            percent: 30,
        })
        .expect("inject loss");
    let started = Instant::now();
    let found = wait(Duration::from_secs(40), || {
        let problems: Vec<Problem> = lab.get("/api/v1/problems").ok()?;
        problems.into_iter().find(covers_the_lossy_link)
    })
    .unwrap_or_else(|| {
        panic!(
            "neither s1 nor a link of it reported: {:#?}",
            lab.problems()
        )
    });
    eprintln!(
        "{} reported after {:.1} s",
        found.component,
        started.elapsed().as_secs_f64()
    );
    // Flow blame: the task is on the link's list exactly when its flow's path crosses it.
    let (prober, target, sport) = &service_flow;
    let task_paths = || -> Option<Vec<Vec<String>>> {
        let traced: PathsReply = lab
            .get(&format!(
                "/api/v1/paths?src_rnic={prober}&dst_rnic={target}&limit=1000"
            ))
            .ok()?;
        let hops: Vec<Vec<String>> = traced
            .paths
            .into_iter()
            .filter(|p| p.direction == PathDirection::Probe && p.src_port == *sport)
            .map(|p| p.hop_names)
            .collect();
        (!hops.is_empty()).then_some(hops)
    };
    // The tracer paces itself, so on a loaded machine the task's 5-tuple may be traced
    // after the fault is found.
    let task_path = wait(Duration::from_secs(40), task_paths).unwrap_or_else(|| {
        panic!(
            "task flow {service_flow:?} untraced: {:#?}",
            lab.get::<PathsReply>(&format!(
                "/api/v1/paths?src_rnic={prober}&dst_rnic={target}&limit=1000"
            ))
        )
    });
    let crosses = task_path.iter().any(|h| h.iter().any(|x| x == "s1"));
    let blames_task = |p: &Problem| p.evidence.blamed.iter().any(|b| b.name == "job");
    let link = wait(Duration::from_secs(30), || {
        let problems: Vec<Problem> = lab.get("/api/v1/problems").ok()?;
        // The verdict may move between s1 and its links as evidence accrues: judge the
        // blame on whichever covers the link now.
        problems
            .into_iter()
            .filter(covers_the_lossy_link)
            .find(|p| blames_task(p) == crosses)
    })
    .unwrap_or_else(|| {
        panic!(
            "blame on s1 or its links wrong (task flow crosses: {crosses}): {:#?}",
            lab.problems()
        )
    });
    if crosses {
        let b = link
            .evidence
            .blamed
            .iter()
            .find(|b| b.name == "job")
            .unwrap();
        assert_eq!((b.task_id, b.flows), (Some(task_id as u32), 1), "{link:#?}");
        let total: f64 = link.evidence.blamed.iter().map(|b| b.share).sum();
        assert!((total - 1.0).abs() < 1e-9, "{link:#?}");
    }
    eprintln!(
        "blamed on {} (task flow crosses: {crosses}): {:?}",
        link.component, link.evidence.blamed
    );

    let advised = advice(&lab);
    assert!(
        !advised.ports.is_empty(),
        "nothing advised: {advised:#?} for {found:#?}"
    );
    for c in &advised.catalog {
        let via_s1 = c
            .path
            .iter()
            .chain(c.ack_path.iter().flatten())
            .any(|s| s == "s1");
        if c.advised {
            assert!(!via_s1 && c.crosses.is_empty(), "advised across s1: {c:#?}");
        }
    }
    assert_eq!(advised.spines, ["s0"], "{advised:#?}");
    // The exact 5-tuples: destination ports as traced, both directions.
    let q = |a: &str, b: &str| format!("/api/v1/paths?src_rnic={a}&dst_rnic={b}&limit=1000");
    let mut paths: PathsReply = lab.get(&q(&src, &dst)).expect("paths");
    paths
        .paths
        .extend(lab.get::<PathsReply>(&q(&dst, &src)).expect("paths").paths);
    let tuple = |port: u16| -> Option<(u16, u16, u16)> {
        let of = |dir| {
            paths
                .paths
                .iter()
                .find(|p| p.src_port == port && p.direction == dir)
        };
        Some((
            port,
            of(PathDirection::Probe)?.dst_port,
            of(PathDirection::Ack)?.dst_port,
        ))
    };
    // Ports whose way there crossed s1 (as traced last, or last before the loss cut it).
    let from = std::net::IpAddr::V4(h0.rnics[0].ip);
    let crossing: BTreeSet<u16> = paths
        .paths
        .iter()
        .filter(|p| p.direction == PathDirection::Probe && p.src == from)
        .filter(|p| p.hop_names.iter().any(|h| h == "s1"))
        .map(|p| p.src_port)
        .collect();
    assert!(
        !crossing.is_empty(),
        "no traced port crosses s1: {paths:#?}"
    );
    let good: Vec<(u16, u16, u16)> = advised.ports.iter().filter_map(|&p| tuple(p)).collect();
    let bad: Vec<(u16, u16, u16)> = crossing.iter().filter_map(|&p| tuple(p)).collect();
    assert_eq!(
        good.len(),
        advised.ports.len(),
        "untraced advised port: {paths:#?}"
    );
    assert!(!bad.is_empty());

    // The agents hold the probe ports: stop them, then exchange on the same 5-tuples.
    lab.kill_agent(&h0.name);
    lab.kill_agent(&h1.name);
    let ends = (
        (h0.netns.as_str(), h0.rnics[0].ip),
        (h1.netns.as_str(), h1.rnics[0].ip),
    );
    let all: Vec<(u16, u16, u16)> = good.iter().chain(&bad).copied().collect();
    let got = exchange(ends.0, ends.1, &all);
    eprintln!("answers per port (of {ROUNDS}): {got:?}");
    for (port, _, _) in &good {
        assert_eq!(
            got[port], ROUNDS,
            "advised port {port} lost probes: {got:?}"
        );
    }
    let lost: u32 = bad.iter().map(|t| u32::from(ROUNDS - got[&t.0])).sum();
    assert!(
        lost > 0,
        "ports across the lossy link lost nothing: the check cannot tell: {got:?}"
    );
}
