//! Seeded random scenarios nobody can tune the analyzer to: the fabric's shape, the
//! faults' kinds, positions, directions and strengths and how many run at once are all
//! drawn. Scenario `i` of seed `s` depends on `(s, i)` only, so any one of a suite is
//! replayed alone from its seed and index.

use crate::faults::FaultSpec;
use crate::rng::{Rng, hash};
use crate::scenario::{Scenario, run_in_process};
use crate::score::{Score, Summary, Truth};
use crate::sim::SimConfig;
use crate::topology::{Fabric, Shape, Tier};
use rocemesh_analyzer::AnalyzerConfig;
use rocemesh_controller::ControllerConfig;
use serde::Serialize;

/// Fabric sizes a suite draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scale {
    /// Lab-sized: 2–6 ToRs × 2–4 spines, 1–4 hosts per ToR, 1–2 RNICs per host, or a
    /// rail-optimized fabric of that size (fast: CI runs these).
    Lab,
    /// 1,000–10,000 RNICs: leaf-spine, k-ary fat-tree or rail-optimized.
    Large,
}

/// Fault-free seconds before the faults start.
pub const WARMUP_S: u32 = 20;
/// Seconds the faults last (to the end of the run).
pub const FAULT_S: u32 = 30;

/// One drawn scenario.
#[derive(Debug, Clone)]
pub struct Drawn {
    /// Its index in the suite.
    pub index: u32,
    /// What to run.
    pub scenario: Scenario,
}

/// Scenario `index` of the suite seeded `seed` at `scale`.
pub fn draw(seed: u64, index: u32, scale: Scale) -> anyhow::Result<Drawn> {
    let mut rng = Rng::new(hash(&[seed, u64::from(index), 0x5ce7a410]));
    let shape = match scale {
        Scale::Lab => lab_shape(&mut rng),
        Scale::Large => large_shape(&mut rng),
    };
    let fabric = Fabric::new(shape.clone())?;
    let faults = faults(&mut rng, &fabric);
    Ok(Drawn {
        index,
        scenario: Scenario {
            config: SimConfig::new(shape, rng.next_u64()),
            faults,
            warmup_s: WARMUP_S,
            seconds: WARMUP_S + FAULT_S,
        },
    })
}

/// One scenario of a suite, run and scored.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Index in the suite (`--only` replays it).
    pub index: u32,
    /// The fabric.
    pub shape: Shape,
    /// Its RNICs.
    pub rnics: usize,
    /// The faults' ground truth (empty: a fault-free run).
    pub truth: Vec<Truth>,
    /// The analyzer's score.
    pub score: Score,
    /// Algorithm 1's score on the same data.
    pub baseline: Score,
    /// Wall-clock seconds the run took.
    pub run_s: f64,
}

/// Runs scenario `index` of the suite seeded `seed` against a real controller and
/// analyzer in this process, with their default configurations.
pub async fn run(seed: u64, index: u32, scale: Scale) -> anyhow::Result<Outcome> {
    let d = draw(seed, index, scale)?;
    let t = std::time::Instant::now();
    let r = run_in_process(
        &d.scenario,
        ControllerConfig::default(),
        AnalyzerConfig::default(),
    )
    .await?;
    Ok(Outcome {
        index,
        shape: d.scenario.config.shape,
        rnics: r.rnics,
        truth: r.truth,
        score: r.score,
        baseline: r.baseline,
        run_s: t.elapsed().as_secs_f64(),
    })
}

/// A suite's figures: the analyzer's and Algorithm 1's.
#[derive(Debug, Clone, Serialize)]
pub struct Totals {
    /// The analyzer.
    pub analyzer: Summary,
    /// R-Pingmesh Algorithm 1 on the same runs.
    pub baseline: Summary,
}

impl Totals {
    /// Sums `outcomes` up.
    pub fn of(outcomes: &[Outcome]) -> Self {
        Self {
            analyzer: Summary::of(outcomes.iter().map(|o| &o.score)),
            baseline: Summary::of(outcomes.iter().map(|o| &o.baseline)),
        }
    }
}

fn between(rng: &mut Rng, lo: u32, hi: u32) -> u32 {
    lo + rng.below(u64::from(hi - lo + 1)) as u32
}

fn pick<T: Copy>(rng: &mut Rng, v: &[T]) -> T {
    v[rng.below(v.len() as u64) as usize]
}

fn lab_shape(rng: &mut Rng) -> Shape {
    let spines = between(rng, 2, 4);
    if rng.chance(0.25) {
        Shape::Rail {
            groups: between(rng, 1, 3),
            hosts_per_group: between(rng, 2, 4),
            rails: 2,
            spines,
        }
    } else {
        Shape::LeafSpine {
            tors: between(rng, 2, 6),
            spines,
            hosts_per_tor: between(rng, 1, 4),
            rnics_per_host: between(rng, 1, 2),
        }
    }
}

fn rnics(shape: &Shape) -> u32 {
    match *shape {
        Shape::LeafSpine {
            tors,
            hosts_per_tor,
            rnics_per_host,
            ..
        } => tors * hosts_per_tor * rnics_per_host,
        Shape::FatTree { k, rnics_per_host } => k * (k / 2) * (k / 2) * rnics_per_host,
        Shape::Rail {
            groups,
            hosts_per_group,
            rails,
            ..
        } => groups * hosts_per_group * rails,
    }
}

fn large_shape(rng: &mut Rng) -> Shape {
    loop {
        let shape = match rng.below(3) {
            0 => Shape::LeafSpine {
                tors: between(rng, 8, 64),
                spines: between(rng, 2, 8),
                hosts_per_tor: between(rng, 4, 16),
                rnics_per_host: pick(rng, &[4, 8]),
            },
            1 => Shape::FatTree {
                k: pick(rng, &[8, 10, 12, 14, 16]),
                rnics_per_host: pick(rng, &[2, 4, 8]),
            },
            _ => Shape::Rail {
                groups: between(rng, 2, 16),
                hosts_per_group: between(rng, 8, 32),
                rails: pick(rng, &[4, 8]),
                spines: between(rng, 2, 8),
            },
        };
        if (1_000..=10_000).contains(&rnics(&shape)) {
            return shape;
        }
    }
}

/// What a drawn fault occupies, so concurrent faults stay apart (two faults on one
/// component, or a switch fault and a fault of one of its links, have no single truth).
#[derive(Default)]
struct Taken {
    switches: Vec<u32>,
    links: Vec<u32>,
    hosts: Vec<u32>,
    flow: bool,
}

impl Taken {
    fn link_free(&self, f: &Fabric, l: u32) -> bool {
        let link = &f.links[l as usize];
        !self.links.contains(&l)
            && !self.switches.contains(&link.lower)
            && !self.switches.contains(&link.upper)
    }

    fn switch_free(&self, f: &Fabric, s: u32) -> bool {
        !self.switches.contains(&s)
            && !self.links.iter().any(|&l| {
                let link = &f.links[l as usize];
                link.lower == s || link.upper == s
            })
            && !self
                .hosts
                .iter()
                .any(|&h| rnics_of(f, h).any(|r| f.rnics[r as usize].tor == s))
    }

    fn host_free(&self, f: &Fabric, h: u32) -> bool {
        !self.hosts.contains(&h)
            && !rnics_of(f, h).any(|r| self.switches.contains(&f.rnics[r as usize].tor))
    }
}

fn rnics_of(f: &Fabric, h: u32) -> impl Iterator<Item = u32> {
    let host = &f.hosts[h as usize];
    host.first_rnic..host.first_rnic + host.rnics
}

fn percent(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
    ((lo + rng.unit() * (hi - lo)) * 10.0).round() / 10.0
}

/// Draws how many faults run at once (none 20 %, one 50 %, two 20 %, three 10 %) and
/// each of them with `one`, which returns `None` when what it drew is taken (then it is
/// drawn again, a few times at most).
pub fn concurrent<T>(rng: &mut Rng, mut one: impl FnMut(&mut Rng) -> Option<T>) -> Vec<T> {
    let n = match rng.below(10) {
        0 | 1 => 0,
        2..=6 => 1,
        7 | 8 => 2,
        _ => 3,
    };
    let mut out = Vec::new();
    for _ in 0..n * 8 {
        if out.len() == n {
            break;
        }
        if let Some(x) = one(rng) {
            out.push(x);
        }
    }
    out
}

fn faults(rng: &mut Rng, f: &Fabric) -> Vec<FaultSpec> {
    let mut taken = Taken::default();
    concurrent(rng, |rng| one_fault(rng, f, &mut taken))
}

fn one_fault(rng: &mut Rng, f: &Fabric, taken: &mut Taken) -> Option<FaultSpec> {
    let link = |rng: &mut Rng, taken: &mut Taken| {
        let l = rng.below(f.links.len() as u64) as u32;
        taken.link_free(f, l).then(|| {
            taken.links.push(l);
            l
        })
    };
    let switch = |rng: &mut Rng, taken: &mut Taken, upper_only: bool| {
        let s = rng.below(f.switches.len() as u64) as u32;
        let ok =
            taken.switch_free(f, s) && !(upper_only && f.switches[s as usize].tier == Tier::Tor);
        ok.then(|| {
            taken.switches.push(s);
            f.switches[s as usize].name.clone()
        })
    };
    let host = |rng: &mut Rng, taken: &mut Taken| {
        let h = rng.below(f.hosts.len() as u64) as u32;
        taken.host_free(f, h).then(|| {
            taken.hosts.push(h);
            h
        })
    };
    let any_rnic = |rng: &mut Rng| f.rnic_name(rng.below(f.rnics.len() as u64) as u32);
    let flap = |rng: &mut Rng| {
        (
            u64::from(between(rng, 1, 4)) * 500,
            u64::from(between(rng, 1, 4)) * 1_000,
        )
    };
    Some(match rng.below(16) {
        14 | 15 => {
            // One dropped 5-tuple per scenario: its switch is known only once injected.
            if std::mem::replace(&mut taken.flow, true) {
                return None;
            }
            FaultSpec::FlowDrop {
                prober: any_rnic(rng),
                pick: rng.next_u64() as u32,
                ack: rng.chance(0.5),
                hop: rng.below(5) as u32,
            }
        }
        0 => {
            // Down at either end: at the lower one its switch routes around the link
            // while the upper one keeps sending into it.
            let l = &f.links[link(rng, taken)? as usize];
            let end = if rng.chance(0.5) { l.lower } else { l.upper };
            FaultSpec::LinkDown {
                link: l.name.clone(),
                at: Some(f.switches[end as usize].name.clone()),
            }
        }
        1 | 2 => FaultSpec::LinkLoss {
            link: f.links[link(rng, taken)? as usize].name.clone(),
            percent: percent(rng, 0.5, 3.0),
            toward: None,
        },
        3 | 4 => {
            let l = &f.links[link(rng, taken)? as usize];
            let end = if rng.chance(0.5) { l.lower } else { l.upper };
            FaultSpec::LinkLoss {
                link: l.name.clone(),
                percent: percent(rng, 0.5, 3.0),
                toward: Some(f.switches[end as usize].name.clone()),
            }
        }
        5 => {
            let (down_ms, up_ms) = flap(rng);
            FaultSpec::LinkFlap {
                link: f.links[link(rng, taken)? as usize].name.clone(),
                down_ms,
                up_ms,
            }
        }
        6 => FaultSpec::SwitchLoss {
            switch: switch(rng, taken, false)?,
            percent: percent(rng, 0.5, 3.0),
        },
        7 => FaultSpec::SwitchDelay {
            switch: switch(rng, taken, false)?,
            delay_us: f64::from(between(rng, 2, 10) * 10),
        },
        8 => FaultSpec::SwitchDown {
            switch: switch(rng, taken, true)?,
        },
        9 => {
            let h = host(rng, taken)?;
            let r = f.hosts[h as usize].first_rnic
                + rng.below(u64::from(f.hosts[h as usize].rnics)) as u32;
            let rnic = f.rnic_name(r);
            match rng.below(3) {
                0 => FaultSpec::RnicDown { rnic },
                1 => FaultSpec::RnicLoss {
                    rnic,
                    percent: percent(rng, 5.0, 30.0),
                },
                _ => {
                    let (down_ms, up_ms) = flap(rng);
                    FaultSpec::RnicFlap {
                        rnic,
                        down_ms,
                        up_ms,
                    }
                }
            }
        }
        10 | 11 => FaultSpec::HostDown {
            host: f.hosts[host(rng, taken)? as usize].name.clone(),
        },
        12 => FaultSpec::AgentRestart {
            host: f.hosts[host(rng, taken)? as usize].name.clone(),
            down_ms: u64::from(between(rng, 1, 5)) * 1_000,
        },
        _ => {
            let h = host(rng, taken)?;
            FaultSpec::CpuNoise {
                host: f.hosts[h as usize].name.clone(),
                rnics: between(rng, 1, f.hosts[h as usize].rnics),
                delay_ms: f64::from(between(rng, 2, 20)),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Fault;

    #[test]
    fn a_scenario_depends_on_seed_and_index_only() {
        let a = draw(7, 3, Scale::Lab).unwrap();
        let b = draw(7, 3, Scale::Lab).unwrap();
        assert_eq!(a.scenario.faults, b.scenario.faults);
        assert_eq!(a.scenario.config.shape, b.scenario.config.shape);
        let others: Vec<_> = (0..20)
            .map(|i| draw(8, i, Scale::Lab).unwrap().scenario.faults)
            .collect();
        assert!(others.iter().any(|f| *f != a.scenario.faults));
    }

    #[test]
    fn drawn_faults_resolve_stay_apart_and_cover_the_kinds() {
        let mut kinds = std::collections::BTreeSet::new();
        let (mut free, mut concurrent, mut directed, mut rail) = (0, 0, 0, 0);
        for i in 0..400 {
            let d = draw(42, i, Scale::Lab).unwrap();
            let fabric = Fabric::new(d.scenario.config.shape.clone()).unwrap();
            let faults = &d.scenario.faults;
            assert!(faults.len() <= 3);
            free += usize::from(faults.is_empty());
            concurrent += usize::from(faults.len() > 1);
            rail += usize::from(matches!(d.scenario.config.shape, Shape::Rail { .. }));
            let mut components = Vec::new();
            for spec in faults {
                kinds.insert(serde_json::to_value(spec).unwrap()["kind"].to_string());
                if matches!(spec, FaultSpec::FlowDrop { .. }) {
                    continue; // resolved against pinglists when injected
                }
                let fault = Fault::new(&fabric, spec.clone(), 0, None)
                    .unwrap_or_else(|e| panic!("scenario {i}: {spec:?}: {e:#}"));
                let t = fault.truth(&fabric, &crate::twins::Twins::new(&fabric, &[]));
                directed += usize::from(t.direction.is_some());
                assert!(
                    !components.contains(&t.component),
                    "scenario {i} repeats {t:?}"
                );
                components.push(t.component);
                if let FaultSpec::LinkLoss { percent, .. } | FaultSpec::SwitchLoss { percent, .. } =
                    spec
                {
                    assert!((0.5..=3.0).contains(percent), "{spec:?}");
                }
            }
        }
        assert_eq!(kinds.len(), 13, "{kinds:?}");
        assert!(free > 20 && concurrent > 20 && directed > 20 && rail > 40);
    }

    #[test]
    fn large_fabrics_hold_one_to_ten_thousand_rnics() {
        let mut shapes = std::collections::HashSet::new();
        for i in 0..60 {
            let d = draw(1, i, Scale::Large).unwrap();
            let n = rnics(&d.scenario.config.shape);
            assert!((1_000..=10_000).contains(&n), "{n}");
            assert_eq!(
                Fabric::new(d.scenario.config.shape.clone())
                    .unwrap()
                    .rnics
                    .len(),
                n as usize
            );
            shapes.insert(std::mem::discriminant(&d.scenario.config.shape));
        }
        assert_eq!(shapes.len(), 3, "leaf-spine, fat-tree and rail");
    }
}
