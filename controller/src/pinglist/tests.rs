//! Pinglist generation on synthetic registries: ToR-mesh completeness, inter-ToR coverage
//! under simulated ECMP, rotation, determinism and versioning.

use super::*;
use crate::hash::stable_hash;
use crate::registry::{HostRecord, RnicRecord};
use std::collections::HashSet;

/// `tors` ToRs with `hosts_per_tor` hosts each, two RNICs per host under the same ToR.
fn registry(tors: u32, hosts_per_tor: u32) -> Registry {
    let mut hosts = Vec::new();
    let mut rnics = Vec::new();
    for t in 0..tors {
        for h in 0..hosts_per_tor {
            let host_id = t * hosts_per_tor + h + 1;
            hosts.push(HostRecord {
                id: host_id,
                name: format!("host-{host_id}"),
                epoch: 1,
                registrations: 1,
                registered_at_ms: 0,
            });
            for n in 0..2u32 {
                let id = host_id * 2 + n;
                rnics.push(RnicRecord {
                    id,
                    host_id,
                    ifname: format!("eth{n}"),
                    ip: format!("10.{t}.{h}.{}", n + 1).parse().unwrap(),
                    gid: None,
                    qpn: 100 + id,
                    port: 4791,
                    tor: format!("tor-{t:02}"),
                    tor_hint: None,
                    rail: None,
                    rail_hint: None,
                    gateway: None,
                    epoch: 1,
                    registered_at_ms: 0,
                });
            }
        }
    }
    Registry::from_records(hosts, rnics)
}

fn params(k: u32, m: u32) -> PinglistParams {
    PinglistParams {
        tormesh_pps: 10.0,
        intertor_link_pps: 10.0,
        tuples_per_tor: k,
        rotated_per_period: m,
        ports: PortRange {
            min: 49152,
            max: 65535,
        },
        timeout_ms: 500,
        tormesh_max_targets: 64,
    }
}

fn list(lists: &HashMap<u32, Arc<Pinglist>>, rnic: u32, class: ProbeClass) -> Option<&ProbeList> {
    lists
        .values()
        .flat_map(|p| &p.rnics)
        .find(|r| r.rnic_id == rnic)?
        .lists
        .iter()
        .find(|l| l.class == class)
}

#[test]
fn tormesh_lists_hold_exactly_the_other_rnics_of_the_tor() {
    let reg = registry(3, 4);
    let lists = build_all(&reg, &params(21, 5), 0, HashMap::new());
    assert_eq!(lists.len(), 12, "one pinglist per host");
    for r in reg.rnics() {
        let mesh = list(&lists, r.id, ProbeClass::TorMesh).expect("every RNIC has a ToR-mesh list");
        assert_eq!(mesh.pps, 10.0);
        let got: HashSet<u32> = mesh.entries.iter().map(|e| e.rnic_id).collect();
        let want: HashSet<u32> = reg
            .rnics()
            .filter(|o| o.tor == r.tor && o.id != r.id)
            .map(|o| o.id)
            .collect();
        assert_eq!(got, want);
        assert_eq!(mesh.entries.len(), want.len(), "no duplicates");
        for e in &mesh.entries {
            let t = reg.rnics().find(|o| o.id == e.rnic_id).unwrap();
            assert_eq!((e.ip, e.port, e.qpn), (t.ip, t.port, t.qpn));
            assert!(e.src_port >= 49152);
        }
    }
}

#[test]
fn a_single_tor_has_no_inter_tor_lists() {
    let reg = registry(1, 3);
    let lists = build_all(&reg, &params(21, 5), 0, HashMap::new());
    assert!(
        reg.rnics()
            .all(|r| list(&lists, r.id, ProbeClass::InterTor).is_none())
    );
}

#[test]
fn inter_tor_tuples_leave_their_tor_and_set_the_rate() {
    let reg = registry(5, 3);
    let (k, m) = (21, 5);
    let groups = tor_groups(&reg);
    let tuples = intertor::tuples(
        &groups,
        k,
        m,
        7,
        PortRange {
            min: 49152,
            max: 65535,
        },
    );
    assert_eq!(tuples.len(), 5 * k as usize);
    for (tor_index, chunk) in tuples.chunks(k as usize).enumerate() {
        let tor = format!("tor-{tor_index:02}");
        assert!(chunk.iter().all(|t| t.src.tor == tor && t.dst.tor != tor));
        // Cycling over the other ToRs: with 4 others and 21 slots each gets 5 or 6.
        let mut per_dst: HashMap<&str, usize> = HashMap::new();
        for t in chunk {
            *per_dst.entry(t.dst.tor.as_str()).or_default() += 1;
        }
        assert_eq!(per_dst.len(), 4);
        assert!(per_dst.values().all(|&n| n == 5 || n == 6), "{per_dst:?}");
    }
    // Every ToR is a destination k times in total: incoming uplinks get as many tuples.
    let mut incoming: HashMap<&str, usize> = HashMap::new();
    for t in &tuples {
        *incoming.entry(t.dst.tor.as_str()).or_default() += 1;
    }
    assert!(incoming.values().all(|&n| n == k as usize), "{incoming:?}");
    // Each tuple lands in its source RNIC's list, probed at intertor_link_pps.
    let lists = build_all(&reg, &params(k, m), 7, HashMap::new());
    let listed: usize = reg
        .rnics()
        .filter_map(|r| list(&lists, r.id, ProbeClass::InterTor))
        .map(|l| {
            assert_eq!(l.pps, l.entries.len() as f64 * 10.0);
            l.entries.len()
        })
        .sum();
    assert_eq!(listed, tuples.len());
}

#[test]
fn inter_tor_tuples_cover_all_ecmp_paths_with_probability_p() {
    // ECMP modelled as a uniform hash of the 5-tuple onto N paths, salted per trial;
    // trials also vary the rotation, so both the hash and the tuples change.
    let n = 4u32;
    let k = coverage::tuples_per_tor(n, 0.99);
    let reg = registry(4, 4);
    let groups = tor_groups(&reg);
    let ports = PortRange {
        min: 49152,
        max: 65535,
    };
    let (mut trials, mut covered) = (0u32, 0u32);
    for seed in 0u64..500 {
        let tuples = intertor::tuples(&groups, k, k, seed, ports);
        for chunk in tuples.chunks(k as usize) {
            let mut paths = 0u32;
            for t in chunk {
                let h = stable_hash(&[
                    b"ecmp",
                    &seed.to_le_bytes(),
                    t.src.ip.to_string().as_bytes(),
                    t.dst.ip.to_string().as_bytes(),
                    &t.src_port.to_le_bytes(),
                    &t.dst.port.to_le_bytes(),
                ]);
                paths |= 1 << (h % u64::from(n));
            }
            trials += 1;
            covered += u32::from(paths == (1 << n) - 1);
        }
    }
    let rate = f64::from(covered) / f64::from(trials);
    assert!(
        rate >= 0.98,
        "all {n} paths covered in {covered}/{trials} trials"
    );
}

#[test]
fn each_rotation_changes_exactly_m_slots() {
    let reg = registry(3, 4);
    let groups = tor_groups(&reg);
    let ports = PortRange {
        min: 49152,
        max: 65535,
    };
    let (k, m) = (21u32, 5u32);
    for r in [0u64, 1, 2, 3, 4, 5, 1000] {
        let changed_gens = (0..k)
            .filter(|&i| {
                intertor::slot_generation(i, k, m, r) != intertor::slot_generation(i, k, m, r + 1)
            })
            .count();
        assert_eq!(changed_gens, m as usize, "rotation {r}");
        let before = intertor::tuples(&groups, k, m, r, ports);
        let after = intertor::tuples(&groups, k, m, r + 1, ports);
        for (a, b) in before.chunks(k as usize).zip(after.chunks(k as usize)) {
            let changed = a
                .iter()
                .zip(b)
                .filter(|(x, y)| {
                    (x.src.id, x.dst.id, x.src_port) != (y.src.id, y.dst.id, y.src_port)
                })
                .count();
            assert_eq!(changed, m as usize, "rotation {r}");
        }
    }
    // After ceil(k / m) rotations every slot has been refreshed.
    let gens0: Vec<u64> = (0..k)
        .map(|i| intertor::slot_generation(i, k, m, 10))
        .collect();
    let gens1: Vec<u64> = (0..k)
        .map(|i| intertor::slot_generation(i, k, m, 10 + u64::from(k.div_ceil(m))))
        .collect();
    assert!(gens0.iter().zip(&gens1).all(|(a, b)| a != b));
    // m = 0 freezes the tuples.
    assert!((0..k).all(|i| intertor::slot_generation(i, k, 0, 5) == intertor::slot_generation(i, k, 0, 6)));
}

#[test]
fn output_is_deterministic_and_versions_follow_content() {
    let reg = registry(3, 2);
    let a = build_all(&reg, &params(21, 5), 3, HashMap::new());
    let b = build_all(&registry(3, 2), &params(21, 5), 3, HashMap::new());
    assert_eq!(a, b);
    let rotated = build_all(&reg, &params(21, 5), 4, HashMap::new());
    let changed = a
        .keys()
        .filter(|h| a[h].version != rotated[h].version)
        .count();
    assert!(changed > 0, "a rotation changes some hosts' lists");
    for (h, list) in &rotated {
        assert_eq!(
            list.version == a[h].version,
            list.rnics == a[h].rnics,
            "host {h}: version tracks content"
        );
    }
}

#[test]
fn the_cache_serves_lists_read_after_a_callers_arrival_and_rebuilds_otherwise() {
    let reg = registry(3, 2);
    let lists = build_all(&reg, &params(21, 5), 3, HashMap::new());
    let host = *lists.keys().next().unwrap();
    let cache = PinglistCache::default();
    let builds = std::cell::Cell::new(0);
    let build = |key: CacheKey| {
        let (builds, lists) = (&builds, &lists);
        move || {
            builds.set(builds.get() + 1);
            (key, lists.clone())
        }
    };
    let early = Instant::now();
    // A poll builds from generation 2...
    assert!(
        cache
            .get(early, host, || (2, 0, 0), build((2, 0, 0)))
            .is_some()
    );
    // ...which serves a poll that arrived before that build even though the registry has
    // moved on since (generation 3): no rebuild.
    assert!(
        cache
            .get(early, host, || (3, 0, 0), build((3, 0, 0)))
            .is_some()
    );
    assert_eq!(builds.get(), 1);
    // A poll arriving after the build: the same generation is a hit, a newer one rebuilds.
    let later = Instant::now();
    assert!(
        cache
            .get(later, host, || (2, 0, 0), build((2, 0, 0)))
            .is_some()
    );
    assert_eq!(builds.get(), 1);
    assert!(
        cache
            .get(later, host, || (3, 0, 0), build((3, 0, 0)))
            .is_some()
    );
    assert_eq!(builds.get(), 2);
    // A host the lists lack: rebuilt, then unknown.
    assert!(
        cache
            .get(Instant::now(), u32::MAX, || (4, 0, 0), build((4, 0, 0)))
            .is_none()
    );
    assert_eq!(builds.get(), 3);
}

/// One ToR of `hosts` hosts with `per_host` RNICs each (addresses from 10.0.0.0/8).
fn one_big_tor(hosts: u32, per_host: u32) -> Registry {
    let mut hs = Vec::new();
    let mut rnics = Vec::new();
    for host_id in 1..=hosts {
        hs.push(HostRecord {
            id: host_id,
            name: format!("host-{host_id}"),
            epoch: 1,
            registrations: 1,
            registered_at_ms: 0,
        });
        for n in 0..per_host {
            let id = host_id * per_host + n;
            rnics.push(RnicRecord {
                id,
                host_id,
                ifname: format!("eth{n}"),
                ip: std::net::Ipv4Addr::from(0x0a00_0000 | id).into(),
                gid: None,
                qpn: 100 + id,
                port: 4791,
                tor: "tor-big".into(),
                tor_hint: None,
                rail: None,
                rail_hint: None,
                gateway: None,
                epoch: 1,
                registered_at_ms: 0,
            });
        }
    }
    Registry::from_records(hs, rnics)
}

#[test]
fn a_tor_larger_than_the_cap_is_sampled_and_rotations_cover_every_pair() {
    let reg = one_big_tor(50, 4);
    let n = 200usize;
    let mut p = params(21, 5);
    p.tormesh_max_targets = 16;
    let rotations = (n - 1).div_ceil(16) as u64;
    let mut pairs: HashSet<(u32, u32)> = HashSet::new();
    for rotation in 0..rotations {
        let lists = build_all(&reg, &p, rotation, HashMap::new());
        assert_eq!(
            lists,
            build_all(&reg, &p, rotation, HashMap::new()),
            "deterministic"
        );
        for r in reg.rnics() {
            let mesh = list(&lists, r.id, ProbeClass::TorMesh).unwrap();
            assert_eq!(mesh.entries.len(), 16, "capped");
            assert_eq!(mesh.pps, 10.0, "the rate per RNIC stays the configured one");
            let ids: HashSet<u32> = mesh.entries.iter().map(|e| e.rnic_id).collect();
            assert_eq!(ids.len(), 16, "no duplicates");
            assert!(!ids.contains(&r.id), "never itself");
            pairs.extend(ids.into_iter().map(|t| (r.id, t)));
        }
    }
    assert_eq!(
        pairs.len(),
        n * (n - 1),
        "every ordered pair probed within {rotations} rotations"
    );
    let r0 = build_all(&reg, &p, 0, HashMap::new());
    let r1 = build_all(&reg, &p, 1, HashMap::new());
    let some = reg.rnics().next().unwrap().id;
    assert_ne!(
        list(&r0, some, ProbeClass::TorMesh),
        list(&r1, some, ProbeClass::TorMesh),
        "the window moves with the rotation"
    );
}

#[test]
fn seven_thousand_rnics_on_one_tor_make_pinglists_linear_in_size() {
    // 7,040 RNICs (110 hosts x 64): unsampled, each host's list held 64 x 7,039 targets
    // (33 MB of JSON) and the controller 2 GB.
    let reg = one_big_tor(110, 64);
    let p = params(21, 5);
    let lists = build_all(&reg, &p, 0, HashMap::new());
    let mut targets = 0usize;
    let mut largest_json = 0usize;
    for l in lists.values() {
        for r in &l.rnics {
            for pl in &r.lists {
                assert!(pl.entries.len() <= p.tormesh_max_targets);
                targets += pl.entries.len();
            }
        }
        largest_json = largest_json.max(serde_json::to_vec(&**l).unwrap().len());
    }
    assert_eq!(targets, 7_040 * p.tormesh_max_targets);
    assert!(
        largest_json < 512 * 1024,
        "largest host pinglist {largest_json} bytes"
    );
}
