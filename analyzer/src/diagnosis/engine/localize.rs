//! Step 5 of a tick: tomography of the timeouts and slow probes nothing else
//! explains, over the traced paths; findings become link, RNIC and switch problems.

use super::{BaselineVote, Candidate, Engine, FlowAgg, FlowKey, Inputs, Outcome, rnic_name};
use crate::diagnosis::fabric::FabricMap;
use crate::diagnosis::paths::{Element, End, Route, Tuple, route};
use crate::diagnosis::tomography::{
    Finding, FlowObs, Params, alg1_votes, explain_away, located_suspects,
};
use rocemesh_proto::api::{ComponentKind, Evidence, ProblemKind};
use std::collections::{HashMap, HashSet};

/// Fewest slow probes through a component to blame it for latency.
const MIN_SLOW: f64 = 10.0;
/// Background share of slow probes assumed at least.
const SLOW_FLOOR: f64 = 0.01;
/// Share of a switch's links (at least two) that must be blamed to blame the switch
/// (more than half let one link fault plus one mislocated trace make a spine down).
const SWITCH_SHARE: f64 = 0.75;

fn confidence(score: f64, min_score: f64) -> f64 {
    score / (score + min_score)
}

impl Engine {
    /// Step 5: tomography of the timeouts and slow probes nothing else explains.
    /// RNICs `vouched` for by their own ToR-mesh probes are never blamed for loss.
    pub(super) fn tomography(
        &mut self,
        inp: &Inputs,
        noisy_hosts: &HashSet<u32>,
        anomalous: &HashSet<u32>,
        vouched: &HashSet<u32>,
        out: &mut Outcome,
    ) {
        let excluded = |r: u32| {
            anomalous.contains(&r)
                || inp
                    .registry
                    .get(r)
                    .is_none_or(|e| noisy_hosts.contains(&e.host_id))
        };
        let mut loss = Vec::new();
        let mut slow = Vec::new();
        let mut keys: Vec<(&FlowKey, &FlowAgg)> = self
            .flows
            .iter()
            .filter(|(k, f)| {
                f.ok + f.timeouts + f.ack2_lost > 0 && !excluded(k.prober) && !excluded(k.target)
            })
            .collect();
        keys.sort_by_key(|(k, _)| (k.prober, k.target, k.sport, k.dport));
        // Nothing failed or nothing was slow: that tomography has nothing to explain.
        let c = &self.cfg;
        let failures: u32 = keys.iter().map(|(_, f)| f.timeouts + f.ack2_lost).sum();
        let slow_probes: u32 = keys.iter().map(|(_, f)| f.slow).sum();
        let want_loss = f64::from(failures) >= f64::from(c.min_failures);
        let want_slow = f64::from(slow_probes) >= MIN_SLOW;
        if !want_loss && !want_slow {
            return;
        }
        for (k, f) in keys {
            let (Some(p), Some(t)) = (end(inp, k.prober), end(inp, k.target)) else {
                continue;
            };
            let with_text = f.timeouts + f.ack2_lost + f.slow > 0;
            let fwd_key = Tuple {
                src: p.ip,
                dst: t.ip,
                sport: k.sport,
                dport: k.dport,
            };
            let fwd = route(inp.map, inp.paths.get(&fwd_key), &p, &t, with_text);
            let ack_key = Tuple {
                src: t.ip,
                dst: p.ip,
                sport: k.sport,
                dport: k.dport,
            };
            let swapped = Tuple {
                sport: k.dport,
                dport: k.sport,
                ..ack_key
            };
            let ack_traces = inp.paths.get(&ack_key).or_else(|| inp.paths.get(&swapped));
            let ack = route(inp.map, ack_traces, &t, &p, with_text);
            let ok_elems = union(&[&fwd.ok, &ack.ok]);
            let broken: Vec<&Route> = [&fwd, &ack]
                .into_iter()
                .filter(|r| r.break_device.is_some())
                .collect();
            let (fail_elems, located) = if broken.is_empty() {
                (union(&[&fwd.fail, &ack.fail]), false)
            } else {
                (
                    union(&broken.iter().map(|r| &r.fail).collect::<Vec<_>>()),
                    true,
                )
            };
            let break_device = fwd
                .break_device
                .clone()
                .or_else(|| ack.break_device.clone());
            if want_loss {
                loss.push(FlowObs {
                    ok: f64::from(f.ok),
                    fail: f64::from(f.timeouts),
                    ok_elems: ok_elems.clone(),
                    fail_elems,
                    located,
                    break_device: break_device.clone(),
                    text: fwd.text.clone(),
                });
            }
            if want_loss && f.ack2_lost > 0 {
                loss.push(FlowObs {
                    ok: 0.0,
                    fail: f64::from(f.ack2_lost),
                    // Never counted as arrivals (ok = 0): the path, for explain-away.
                    ok_elems: ack.ok.clone(),
                    fail_elems: ack.fail.clone(),
                    located: ack.break_device.is_some(),
                    break_device: ack.break_device.clone(),
                    text: ack.text.clone(),
                });
            }
            if want_slow && f.ok > 0 {
                slow.push(FlowObs {
                    ok: f64::from(f.ok - f.slow),
                    fail: f64::from(f.slow),
                    fail_elems: ok_elems.clone(),
                    ok_elems,
                    located: false,
                    break_device: None,
                    text: fwd.text,
                });
            }
        }
        let loss_params = Params {
            min_score: f64::from(c.min_score),
            min_failures: f64::from(c.min_failures),
            floor: f64::from(c.background_loss_ppm) / 1e6,
            min_share: 0.0,
        };
        let slow_params = Params {
            min_failures: MIN_SLOW,
            floor: SLOW_FLOOR,
            min_share: f64::from(c.latency_percent) / 100.0,
            ..loss_params
        };
        let mut found = Vec::new();
        let blamable = |e: &Element| !matches!(e, Element::Rnic(r) if vouched.contains(r));
        for f in explain_away(&loss, &loss_params, blamable) {
            let (kind, ck, name) = match &f.element {
                Element::Rnic(r) => {
                    self.sticky.insert(
                        *r,
                        (inp.now_ms + c.rnic_sticky_ms as i64, evidence(&f, "RNIC")),
                    );
                    (
                        ProblemKind::RnicFault,
                        ComponentKind::Rnic,
                        rnic_name(inp, *r),
                    )
                }
                Element::Link(l) => (ProblemKind::LinkFault, ComponentKind::Link, l.clone()),
            };
            found.push((kind, ck, name, f));
        }
        for f in explain_away(&slow, &slow_params, |_| true) {
            let (ck, name) = match &f.element {
                Element::Rnic(r) => (ComponentKind::Rnic, rnic_name(inp, *r)),
                Element::Link(l) => (ComponentKind::Link, l.clone()),
            };
            found.push((ProblemKind::HighLatency, ck, name, f));
        }
        // Switches that answered the fresh traces of failed probes are alive: their
        // failed links are link faults, not a dead switch.
        let alive: HashSet<&str> = loss
            .iter()
            .filter(|o| o.fail > 0.0)
            .filter_map(|o| o.break_device.as_deref())
            .collect();
        let suspects = located_suspects(&loss, loss_params.min_failures);
        self.down_switches.retain(|_, until| *until > inp.now_ms);
        let groups = group_by_switch(inp.map, found, &suspects, &alive, &self.down_switches);
        for (_, _, name, _) in groups.iter().filter(|g| g.0 == ProblemKind::SwitchFault) {
            self.down_switches
                .insert(name.clone(), inp.now_ms + c.window_ms as i64);
        }
        for (kind, ck, name, f) in groups {
            let what = match kind {
                ProblemKind::HighLatency => "latency tomography: slow probes",
                _ => "loss tomography: failed probes",
            };
            let score = f.iter().map(|x| x.score).fold(0.0, f64::max);
            let mut e = f.iter().fold(Evidence::default(), |mut e, x| {
                let one = evidence(x, what);
                e.probes += one.probes;
                e.timeouts += one.timeouts;
                e.votes += one.votes;
                e.ok_paths += one.ok_paths;
                e.example_paths.extend(one.example_paths);
                if !e.detail.is_empty() {
                    e.detail.push_str("; ");
                }
                e.detail.push_str(&one.detail);
                e
            });
            e.example_paths.truncate(5);
            out.candidates.push(Candidate {
                kind,
                component_kind: ck,
                component: name,
                confidence: confidence(score, f64::from(c.min_score)),
                evidence: e,
            });
        }
        out.baseline = alg1_votes(&loss)
            .into_iter()
            .map(|(e, votes)| match e {
                Element::Rnic(r) => BaselineVote {
                    component_kind: ComponentKind::Rnic,
                    component: rnic_name(inp, r),
                    votes,
                },
                Element::Link(l) => BaselineVote {
                    component_kind: ComponentKind::Link,
                    component: l,
                    votes,
                },
            })
            .collect();
    }
}

fn end<'a>(inp: &'a Inputs, r: u32) -> Option<End<'a>> {
    let m = inp.registry.meta(r)?;
    let e = inp.registry.get(r)?;
    Some(End {
        rnic: r,
        ip: m.ip,
        tor: inp.registry.tor_name(e.tor),
        name: &m.name,
    })
}

/// Elements of several lists, each at its largest weight.
fn union(lists: &[&Vec<(Element, f64)>]) -> Vec<(Element, f64)> {
    let mut v: Vec<(Element, f64)> = Vec::new();
    for (e, w) in lists.iter().flat_map(|l| l.iter()) {
        match v.iter_mut().find(|(x, _)| x == e) {
            Some((_, old)) => *old = old.max(*w),
            None => v.push((e.clone(), *w)),
        }
    }
    v
}

fn evidence(f: &Finding, what: &str) -> Evidence {
    Evidence {
        probes: (f.failures + f.ok).round() as u64,
        timeouts: f.failures.round() as u64,
        votes: f.failures.round() as u64,
        ok_paths: f.ok.round() as u64,
        example_paths: f.examples.clone(),
        detail: format!(
            "{what}: {:.0} of {:.0} through it vs background {:.2} %, score {:.1}",
            f.failures,
            f.failures + f.ok,
            f.background * 100.0,
            f.score
        ),
    }
}

type Found = (ProblemKind, ComponentKind, String, Finding);
type Group = (ProblemKind, ComponentKind, String, Vec<Finding>);

/// Link findings of one kind covering most (and at least two) links of a switch become
/// one switch finding, unless the switch is known `alive` (it answered fresh traces of
/// failed probes): a switch verdict needs more evidence than any one link's.
/// `suspects` are loss suspects not blamed themselves (their failures were explained
/// by a sibling) that still count towards their switches; a switch recently found
/// `down` keeps any of its failing links.
fn group_by_switch(
    map: &FabricMap,
    found: Vec<Found>,
    suspects: &[Element],
    alive: &HashSet<&str>,
    down: &HashMap<String, i64>,
) -> Vec<Group> {
    let mut per_switch: HashMap<(ProblemKind, String), Vec<usize>> = HashMap::new();
    for (i, (kind, ck, name, _)) in found.iter().enumerate() {
        if *ck != ComponentKind::Link {
            continue;
        }
        for d in map
            .link(name)
            .map(|l| l.devices.clone())
            .into_iter()
            .flatten()
        {
            let kind = if *kind == ProblemKind::LinkFault {
                ProblemKind::SwitchFault
            } else {
                *kind
            };
            per_switch.entry((kind, d)).or_default().push(i);
        }
    }
    let mut switches: Vec<_> = per_switch
        .into_iter()
        .filter(|((kind, d), links)| {
            if *kind == ProblemKind::SwitchFault && alive.contains(d.as_str()) {
                return false;
            }
            let total = map.links_of(d).count();
            let extra = if *kind == ProblemKind::SwitchFault {
                map.links_of(d)
                    .filter(|l| suspects.contains(&Element::Link(l.name.clone())))
                    .filter(|l| !links.iter().any(|&i| found[i].2 == l.name))
                    .count()
            } else {
                0
            };
            let implicated = links.len() + extra;
            (*kind == ProblemKind::SwitchFault && down.contains_key(d))
                || (implicated >= 2 && implicated as f64 >= SWITCH_SHARE * total as f64)
        })
        .collect();
    switches.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    let mut taken = vec![false; found.len()];
    let mut groups: Vec<Group> = Vec::new();
    for ((kind, d), links) in switches {
        if links.iter().any(|&i| taken[i]) {
            continue;
        }
        links.iter().for_each(|&i| taken[i] = true);
        let ck = ComponentKind::Switch;
        groups.push((
            kind,
            ck,
            d,
            links.iter().map(|&i| found[i].3.clone()).collect(),
        ));
    }
    for (i, (kind, ck, name, f)) in found.into_iter().enumerate() {
        if !taken[i] {
            match groups
                .iter_mut()
                .find(|g| g.0 == kind && g.1 == ck && g.2 == name)
            {
                Some(g) => g.3.push(f),
                None => groups.push((kind, ck, name, vec![f])),
            }
        }
    }
    groups
}
