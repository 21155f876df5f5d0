//! Tomography's observations of one tick.
//!
//! A flow with failures or slow probes becomes observations of its own, over its traced
//! paths, with their hop lists as evidence. Every other flow only brings arrivals, and
//! tomography reads those only on the components some failure (or slow probe) votes
//! for, in all (the background ratio) and as the number of components tested: so the
//! healthy flows are added up by the blamed components they cross (a same-ToR flow's are
//! its two RNICs and their ToR, an inter-ToR one's those of its traces), each flow's
//! components remembered across ticks ([`RouteMemo`]).
//! The findings are those of one observation per flow; scale-out shards, which hand
//! their observations to each other, still make one per flow.

use super::memo::{Components, Ends, Interner, RouteMemo, Stamp, Weighted};
use super::{Fails, Inputs};
use crate::diagnosis::flows::table::{FlowKey, FlowTable};
use crate::diagnosis::paths::{Element, End, Name, Route, Traced, route};
use crate::diagnosis::tomography::{FlowObs, Obs, ObsSet};

/// Fewest slow probes through a component to blame it for latency.
pub(super) const MIN_SLOW: f64 = 10.0;

/// Arrivals, failures and slow probes of one flow this tick.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    ok: f64,
    timeouts: u32,
    ack2: u32,
    slow: u32,
}

/// Which tomographies run this tick.
#[derive(Debug, Clone, Copy)]
struct Want {
    loss: bool,
    slow: bool,
}

/// The observations of a tick.
#[derive(Debug, Default)]
pub(super) struct Observations {
    /// Loss observations.
    pub loss: ObsSet,
    /// Latency observations.
    pub slow: ObsSet,
    /// (prober, target) of the leading latency observations, one per flow: the pairs
    /// behind latency verdicts.
    pub slow_pairs: Vec<(u32, u32)>,
    /// Components tested by loss and by latency tomography when healthy flows were
    /// added up (`None`: those the observations name).
    pub tested: (Option<usize>, Option<usize>),
}

/// Which tomographies count the flows of an RNIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counted {
    /// None: unregistered, or anomalous (its flows fail for its own fault).
    No,
    /// Loss only: on a noisy host, whose delays say nothing of the network while its
    /// probes' losses still do.
    Loss,
    /// Loss and latency.
    Both,
}

/// What a tick makes of each RNIC as an end of a flow, dense by RNIC id.
struct Sides<'a> {
    /// `None`: not counted; `Some((None, _))`: counted but without an address to
    /// route; the flag: counted for latency too.
    sides: Vec<Option<(Option<End<'a>>, bool)>>,
}

impl<'a> Sides<'a> {
    /// Every registered RNIC as `counted` says.
    fn new(inp: &'a Inputs, counted: impl Fn(u32) -> Counted) -> Self {
        let mut sides = vec![None; inp.registry.id_bound()];
        for r in inp.registry.rnic_ids() {
            let c = counted(r);
            if c != Counted::No {
                sides[r as usize] = Some((end(inp, r), c == Counted::Both));
            }
        }
        Self { sides }
    }

    fn get(&self, r: u32) -> Option<Option<&End<'a>>> {
        self.sides
            .get(r as usize)?
            .as_ref()
            .map(|(e, _)| e.as_ref())
    }

    /// True when the flow between `a` and `b` counts for latency.
    fn latency(&self, a: u32, b: u32) -> bool {
        let both = |r: u32| {
            self.sides
                .get(r as usize)
                .is_some_and(|s| s.as_ref().is_some_and(|s| s.1))
        };
        both(a) && both(b)
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

/// The tick's observations of the flows whose ends are both `counted`, from each flow's
/// `arrivals` (by index) and `fails` (the window's, or those of an interval of it);
/// `None` when there is nothing to explain: fewer than `min_failures` failures, and
/// fewer than [`MIN_SLOW`] slow probes or no flow with a share of `slow_share` of its
/// arrivals slow (scale-out, `shared`: loss observations of every flow, always).
///
/// Latency tomography blames a component only when at least `slow_share` of the arrivals
/// through it are slow, and a component's share (a weighted sum over flows) is at most
/// that of its slowest flow: without such a flow it can blame nothing, and at 10k RNICs
/// queueing alone leaves a few slow probes on thousands of flows every second.
pub(super) fn observations(
    inp: &Inputs,
    (flows, arrivals): (&FlowTable, &dyn Fn(u32) -> f64),
    (fails, slow): (&Fails, &foldhash::HashMap<u32, u32>),
    counted: impl Fn(u32) -> Counted,
    shared: bool,
    (min_failures, slow_share): (u32, f64),
    memo: &mut RouteMemo,
) -> Option<Observations> {
    let counts = |i: u32| {
        let (timeouts, ack2) = fails.get(&i).copied().unwrap_or_default();
        Counts {
            ok: arrivals(i),
            timeouts,
            ack2,
            slow: slow.get(&i).copied().unwrap_or_default(),
        }
    };
    // The hot flows are judged by `counted` itself: the dense sides of every RNIC are
    // built only when there is something to explain.
    let ends = |i: u32| {
        let k = flows.get(i).key;
        [counted(k.prober), counted(k.target)]
    };
    let mut hot: Vec<u32> = fails.keys().chain(slow.keys()).copied().collect();
    hot.sort_unstable();
    hot.dedup();
    hot.retain(|&i| !ends(i).contains(&Counted::No));
    let (failures, slow_probes, share) = hot.iter().fold((0u32, 0u32, 0.0), |(f, s, m), &i| {
        let mut c = counts(i);
        if ends(i) != [Counted::Both; 2] {
            c.slow = 0;
        }
        let share = f64::from(c.slow) / c.ok.max(1.0);
        (f + c.timeouts + c.ack2, s + c.slow, share.max(m))
    });
    let want = Want {
        loss: shared || failures >= min_failures,
        slow: f64::from(slow_probes) >= MIN_SLOW && share > 0.0 && share >= slow_share,
    };
    if !want.loss && !want.slow {
        return None;
    }
    let sides = Sides::new(inp, counted);
    let latency = |k: &FlowKey| sides.latency(k.prober, k.target);
    let counted = |i: u32| {
        let k = flows.get(i).key;
        sides.get(k.prober).is_some() && sides.get(k.target).is_some()
    };
    let mut obs = Observations::default();
    let mut own: Vec<u32> = if shared {
        flows.indices().filter(|&i| counted(i)).collect()
    } else {
        hot
    };
    own.sort_unstable_by_key(|&i| flows.get(i).key);
    for &i in &own {
        let k = flows.get(i).key;
        if let (Some(Some(p)), Some(Some(t))) = (sides.get(k.prober), sides.get(k.target)) {
            let want = Want {
                slow: want.slow && latency(&k),
                ..want
            };
            observe(inp, (p, t), &k, counts(i), want, &mut obs);
        }
    }
    if shared {
        return Some(obs);
    }
    let mut is_own = vec![false; flows.bound()];
    for &i in &own {
        is_own[i as usize] = true;
    }
    memo.begin(inp.registry.id_bound());
    let mut rest = Rest::new(&obs, want, memo.interner());
    let mut ends = Ends::new(inp.registry.id_bound());
    for i in flows.indices().filter(|&i| !is_own[i as usize]) {
        let f = flows.get(i);
        let ok = arrivals(i);
        if let (Some(Some(p)), Some(Some(t))) = (sides.get(f.key.prober), sides.get(f.key.target))
            && ok > 0.0
        {
            if p.tor == t.tor {
                let interner = memo.interner();
                let tor = inp.map.switch(p.tor);
                let (ids, n) = ends.same_tor(interner, (p.rnic, t.rnic), tor);
                let c = Components {
                    ok: &ids[..n],
                    fail: &ids[..n],
                    interner,
                };
                rest.add(&c, ok, latency(&f.key));
                continue;
            }
            let traced = traces(inp, (p, t), &f.key);
            let stamp = Stamp::new(
                &f.key,
                (p.ip, t.ip, p.tor, t.tor),
                traced.0.map_or(0, |x| x.version()),
                traced.1.map_or(0, |x| x.version()),
            );
            let c = memo.components(i, stamp, || healthy_components(inp, (p, t), traced));
            rest.add(&c, ok, latency(&f.key));
        }
    }
    rest.finish(&mut obs, memo.interner());
    Some(obs)
}

/// The traces of a flow's probes and of their ACKs (none for a same-ToR flow: its RNICs
/// are all a route names, whatever the traces).
fn traces<'p>(
    inp: &'p Inputs,
    (p, t): (&End, &End),
    k: &FlowKey,
) -> (Option<Traced<'p>>, Option<Traced<'p>>) {
    let Some(between) = (p.tor != t.tor)
        .then(|| inp.paths.between(p.ip, t.ip))
        .flatten()
    else {
        return (None, None);
    };
    // An ACK's 5-tuple is the probe's reversed, or with its ports swapped too.
    (
        between.there(k.sport, k.dport),
        between
            .back(k.sport, k.dport)
            .or_else(|| between.back(k.dport, k.sport)),
    )
}

/// The routes of a flow's probes and of their ACKs, over their traces.
fn routes(
    inp: &Inputs,
    (p, t): (&End, &End),
    (fwd, ack): (Option<Traced>, Option<Traced>),
    with_text: bool,
) -> (Route, Route) {
    (
        route(inp.map, fwd, p, t, with_text),
        route(inp.map, ack, t, p, with_text),
    )
}

/// What a lost probe of the flow votes for: the broken directions' candidates when a
/// fresh trace located a break, else both whole paths; and whether a break was located.
fn loss_elements(fwd: &Route, ack: &Route) -> (Vec<(Element, f64)>, bool) {
    let broken: Vec<&Vec<(Element, f64)>> = [fwd, ack]
        .into_iter()
        .filter(|r| r.break_device.is_some())
        .map(|r| &r.fail)
        .collect();
    if broken.is_empty() {
        (union(&[&fwd.fail, &ack.fail]), false)
    } else {
        (union(&broken), true)
    }
}

/// One flow's own observations: its probes (loss), its lost ACK2s, its arrivals (latency).
fn observe(
    inp: &Inputs,
    ends: (&End, &End),
    k: &FlowKey,
    f: Counts,
    want: Want,
    out: &mut Observations,
) {
    let with_text = f.timeouts + f.ack2 + f.slow > 0;
    let (fwd, ack) = routes(inp, ends, traces(inp, ends, k), with_text);
    let ok_elems = with_switches(inp, ends, union(&[&fwd.ok, &ack.ok]));
    if want.loss {
        let (fail_elems, located) = loss_elements(&fwd, &ack);
        out.loss.push(FlowObs {
            ok: f.ok,
            fail: f64::from(f.timeouts),
            ok_elems: ok_elems.clone(),
            fail_elems: with_switches(inp, ends, fail_elems),
            located,
            break_device: fwd
                .break_device
                .clone()
                .or_else(|| ack.break_device.clone()),
            text: fwd.text.clone(),
            untraced: fwd.untraced && ack.untraced,
            flow: Some(*k),
        });
        if f.ack2 > 0 {
            out.loss.push(FlowObs {
                ok: 0.0,
                fail: f64::from(f.ack2),
                // Never counted as arrivals (ok = 0): the path, for explain-away.
                ok_elems: with_switches(inp, ends, ack.ok.clone()),
                fail_elems: with_switches(inp, ends, ack.fail.clone()),
                located: ack.break_device.is_some(),
                break_device: ack.break_device.clone(),
                text: ack.text.clone(),
                untraced: ack.untraced,
                flow: Some(*k),
            });
        }
    }
    if want.slow && f.ok > 0.0 {
        out.slow.push(FlowObs {
            ok: f.ok - f64::from(f.slow),
            fail: f64::from(f.slow),
            fail_elems: ok_elems.clone(),
            ok_elems,
            located: false,
            break_device: None,
            text: fwd.text,
            untraced: fwd.untraced && ack.untraced,
            flow: Some(*k),
        });
        out.slow_pairs.push((k.prober, k.target));
    }
}

/// `elems` (one direction's or a flow's components) with the switches they cross: the
/// ends of each link at the link's weight, and the ToR of each end RNIC (surely
/// crossed, whatever ECMP chose), each switch at its largest weight. Switches the map
/// does not know are left out.
fn with_switches(
    inp: &Inputs,
    ends: (&End, &End),
    mut elems: Vec<(Element, f64)>,
) -> Vec<(Element, f64)> {
    let mut switches: Vec<(Element, f64)> = Vec::new();
    let mut add = |name: &str, w: f64| {
        let Some(name) = inp.map.switch(name) else {
            return;
        };
        match switches
            .iter_mut()
            .find(|(e, _)| matches!(e, Element::Switch(s) if *s == *name))
        {
            Some((_, old)) => *old = old.max(w),
            None => switches.push((Element::Switch(Name::clone(name)), w)),
        }
    };
    for (e, w) in &elems {
        match e {
            Element::Rnic(r) => {
                for end in [ends.0, ends.1].into_iter().filter(|end| end.rnic == *r) {
                    add(end.tor, *w);
                }
            }
            Element::Link(l) => {
                for d in inp.map.link(l).map(|l| &l.devices[..]).unwrap_or_default() {
                    add(d, *w);
                }
            }
            Element::Switch(_) | Element::Direction { .. } => {}
        }
    }
    elems.extend(switches);
    elems
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

/// A flow's components for the healthy flows added up: those an arrival vouches for,
/// and those a loss would vote for.
fn healthy_components(
    inp: &Inputs,
    ends: (&End, &End),
    traced: (Option<Traced>, Option<Traced>),
) -> (Weighted, Weighted) {
    let (fwd, ack) = routes(inp, ends, traced, false);
    let ok_elems = with_switches(inp, ends, union(&[&fwd.ok, &ack.ok]));
    let (fail_elems, _) = loss_elements(&fwd, &ack);
    (ok_elems, with_switches(inp, ends, fail_elems))
}

/// A set of interned components.
#[derive(Debug, Default)]
struct IdSet {
    has: Vec<bool>,
    /// Components held, a link's directions not counted apart from the link.
    len: usize,
}

impl IdSet {
    fn insert(&mut self, id: u32, interner: &Interner) {
        let i = id as usize;
        if self.has.len() <= i {
            self.has.resize(i + 1, false);
        }
        if !std::mem::replace(&mut self.has[i], true) {
            self.len += usize::from(!interner.element(id).is_direction());
        }
    }

    fn contains(&self, id: u32) -> bool {
        self.has.get(id as usize).copied().unwrap_or(false)
    }
}

/// Interned components with weights, as a map key (weights by their bits).
type Projection = Vec<(u32, u32)>;

/// The healthy flows added up: arrivals per combination of blamed components crossed.
struct Rest {
    want: Want,
    /// Components loss (latency) observations blame: where arrivals matter.
    blamed: (IdSet, IdSet),
    /// Every component the observations name.
    named: (IdSet, IdSet),
    /// Arrivals per (blamed arrival components, blamed failure components).
    loss: foldhash::HashMap<(Projection, Projection), f64>,
    /// Arrivals per blamed components (latency: arrivals and failures vote alike).
    slow: foldhash::HashMap<Projection, f64>,
}

impl Rest {
    fn new(own: &Observations, want: Want, interner: &mut Interner) -> Self {
        let mut rest = Self {
            want,
            blamed: Default::default(),
            named: Default::default(),
            loss: Default::default(),
            slow: Default::default(),
        };
        for (obs, blamed, named) in [
            (&own.loss, &mut rest.blamed.0, &mut rest.named.0),
            (&own.slow, &mut rest.blamed.1, &mut rest.named.1),
        ] {
            let elements = obs.elements();
            for i in 0..obs.len() {
                for (e, _) in obs.ok_elems(i).chain(obs.fail_elems(i)) {
                    let id = interner.id(&elements[e]);
                    named.insert(id, interner);
                }
                if obs[i].fail > 0.0 {
                    for (e, _) in obs.fail_elems(i) {
                        let id = interner.id(&elements[e]);
                        blamed.insert(id, interner);
                    }
                }
            }
        }
        rest
    }

    /// Adds a flow without failures or slow probes: `ok` arrivals over its components,
    /// for latency too when `latency`.
    fn add(&mut self, c: &Components, ok: f64, latency: bool) {
        let project = |list: &[(u32, f32)], on: &IdSet| -> Projection {
            list.iter()
                .filter(|(e, _)| on.contains(*e))
                .map(|(e, w)| (*e, w.to_bits()))
                .collect()
        };
        if self.want.loss {
            c.ok.iter()
                .chain(c.fail)
                .for_each(|(e, _)| self.named.0.insert(*e, c.interner));
            let key = (
                project(c.ok, &self.blamed.0),
                project(c.fail, &self.blamed.0),
            );
            *self.loss.entry(key).or_default() += ok;
        }
        if self.want.slow && latency {
            c.ok.iter()
                .for_each(|(e, _)| self.named.1.insert(*e, c.interner));
            *self.slow.entry(project(c.ok, &self.blamed.1)).or_default() += ok;
        }
    }

    /// Appends the added-up arrivals to `out`, ordered by their components, and says how
    /// many components were tested.
    fn finish(self, out: &mut Observations, interner: &Interner) {
        let rank = Rank::of(&self.blamed, interner);
        let order = |a: &Projection, b: &Projection| rank.order(a, b);
        let mut loss: Vec<_> = self.loss.into_iter().collect();
        loss.sort_unstable_by(|a, b| order(&a.0.0, &b.0.0).then_with(|| order(&a.0.1, &b.0.1)));
        let loss = loss.into_iter().map(|((o, f), ok)| (o, Some(f), ok));
        push_added(&mut out.loss, interner, loss);
        let mut slow: Vec<_> = self.slow.into_iter().collect();
        slow.sort_unstable_by(|a, b| order(&a.0, &b.0));
        push_added(
            &mut out.slow,
            interner,
            slow.into_iter().map(|(p, ok)| (p, None, ok)),
        );
        out.tested = (Some(self.named.0.len), Some(self.named.1.len));
    }
}

/// Appends added-up arrivals to `set`, each over its arrival components and its failure
/// components (`None`: the same) in the memo's ids.
fn push_added(
    set: &mut ObsSet,
    interner: &Interner,
    added: impl Iterator<Item = (Projection, Option<Projection>, f64)>,
) {
    let mut ids = Remap::new(interner);
    for (ok_elems, fail_elems, ok) in added {
        let ok_ids = ids.list(&ok_elems, set);
        let fail_ids = fail_elems
            .filter(|f| *f != ok_elems)
            .map(|f| ids.list(&f, set));
        let o = Obs {
            ok,
            ..Obs::default()
        };
        set.push_interned(o, &ok_ids, fail_ids.as_deref());
    }
}

/// Order of added-up observations: by components, then weights, components by name (a
/// fixed order whatever the ids, so a tick's observations do not depend on what the memo
/// saw before). Projections hold blamed components only: those are ranked by name once,
/// and projections compared by rank.
struct Rank {
    rank: Vec<u32>,
}

impl Rank {
    fn of((loss, slow): &(IdSet, IdSet), interner: &Interner) -> Self {
        let mut ids: Vec<u32> = (0..interner.len() as u32)
            .filter(|&e| loss.contains(e) || slow.contains(e))
            .collect();
        ids.sort_unstable_by(|&a, &b| interner.element(a).cmp(interner.element(b)));
        let mut rank = vec![u32::MAX; interner.len()];
        for (r, &e) in ids.iter().enumerate() {
            rank[e as usize] = r as u32;
        }
        Self { rank }
    }

    fn order(&self, a: &Projection, b: &Projection) -> std::cmp::Ordering {
        let ranked = |&(e, w): &(u32, u32)| (self.rank[e as usize], w);
        a.iter().map(ranked).cmp(b.iter().map(ranked))
    }
}

/// The memo's component ids as those of one [`ObsSet`], interned there on first use.
struct Remap<'a> {
    interner: &'a Interner,
    ids: Vec<Option<u32>>,
}

impl<'a> Remap<'a> {
    fn new(interner: &'a Interner) -> Self {
        Self {
            interner,
            ids: vec![None; interner.len()],
        }
    }

    /// Projection `p` in `set`'s ids, with its weights.
    fn list(&mut self, p: &Projection, set: &mut ObsSet) -> Vec<(u32, f32)> {
        p.iter()
            .map(|&(e, w)| {
                let id = *self.ids[e as usize]
                    .get_or_insert_with(|| set.intern(self.interner.element(e)));
                (id, f32::from_bits(w))
            })
            .collect()
    }
}
