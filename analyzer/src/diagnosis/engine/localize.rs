//! Step 5 of a tick: tomography of the timeouts and slow probes nothing else
//! explains, over the traced paths; findings become link, RNIC and switch problems (a
//! link problem names the faulty direction when one direction alone is blamed).

use super::classify::strained;
use super::memo::RouteMemo;
use super::observe::{Counted, MIN_SLOW, Observations, observations};
use super::{BaselineVote, Candidate, Engine, Facts, Failed, Inputs, Outcome, rnic_name, tally};
use crate::config::DiagnosisConfig;
use crate::diagnosis::fabric::FabricMap;
use crate::diagnosis::flows::Window;
use crate::diagnosis::flows::table::FlowKey;
use crate::diagnosis::paths::{Element, far_end};
use crate::diagnosis::policy::{self, Onset};
use crate::diagnosis::tomography::{
    Finding, ObsSet, Params, alg1_votes, chernoff_score, explain_away, located_breaks,
};
use rocemesh_proto::api::{ComponentKind, Evidence, LinkDirection, ProblemKind, SuspectComponent};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

/// Background share of slow probes assumed at least.
const SLOW_FLOOR: f64 = 0.01;
/// Share of a switch's links (at least two) that must be blamed to blame the switch:
/// more than half. A link fault's mislocated side effects no longer reach a second
/// link of its switch (breaks after a spine point at its link to the destination ToR,
/// and explain-away drops findings another one shadows), and a switch that answered the
/// traces of failed probes is never blamed; a dead spine, whose links fail one by one as
/// their probes time out, is then named before its last link is.
const SWITCH_SHARE: f64 = 0.5;

fn confidence(score: f64, min_score: f64) -> f64 {
    score / (score + min_score)
}

impl Engine {
    /// Step 5: tomography of the timeouts and slow probes nothing else explains.
    /// RNICs `vouched` for by their own ToR-mesh probes are never blamed for loss.
    pub(super) fn tomography(&mut self, inp: &Inputs, facts: &Facts, out: &mut Outcome) {
        let Facts {
            hosts,
            noisy: noisy_hosts,
            anomalous,
            vouched,
            ..
        } = facts;
        let tick = (&facts.fails, &facts.slow);
        let noisy = |r: u32| {
            inp.registry
                .get(r)
                .is_some_and(|e| noisy_hosts.contains(&e.host_id))
        };
        let counted = |r: u32| match inp.registry.get(r) {
            None => Counted::No,
            Some(_) if anomalous.contains(&r) => Counted::No,
            Some(_) if noisy(r) => Counted::Loss,
            Some(_) => Counted::Both,
        };
        let c = self.cfg.clone();
        let others = self.shared.take();
        if inp.now_ms < self.paths_until_ms {
            return;
        }
        let flows = self.window.flows();
        let arrivals = |i: u32| f64::from(flows.get(i).ok);
        let Some(obs) = observations(
            inp,
            (flows, &arrivals),
            tick,
            counted,
            others.is_some(),
            (c.min_failures, latency_params(&c, None).min_share),
            &mut self.routes,
        ) else {
            return;
        };
        let Observations {
            mut loss,
            slow,
            slow_pairs,
            tested,
        } = obs;
        if let Some(others) = others {
            out.loss = loss.to_named();
            loss.extend(others);
        }
        let loss_params = loss_params(&c, tested.0);
        let slow_params = latency_params(&c, tested.1);
        let mut found = Vec::new();
        let blamable = |e: &Element| !matches!(e, Element::Rnic(r) if vouched.contains(r));
        let gap = policy::hold_gap_ms(c.tick_ms);
        self.flow_holds.forget_before(inp.now_ms - gap);
        self.rnic_holds.forget_before(inp.now_ms - gap);
        let breaks = located_breaks(&loss, loss_params.min_failures);
        let now = inp.now_ms;
        self.located.retain(|_, (until, _)| *until > now);
        for b in breaks.iter().filter(|b| b.mostly) {
            if let Element::Link(l) = &b.element {
                self.located
                    .insert(l.to_string(), (now + c.window_ms as i64, b.failures));
            }
        }
        let open_after = now - c.resolve_after_ms as i64;
        let open =
            |l: &str| (self.link_holds.reported.get(l)).is_some_and(|(at, _)| *at >= open_after);
        for mut f in explain_away(&loss, &loss_params, blamable) {
            tracing::debug!(
                element = ?f.element,
                flow = ?f.flow,
                failures = f.failures,
                ok = f.ok,
                located = f.located,
                score = f.score,
                rival = f.rival,
                beside_switch = f.beside_switch,
                "loss tomography finding"
            );
            if let Some(k) = f.flow {
                // One flow's failures single out none of its components: a flow problem,
                // once it has lasted (a fault's first failures may come from one flow).
                if self
                    .flow_holds
                    .confirm(k, inp.now_ms, c.link_confirm_ms as i64)
                {
                    out.candidates.push(flow_problem(inp, &loss, &f, k, &c));
                }
                continue;
            }
            pick_twin(&mut f, open, &self.located);
            // The host noise already reported explains failures an RNIC of a noisy host
            // (or a component the probes cannot tell from it) is blamed for.
            let on_noisy = |e: &Element| matches!(e, Element::Rnic(r) if noisy(*r));
            if on_noisy(&f.element) || f.equivalent.iter().any(on_noisy) {
                continue;
            }
            let (kind, ck, name) = match &f.element {
                Element::Rnic(r) => {
                    // Found afresh every tick, not sticky: an RNIC blamed while a lossy
                    // switch above it was not significant yet gives way to the switch.
                    let lasted =
                        self.rnic_holds
                            .confirm(*r, inp.now_ms, c.strained_rnic_hold_ms as i64);
                    // Evidence short of twice `min_score` (the prior of a fabric of up to
                    // 100 components) may be a switch or link fault's first failures, its
                    // other parts not significant yet: held too.
                    let weak = f.score < 2.0 * loss_params.min_score;
                    if !lasted && (f.rival || weak || strained(inp, hosts, *r)) {
                        continue;
                    }
                    (
                        ProblemKind::RnicFault,
                        ComponentKind::Rnic,
                        rnic_name(inp, *r),
                    )
                }
                Element::Link(l) | Element::Direction { link: l, .. } => {
                    (ProblemKind::LinkFault, ComponentKind::Link, l.to_string())
                }
                Element::Switch(d) => (
                    ProblemKind::SwitchFault,
                    ComponentKind::Switch,
                    d.to_string(),
                ),
            };
            found.push((kind, ck, name, f));
        }
        for f in explain_away(&slow, &slow_params, |_| true) {
            let (ck, name) = component(inp, &f.element);
            found.push((ProblemKind::HighLatency, ck, name, f));
        }
        // Switches that answered the fresh traces of failed probes are alive: their
        // failed links are link faults, not a dead switch.
        let alive: HashSet<&str> = (0..loss.len())
            .filter(|&i| loss[i].fail > 0.0)
            .filter_map(|i| loss.break_device(i))
            .collect();
        let suspects: Vec<Element> = breaks
            .into_iter()
            .filter(|b| b.down)
            .map(|b| b.element)
            .collect();
        self.down_switches.retain(|_, until| *until > inp.now_ms);
        // ...and stay so for a window: a switch is declared down on lasting silence, not
        // on one tick in which it answered no trace (ICMP replies late on a loaded box).
        self.answered.retain(|_, until| *until > inp.now_ms);
        for d in &alive {
            self.answered
                .insert((*d).to_string(), inp.now_ms + c.window_ms as i64);
        }
        let recently_alive: HashSet<&str> = self.answered.keys().map(String::as_str).collect();
        let liveness = Liveness {
            alive: &recently_alive,
            silence_known: inp.now_ms >= self.silence_known_ms,
            down: &self.down_switches,
        };
        let groups = group_by_switch(inp.map, found, &suspects, &liveness);
        // A switch is down when most of its failures end at breaks fresh traces located
        // (it answers none): then a single failing link of its stays its for a window.
        // A switch losing part of its traffic, whose traces mostly get through, is
        // judged afresh every tick.
        for (_, _, name, f) in groups.iter().filter(|g| g.0 == ProblemKind::SwitchFault) {
            let (located, failures) = f
                .iter()
                .fold((0.0, 0.0), |(l, n), x| (l + x.located, n + x.failures));
            if 2.0 * located >= failures {
                self.down_switches
                    .insert(name.clone(), inp.now_ms + c.window_ms as i64);
            }
        }
        // The oldest last upload of the live agents: every live agent's results up to it
        // are in.
        let uploaded = inp
            .hosts
            .values()
            .filter(|l| inp.now_ms - l.last_upload_ms <= c.host_silent_ms as i64)
            .map(|l| l.last_upload_ms)
            .min();
        let since_failure = SinceFailure {
            inp,
            uploaded,
            window: &self.window,
            failed: &facts.failed,
            counted: &counted,
            memo: RefCell::new(&mut self.routes),
            loss: &loss,
            params: &loss_params,
            cfg: &c,
            weighed: Default::default(),
        };
        let groups = confirm_links(
            &mut self.link_holds,
            &c,
            (inp.now_ms, inp.map),
            groups,
            &Ends {
                alive: &alive,
                beyond: &|device: &str, link: &str, background: f64| {
                    fails_beyond(&loss, (device, link), background, &loss_params)
                },
                settled: &|since: i64| uploaded.is_none_or(|u| u > since),
                cleared: &|device: &str, link: &str, background: f64| {
                    since_failure.clears(device, link, background)
                },
            },
        );
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
            if ck == ComponentKind::Link {
                e.direction = blamed_direction(inp.map, &f);
            }
            indistinguishable(inp, (ck, &name), &f, &mut e);
            if kind == ProblemKind::HighLatency {
                super::latency::attach_pairs(inp, &slow, &slow_pairs, &f, &mut e);
            }
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
            .map(|(e, votes)| {
                let (component_kind, component) = component(inp, &e);
                BaselineVote {
                    component_kind,
                    component,
                    votes,
                }
            })
            .collect();
    }
}

/// Loss tomography's thresholds, `tested` components.
fn loss_params(c: &DiagnosisConfig, tested: Option<usize>) -> Params {
    Params {
        min_score: f64::from(c.min_score),
        min_failures: f64::from(c.min_failures),
        floor: f64::from(c.background_loss_ppm) / 1e6,
        min_share: 0.0,
        tested,
        lone_flows: true,
    }
}

/// Latency tomography's thresholds, `tested` components.
pub(super) fn latency_params(c: &DiagnosisConfig, tested: Option<usize>) -> Params {
    Params {
        min_failures: MIN_SLOW,
        floor: SLOW_FLOOR,
        min_share: f64::from(c.latency_percent) / 100.0,
        lone_flows: false,
        ..loss_params(c, tested)
    }
}

/// Link (and RNIC) findings held back until confirmed, and when each was last reported.
#[derive(Debug, Default)]
pub(super) struct LinkHolds {
    /// Held links and RNICs, by name.
    pending: Onset<String>,
    /// Latest time each link or RNIC finding was reported, by name (never held while its
    /// problem is open), and whether it holds its switches' other links
    /// (a link fault, or a finding beside a ruled-out switch).
    reported: HashMap<String, (i64, bool)>,
}

impl LinkHolds {
    /// Links whose problem is open at `now`: reported, so never held.
    pub(super) fn keep_open(&mut self, links: Vec<String>, now: i64) {
        for l in links {
            self.pending.remove(&l);
            self.reported.insert(l, (now, true));
        }
    }
}

/// Failures and probes of the observations that cross `link`, and of those through
/// `device` that do not; `None` when the observations name neither.
fn around_link(loss: &ObsSet, (device, link): (&str, &str)) -> Option<[(f64, f64); 2]> {
    let sw = loss.id(&Element::Switch(device.into()))? as usize;
    let l = loss.id(&Element::Link(link.into()))? as usize;
    let mut counts = [(0.0, 0.0); 2];
    for i in 0..loss.len() {
        let o = &loss[i];
        let (mut through, mut crosses) = (false, false);
        for (e, _) in loss.fail_elems(i).chain(loss.ok_elems(i)) {
            through |= e == sw;
            crosses |= e == l;
        }
        if crosses || through {
            let c = &mut counts[usize::from(!crosses)];
            *c = (c.0 + o.fail, c.1 + o.fail + o.ok);
        }
    }
    Some(counts)
}

/// True when the probes through `device` that do not cross `link` fail significantly
/// above `background` (at least `min_failures`, scoring `min_score`): the device fails
/// beyond that one link, as a dying switch does, and not only where a link broke.
fn fails_beyond(loss: &ObsSet, (device, link): (&str, &str), background: f64, p: &Params) -> bool {
    around_link(loss, (device, link)).is_some_and(|[_, beyond]| significant(beyond, background, p))
}

/// True when `(failures, probes)` are at least `min_failures` failures scoring
/// `min_score` above `background`.
fn significant((fail, probes): (f64, f64), background: f64, p: &Params) -> bool {
    fail >= p.min_failures && chernoff_score(fail, probes, background) >= p.min_score
}

/// Most links a tick weighs [`SinceFailure::clears`] for: each costs a pass over the
/// window's flows, and it is meant for one link down; a dying spine's many links wait
/// for the next uploads as before.
const MAX_EARLY_RELEASES: usize = 4;

/// The evidence sent since a link's first failure, which may clear a silent end of the
/// link before every agent has uploaded since its hold began.
struct SinceFailure<'a> {
    inp: &'a Inputs<'a>,
    /// The oldest last upload of the live agents (`None`: no live agent).
    uploaded: Option<i64>,
    window: &'a Window,
    /// The tick's failures left for the network, with their send times.
    failed: &'a [Failed],
    counted: &'a dyn Fn(u32) -> Counted,
    memo: RefCell<&'a mut RouteMemo>,
    /// The tick's loss observations (which flows failed across the link).
    loss: &'a ObsSet,
    params: &'a Params,
    cfg: &'a DiagnosisConfig,
    /// Links weighed this tick, up to [`MAX_EARLY_RELEASES`].
    weighed: std::cell::Cell<usize>,
}

impl SinceFailure<'_> {
    /// True when, over the probes sent from the link's first failure `a` until `c`, the
    /// latest send time whose outcome every live agent has reported (its last upload
    /// minus `liveness_margin`):
    /// - the link failed at least `min_failures` times and on at least half its probes:
    ///   it is down (a lossy link's first located breaks, or a dropped 5-tuple's, are as
    ///   weak a sign as a dying switch's first failures);
    /// - `device`'s probes that do not cross the link are enough that, failing at the
    ///   link's rate, they would reach `min_failures` too;
    /// - and they do not fail beyond the link ([`fails_beyond`]).
    ///
    /// Over the whole window a switch that died with the link is hidden by its probes
    /// from before; over `[a, c]` it is not. A scale-out shard weighs its own agents'
    /// probes (the others' observations carry no send times).
    fn clears(&self, device: &str, link: &str, background: f64) -> bool {
        let (inp, c, p) = (self.inp, self.cfg, self.params);
        if self.weighed.get() == MAX_EARLY_RELEASES {
            return false;
        }
        let Some(l) = self.loss.id(&Element::Link(link.into())) else {
            return false;
        };
        let across: HashSet<FlowKey> = (0..self.loss.len())
            .filter(|&i| self.loss[i].fail > 0.0)
            .filter(|&i| self.loss.fail_elems(i).any(|(e, _)| e == l as usize))
            .filter_map(|i| self.loss[i].flow)
            .collect();
        let flows = self.window.flows();
        let first = self
            .failed
            .iter()
            .filter(|f| across.contains(&flows.get(f.flow).key))
            .map(|f| f.send_ms)
            .min();
        let (Some(a), Some(uploaded)) = (first, self.uploaded) else {
            return false;
        };
        let span = a..(uploaded - c.liveness_margin_ms as i64).min(inp.now_ms);
        if span.is_empty() {
            return false;
        }
        let fails = tally(self.failed, &span);
        self.weighed.set(self.weighed.get() + 1);
        let arrivals = |i: u32| self.window.ok_within(i, &span);
        let mut memo = self.memo.borrow_mut();
        let Some(obs) = observations(
            inp,
            (flows, &arrivals),
            (&fails, &foldhash::HashMap::default()),
            self.counted,
            false,
            (c.min_failures, 1.0),
            &mut memo,
        ) else {
            return false;
        };
        let Some([(lf, ln), beyond]) = around_link(&obs.loss, (device, link)) else {
            return false;
        };
        lf >= p.min_failures
            && 2.0 * lf >= ln
            && beyond.1 * lf / ln >= p.min_failures
            && !significant(beyond, background, p)
    }
}

/// What is known of a link's ends in a tick, for [`confirm_links`].
pub(super) struct Ends<'a> {
    /// Switches that answered fresh traces of failed probes.
    pub alive: &'a HashSet<&'a str>,
    /// Whether a switch fails beyond a link at the given background ([`fails_beyond`]).
    pub beyond: &'a dyn Fn(&str, &str, f64) -> bool,
    /// Whether every live agent has uploaded since the given time: the evidence of the
    /// rest of a switch is in.
    pub settled: &'a dyn Fn(i64) -> bool,
    /// Whether the evidence since the link's first failure clears a switch of failing
    /// beyond the link at the given background ([`SinceFailure::clears`]).
    pub cleared: &'a dyn Fn(&str, &str, f64) -> bool,
}

/// Holds back findings that may be the first sign of a switch's fault until they have
/// persisted `link_confirm_ms`: by then the switch's evidence suffices and its verdict
/// takes them over, instead of a part of it reported first. Two kinds are held:
/// - a link fault whose fresh traces located breaks on it while one of its switches
///   answered no fresh trace of a failed probe (a dead switch answers none; a broken
///   link leaves both ends answering, and partial loss seldom breaks a trace), unless
///   the switch fails nowhere beyond that link ([`fails_beyond`]: a switch that lost one
///   link forwards the rest of its traffic, a dying one does not) and either every agent
///   has uploaded since the hold began or the probes sent since the link's first failure
///   already clear the switch ([`SinceFailure::clears`]), or that
///   shares a switch with a link reported within `resolve_after_ms` (where paths are
///   only partly known, one direction of a flow untraced or right after a shard
///   takeover, a fault's failures spill over to its siblings for a tick or two, while a
///   second real fault persists);
/// - a link or RNIC finding (loss or latency) whose failures a switch also explained
///   when that switch was ruled out against its parts this tick (a switch's first
///   ticks, when its parts' shares differ by chance).
///
/// A finding reported within the last `resolve_after_ms` is never held: its problem is
/// still open, and holding it would resolve that problem and raise it again (an alert
/// that flaps).
pub(super) fn confirm_links(
    holds: &mut LinkHolds,
    c: &DiagnosisConfig,
    (now, map): (i64, &FabricMap),
    groups: Vec<Group>,
    ends: &Ends,
) -> Vec<Group> {
    holds
        .pending
        .forget_before(now - policy::hold_gap_ms(c.tick_ms));
    let open_after = now - c.resolve_after_ms as i64;
    holds.reported.retain(|_, (at, _)| *at >= open_after);
    // Switches of the links open before this tick (two links found in the same tick do
    // not hold each other; an open link itself is reported whatever its switches).
    let open_switches: HashSet<crate::diagnosis::paths::Name> = holds
        .reported
        .iter()
        .filter(|(_, (_, siblings))| *siblings)
        .filter_map(|(l, _)| map.link(l))
        .flat_map(|l| l.devices.iter().cloned())
        .collect();
    groups
        .into_iter()
        .filter(|(kind, ck, name, found)| {
            if !matches!(ck, ComponentKind::Link | ComponentKind::Rnic) {
                return true;
            }
            let beside_switch = found.iter().any(|f| f.beside_switch);
            let link_fault = *kind == ProblemKind::LinkFault && *ck == ComponentKind::Link;
            let devices = map.link(name).map_or(&[][..], |l| &l.devices[..]);
            let held_link = link_fault && {
                let located = found.iter().any(|f| f.located > 0.0);
                let background = found.iter().map(|f| f.background).fold(0.0, f64::max);
                let since = holds.pending.since(name).unwrap_or(now);
                let silent_end = devices.iter().any(|d| {
                    !ends.alive.contains(&**d)
                        && ((ends.beyond)(d, name, background)
                            || !((ends.settled)(since) || (ends.cleared)(d, name, background)))
                });
                let beside_open = devices.iter().any(|d| open_switches.contains(d));
                located && silent_end || beside_open
            };
            let report = holds.reported.contains_key(name)
                || !(held_link || beside_switch)
                || holds
                    .pending
                    .confirm(name.clone(), now, c.link_confirm_ms as i64);
            if !report {
                tracing::debug!(component = %name, held_link, beside_switch, "finding held");
            }
            if report {
                let r = holds.reported.entry(name.clone()).or_insert((now, false));
                *r = (now, r.1 || link_fault || beside_switch);
            }
            report
        })
        .collect()
}

/// How a problem names a component.
fn component(inp: &Inputs, e: &Element) -> (ComponentKind, String) {
    match e {
        Element::Rnic(r) => (ComponentKind::Rnic, rnic_name(inp, *r)),
        Element::Link(l) | Element::Direction { link: l, .. } => {
            (ComponentKind::Link, l.to_string())
        }
        Element::Switch(d) => (ComponentKind::Switch, d.to_string()),
    }
}

/// The direction `e` names, when it is one direction of a map link.
fn link_direction(map: &FabricMap, e: &Element) -> Option<LinkDirection> {
    let Element::Direction { link, to } = e else {
        return None;
    };
    Some(LinkDirection {
        from: far_end(map.link(link)?, to).to_string(),
        to: to.to_string(),
    })
}

/// The one direction a link problem's findings blame: none when one of them blames both
/// directions of the link, or they blame one each.
fn blamed_direction(map: &FabricMap, found: &[Finding]) -> Option<LinkDirection> {
    let mut dirs = found.iter().map(|f| link_direction(map, &f.element));
    let first = dirs.next()??;
    dirs.all(|d| d.as_ref() == Some(&first)).then_some(first)
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
        ..Evidence::default()
    }
}

/// Which link a finding names when this tick cannot tell it from a twin link (every
/// failed flow crosses both, and no fresh trace located a break). The twin at which
/// fresh traces located the most breaks within the last window (in a tick where most of
/// its failures were located), when that is more than at its own link: a flapping link
/// is traced while it is up as often as while it is down, and the ticks of the first
/// kind carry no evidence of which twin it is. Else its own link while that has an open
/// problem, else a twin with an open problem: one fault stays one problem, though ties
/// break by name.
pub(super) fn pick_twin(
    f: &mut Finding,
    open: impl Fn(&str) -> bool,
    located: &HashMap<String, (i64, f64)>,
) {
    let Some(own) = f.element.link().filter(|_| f.located <= 0.0) else {
        return;
    };
    let breaks = |e: &Element| e.link().and_then(|l| located.get(l)).map_or(0.0, |b| b.1);
    let own_breaks = breaks(&f.element);
    let (most, n) = (f.equivalent.iter().enumerate())
        .map(|(i, e)| (Some(i), breaks(e)))
        .fold((None, 0.0), |a, b| if b.1 > a.1 { b } else { a });
    let twin = if n > own_breaks {
        most
    } else if own_breaks > n || open(own) {
        None
    } else {
        f.equivalent
            .iter()
            .position(|e| e.link().is_some_and(&open))
    };
    let Some(i) = twin else {
        return;
    };
    let twin = f.equivalent.remove(i);
    let named = std::mem::replace(&mut f.element, twin);
    f.equivalent.push(named);
}

/// Lists beside the problem's component the components its findings could not be told
/// from (each finding of the component itself; a switch built from link findings is
/// not any one of them), with equal shares, and says so in the detail.
fn indistinguishable(
    inp: &Inputs,
    (ck, name): (ComponentKind, &str),
    f: &[Finding],
    e: &mut Evidence,
) {
    let own = (ck, name.to_string());
    // Each other component once (two directions of one link are one link), with the
    // direction its first element names.
    let mut others: Vec<((ComponentKind, String), Option<LinkDirection>)> = Vec::new();
    for x in f.iter().filter(|x| component(inp, &x.element) == own) {
        for other in &x.equivalent {
            let c = component(inp, other);
            if c != own && !others.iter().any(|(o, _)| *o == c) {
                others.push((c, link_direction(inp.map, other)));
            }
        }
    }
    if others.is_empty() {
        return;
    }
    others.sort_by(|a, b| a.0.cmp(&b.0));
    let share = 1.0 / (others.len() + 1) as f64;
    let suspect = |(component_kind, component), direction| SuspectComponent {
        component_kind,
        component,
        direction,
        confidence: share,
    };
    let names: Vec<String> = others.iter().map(|((_, n), _)| n.clone()).collect();
    e.candidates.push(suspect(own, e.direction.clone()));
    e.candidates
        .extend(others.into_iter().map(|(c, d)| suspect(c, d)));
    e.detail.push_str(&format!(
        "; the probes cannot tell it from {}",
        names.join(", ")
    ));
}

type Found = (ProblemKind, ComponentKind, String, Finding);
type Group = (ProblemKind, ComponentKind, String, Vec<Finding>);

/// What the engine knows of switches answering traces this tick.
struct Liveness<'a> {
    /// Switches that answered fresh traces of failed probes within a window.
    alive: &'a HashSet<&'a str>,
    /// Whether the engine has watched traces for a window: before that, a switch not
    /// `alive` may only not have been asked yet, and is not taken for silent.
    silence_known: bool,
    /// Switches recently found down (or with an open switch problem after a restart).
    down: &'a HashMap<String, i64>,
}

impl Liveness<'_> {
    /// True when `d` may be declared down: not known alive, and either known silent or
    /// already found down.
    fn may_be_down(&self, d: &str) -> bool {
        !self.alive.contains(d) && (self.silence_known || self.down.contains_key(d))
    }
}

/// Link findings of one kind covering most (and at least two) links of a switch become
/// one switch finding (for loss: findings located at breaks by fresh traces), unless the
/// switch is not known silent (it answered fresh traces
/// of failed probes, or the engine has not watched a window yet): a switch verdict needs
/// more evidence than any one link's. `suspects` are loss suspects not blamed themselves
/// (their failures were explained by a sibling) that still count towards their
/// switches; a switch recently found down keeps any of its failing links.
fn group_by_switch(
    map: &FabricMap,
    found: Vec<Found>,
    suspects: &[Element],
    liveness: &Liveness,
) -> Vec<Group> {
    let down = liveness.down;
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
            per_switch.entry((kind, d.to_string())).or_default().push(i);
        }
    }
    let mut switches: Vec<_> = per_switch
        .into_iter()
        .filter(|((kind, d), links)| {
            if *kind == ProblemKind::SwitchFault && !liveness.may_be_down(d) {
                return false;
            }
            let total = map.links_of(d).count();
            let implicated = if *kind == ProblemKind::SwitchFault {
                // A silent switch's links fail at breaks fresh traces locate right
                // before it; links losing part of their probes, whose traces reach
                // their destinations, are not a switch that stopped answering.
                let located = links.iter().filter(|&&i| found[i].3.located > 0.0);
                let extra = map
                    .links_of(d)
                    .filter(|l| {
                        suspects
                            .iter()
                            .any(|e| matches!(e, Element::Link(n) if **n == *l.name))
                    })
                    .filter(|l| !links.iter().any(|&i| *found[i].2 == *l.name))
                    .count();
                located.count() + extra
            } else {
                links.len()
            };
            (*kind == ProblemKind::SwitchFault && down.contains_key(d))
                || (implicated >= 2 && implicated as f64 > SWITCH_SHARE * total as f64)
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

/// Confidence of each suspect of a flow problem: every component on the flow's paths
/// (both directions) can drop its 5-tuple alone, so each gets one share, and a component
/// a fresh trace located the break at gets two more per located failure share. A link
/// comes with the direction the flow crosses it in, when it crosses it one way only.
fn flow_suspects(
    map: &FabricMap,
    loss: &ObsSet,
    k: FlowKey,
) -> Vec<(Element, f64, Option<LinkDirection>)> {
    let mut weight: Vec<(Element, f64)> = Vec::new();
    let mut ways: Vec<&Element> = Vec::new();
    let mut add = |e: &Element, w: f64| match weight.iter_mut().find(|(x, _)| x == e) {
        Some((_, old)) => *old += w,
        None => weight.push((e.clone(), w)),
    };
    let elements = loss.elements();
    for i in (0..loss.len()).filter(|&i| loss[i].flow == Some(k)) {
        let o = &loss[i];
        let (dirs, parts): (Vec<_>, Vec<_>) = loss
            .ok_elems(i)
            .chain(loss.fail_elems(i))
            .map(|(e, w)| (&elements[e], w))
            .partition(|(e, _)| e.is_direction());
        ways.extend(dirs.into_iter().map(|(e, _)| e));
        for (e, _) in parts {
            add(e, 0.0);
        }
        let located = || {
            loss.fail_elems(i)
                .map(|(e, w)| (&elements[e], w))
                .filter(|(e, _)| !e.is_direction())
        };
        let fails: f64 = located().map(|(_, w)| w).sum();
        if o.located && o.fail > 0.0 && fails > 0.0 {
            for (e, w) in located() {
                add(e, 2.0 * w / fails);
            }
        }
    }
    for (_, w) in &mut weight {
        *w += 1.0;
    }
    let total: f64 = weight.iter().map(|(_, w)| w).sum();
    weight.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    weight
        .into_iter()
        .map(|(e, w)| {
            let mut crossed = ways
                .iter()
                .filter(|d| matches!((d, &e), (Element::Direction { link, .. }, Element::Link(l)) if link == l))
                .filter_map(|d| link_direction(map, d));
            let one_way = crossed
                .next()
                .filter(|first| crossed.all(|d| d == *first));
            (e, w / total, one_way)
        })
        .collect()
}

/// A flow problem: the 5-tuple `k` fails, and its failures single out none of the
/// components on its paths (`f` is the component explain-away picked for them).
fn flow_problem(
    inp: &Inputs,
    loss: &ObsSet,
    f: &Finding,
    k: FlowKey,
    c: &DiagnosisConfig,
) -> Candidate {
    let (prober, target) = (rnic_name(inp, k.prober), rnic_name(inp, k.target));
    let candidates = flow_suspects(inp.map, loss, k)
        .into_iter()
        .map(|(e, confidence, direction)| {
            let (component_kind, component) = component(inp, &e);
            SuspectComponent {
                component_kind,
                component,
                direction,
                confidence,
            }
        })
        .collect();
    let mut evidence = evidence(f, "flow problem: only this 5-tuple fails");
    evidence.candidates = candidates;
    Candidate {
        kind: ProblemKind::FlowFault,
        component_kind: ComponentKind::Flow,
        component: format!("{prober} -> {target} sport {}", k.sport),
        confidence: confidence(f.score, f64::from(c.min_score)),
        evidence,
    }
}
