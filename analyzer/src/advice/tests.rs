use super::*;
use crate::diagnosis::fabric::CLOS_2X2;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rocemesh_proto::api::ProblemKind;
use rocemesh_proto::api::{LinkDirection, SuspectComponent};
use rocemesh_proto::testing::active_problem;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The 2x2 Clos and its pair: RNIC 1 under t0 (h0/r0) to RNIC 1 under t1 (h2/r0).
fn clos_pair() -> (FabricMap, PairEnd, PairEnd) {
    let map = FabricMap::parse(CLOS_2X2).unwrap();
    (
        map,
        end("h0/r0", "h0", "198.18.0.1"),
        end("h2/r0", "h2", "198.18.1.1"),
    )
}

fn end(name: &str, host: &str, addr: &str) -> PairEnd {
    PairEnd {
        name: name.into(),
        host: host.into(),
        ip: ip(addr),
    }
}

/// A traceroute over the 2x2 Clos in the testbed's address plan: ToR `from` (0 or 1) up
/// to spine `spine`, down to the other ToR, reaching RNIC 1 there; `ack` for the
/// responder's trace of the way back.
fn trace(from: u8, spine: u8, port: u16, ack: bool, at_ms: u64) -> TracedPath {
    let to = 1 - from;
    let up = 2 * from + spine; // link index of (from, spine)
    let down = 2 * to + spine;
    TracedPath {
        src: ip(&format!("198.18.{from}.1")),
        dst: ip(&format!("198.18.{to}.1")),
        src_port: port,
        dst_port: 4792,
        traced_at_unix_ns: at_ms * 1_000_000,
        reached: true,
        ack_direction: ack,
        hops: vec![
            Some(ip(&format!("198.18.{from}.0"))),
            Some(ip(&format!("198.19.0.{}", 2 * up + 1))),
            Some(ip(&format!("198.19.0.{}", 2 * down))),
            Some(ip(&format!("198.18.{to}.1"))),
        ],
    }
}

/// Forward and ACK traces of `ports` ports between t0's and t1's RNIC 1, each direction
/// hashed to a spine independently (as ECMP does): returns the traces and, per port, the
/// (forward, ACK) spines.
fn catalog(rng: &mut StdRng, ports: u16) -> (Vec<TracedPath>, BTreeMap<u16, (u8, u8)>) {
    let mut traces = Vec::new();
    let mut spines = BTreeMap::new();
    for i in 0..ports {
        let port = 49_152 + i * 7;
        let (f, a) = (rng.random_range(0..2u8), rng.random_range(0..2u8));
        traces.push(trace(0, f, port, false, 1_000 + u64::from(i)));
        traces.push(trace(1, a, port, true, 1_000 + u64::from(i)));
        spines.insert(port, (f, a));
    }
    (traces, spines)
}

/// One faulty spine link (either one, drawn per seed): every advised port of the pair
/// avoids it in both directions, every port that avoids it is advised, and the catalog
/// lists every traced port.
#[test]
fn advised_ports_avoid_a_faulty_spine_link_both_ways() {
    let (map, src, dst) = clos_pair();
    for seed in 0..20u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let (traces, spines) = catalog(&mut rng, 16);
        let bad_spine = rng.random_range(0..2u8);
        let link = ["t0-s0", "t0-s1", "t1-s0", "t1-s1"]
            [rng.random_range(0..2usize) * 2 + usize::from(bad_spine)];
        let problems = [active_problem(
            1,
            ProblemKind::LinkFault,
            ComponentKind::Link,
            link,
            "",
        )];
        let a = advise(&map, &src, &dst, &traces, &Avoid::from_problems(&problems));
        assert_eq!(a.catalog.len(), 16, "seed {seed}");
        let clean: Vec<u16> = spines
            .iter()
            .filter(|(_, (f, b))| *f != bad_spine && *b != bad_spine)
            .map(|(p, _)| *p)
            .collect();
        let mut got = a.ports.clone();
        got.sort_unstable();
        assert_eq!(got, clean, "seed {seed}: link {link}, spines {spines:?}");
        for c in &a.catalog {
            let crosses = c
                .path
                .iter()
                .chain(c.ack_path.iter().flatten())
                .any(|s| *s == format!("s{bad_spine}"));
            assert_eq!(c.advised, !crosses, "seed {seed}: {c:?}");
            assert_eq!(c.crosses.is_empty(), !crosses, "seed {seed}: {c:?}");
        }
        assert!(a.endpoint_problems.is_empty());
    }
}

/// Without problems every port is advised, and consecutive advised ports alternate between
/// the spines for as long as both have ports left.
#[test]
fn advice_spreads_ports_across_spines() {
    let (map, src, dst) = clos_pair();
    for seed in 0..20u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let (traces, spines) = catalog(&mut rng, 12);
        let a = advise(&map, &src, &dst, &traces, &Avoid::default());
        assert_eq!(a.ports.len(), 12, "seed {seed}");
        let per: [usize; 2] = [0, 1].map(|s| spines.values().filter(|(f, _)| *f == s).count());
        let both = 2 * per[0].min(per[1]);
        for w in a.ports[..both].windows(2) {
            assert_ne!(
                spines[&w[0]].0, spines[&w[1]].0,
                "seed {seed}: {:?}",
                a.ports
            );
        }
        let want: Vec<String> = (0..2)
            .filter(|s| per[*s] > 0)
            .map(|s| format!("s{s}"))
            .collect();
        assert_eq!(a.spines, want, "seed {seed}");
    }
}

/// A port whose latest trace broke off, or whose ACK path is not traced, is listed but not
/// advised; a flow problem's link suspects are avoided; a problem on an end RNIC is
/// reported, since no port avoids it.
#[test]
fn broken_traces_flow_suspects_and_endpoint_problems() {
    let (map, src, dst) = clos_pair();
    let mut broken = trace(0, 0, 2000, false, 5);
    broken.hops.truncate(2);
    broken.reached = false;
    let traces = vec![
        broken,
        trace(0, 1, 2001, false, 5),
        trace(0, 1, 2002, false, 5),
        // An older trace of 2002 over s0 does not count: the newest one wins.
        trace(0, 0, 2002, false, 1),
        // Traces of other pairs are ignored.
        TracedPath {
            src: ip("198.18.0.3"),
            ..trace(0, 0, 2003, false, 5)
        },
    ];
    let mut flow = active_problem(1, ProblemKind::FlowFault, ComponentKind::Flow, "x", "");
    flow.evidence.candidates = vec![SuspectComponent {
        component_kind: ComponentKind::Link,
        component: "t1-s1".into(),
        direction: Some(LinkDirection {
            from: "s1".into(),
            to: "t1".into(),
        }),
        confidence: 0.5,
    }];
    let rnic = active_problem(2, ProblemKind::RnicFault, ComponentKind::Rnic, "h2/r0", "");
    let other = active_problem(3, ProblemKind::HostDown, ComponentKind::Host, "h9", "");
    let a = advise(
        &map,
        &src,
        &dst,
        &traces,
        &Avoid::from_problems(&[flow, rnic, other]),
    );
    assert!(a.ports.is_empty(), "{a:#?}");
    let ports: Vec<(u16, bool, bool)> = a
        .catalog
        .iter()
        .map(|c| (c.src_port, c.reached, c.advised))
        .collect();
    assert_eq!(
        ports,
        [
            (2000, false, false),
            (2001, true, false),
            (2002, true, false)
        ]
    );
    assert_eq!(a.catalog[1].crosses, ["t1-s1"]);
    assert_eq!(a.endpoint_problems, ["h2/r0"]);
}
