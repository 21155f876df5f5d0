//! Binary network tomography over the paths of failed and successful probes.
//!
//! [`explain_away`] is the localizer, one rule for every kind of component (RNICs,
//! links in one direction or both, switches): it scores every component by the log-likelihood its failures gain
//! from a loss ratio of its own over the fabric's background (the binomial
//! log-likelihood ratio at the MLE, which is also the Chernoff exponent of the tail,
//! so the score is ~ `-ln p`), blames the best one if the gain pays a sparsity prior,
//! removes the failures it explains and repeats, so concurrent faults are all found
//! while components that only share failed paths with a culprit (and carry successful
//! probes elsewhere) are not. [`alg1_votes`] is R-Pingmesh's plain Algorithm 1 (votes
//! of failed paths), kept as a baseline.

mod set;

pub(crate) use set::{Interner, Obs, ObsSet};

use super::flows::table::FlowKey;
use super::paths::Element;
use std::collections::HashMap;

/// Probes of one flow (one prober/target/5-tuple) with one way of failing; shards of a
/// scale-out deployment exchange them ([`crate::shard`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FlowObs {
    /// Probes that arrived (for latency: arrived and fast).
    pub ok: f64,
    /// Probes that failed (for latency: arrived slow).
    pub fail: f64,
    /// Components arrivals vouch for, with weights.
    pub ok_elems: Vec<(Element, f64)>,
    /// Components a failure votes for, with weights.
    pub fail_elems: Vec<(Element, f64)>,
    /// True when `fail_elems` comes from a fresh partial trace (a located break).
    pub located: bool,
    /// Device after which the trace broke, if it did.
    pub break_device: Option<String>,
    /// Hop list, for evidence.
    pub text: String,
    /// No direction of the flow was traced: `fail_elems` are ECMP alternatives only.
    #[serde(default)]
    pub untraced: bool,
    /// The flow whose probes these are (`None`: healthy flows added up).
    #[serde(default)]
    pub flow: Option<FlowKey>,
}

/// Thresholds of one tomography run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// Least score (Chernoff exponent) to blame a component.
    pub min_score: f64,
    /// Least weighted failures to blame a component.
    pub min_failures: f64,
    /// Background failure ratio assumed at least.
    pub floor: f64,
    /// Least failure share of a component's probes to blame it (the best explanation
    /// below it explains its failures without being blamed).
    pub min_share: f64,
    /// Components under test when the observations stand for more than they name
    /// (healthy flows added up on the blamed components); `None`: those they name.
    pub tested: Option<usize>,
    /// Split a flow failing far more often than the rest of a component's off it as a
    /// flow finding ([`lone_outlier`]): for loss, where one 5-tuple can be dropped
    /// whole; not for latency, where a flow's share of slow probes is no such sign.
    pub lone_flows: bool,
}

/// A blamed component.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finding {
    /// The component.
    pub element: Element,
    /// Weighted failures it explains.
    pub failures: f64,
    /// Of which fresh partial traces located on it (a break right before it).
    pub located: f64,
    /// Weighted arrivals through it.
    pub ok: f64,
    /// Evidence score (~ -ln p).
    pub score: f64,
    /// Background failure ratio it was tested against.
    pub background: f64,
    /// Failed paths it explains (up to a few, for evidence).
    pub examples: Vec<String>,
    /// The one flow all the failures it explains belong to, if they do: then nothing
    /// singles the component out from the rest of that flow's paths.
    pub flow: Option<FlowKey>,
    /// A switch crossed by these failures was ruled out against its parts this tick:
    /// the finding may be a part of that switch's fault, seen before the switch's own
    /// evidence suffices (its first ticks, when its parts' shares differ by chance).
    pub beside_switch: bool,
    /// Components the observations cannot tell from `element`: when it was blamed,
    /// each crossed exactly the live failed probes it crosses and as many arrivals
    /// (a 2-ToR fabric's spine and both its links; a ToR and its only RNIC). The
    /// verdict names `element` and lists these beside it, never one of them guessed.
    pub equivalent: Vec<Element>,
    /// An RNIC finding: a link, not one of `equivalent`, was crossed by every live
    /// failed probe it explains and would have been blamed for them too, so this tick's
    /// evidence cannot choose between them (a link fault's first failures, on a few
    /// flows that happen to share an RNIC).
    pub rival: bool,
}

/// Binomial upper-tail exponent: `n * KL(q || p)` for `q = f / n > p`, else 0.
pub(crate) fn chernoff_score(f: f64, n: f64, p: f64) -> f64 {
    if n <= 0.0 || f <= 0.0 {
        return 0.0;
    }
    let q = (f / n).min(1.0);
    if q <= p {
        return 0.0;
    }
    let mut kl = q * (q / p).ln();
    if q < 1.0 {
        kl += (1.0 - q) * ((1.0 - q) / (1.0 - p)).ln();
    }
    n * kl
}

#[derive(Default, Clone, Copy)]
struct Tally {
    fail: f64,
    ok: f64,
    located: f64,
    /// Failures of untraced flows through it: the path is known only as "an RNIC or one
    /// of the ToRs' ECMP uplinks", so they support a component but never single it out.
    alternative: f64,
}

/// What the rounds of explain-away look up besides the observations: each direction's
/// link and each component's failed observations.
struct Compiled<'a> {
    obs: &'a ObsSet,
    elements: &'a [Element],
    /// For each direction of a link, the link's id.
    link_of: Vec<Option<usize>>,
    /// For each component, the observations with failures that vote for it, in order.
    failing_with: Vec<Vec<usize>>,
}

impl Compiled<'_> {
    /// Components named, a link's directions not counted apart from the link.
    fn components(&self) -> usize {
        self.elements.iter().filter(|e| !e.is_direction()).count()
    }

    /// Components an arrival of observation `i` vouches for, with weights.
    fn ok(&self, i: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.obs.ok_elems(i)
    }

    /// Components a failure of observation `i` votes for, with weights.
    fn fail(&self, i: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.obs.fail_elems(i)
    }
}

fn compile(obs: &ObsSet) -> Compiled<'_> {
    let elements = obs.elements();
    let link_of = elements
        .iter()
        .map(|e| match e {
            Element::Direction { link, .. } => obs
                .id(&Element::Link(std::sync::Arc::clone(link)))
                .map(|id| id as usize),
            _ => None,
        })
        .collect();
    let mut failing_with: Vec<Vec<usize>> = vec![Vec::new(); elements.len()];
    for i in (0..obs.len()).filter(|&i| obs[i].fail > 0.0) {
        for (e, _) in obs.fail_elems(i) {
            if failing_with[e].last() != Some(&i) {
                failing_with[e].push(i);
            }
        }
    }
    Compiled {
        obs,
        elements,
        link_of,
        failing_with,
    }
}

/// The observations not explained yet, with their tallies per component kept up to date
/// as observations are explained (each round of explain-away then costs the components,
/// not every observation again).
#[derive(Clone)]
struct Live {
    live: Vec<bool>,
    tally: Vec<Tally>,
    /// Failures and probes (unweighted) of the live observations.
    totals: (f64, f64),
}

impl Live {
    /// The observations `live` says, tallied.
    fn new(c: &Compiled, live: Vec<bool>) -> Self {
        let obs = c.obs;
        let mut l = Self {
            live: vec![false; obs.len()],
            tally: vec![Tally::default(); c.elements.len()],
            totals: (0.0, 0.0),
        };
        for i in (0..obs.len()).filter(|&i| live[i]) {
            l.count(c, i, 1.0);
        }
        l.live = live;
        l
    }

    /// Adds (`sign` 1) or takes away (-1) observation `i`'s part of the tallies.
    fn count(&mut self, c: &Compiled, i: usize, sign: f64) {
        let o = &c.obs[i];
        let t = &mut self.tally;
        if o.fail > 0.0 {
            for (e, w) in c.fail(i) {
                let f = sign * o.fail * w;
                t[e].fail += f;
                if o.located {
                    t[e].located += f;
                }
                if o.untraced {
                    t[e].alternative += f;
                }
            }
        }
        if o.ok > 0.0 {
            for (e, w) in c.ok(i) {
                t[e].ok += sign * o.ok * w;
            }
        }
        self.totals.0 += sign * o.fail;
        self.totals.1 += sign * (o.fail + o.ok);
    }

    /// The live failed observations that vote for component `e`, in order.
    fn failing<'a>(&'a self, c: &'a Compiled, e: usize) -> impl Iterator<Item = usize> + 'a {
        c.failing_with[e].iter().copied().filter(|&i| self.live[i])
    }

    /// Component `e` scored on its live tally against the background of the live
    /// probes that do not cross it ([`background_outside`]).
    fn scored(&self, e: usize, floor: f64) -> Best {
        let x = self.tally[e];
        let background = background_outside(self.totals, &x, floor);
        Best {
            element: e,
            score: chernoff_score(x.fail, x.fail + x.ok, background),
            background,
            tally: x,
        }
    }

    /// Observation `i` is explained: out of the tallies.
    fn remove(&mut self, c: &Compiled, i: usize) {
        if std::mem::replace(&mut self.live[i], false) {
            self.count(c, i, -1.0);
        }
    }
}

/// Background failure ratio a component is tested against: that of the unexplained
/// probes that do not cross it, at least `floor`. A fault's own failures thus never
/// raise the bar it is held to (pooled over everything, a 1 % loss on a link carrying
/// a third of a small fabric's probes made its own background 0.9 %), while loss spread
/// evenly over the fabric raises every component's background alike. A pseudo-count
/// (one failure in two extra probes) keeps a thin outside sample from looking perfect.
fn background_outside(totals: (f64, f64), x: &Tally, floor: f64) -> f64 {
    let fail = (totals.0 - x.fail).max(0.0);
    let n = (totals.1 - x.fail - x.ok).max(0.0);
    ((fail + 1.0) / (n + 2.0)).max(floor).min(0.5)
}

/// Log-likelihood (nats) a direction of a link must gain over the whole link (both
/// directions, one loss ratio) to be blamed instead of it (odds of ~400 to 1). The gain
/// comes from the probes crossing the link the other way only: under "both" they should
/// have failed at the link's ratio too. A one-way fault is named once they carry about
/// six failures' worth of arrivals (600 probes at 1 % loss); a symmetric fault whose
/// other direction shows no failure by chance, as likely as e^-6, is not.
const DIRECTION_PRIOR: f64 = 6.0;

/// The component that best explains the live failures among those `allowed`: the
/// largest log-likelihood gain of giving it a loss ratio of its own (the MLE of its
/// failures over its probes) against the background ([`chernoff_score`]), at least
/// `min_score` (the sparsity prior: what one more faulty component must buy).
///
/// A link offers three hypotheses: its two directions and both (the link itself, over
/// every probe crossing it either way). When one of them wins, a direction is blamed
/// only when it beats the link by [`DIRECTION_PRIOR`]; else the link is, on its own tally.
struct Best {
    element: usize,
    score: f64,
    background: f64,
    tally: Tally,
}

fn best(c: &Compiled, live: &Live, allowed: &[bool], p: &Params, min_score: f64) -> Option<Best> {
    let t = &live.tally;
    let scored = |e: usize| live.scored(e, p.floor);
    let winner = t
        .iter()
        .enumerate()
        .filter(|(e, x)| {
            // Known-path failures alone reach `min_failures` (so all failures do).
            allowed[*e] && x.fail - x.alternative >= p.min_failures
        })
        .map(|(e, x)| {
            let b = scored(e);
            // A break located by a fresh trace beats a tie of whole paths.
            (b.score * (1.0 + 0.1 * x.located / x.fail), b)
        })
        .filter(|(_, b)| b.score >= min_score)
        .max_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then_with(|| c.elements[b.1.element].cmp(&c.elements[a.1.element]))
        })
        .map(|(_, b)| b)?;
    // A link's three hypotheses compete by likelihood alone (a located break's bonus
    // ranks components, not one link's directions): the best direction when it beats
    // both by the prior, else both.
    let link = match c.elements[winner.element] {
        Element::Link(_) => winner.element,
        _ => match c.link_of[winner.element].filter(|&l| allowed[l]) {
            Some(l) => l,
            None => return Some(winner),
        },
    };
    let both = scored(link);
    let way = (0..c.elements.len())
        .filter(|&d| c.link_of[d] == Some(link) && allowed[d])
        .map(scored)
        .filter(|d| d.tally.fail - d.tally.alternative >= p.min_failures)
        .max_by(|a, b| a.score.total_cmp(&b.score));
    match way {
        Some(d) if d.score > both.score + DIRECTION_PRIOR => Some(d),
        _ => Some(both),
    }
}

/// Most components listed as indistinguishable from a blamed one: past a few, the
/// failures sit on one path and the verdict is a flow problem, or the fabric map is too
/// thin to tell anything apart.
const MAX_EQUIVALENT: usize = 8;

/// The eligible components the live observations cannot tell from `b`: the same live
/// failed observations vote for each, with the same weighted failures and arrivals. A
/// direction is listed only beside a direction (so a link's own directions, refinements
/// of it, never are), and never the other direction of its own link.
fn equivalents<'a>(
    c: &'a Compiled,
    live: &'a Live,
    eligible: &'a [bool],
    b: &'a Best,
) -> impl Iterator<Item = usize> + 'a {
    // Weights are held as `f32` ([`ObsSet`]): three thirds may sum to 1 + 3e-8.
    let same = |x: f64, y: f64| (x - y).abs() <= 1e-6 * x.abs().max(y.abs()).max(1.0);
    // The other direction of a blamed direction's own link.
    let own_link =
        |e: usize| c.link_of[b.element].is_some() && c.link_of[e] == c.link_of[b.element];
    let direction = c.elements[b.element].is_direction();
    (0..c.elements.len())
        .filter(move |&e| {
            let x = live.tally[e];
            e != b.element
                && eligible[e]
                && !own_link(e)
                && c.elements[e].is_direction() == direction
                && same(x.fail, b.tally.fail)
                && same(x.ok, b.tally.ok)
                && live.failing(c, e).eq(live.failing(c, b.element))
        })
        .take(MAX_EQUIVALENT)
}

/// True when `b` is an RNIC and a link other than its `twins` is crossed by every live
/// failed observation `b` is, and is significant on its own tally: the evidence names
/// two suspects and this tick cannot tell which.
fn has_rival(
    c: &Compiled,
    (live, allowed): (&Live, &[bool]),
    b: &Best,
    twins: &[usize],
    (p, min_score): (&Params, f64),
) -> bool {
    if !matches!(c.elements[b.element], Element::Rnic(_)) {
        return false;
    }
    let failing: Vec<usize> = live.failing(c, b.element).collect();
    let Some(&first) = failing.first() else {
        return false;
    };
    c.fail(first).any(|(e, _)| {
        let x = live.tally[e];
        allowed[e]
            && !twins.contains(&e)
            && matches!(c.elements[e], Element::Link(_))
            && x.fail - x.alternative >= p.min_failures
            && failing.iter().all(|&i| c.fail(i).any(|(x, _)| x == e))
            && live.scored(e, p.floor).score >= min_score
    })
}

/// Marks the live failed observations `element` explains as explained; returns up to
/// three of their hop lists and the one flow they all belong to, if they do.
fn take(c: &Compiled, live: &mut Live, element: usize) -> (Vec<String>, Option<FlowKey>) {
    let obs = c.obs;
    let mut examples = Vec::new();
    // Flows of the failures explained: `Some(Some(k))` while all are flow `k`.
    let mut flow: Option<Option<FlowKey>> = None;
    for &i in &c.failing_with[element] {
        if !live.live[i] {
            continue;
        }
        let o = &obs[i];
        add_example(&mut examples, obs.text(i));
        flow = match flow {
            None => Some(o.flow),
            Some(k) if k == o.flow => Some(k),
            Some(_) => Some(None),
        };
        live.remove(c, i);
    }
    (examples, flow.flatten())
}

/// True when switch `sw` explains the live failures it covers better than the best
/// explanation without any switch: those failures (with every arrival) explained
/// greedily by links and RNICs alone, against the same background (the switch's: both
/// explain the same failures), must need at least two of them, and the switch's
/// likelihood gain minus one sparsity prior must be at least theirs minus one prior
/// each. A switch dropping a little of everything thus beats the dozen links it spreads
/// over; two dead links of one spine stay two links, and two lossy links on either side
/// of a 2-ToR fabric (whose every flow crosses both ToRs) are not a ToR.
fn switch_beats_parts(
    c: &Compiled,
    (live, allowed): (&Live, &[bool]),
    sw: &Best,
    (p, min_score): (&Params, f64),
) -> bool {
    let obs = c.obs;
    let parts: Vec<bool> = (0..c.elements.len())
        .map(|e| allowed[e] && !matches!(c.elements[e], Element::Switch(_)))
        .collect();
    let mut covered = vec![false; obs.len()];
    for &i in &c.failing_with[sw.element] {
        covered[i] = true;
    }
    let mut live = live.clone();
    for i in (0..obs.len()).filter(|&i| obs[i].fail > 0.0 && !covered[i]) {
        live.remove(c, i);
    }
    let (mut n, mut total) = (0usize, 0.0);
    while let Some(b) = best(c, &live, &parts, p, min_score) {
        let x = b.tally;
        n += 1;
        total += chernoff_score(x.fail, x.fail + x.ok, sw.background) - min_score;
        take(c, &mut live, b.element);
    }
    n >= 2 && sw.score - min_score >= total
}

/// The smallest set of components that best explains the failures, among those
/// `eligible` allows; findings in the order they were blamed.
///
/// Every observation (one flow's probes, or healthy flows added up) is explained by the
/// components of its probes' and its ACKs' paths (`fail_elems`, spread over the ECMP
/// candidates where a path is not known). Greedy set cover scored by likelihood
/// (NetBouncer, Sherlock): each round blames the component whose own loss ratio gains
/// the most log-likelihood over the background, if the gain pays the sparsity prior
/// (`min_score`, plus ln m for m components beyond a hundred, so a large healthy fabric
/// stays silent), and removes the failures it explains. A switch competes with the
/// links and RNICs on the same terms: blamed when it beats the best explanation of its
/// failures without switches ([`switch_beats_parts`]), else ruled out. A link competes
/// as three hypotheses, each direction (the probes crossing it that way) and both (every
/// probe crossing it): a direction is blamed when it beats both ([`DIRECTION_PRIOR`]),
/// and then explains only the failures of the probes crossing the link that way.
///
/// A component needs `min_failures` failures of flows whose path is known: those of
/// untraced flows (one of a ToR's ECMP uplinks, or either RNIC, failed) only add to
/// evidence it has already. Right after an analyzer restart or a shard takeover every
/// path is untraced: the uplinks of a ToR are then told apart only by chance
/// differences, and its RNICs, the only components such a flow names for sure, would
/// be blamed for their uplink's loss.
///
/// Every finding must then stand without each other one: judged only by the flows whose
/// paths do not cross that other finding, it must still be significant ([`independent`]). Failures of one
/// fault located elsewhere on its paths (a trace cut short by a router's ICMP rate limit,
/// the ACKs of an ECMP blackhole) thus yield one verdict, while two faults each with
/// flows of their own are both kept.
pub(crate) fn explain_away(
    obs: &ObsSet,
    p: &Params,
    eligible: impl Fn(&Element) -> bool,
) -> Vec<Finding> {
    let c = compile(obs);
    let mut live = Live::new(&c, obs.iter().map(|o| o.fail > 0.0 || o.ok > 0.0).collect());
    // Many components tested at once: beyond a hundred, each needs more evidence
    // (a Bonferroni-style ln m), so a large healthy fabric stays silent too.
    let tested = p.tested.unwrap_or_else(|| c.components());
    let min_score = p.min_score + (tested as f64 / 100.0).max(1.0).ln();
    let eligible_ids: Vec<bool> = c.elements.iter().map(&eligible).collect();
    let mut allowed = eligible_ids.clone();
    let mut blamed: Vec<usize> = Vec::new();
    let mut ruled_out: Vec<usize> = Vec::new();
    let mut found = Vec::new();
    // Flows split off the component they cross ([`lone_outlier`]): flow findings that
    // stand without any other.
    let mut dropped = Vec::new();
    let mut totals = None;
    // Each round removes at least one failed observation or rules out one switch:
    // bounded by their number.
    while let Some(b) = best(&c, &live, &allowed, p, min_score) {
        if matches!(c.elements[b.element], Element::Switch(_))
            && !switch_beats_parts(&c, (&live, &allowed), &b, (p, min_score))
        {
            allowed[b.element] = false;
            ruled_out.push(b.element);
            continue;
        }
        // A 5-tuple dropped on the component's path fails far more often than the
        // component's other flows: its own problem, and the rest are judged without it.
        if p.lone_flows {
            let totals = totals.get_or_insert_with(|| flow_totals(obs));
            if let Some(flow) = lone_outlier((&c, totals), &live, &b, p.floor, min_score) {
                dropped.push(flow_finding(&c, b.element, &flow, (&live, p.floor)));
                flow.iter().for_each(|&i| live.remove(&c, i));
                continue;
            }
        }
        let beside_switch = live.failing(&c, b.element).any(|i| {
            let fails = |e: usize| c.fail(i).any(|(x, _)| x == e);
            ruled_out.iter().any(|&s| fails(s))
        });
        let twins: Vec<usize> = equivalents(&c, &live, &eligible_ids, &b).collect();
        let rival = has_rival(&c, (&live, &allowed), &b, &twins, (p, min_score));
        let equivalent = twins.iter().map(|&e| c.elements[e].clone()).collect();
        let (examples, flow) = take(&c, &mut live, b.element);
        // The best explanation of its failures, but not (yet) failing often enough to
        // be blamed: what it explains is no other component's either (a switch whose
        // delay shows in fewer than `min_share` of its probes, a tick before it does,
        // does not leave one of its links to be blamed for the same probes).
        if b.tally.fail < p.min_share * (b.tally.fail + b.tally.ok) {
            continue;
        }
        blamed.push(b.element);
        found.push(Finding {
            element: c.elements[b.element].clone(),
            failures: b.tally.fail,
            located: b.tally.located,
            ok: b.tally.ok,
            score: b.score,
            background: b.background,
            examples,
            flow,
            beside_switch,
            equivalent,
            rival,
        });
    }
    let significant = |x: &Tally, background: f64| {
        x.fail >= p.min_failures
            && x.fail >= p.min_share * (x.fail + x.ok)
            && chernoff_score(x.fail, x.fail + x.ok, background) >= min_score
    };
    // Drop the weakest finding that another one shadows, one at a time (of two findings
    // sharing every flow, the one with flows of its own stays). Shadowing is pairwise:
    // a dead link shares each of its flows with some other link of its spine, but no
    // single other link holds them all.
    loop {
        let weakest = (0..found.len())
            .flat_map(|k| {
                (0..found.len())
                    .filter(move |&j| j != k)
                    .map(move |j| (k, j))
            })
            .map(|(k, j)| {
                let x = independent(&c, blamed[k], blamed[j]);
                (
                    k,
                    x,
                    chernoff_score(x.fail, x.fail + x.ok, found[k].background),
                )
            })
            .filter(|(k, x, _)| !significant(x, found[*k].background))
            .min_by(|a, b| a.2.total_cmp(&b.2));
        let Some((k, _, _)) = weakest else {
            break;
        };
        found.remove(k);
        blamed.remove(k);
    }
    found.extend(dropped);
    found
}

/// Failures and probes of each flow over all its observations (a flow's lost ACK2s are
/// an observation apart, with no arrivals).
fn flow_totals(obs: &ObsSet) -> HashMap<FlowKey, (f64, f64)> {
    let mut totals: HashMap<FlowKey, (f64, f64)> = HashMap::new();
    for o in obs.iter() {
        if let Some(k) = o.flow {
            let t = totals.entry(k).or_default();
            (t.0, t.1) = (t.0 + o.fail, t.1 + o.fail + o.ok);
        }
    }
    totals
}

/// Least share of its probes a flow split off a component loses: a dropped 5-tuple
/// loses all of them once the drop starts.
const LONE_SHARE: f64 = 0.5;

/// The live failed observations of the one flow through `b` that fails far more often
/// than the rest of `b`'s probes: a 5-tuple dropped on the path of a lossy link or
/// switch, or on a healthy one. Nothing when no flow or several do (a dead link's
/// blackholed flows beside its rerouted ones, a dead RNIC's flows: the component's
/// fault).
fn lone_outlier(
    (c, totals): (&Compiled, &HashMap<FlowKey, (f64, f64)>),
    live: &Live,
    b: &Best,
    floor: f64,
    min_score: f64,
) -> Option<Vec<usize>> {
    let obs = c.obs;
    let mut flows: Vec<FlowKey> = live
        .failing(c, b.element)
        .filter_map(|i| obs[i].flow)
        .collect();
    flows.sort_unstable();
    flows.dedup();
    if flows.len() < 2 {
        return None;
    }
    let x = b.tally;
    let mut outliers = flows.iter().filter(|k| {
        let (f, n) = totals[k];
        let rest = ((x.fail - f) / (x.fail + x.ok - n).max(1.0)).max(floor);
        f >= LONE_SHARE * n && chernoff_score(f, n, rest) >= min_score
    });
    let k = outliers.next()?;
    if outliers.next().is_some() {
        return None;
    }
    Some(
        live.failing(c, b.element)
            .filter(|&i| obs[i].flow == Some(*k))
            .collect(),
    )
}

/// The finding of the flow whose live failed observations are `flow`, split off
/// component `e` ([`lone_outlier`]), scored against the background of the live probes
/// that do not cross it.
fn flow_finding(c: &Compiled, e: usize, flow: &[usize], (live, floor): (&Live, f64)) -> Finding {
    let obs = c.obs;
    let mut x = Tally::default();
    let mut examples = Vec::new();
    for &i in flow {
        x.fail += obs[i].fail;
        x.ok += obs[i].ok;
        add_example(&mut examples, obs.text(i));
    }
    let background = background_outside(live.totals, &x, floor);
    Finding {
        element: c.elements[e].clone(),
        failures: x.fail,
        located: 0.0,
        ok: x.ok,
        score: chernoff_score(x.fail, x.fail + x.ok, background),
        background,
        examples,
        flow: obs[flow[0]].flow,
        beside_switch: false,
        equivalent: Vec::new(),
        rival: false,
    }
}

/// Tally of `element` over the flows whose paths (arrival or failure components)
/// do not cross `other`: what it explains without it.
fn independent(c: &Compiled, element: usize, other: usize) -> Tally {
    let obs = c.obs;
    let mut t = Tally::default();
    for (i, o) in obs.iter().enumerate() {
        if c.ok(i).chain(c.fail(i)).any(|(e, _)| e == other) {
            continue;
        }
        if let Some((_, w)) = c.fail(i).find(|(e, _)| *e == element) {
            t.fail += o.fail * w;
        }
        if let Some((_, w)) = c.ok(i).find(|(e, _)| *e == element) {
            t.ok += o.ok * w;
        }
    }
    t
}

/// A component at which fresh traces located at least `min_failures` breaks.
#[derive(Debug)]
pub(crate) struct Located {
    /// The component.
    pub element: Element,
    /// Failures at those breaks (a break that may sit on either of two links counts
    /// half on each).
    pub failures: f64,
    /// Most of its failures are at those breaks: a component that drops everything
    /// while a trace runs, not one whose loss cut a trace now and then.
    pub mostly: bool,
    /// Most of its probes failed, whether or not explain-away blamed it (a sibling may
    /// have explained its failures): evidence that a whole switch is down.
    pub down: bool,
}

/// Components at which fresh traces located at least `min_failures` breaks.
pub(crate) fn located_breaks(obs: &ObsSet, min_failures: f64) -> Vec<Located> {
    let c = compile(obs);
    let live = Live::new(&c, vec![true; obs.len()]);
    live.tally
        .iter()
        .enumerate()
        .filter(|(_, x)| x.located >= min_failures)
        .map(|(e, x)| Located {
            element: c.elements[e].clone(),
            failures: x.located,
            mostly: 2.0 * x.located >= x.fail,
            down: x.fail >= x.ok,
        })
        .collect()
}

/// R-Pingmesh Algorithm 1: every failed path votes once per failure for each
/// link and RNIC on it; components by votes, most first.
pub(crate) fn alg1_votes(obs: &ObsSet) -> Vec<(Element, u64)> {
    let elements = obs.elements();
    let mut votes: Vec<u64> = vec![0; elements.len()];
    for i in (0..obs.len()).filter(|&i| obs[i].fail > 0.0) {
        for (e, _) in obs
            .fail_elems(i)
            .filter(|&(e, _)| matches!(elements[e], Element::Rnic(_) | Element::Link(_)))
        {
            votes[e] += obs[i].fail.round() as u64;
        }
    }
    let mut v: Vec<(Element, u64)> = votes
        .into_iter()
        .enumerate()
        .filter(|(_, n)| *n > 0)
        .map(|(e, n)| (elements[e].clone(), n))
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// Adds hop list `text` to `examples`, up to three distinct ones.
fn add_example(examples: &mut Vec<String>, text: &str) {
    if examples.len() < 3 && !examples.iter().any(|x| x == text) {
        examples.push(text.to_string());
    }
}

#[cfg(test)]
mod tests {
    /// Explain-away over named observations.
    fn explain(obs: &[FlowObs], p: &Params, eligible: impl Fn(&Element) -> bool) -> Vec<Finding> {
        explain_away(&ObsSet::from_named(obs.to_vec()), p, eligible)
    }

    use super::*;

    const P: Params = Params {
        min_score: 10.0,
        min_failures: 3.0,
        floor: 1e-3,
        min_share: 0.0,
        tested: None,
        lone_flows: true,
    };

    fn link(n: &str) -> Element {
        Element::Link(n.into())
    }

    /// A flow over ToR `a` -> spine `s` -> ToR `b` (2-tier Clos), `ok` arrivals, `fail` losses.
    fn flow(id: usize, a: u32, s: u32, b: u32, ok: f64, fail: f64) -> FlowObs {
        let elems = vec![
            (Element::Rnic(a * 10 + id as u32 % 3), 1.0),
            (link(&format!("t{a}-s{s}")), 1.0),
            (link(&format!("t{b}-s{s}")), 1.0),
            (Element::Rnic(b * 10 + id as u32 % 3), 1.0),
        ];
        FlowObs {
            ok,
            fail,
            ok_elems: elems.clone(),
            fail_elems: elems,
            text: format!("flow {id} t{a} s{s} t{b}"),
            ..FlowObs::default()
        }
    }

    /// Every ToR pair of a 4x2 fabric, three flows per pair and spine, 100 probes each.
    fn fabric(loss: impl Fn(u32, u32, u32) -> f64) -> Vec<FlowObs> {
        fabric_of(4, loss)
    }

    /// [`fabric`] with `tors` ToRs.
    fn fabric_of(tors: u32, loss: impl Fn(u32, u32, u32) -> f64) -> Vec<FlowObs> {
        let mut v = Vec::new();
        for a in 0..tors {
            for b in 0..tors {
                for s in 0..2 {
                    for _ in 0..3 {
                        if a != b {
                            let fail = (100.0 * loss(a, s, b)).round();
                            v.push(flow(v.len(), a, s, b, 100.0 - fail, fail));
                        }
                    }
                }
            }
        }
        v
    }

    /// `fail` probes whose fresh trace broke right after `tor`, located on `link_name`.
    fn broke_after(tor: &str, link_name: &str, fail: f64) -> FlowObs {
        FlowObs {
            fail,
            fail_elems: vec![(link(link_name), 1.0)],
            located: true,
            break_device: Some(tor.into()),
            text: format!("broke after {tor}"),
            ..FlowObs::default()
        }
    }

    fn blamed(f: &[Finding]) -> Vec<Element> {
        f.iter().map(|f| f.element.clone()).collect()
    }

    #[test]
    fn single_link_down_is_found_alone() {
        let obs = fabric(|a, s, b| {
            if s == 1 && (a == 0 || b == 0) {
                1.0
            } else {
                0.0
            }
        });
        assert_eq!(blamed(&explain(&obs, &P, |_| true)), [link("t0-s1")]);
    }

    /// Loss on one link of a 2-ToR fabric: every probe crossing it crosses its twin (the
    /// other ToR's link to the same spine) too, so the finding lists the twin; with
    /// more ToRs nothing is listed. Seeded positions, rates and fabric sizes.
    #[test]
    fn a_link_the_probes_cannot_tell_from_its_twin_lists_it() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let seed = rand::random::<u64>();
        println!("seed {seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        for _ in 0..20 {
            let tors = rng.random_range(2..5u32);
            let (tor, spine) = (rng.random_range(0..tors), rng.random_range(0..2u32));
            let loss = rng.random_range(0.05..0.3);
            let obs = fabric_of(tors, |a, s, b| {
                if s == spine && (a == tor || b == tor) {
                    loss
                } else {
                    0.0
                }
            });
            let found = explain(&obs, &P, |_| true);
            let faulty = link(&format!("t{tor}-s{spine}"));
            let twin = link(&format!("t{}-s{spine}", 1 - tor.min(1)));
            let case = format!("seed {seed}: {tors} ToRs, t{tor}-s{spine} at {loss:.2}");
            assert_eq!(found.len(), 1, "{case}: {found:?}");
            let f = &found[0];
            if tors == 2 {
                let mut named = vec![f.element.clone()];
                named.extend(f.equivalent.iter().cloned());
                named.sort();
                let mut want = vec![faulty, twin];
                want.sort();
                assert_eq!(named, want, "{case}");
            } else {
                assert_eq!(
                    (&f.element, &f.equivalent[..]),
                    (&faulty, &[][..]),
                    "{case}"
                );
            }
        }
    }

    /// Two failing flows that share an RNIC and a spine link: the RNIC (fewer probes)
    /// is blamed, but the link would be too, so the finding has a rival; the same RNIC
    /// failing on flows over both spines has none.
    #[test]
    fn an_rnic_whose_failures_one_link_explains_as_well_has_a_rival() {
        let crosses = |o: &FlowObs, e: &Element| o.fail_elems.iter().any(|(x, _)| x == e);
        let (rnic, l) = (Element::Rnic(0), link("t0-s1"));
        let mut obs = fabric(|_, _, _| 0.0);
        for o in obs
            .iter_mut()
            .filter(|o| crosses(o, &rnic) && crosses(o, &l))
            .take(2)
        {
            (o.ok, o.fail) = (70.0, 30.0);
        }
        let found = explain(&obs, &P, |_| true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((&found[0].element, found[0].rival), (&rnic, true));
        let mut obs = fabric(|_, _, _| 0.0);
        for o in obs.iter_mut().filter(|o| crosses(o, &rnic)) {
            (o.ok, o.fail) = (70.0, 30.0);
        }
        let found = explain(&obs, &P, |_| true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((&found[0].element, found[0].rival), (&rnic, false));
    }

    #[test]
    fn two_concurrent_faults_on_different_spines_are_both_found() {
        let obs = fabric(|a, s, b| match s {
            1 if a == 0 || b == 0 => 1.0,
            0 if a == 2 || b == 2 => 0.1,
            _ => 0.0,
        });
        let mut got = blamed(&explain(&obs, &P, |_| true));
        got.sort();
        assert_eq!(got, [link("t0-s1"), link("t2-s0")]);
    }

    #[test]
    fn one_percent_loss_is_found_but_scattered_timeouts_are_not() {
        // 1 % on t3-s0: 18 flows x 100 probes cross it, 18 losses.
        let obs = fabric(|a, s, b| {
            if s == 0 && (a == 3 || b == 3) && (a + b) % 2 == 1 {
                0.02
            } else {
                0.0
            }
        });
        assert_eq!(blamed(&explain(&obs, &P, |_| true)), [link("t3-s0")]);
        // Noise: one timeout on each of 8 random flows all over the fabric.
        let mut noise = fabric(|_, _, _| 0.0);
        for i in (0..noise.len()).step_by(noise.len() / 8) {
            noise[i].fail = 1.0;
        }
        assert!(explain(&noise, &P, |_| true).is_empty());
        // A lone burst of two timeouts is not enough either.
        let mut burst = fabric(|_, _, _| 0.0);
        burst[5].fail = 2.0;
        assert!(explain(&burst, &P, |_| true).is_empty());
    }

    #[test]
    fn a_fault_does_not_raise_its_own_background() {
        // 1 % on t0-s1 of a 3-ToR fabric: the link carries a third of all probes, so
        // pooled over everything its own losses would make the background 0.33 % and
        // its 12 of 1,200 too weak (score ~5); against the probes not crossing it
        // (none lost) they are plain.
        let obs = fabric_of(3, |a, s, b| {
            if s == 1 && (a == 0 || b == 0) {
                0.01
            } else {
                0.0
            }
        });
        let found = explain(&obs, &P, |_| true);
        assert_eq!(blamed(&found), [link("t0-s1")]);
        assert!(found[0].background < 0.002, "{found:?}");
        // The same loss spread evenly over every link is background, not a fault.
        let even = fabric_of(3, |_, _, _| 0.01);
        assert!(explain(&even, &P, |_| true).is_empty());
    }

    #[test]
    fn partial_path_knowledge_and_ecmp_candidates() {
        let mut obs = fabric(|_, _, _| 0.0);
        // Flows from t1 whose spine is unknown (no trace): losses spread over t1's
        // uplinks; located breaks from fresh traces point at t1-s0.
        for _ in 0..6 {
            obs.push(FlowObs {
                ok: 0.0,
                fail: 10.0,
                fail_elems: vec![(link("t1-s0"), 0.5), (link("t1-s1"), 0.5)],
                text: "unknown spine".into(),
                ..FlowObs::default()
            });
        }
        for _ in 0..3 {
            obs.push(broke_after("t1", "t1-s0", 10.0));
        }
        assert_eq!(blamed(&explain(&obs, &P, |_| true)), [link("t1-s0")]);
    }

    #[test]
    fn untraced_ecmp_alternatives_are_not_guessed_between() {
        // Nothing traced yet: every flow to t0 spreads over t0's two uplinks alike, the
        // failing ones (over s1, truly) and the arriving ones (over s0).
        let untraced = |ok: f64, fail: f64| {
            let elems = vec![(link("t0-s0"), 0.5), (link("t0-s1"), 0.5)];
            FlowObs {
                ok,
                fail,
                ok_elems: elems.clone(),
                fail_elems: elems,
                text: "h5/r0 ... h0/r0".into(),
                untraced: true,
                ..FlowObs::default()
            }
        };
        let mut obs = fabric(|_, _, _| 0.0);
        obs.extend((0..8).map(|_| untraced(0.0, 10.0)));
        obs.extend((0..8).map(|_| untraced(10.0, 0.0)));
        assert_eq!(blamed(&explain(&obs, &P, |_| true)), []);
        // One fresh trace breaking after t0 towards s1 separates them.
        obs.push(broke_after("t0", "t0-s1", 10.0));
        assert_eq!(blamed(&explain(&obs, &P, |_| true)), [link("t0-s1")]);
    }

    #[test]
    fn untraced_failures_never_single_out_a_sibling_that_differs_by_chance() {
        // A shard just taken over: flows from t0 are untraced (the four uplinks share
        // their failures alike), and traced arrivals happen to cross t0-s2 a little less
        // than the others, so the uplinks are not exact twins.
        let uplinks = ["t0-s0", "t0-s1", "t0-s2", "t0-s3"];
        let untraced = |ok: f64, fail: f64| {
            let elems: Vec<_> = uplinks.iter().map(|l| (link(l), 0.25)).collect();
            FlowObs {
                ok,
                fail,
                ok_elems: elems.clone(),
                fail_elems: elems,
                text: "h3/r0 ... h40/r2".into(),
                untraced: true,
                ..FlowObs::default()
            }
        };
        let traced_ok = |l: &str, ok: f64| FlowObs {
            ok,
            ok_elems: vec![(link(l), 1.0)],
            fail_elems: vec![(link(l), 1.0)],
            text: format!("traced over {l}"),
            ..FlowObs::default()
        };
        let mut obs = fabric(|_, _, _| 0.0);
        obs.extend((0..12).map(|_| untraced(38.0, 2.0)));
        for (l, ok) in [
            ("t0-s0", 40.0),
            ("t0-s1", 40.0),
            ("t0-s2", 35.0),
            ("t0-s3", 40.0),
        ] {
            obs.push(traced_ok(l, ok));
        }
        assert_eq!(blamed(&explain(&obs, &P, |_| true)), []);
        // Traced failures name the culprit; the untraced ones then add to its evidence
        // and are explained by it, blaming no sibling.
        for _ in 0..3 {
            obs.push(broke_after("t0", "t0-s1", 20.0));
        }
        let found = explain(&obs, &P, |_| true);
        assert_eq!(blamed(&found), [link("t0-s1")]);
        assert!(
            found[0].failures > 60.0,
            "untraced failures count: {found:?}"
        );
    }

    #[test]
    fn one_failing_flow_among_passing_ones_is_flagged() {
        let mut obs = fabric(|_, _, _| 0.0);
        obs[0] = FlowObs {
            fail: 100.0,
            ok: 0.0,
            fail_elems: vec![(link("t0-s0"), 1.0)],
            located: true,
            break_device: Some("t0".into()),
            ..obs[0].clone()
        };
        let f = explain(&obs, &P, |_| true);
        assert_eq!(blamed(&f), [link("t0-s0")]);
    }

    /// [`fabric_of`] with each observation a flow of its own.
    fn keyed(mut obs: Vec<FlowObs>) -> Vec<FlowObs> {
        for (i, o) in obs.iter_mut().enumerate() {
            o.flow = Some(FlowKey {
                prober: i as u32,
                target: 1000 + i as u32,
                sport: 49152 + i as u16,
                dport: 4791,
            });
        }
        obs
    }

    /// One 5-tuple dropped whole on a fabric with a lossy link, on that link's path or
    /// elsewhere: the flow is a finding of its own and the link is still blamed for the
    /// rest. Seeded positions, rates and fabric sizes.
    #[test]
    fn a_flow_dropped_beside_a_lossy_link_is_a_finding_of_its_own() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let seed = rand::random::<u64>();
        println!("seed {seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        for _ in 0..20 {
            let tors = rng.random_range(3..6u32);
            let (tor, spine) = (rng.random_range(0..tors), rng.random_range(0..2u32));
            let loss = rng.random_range(0.01..0.04);
            let mut obs = keyed(fabric_of(tors, |a, s, b| {
                if s == spine && (a == tor || b == tor) {
                    loss
                } else {
                    0.0
                }
            }));
            let dropped = rng.random_range(0..obs.len());
            (obs[dropped].ok, obs[dropped].fail) = (0.0, 100.0);
            let found = explain(&obs, &P, |_| true);
            let case = format!(
                "seed {seed}: {tors} ToRs, t{tor}-s{spine} at {loss:.3}, {}",
                obs[dropped].text
            );
            let flows: Vec<_> = found.iter().filter_map(|f| f.flow).collect();
            assert_eq!(flows, [obs[dropped].flow.unwrap()], "{case}: {found:?}");
            let components: Vec<_> = found
                .iter()
                .filter(|f| f.flow.is_none())
                .map(|f| &f.element)
                .collect();
            assert_eq!(
                components,
                [&link(&format!("t{tor}-s{spine}"))],
                "{case}: {found:?}"
            );
        }
    }

    /// A dead link whose flows fail whole, all of them or some beside rerouted ones
    /// that arrive: the link's fault, no flow split off it.
    #[test]
    fn a_dead_links_blackholed_flows_stay_the_links() {
        for rerouted in [0, 2] {
            let mut obs = keyed(fabric(|a, s, b| {
                if s == 1 && (a == 0 || b == 0) {
                    1.0
                } else {
                    0.0
                }
            }));
            let through = |o: &FlowObs| o.fail > 0.0;
            for o in obs
                .iter_mut()
                .filter(|o| through(o))
                .step_by(3)
                .take(rerouted)
            {
                (o.ok, o.fail) = (100.0, 0.0);
            }
            let found = explain(&obs, &P, |_| true);
            assert_eq!(blamed(&found), [link("t0-s1")], "{rerouted} rerouted");
            assert_eq!(found[0].flow, None, "{found:?}");
        }
    }

    #[test]
    fn a_break_located_elsewhere_on_a_blamed_path_is_not_a_second_fault() {
        // t0-s1 down; one flow t2 -> t0 over s1 re-traced short (ICMP rate limit at
        // s1) locates its break on t2-s1, which carries plenty of arrivals.
        let mut obs = fabric(|a, s, b| {
            if s == 1 && (a == 0 || b == 0) {
                1.0
            } else {
                0.0
            }
        });
        let i = obs
            .iter()
            .position(|o| o.text.contains("t2 s1 t0"))
            .unwrap();
        obs[i].fail_elems = vec![(link("t2-s1"), 1.0)];
        obs[i].located = true;
        obs[i].break_device = Some("t2".into());
        assert_eq!(blamed(&explain(&obs, &P, |_| true)), [link("t0-s1")]);
        // The same lone located break without the link fault is blamed (a silent drop).
        let mut alone = fabric(|_, _, _| 0.0);
        alone[i] = FlowObs {
            fail: 100.0,
            ok: 0.0,
            ..obs[i].clone()
        };
        assert_eq!(blamed(&explain(&alone, &P, |_| true)), [link("t2-s1")]);
    }

    #[test]
    fn failures_located_beside_a_dead_link_are_not_a_second_link_fault() {
        // t0-s1 down (ECMP blackhole): the traces of t1 <-> t0 over s1 and of their lost
        // ACKs stop after t1 (s1 rate-limits ICMP), so t1-s1 gets more failures than
        // arrivals, yet every one of them comes from a flow whose path crosses t0-s1.
        let mut obs = fabric(|a, s, b| {
            if s == 1 && (a == 0 || b == 0) {
                1.0
            } else {
                0.0
            }
        });
        // The same beside t2: every flow of t0-s1 also crosses t1-s1 or t2-s1.
        let located_on = |o: &FlowObs, tor: &str| FlowObs {
            fail_elems: vec![(link(&format!("{tor}-s1")), 1.0)],
            located: true,
            break_device: Some(tor.into()),
            ..o.clone()
        };
        for tor in ["t1", "t2"] {
            let beside: Vec<usize> = (0..obs.len())
                .filter(|&i| {
                    obs[i].text.ends_with(&format!("{tor} s1 t0"))
                        || obs[i].text.ends_with(&format!("t0 s1 {tor}"))
                })
                .collect();
            for &i in &beside {
                obs[i] = located_on(&obs[i], tor);
                for _ in 0..2 {
                    let ack = FlowObs {
                        ok: 0.0,
                        ..located_on(&obs[i], tor)
                    };
                    obs.push(ack);
                }
            }
        }
        let t1_s1 = |o: &FlowObs| o.fail_elems.iter().any(|(e, _)| *e == link("t1-s1"));
        let (fail, ok): (f64, f64) = obs
            .iter()
            .filter(|o| t1_s1(o))
            .fold((0.0, 0.0), |(f, k), o| (f + o.fail, k + o.ok));
        assert!(fail > ok, "the reproduction needs mostly failures on t1-s1");
        assert_eq!(blamed(&explain(&obs, &P, |_| true)), [link("t0-s1")]);
        // A second dead link on the other spine (its flows cross neither) is found too.
        for o in obs
            .iter_mut()
            .filter(|o| o.text.contains("t3 s0") || o.text.ends_with("s0 t3"))
        {
            (o.ok, o.fail) = (0.0, 100.0);
        }
        let mut got = blamed(&explain(&obs, &P, |_| true));
        got.sort();
        assert_eq!(got, [link("t0-s1"), link("t3-s0")]);
    }

    #[test]
    fn ineligible_components_are_never_blamed() {
        // Every probe RNIC 1 sends fails: it is the culprit unless it may not be blamed.
        let mut obs = fabric(|_, _, _| 0.0);
        for o in obs
            .iter_mut()
            .filter(|o| o.fail_elems[0].0 == Element::Rnic(1))
        {
            (o.ok, o.fail) = (0.0, 100.0);
        }
        assert_eq!(blamed(&explain(&obs, &P, |_| true)), [Element::Rnic(1)]);
        let f = explain(&obs, &P, |e| *e != Element::Rnic(1));
        assert!(f.iter().all(|f| f.element != Element::Rnic(1)));
    }

    /// Link faults on seeded random leaf-spine fabrics (3-6 ToRs x 2-4 spines, two RNICs
    /// per ToR, probes and ACKs hashed onto spines independently), 1-3 concurrent faulty
    /// links with 2-100 % loss, paths as the agents' traces give them (a dead link stops
    /// the fresh trace of each direction crossing it right before it): explain-away's
    /// precision and recall over many seeds. (With two ToRs, a partial loss on `t0-sX` and
    /// on `t1-sX` crosses exactly the same flows: no end-to-end probe tells them apart.)
    #[test]
    fn random_fabrics_and_concurrent_link_faults() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let seed: u64 = rand::random();
        println!("seed {seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        let (mut right, mut blamed_n, mut truth_n) = (0usize, 0usize, 0usize);
        for case in 0..100 {
            let (tors, spines) = (rng.random_range(3..=6u32), rng.random_range(2..=4u32));
            let mut faults: Vec<(String, f64)> = Vec::new();
            for _ in 0..rng.random_range(1..=3) {
                let l = format!(
                    "t{}-s{}",
                    rng.random_range(0..tors),
                    rng.random_range(0..spines)
                );
                let loss = if rng.random_bool(0.5) {
                    1.0
                } else {
                    rng.random_range(0.02..0.1)
                };
                if !faults.iter().any(|(x, _)| *x == l) {
                    faults.push((l, loss));
                }
            }
            let loss_of = |l: &str| faults.iter().find(|(x, _)| x == l).map_or(0.0, |f| f.1);
            let mut obs = Vec::new();
            for a in 0..tors * 2 {
                for b in (0..tors * 2).filter(|b| b / 2 != a / 2) {
                    for _ in 0..2 {
                        let (fs, bs) = (rng.random_range(0..spines), rng.random_range(0..spines));
                        let fwd = [format!("t{}-s{fs}", a / 2), format!("t{}-s{fs}", b / 2)];
                        let ack = [format!("t{}-s{bs}", b / 2), format!("t{}-s{bs}", a / 2)];
                        let links = || fwd.iter().chain(&ack);
                        let arrive: f64 = links().map(|l| 1.0 - loss_of(l)).product();
                        let fail = (100.0 * (1.0 - arrive)).round();
                        let mut elems = vec![(Element::Rnic(a), 1.0), (Element::Rnic(b), 1.0)];
                        for l in links() {
                            if !elems.iter().any(|(e, _)| *e == link(l)) {
                                elems.push((link(l), 1.0));
                            }
                        }
                        // Each direction's trace breaks before its first dead link.
                        let breaks: Vec<(Element, f64)> = [&fwd, &ack]
                            .iter()
                            .filter_map(|dir| dir.iter().find(|l| loss_of(l) >= 1.0))
                            .map(|l| (link(l), 1.0))
                            .collect();
                        obs.push(FlowObs {
                            ok: 100.0 - fail,
                            fail,
                            located: !breaks.is_empty(),
                            fail_elems: if breaks.is_empty() {
                                elems.clone()
                            } else {
                                breaks
                            },
                            ok_elems: elems,
                            text: format!("case {case} {a}->{b}"),
                            ..FlowObs::default()
                        });
                    }
                }
            }
            let found = blamed(&explain(&obs, &P, |_| true));
            let truth: Vec<Element> = faults.iter().map(|(l, _)| link(l)).collect();
            if found.iter().any(|e| !truth.contains(e)) || truth.iter().any(|e| !found.contains(e))
            {
                println!("case {case} {tors}x{spines} faults {faults:?} found {found:?}");
            }
            right += found.iter().filter(|e| truth.contains(e)).count();
            blamed_n += found.len();
            truth_n += truth.len();
        }
        let precision = right as f64 / blamed_n.max(1) as f64;
        let recall = right as f64 / truth_n as f64;
        println!("seed {seed}: precision {precision:.3} recall {recall:.3}");
        assert!(
            precision >= 0.95 && recall >= 0.9,
            "seed {seed}: precision {precision:.3} recall {recall:.3}"
        );
    }

    /// A switch fault against faults of its parts, on seeded random leaf-spine fabrics
    /// (4-6 ToRs x 2-4 spines, two RNICs per ToR, probes and ACKs hashed onto spines
    /// independently, 200 probes per flow, losses drawn binomially): 1-3 % loss on
    /// every port of a random ToR or spine is that switch; two dead links of one spine
    /// are two links; 2-3 % loss on one link is that link. (With three ToRs, every flow
    /// over a spine with two of its three links dead crosses a dead link: the spine
    /// explains the probes as well, with one component.)
    #[test]
    fn a_switch_against_its_links_on_random_fabrics() {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let seed: u64 = rand::random();
        println!("seed {seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        let sw = |n: String| Element::Switch(n.into());
        let tor_of = |r: u32| r / 2;
        let mut wrong = Vec::new();
        for case in 0..60 {
            let (tors, spines) = (rng.random_range(4..=6u32), rng.random_range(2..=4u32));
            // What fails: a switch with its loss, or links with theirs.
            type Lossy = (String, f64);
            let (switch, links): (Option<Lossy>, Vec<Lossy>) = match case % 3 {
                0 => {
                    let name = if rng.random_bool(0.5) {
                        format!("t{}", rng.random_range(0..tors))
                    } else {
                        format!("s{}", rng.random_range(0..spines))
                    };
                    (Some((name, rng.random_range(0.01..0.03))), Vec::new())
                }
                1 => {
                    let s = rng.random_range(0..spines);
                    let a = rng.random_range(0..tors);
                    let b = (a + rng.random_range(1..tors)) % tors;
                    (
                        None,
                        vec![(format!("t{a}-s{s}"), 1.0), (format!("t{b}-s{s}"), 1.0)],
                    )
                }
                _ => {
                    let l = format!(
                        "t{}-s{}",
                        rng.random_range(0..tors),
                        rng.random_range(0..spines)
                    );
                    (None, vec![(l, rng.random_range(0.02..0.03))])
                }
            };
            let survive = |names: &[String]| -> f64 {
                names
                    .iter()
                    .map(|n| {
                        let s = switch.as_ref().filter(|(x, _)| x == n).map_or(0.0, |x| x.1);
                        let l = links.iter().find(|(x, _)| x == n).map_or(0.0, |x| x.1);
                        (1.0 - s) * (1.0 - l)
                    })
                    .product()
            };
            let mut obs = Vec::new();
            for a in 0..tors * 2 {
                for b in (0..tors * 2).filter(|&b| b != a) {
                    let (ta, tb) = (tor_of(a), tor_of(b));
                    // A direction's components in crossing order: ToR, link, spine, link, ToR.
                    let dir = |from: u32, to: u32, s: u32| -> Vec<String> {
                        if from == to {
                            vec![format!("t{from}")]
                        } else {
                            vec![
                                format!("t{from}"),
                                format!("t{from}-s{s}"),
                                format!("s{s}"),
                                format!("t{to}-s{s}"),
                                format!("t{to}"),
                            ]
                        }
                    };
                    let (fs, bs) = (rng.random_range(0..spines), rng.random_range(0..spines));
                    let (fwd, ack) = (dir(ta, tb, fs), dir(tb, ta, bs));
                    let arrive = survive(&fwd) * survive(&ack);
                    let elems = fwd.iter().chain(&ack).map(|n| {
                        if n.contains('-') {
                            link(n)
                        } else {
                            sw(n.clone())
                        }
                    });
                    obs.push(FlowObs {
                        text: format!("case {case} {a}->{b}"),
                        flow: Some(FlowKey {
                            prober: a,
                            target: b,
                            sport: 1,
                            dport: 4791,
                        }),
                        ..drawn_flow(&mut rng, (a, b), arrive, elems)
                    });
                }
            }
            let mut found = blamed(&explain(&obs, &P, |_| true));
            found.sort();
            let mut truth: Vec<Element> = match &switch {
                Some((n, _)) => vec![sw(n.clone())],
                None => links.iter().map(|(l, _)| link(l)).collect(),
            };
            truth.sort();
            if found != truth {
                wrong.push(format!(
                    "case {case} {tors}x{spines} {switch:?} {links:?}: found {found:?}"
                ));
            }
        }
        println!("{}", wrong.join("\n"));
        assert!(wrong.len() <= 3, "seed {seed}: {} of 60 wrong", wrong.len());
    }

    /// Flow `a` -> `b` over its RNICs and `elems` (repeats dropped): 200 probes, each
    /// arriving with probability `arrive`.
    fn drawn_flow(
        rng: &mut rand::rngs::StdRng,
        (a, b): (u32, u32),
        arrive: f64,
        elems: impl IntoIterator<Item = Element>,
    ) -> FlowObs {
        use rand::Rng;
        let fail = (0..200).filter(|_| !rng.random_bool(arrive)).count() as f64;
        let mut v = vec![(Element::Rnic(a), 1.0), (Element::Rnic(b), 1.0)];
        for e in elems {
            if !v.iter().any(|(x, _)| *x == e) {
                v.push((e, 1.0));
            }
        }
        FlowObs {
            ok: 200.0 - fail,
            fail,
            ok_elems: v.clone(),
            fail_elems: v,
            text: format!("{a}->{b}"),
            ..FlowObs::default()
        }
    }

    /// Link `n` crossed towards `to`.
    fn way(n: &str, to: &str) -> Element {
        Element::Direction {
            link: n.into(),
            to: to.into(),
        }
    }

    /// Every RNIC pair of a `tors` x `spines` leaf-spine (two RNICs per ToR), three flows
    /// each, their probes and ACKs hashed onto spines independently, 200 probes a flow
    /// with losses drawn binomially: each crossing of a link loses `loss(link, towards)`.
    fn directed_fabric(
        seed: u64,
        (tors, spines): (u32, u32),
        loss: impl Fn(&str, &str) -> f64,
    ) -> Vec<FlowObs> {
        use rand::{Rng, SeedableRng, rngs::StdRng};
        let mut rng = StdRng::seed_from_u64(seed);
        let mut obs = Vec::new();
        for a in 0..tors * 2 {
            for b in (0..tors * 2).filter(|b| b / 2 != a / 2) {
                for _ in 0..3 {
                    // (link, towards) of each crossing: up from a's ToR, down into b's,
                    // and the ACK's way back over a spine of its own.
                    let (fs, bs) = (rng.random_range(0..spines), rng.random_range(0..spines));
                    let (ta, tb) = (a / 2, b / 2);
                    let crossings = [
                        (format!("t{ta}-s{fs}"), format!("s{fs}")),
                        (format!("t{tb}-s{fs}"), format!("t{tb}")),
                        (format!("t{tb}-s{bs}"), format!("s{bs}")),
                        (format!("t{ta}-s{bs}"), format!("t{ta}")),
                    ];
                    let arrive: f64 = crossings.iter().map(|(l, to)| 1.0 - loss(l, to)).product();
                    let elems = crossings.iter().flat_map(|(l, to)| [link(l), way(l, to)]);
                    obs.push(drawn_flow(&mut rng, (a, b), arrive, elems));
                }
            }
        }
        obs
    }

    #[test]
    fn a_link_is_blamed_in_the_direction_that_loses() {
        // (fabric, faults as (link, towards or "both", loss)): each fault's link must be
        // blamed, in its direction when it has one, and nothing else, on every seed.
        type Case = ((u32, u32), &'static [(&'static str, &'static str, f64)]);
        let cases: &[Case] = &[
            // One direction, up into the spine or down into the ToR.
            ((4, 2), &[("t1-s0", "s0", 0.02)]),
            ((4, 2), &[("t1-s0", "t1", 0.02)]),
            ((5, 3), &[("t3-s2", "s2", 0.02)]),
            ((4, 2), &[("t0-s1", "t0", 1.0)]),
            // Both directions.
            ((4, 2), &[("t1-s0", "both", 0.02)]),
            ((5, 3), &[("t3-s2", "both", 0.01)]),
            ((3, 2), &[("t2-s1", "both", 0.01)]),
            // Two faulty links, one of them one way only.
            ((4, 2), &[("t0-s0", "t0", 0.03), ("t2-s1", "both", 0.02)]),
            ((5, 3), &[("t1-s2", "s2", 0.02), ("t4-s0", "both", 0.03)]),
        ];
        for (i, ((tors, spines), faults)) in cases.iter().enumerate() {
            let mut want: Vec<Element> = faults
                .iter()
                .map(|&(l, dir, _)| if dir == "both" { link(l) } else { way(l, dir) })
                .collect();
            want.sort();
            for seed in 0..10 {
                let obs = directed_fabric(seed, (*tors, *spines), |l, to| {
                    faults
                        .iter()
                        .filter(|(x, dir, _)| *x == l && (*dir == "both" || *dir == to))
                        .map(|f| f.2)
                        .sum()
                });
                let mut got = blamed(&explain(&obs, &P, |_| true));
                got.sort();
                assert_eq!(got, want, "case {i} seed {seed}: {faults:?}");
            }
        }
    }

    #[test]
    fn alg1_counts_votes_of_failed_paths() {
        let obs = fabric(|a, s, b| if s == 1 && a == 0 && b == 1 { 1.0 } else { 0.0 });
        let v = alg1_votes(&ObsSet::from_named(obs.clone()));
        assert_eq!(v[0].1, 300);
        assert!(v.iter().any(|(e, n)| *e == link("t0-s1") && *n == 300));
        assert!(v.iter().all(|(e, _)| *e != link("t0-s0")));
        assert!(chernoff_score(0.0, 10.0, 0.01) == 0.0 && chernoff_score(5.0, 5.0, 0.01) > 20.0);
    }
}
