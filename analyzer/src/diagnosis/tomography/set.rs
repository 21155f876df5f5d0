//! One tick's observations with their components interned: what tomography reads.
//!
//! At 10k RNICs a tick explains tens of thousands of observations of ~20 components
//! each. Named, a component and its weight take 48 bytes and every list its own
//! allocation; here one array holds every list as (component id, `f32` weight) pairs, 8
//! bytes each, and the components are named once. Weights are 1 or an ECMP share, so
//! `f32` holds them to ~1e-7.

use super::FlowObs;
use crate::diagnosis::flows::table::FlowKey;
use crate::diagnosis::paths::Element;

/// One observation of an [`ObsSet`]: its counts and flags (its components and hop list
/// are the set's).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Obs {
    /// Probes that arrived (for latency: arrived and fast).
    pub ok: f64,
    /// Probes that failed (for latency: arrived slow).
    pub fail: f64,
    /// True when the failure components come from a fresh partial trace (a located break).
    pub located: bool,
    /// No direction of the flow was traced: the failure components are ECMP alternatives.
    pub untraced: bool,
    /// The flow whose probes these are (`None`: healthy flows added up).
    pub flow: Option<FlowKey>,
}

/// Where an observation's lists and details sit in the set.
#[derive(Debug, Clone, Copy)]
struct Span {
    /// Arrival components: `entries[ok_at..ok_at + ok_len]`.
    ok_at: u32,
    ok_len: u32,
    /// Failure components, likewise (the same range when both lists are equal).
    fail_at: u32,
    fail_len: u32,
    /// Index of its hop list and break device in `details`, if it has any.
    detail: Option<u32>,
}

/// Components as dense ids, in order of first appearance.
#[derive(Debug, Clone, Default)]
pub(crate) struct Interner {
    ids: foldhash::HashMap<Element, u32>,
    elements: Vec<Element>,
}

impl Interner {
    /// The id of `e`, interning it.
    pub(crate) fn id(&mut self, e: &Element) -> u32 {
        if let Some(&id) = self.ids.get(e) {
            return id;
        }
        let id = self.elements.len() as u32;
        self.elements.push(e.clone());
        self.ids.insert(e.clone(), id);
        id
    }

    /// The id of `e` if it was interned.
    pub(crate) fn get(&self, e: &Element) -> Option<u32> {
        self.ids.get(e).copied()
    }

    /// The component of an id this interner gave.
    pub(crate) fn element(&self, id: u32) -> &Element {
        &self.elements[id as usize]
    }

    /// Every component interned, by id.
    pub(crate) fn elements(&self) -> &[Element] {
        &self.elements
    }

    /// Ids given so far (all below this).
    pub(crate) fn len(&self) -> usize {
        self.elements.len()
    }
}

/// Hop list and break device of an observation that has them (one flow's own).
#[derive(Debug, Clone, Default)]
struct Detail {
    text: String,
    break_device: Option<String>,
}

/// Observations with interned components, in the order they were pushed; ids are dense
/// and given in order of first appearance, so tomography's tie-breaks and orders depend
/// on the observations only.
#[derive(Debug, Clone, Default)]
pub(crate) struct ObsSet {
    elements: Interner,
    entries: Vec<(u32, f32)>,
    obs: Vec<Obs>,
    spans: Vec<Span>,
    details: Vec<Detail>,
}

impl ObsSet {
    /// The observations of `named`, in order.
    #[cfg(test)]
    pub(crate) fn from_named(named: impl IntoIterator<Item = FlowObs>) -> Self {
        let mut set = Self::default();
        set.extend(named);
        set
    }

    /// Appends `named`, in order.
    pub(crate) fn extend(&mut self, named: impl IntoIterator<Item = FlowObs>) {
        for o in named {
            self.push(o);
        }
    }

    /// The id of `e`, interning it.
    pub(crate) fn intern(&mut self, e: &Element) -> u32 {
        self.elements.id(e)
    }

    /// The id of `e` when some observation names it.
    pub(crate) fn id(&self, e: &Element) -> Option<u32> {
        self.elements.get(e)
    }

    /// Appends a named observation.
    pub(crate) fn push(&mut self, o: FlowObs) {
        let intern = |set: &mut Self, list: &[(Element, f64)]| -> Vec<(u32, f32)> {
            list.iter()
                .map(|(e, w)| (set.intern(e), *w as f32))
                .collect()
        };
        let ok = intern(self, &o.ok_elems);
        let fail = intern(self, &o.fail_elems);
        let detail = (!o.text.is_empty() || o.break_device.is_some()).then(|| {
            self.details.push(Detail {
                text: o.text,
                break_device: o.break_device,
            });
            (self.details.len() - 1) as u32
        });
        self.push_ids(
            Obs {
                ok: o.ok,
                fail: o.fail,
                located: o.located,
                untraced: o.untraced,
                flow: o.flow,
            },
            &ok,
            (ok != fail).then_some(&fail[..]),
            detail,
        );
    }

    /// Appends an observation of ids this set gave: arrival components `ok`, failure
    /// components `fail` (`None`: the same), no hop list.
    pub(crate) fn push_interned(&mut self, o: Obs, ok: &[(u32, f32)], fail: Option<&[(u32, f32)]>) {
        self.push_ids(o, ok, fail, None);
    }

    fn push_ids(
        &mut self,
        o: Obs,
        ok: &[(u32, f32)],
        fail: Option<&[(u32, f32)]>,
        detail: Option<u32>,
    ) {
        let mut range = |list: &[(u32, f32)]| {
            let at = self.entries.len() as u32;
            self.entries.extend_from_slice(list);
            (at, list.len() as u32)
        };
        let (ok_at, ok_len) = range(ok);
        let (fail_at, fail_len) = fail.map_or((ok_at, ok_len), range);
        self.obs.push(o);
        self.spans.push(Span {
            ok_at,
            ok_len,
            fail_at,
            fail_len,
            detail,
        });
    }

    /// Number of observations.
    pub(crate) fn len(&self) -> usize {
        self.obs.len()
    }

    /// True when there is no observation.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.obs.is_empty()
    }

    /// The observations, in order.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, Obs> {
        self.obs.iter()
    }

    /// The components named, by id.
    pub(crate) fn elements(&self) -> &[Element] {
        self.elements.elements()
    }

    /// Components an arrival of observation `i` vouches for, with weights.
    pub(crate) fn ok_elems(&self, i: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        let s = &self.spans[i];
        self.list(s.ok_at, s.ok_len)
    }

    /// Components a failure of observation `i` votes for, with weights.
    pub(crate) fn fail_elems(&self, i: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        let s = &self.spans[i];
        self.list(s.fail_at, s.fail_len)
    }

    fn list(&self, at: u32, len: u32) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.entries[at as usize..(at + len) as usize]
            .iter()
            .map(|&(e, w)| (e as usize, f64::from(w)))
    }

    /// Hop list of observation `i`, for evidence (empty for healthy flows added up).
    pub(crate) fn text(&self, i: usize) -> &str {
        self.spans[i]
            .detail
            .map_or("", |d| &self.details[d as usize].text)
    }

    /// Device after which observation `i`'s trace broke, if it did.
    pub(crate) fn break_device(&self, i: usize) -> Option<&str> {
        self.spans[i]
            .detail
            .and_then(|d| self.details[d as usize].break_device.as_deref())
    }

    /// Observation `i` named again (what shards exchange).
    pub(crate) fn named(&self, i: usize) -> FlowObs {
        let o = &self.obs[i];
        let named = |list: &mut dyn Iterator<Item = (usize, f64)>| {
            list.map(|(e, w)| (self.elements.elements()[e].clone(), w))
                .collect()
        };
        FlowObs {
            ok: o.ok,
            fail: o.fail,
            ok_elems: named(&mut self.ok_elems(i)),
            fail_elems: named(&mut self.fail_elems(i)),
            located: o.located,
            break_device: self.break_device(i).map(str::to_string),
            text: self.text(i).to_string(),
            untraced: o.untraced,
            flow: o.flow,
        }
    }

    /// Every observation named again.
    pub(crate) fn to_named(&self) -> Vec<FlowObs> {
        (0..self.len()).map(|i| self.named(i)).collect()
    }
}

impl std::ops::Index<usize> for ObsSet {
    type Output = Obs;

    fn index(&self, i: usize) -> &Obs {
        &self.obs[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(n: &str) -> Element {
        Element::Link(n.into())
    }

    /// Observations of a few flows over a few components; weights exact in `f32`.
    fn named() -> Vec<FlowObs> {
        let flow = |p: u32| FlowKey {
            prober: p,
            target: p + 1,
            sport: 1000 + p as u16,
            dport: 4791,
        };
        let path = vec![
            (Element::Rnic(1), 1.0),
            (link("t0-s1"), 0.5),
            (link("t0-s0"), 0.5),
            (Element::Switch("t0".into()), 1.0),
        ];
        vec![
            FlowObs {
                ok: 10.0,
                fail: 2.0,
                ok_elems: path.clone(),
                fail_elems: path.clone(),
                text: "h1 t0 s1 t1 h2".into(),
                flow: Some(flow(1)),
                ..FlowObs::default()
            },
            FlowObs {
                ok: 0.0,
                fail: 3.0,
                ok_elems: path[..2].to_vec(),
                fail_elems: vec![(link("t1-s1"), 1.0)],
                located: true,
                break_device: Some("t1".into()),
                text: "h2 t1".into(),
                flow: Some(flow(2)),
                ..FlowObs::default()
            },
            FlowObs {
                ok: 40.0,
                ok_elems: vec![(Element::Rnic(7), 1.0), (link("t0-s1"), 0.25)],
                fail_elems: vec![(Element::Rnic(7), 1.0)],
                untraced: true,
                ..FlowObs::default()
            },
        ]
    }

    #[test]
    fn named_observations_read_back_unchanged() {
        let obs = named();
        let set = ObsSet::from_named(obs.clone());
        assert_eq!(set.len(), 3);
        assert_eq!(set.to_named(), obs);
        assert_eq!(set.text(0), "h1 t0 s1 t1 h2");
        assert_eq!(set.break_device(1), Some("t1"));
        assert_eq!((set.text(2), set.break_device(2)), ("", None));
        // Ids in order of first appearance, each component named once.
        assert_eq!(
            set.elements(),
            [
                Element::Rnic(1),
                link("t0-s1"),
                link("t0-s0"),
                Element::Switch("t0".into()),
                link("t1-s1"),
                Element::Rnic(7),
            ]
        );
        assert_eq!(set.id(&link("t1-s1")), Some(4));
        assert_eq!(set.id(&link("t9-s9")), None);
        // Equal arrival and failure lists are stored once.
        assert_eq!(set.entries.len(), 4 + 2 + 1 + 2 + 1);
    }

    #[test]
    fn interned_pushes_reuse_the_sets_ids() {
        let mut set = ObsSet::from_named(named());
        let s0 = set.intern(&link("t0-s1"));
        let fresh = set.intern(&link("t3-s2"));
        assert_eq!((s0, fresh), (1, 6));
        let o = Obs {
            ok: 5.0,
            ..Obs::default()
        };
        set.push_interned(o, &[(s0, 1.0), (fresh, 0.5)], None);
        let back = set.named(3);
        assert_eq!(back.ok_elems, [(link("t0-s1"), 1.0), (link("t3-s2"), 0.5)]);
        assert_eq!(back.fail_elems, back.ok_elems);
        assert_eq!((back.ok, back.fail, back.flow), (5.0, 0.0, None));
    }
}
