use super::*;
use crate::diagnosis::fabric::{CLOS_2X2, FabricMap};
use crate::registry::{RnicEntry, RnicMeta};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rocemesh_proto::path::TracedPath;
use std::sync::Arc;

/// RNIC r (0..4): ToR r / 2, address 198.18.(r/2).(2(r%2)+1) as in the testbed plan;
/// task "a" (id 10) on RNICs 0 and 2, task "b" (id 11) on RNICs 1 and 3.
fn registry() -> Registry {
    let mut reg = Registry::new(
        (0..4).map(|r| {
            (
                r,
                RnicEntry {
                    host_id: r,
                    tor: (r / 2) as u16,
                },
            )
        }),
        vec!["t0".to_string(), "t1".to_string()].into(),
    );
    for r in 0..4u32 {
        reg.set_meta(
            r,
            RnicMeta {
                name: format!("h{r}/r0"),
                host: format!("h{r}"),
                ip: addr(r),
                qpn: 7,
                epoch: 1,
                registered_at_ms: 0,
            },
        );
    }
    reg.set_tasks(
        HashMap::from([(0, vec![0]), (2, vec![0]), (1, vec![1]), (3, vec![1])]),
        Arc::from(vec![("a".to_string(), 10), ("b".to_string(), 11)]),
    );
    reg
}

fn addr(r: u32) -> IpAddr {
    format!("198.18.{}.{}", r / 2, 2 * (r % 2) + 1)
        .parse()
        .unwrap()
}

/// The path of `src` -> `dst` (different ToRs) over `spine` in the 2x2 Clos.
fn flow(map: &FabricMap, src: u32, dst: u32, sport: u16, spine: u32) -> Flow {
    let (t, u) = (src / 2, dst / 2);
    let ip = |s: String| Some(s.parse().unwrap());
    let t = TracedPath {
        src: addr(src),
        dst: addr(dst),
        src_port: sport,
        dst_port: 4792,
        traced_at_unix_ns: 0,
        reached: true,
        ack_direction: false,
        hops: vec![
            ip(format!("198.18.{t}.{}", 2 * (src % 2))),
            ip(format!("198.19.0.{}", 2 * (2 * t + spine) + 1)),
            ip(format!("198.19.0.{}", 2 * (2 * u + spine))),
            Some(addr(dst)),
        ],
    };
    Flow {
        src,
        dst,
        sport,
        crossing: Crossing::of(map, &t),
    }
}

/// Hand-checked: with throughput known, shares follow bytes (a source RNIC's rate split
/// over its flows); without, flow counts; a task whose flows avoid the link is absent.
#[test]
fn shares_follow_throughput_and_fall_back_to_flow_counts() {
    let map = FabricMap::parse(CLOS_2X2).unwrap();
    let reg = registry();
    let flows = vec![
        flow(&map, 0, 2, 1000, 1), // a, crosses t0-s1
        flow(&map, 0, 2, 1001, 0), // a, avoids it
        flow(&map, 1, 3, 1002, 1), // b, crosses
        flow(&map, 1, 2, 1003, 1), // no common task: a flow of its own, crosses
        flow(&map, 3, 1, 1004, 1), // b, enters t0 over s1: crosses t0-s1 too
    ];
    // RNIC 0: 800 B/s over 2 flows; RNIC 1: 300 B/s over 2 flows; RNIC 3 unknown.
    let rate = |r: u32| match r {
        0 => Some(800.0),
        1 => Some(300.0),
        _ => None,
    };
    let got = rank("t0-s1", &flows, &reg, &rate);
    let view: Vec<(&str, Option<u32>, u32, Option<f64>)> = got
        .iter()
        .map(|b| (b.name.as_str(), b.task_id, b.flows, b.bytes_per_s))
        .collect();
    assert_eq!(
        view,
        [
            ("a", Some(10), 1, Some(400.0)),
            ("b", Some(11), 2, Some(150.0)),
            ("h1/r0 -> h2/r0 sport 1003", None, 1, Some(150.0)),
        ]
    );
    let shares: Vec<f64> = got.iter().map(|b| b.share).collect();
    assert_eq!(shares, [400.0 / 700.0, 150.0 / 700.0, 150.0 / 700.0]);
    let by_count = rank("t0-s1", &flows, &reg, &|_| None);
    let view: Vec<(&str, u32, f64)> = by_count
        .iter()
        .map(|b| (b.name.as_str(), b.flows, b.share))
        .collect();
    assert_eq!(
        view,
        [
            ("b", 2, 0.5),
            ("a", 1, 0.25),
            ("h1/r0 -> h2/r0 sport 1003", 1, 0.25)
        ]
    );
    assert!(
        rank("t1-s0", &flows, &reg, &rate)
            .iter()
            .all(|b| b.name == "a")
    );
    assert!(rank("t9-s9", &flows, &reg, &rate).is_empty());
}

/// Random flows over random spines: a blame list names exactly the tasks (and task-less
/// flows) with a flow across the link, counts those flows, its shares sum to 1 in
/// descending order, and it never exceeds its bound.
#[test]
fn random_flows_blame_exactly_what_crosses() {
    let map = FabricMap::parse(CLOS_2X2).unwrap();
    let reg = registry();
    for seed in 0..50u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let n = rng.random_range(1..40);
        let flows: Vec<Flow> = (0..n)
            .map(|i| {
                let src = rng.random_range(0..4u32);
                let dst = (1 - src / 2) * 2 + rng.random_range(0..2u32);
                flow(&map, src, dst, 2000 + i as u16, rng.random_range(0..2))
            })
            .collect();
        let link = ["t0-s0", "t0-s1", "t1-s0", "t1-s1"][rng.random_range(0..4usize)];
        let known = rng.random_bool(0.5);
        let rate = move |r: u32| known.then_some(100.0 * f64::from(r + 1));
        let got = rank(link, &flows, &reg, &rate);
        let crossing: Vec<&Flow> = flows
            .iter()
            .filter(|f| f.crossing.links.iter().any(|l| l == link))
            .collect();
        let mut want: BTreeMap<String, u32> = BTreeMap::new();
        for f in &crossing {
            let name = match (f.src % 2, f.dst % 2) {
                (0, 0) => "a".to_string(),
                (1, 1) => "b".to_string(),
                _ => format!("h{}/r0 -> h{}/r0 sport {}", f.src, f.dst, f.sport),
            };
            *want.entry(name).or_default() += 1;
        }
        let mut have: BTreeMap<String, u32> =
            got.iter().map(|b| (b.name.clone(), b.flows)).collect();
        assert!(got.len() <= MAX_BLAMED, "seed {seed}");
        if want.len() <= MAX_BLAMED {
            assert_eq!(have, want, "seed {seed}: link {link}");
            let sum: f64 = got.iter().map(|b| b.share).sum();
            assert!(
                crossing.is_empty() || (sum - 1.0).abs() < 1e-9,
                "seed {seed}: {sum}"
            );
        } else {
            have.retain(|k, v| want.get(k) == Some(v));
            assert_eq!(have.len(), MAX_BLAMED, "seed {seed}");
        }
        assert!(
            got.windows(2).all(|w| w[0].share >= w[1].share),
            "seed {seed}: {got:?}"
        );
    }
}

#[test]
fn service_flows_are_bounded_and_expire() {
    let mut s = ServiceFlows::default();
    let r = |port: u16| rocemesh_proto::ProbeResult {
        src_port: port,
        ..rocemesh_proto::testing::probe_result(1, 2, 0, true, 1)
    };
    s.note(&r(1), 0);
    s.note(&r(2), 50_000);
    assert_eq!(s.live(59_999).len(), 2);
    assert_eq!(s.live(70_000), [(1, 2, 2)]);
    for p in 0..MAX_SERVICE_FLOWS as u32 {
        s.seen.insert((p, 0, 0), 100_000);
    }
    s.note(&r(3), 100_001);
    assert!(s.seen.len() <= MAX_SERVICE_FLOWS + 2);
    assert!(
        !s.seen.contains_key(&(1, 2, 3)),
        "full: a new flow is refused"
    );
    s.note(&r(3), 100_000 + FLOW_TTL_MS);
    assert!(s.seen.contains_key(&(1, 2, 3)), "stale entries make room");
}
