//! Each flow's components, remembered across ticks. Tomography adds up every healthy
//! flow on each tick it runs, and routing each one afresh (trace lookups, component
//! names built, compared and hashed) took most of a tick at 10k RNICs. A flow's
//! components are a function of its ends and of the traces of its two directions alone,
//! so they are kept, as interned ids, until a trace of either direction with other hops
//! is filed or an end changes address or ToR.

use crate::diagnosis::flows::table::FlowKey;
use crate::diagnosis::paths::Element;
use std::hash::BuildHasher;

/// Interned components the memo may hold beyond four per remembered flow before it
/// starts afresh: hop addresses the map does not know name links of their own, so
/// stray traces must not grow it without bound.
const ELEMENTS_SLACK: usize = 65_536;

/// Components as dense ids.
#[derive(Debug, Default)]
pub(super) struct Interner {
    ids: foldhash::HashMap<Element, u32>,
    elements: Vec<Element>,
}

impl Interner {
    /// The id of `e`, interning it.
    pub(super) fn id(&mut self, e: &Element) -> u32 {
        if let Some(&id) = self.ids.get(e) {
            return id;
        }
        let id = self.elements.len() as u32;
        self.elements.push(e.clone());
        self.ids.insert(e.clone(), id);
        id
    }

    /// The component of an id this interner gave.
    pub(super) fn element(&self, id: u32) -> &Element {
        &self.elements[id as usize]
    }

    /// Ids given so far (all below this).
    pub(super) fn len(&self) -> usize {
        self.elements.len()
    }
}

/// Components with weights, as routing names them.
pub(super) type Weighted = Vec<(Element, f64)>;

/// What a flow's components depend on, as one 64-bit hash: the flow, its ends (address
/// and ToR) and the version of the traces of each direction (0: none). Two states of a
/// flow slot are told apart by it with certainty up to a 2^-64 hash collision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp(u64);

impl Stamp {
    /// The stamp of flow `key` with ends `ends` and traces of versions `fwd` (probes)
    /// and `ack` (their ACKs).
    pub(super) fn new<T: std::hash::Hash>(key: &FlowKey, ends: T, fwd: u64, ack: u64) -> Self {
        Self(foldhash::fast::FixedState::default().hash_one((key, ends, fwd, ack)))
    }
}

/// One flow's components: those an arrival vouches for, then those a loss votes for
/// unless they are the same (a flow traced end to end both ways: most flows). Weights
/// are kept as `f32` (they are 1 or an ECMP share), halving the memo.
#[derive(Debug)]
struct Remembered {
    stamp: Stamp,
    elems: Box<[(u32, f32)]>,
    ok_len: u32,
    same: bool,
}

/// A flow's components as ids, with the interner that names them.
pub(super) struct Components<'a> {
    /// Components an arrival vouches for, with weights.
    pub ok: &'a [(u32, f32)],
    /// Components a loss votes for, with weights.
    pub fail: &'a [(u32, f32)],
    /// Names the ids.
    pub interner: &'a Interner,
}

/// Flows' components by flow-table index, kept while their [`Stamp`] holds.
#[derive(Debug, Default)]
pub(super) struct RouteMemo {
    interner: Interner,
    flows: Vec<Option<Remembered>>,
}

impl RouteMemo {
    /// Starts a tick over a flow table of `bound` indices: forgets everything when the
    /// interner outgrew what the flows remembered can name.
    pub(super) fn begin(&mut self, bound: usize) {
        let remembered = self.flows.iter().flatten().count();
        if self.interner.len() > 4 * remembered + ELEMENTS_SLACK {
            *self = Self::default();
        }
        self.flows.truncate(bound);
        self.flows.resize_with(bound, || None);
    }

    /// The interner (ids stay valid until the next [`RouteMemo::begin`]).
    pub(super) fn interner(&mut self) -> &mut Interner {
        &mut self.interner
    }

    /// The components of flow `key` at index `i`: those remembered when `stamp` is
    /// theirs, else what `compute` gives (arrival components, loss components), then
    /// remembered.
    pub(super) fn components(
        &mut self,
        i: u32,
        stamp: Stamp,
        compute: impl FnOnce() -> (Weighted, Weighted),
    ) -> Components<'_> {
        let slot = &mut self.flows[i as usize];
        let r: &Remembered = match slot.take() {
            Some(r) if r.stamp == stamp => slot.insert(r),
            _ => {
                let (ok, fail) = compute();
                let same = ok == fail;
                let interner = &mut self.interner;
                let elems = ok
                    .iter()
                    .chain(if same { &[][..] } else { &fail[..] })
                    .map(|(e, w)| (interner.id(e), *w as f32))
                    .collect();
                slot.insert(Remembered {
                    stamp,
                    elems,
                    ok_len: ok.len() as u32,
                    same,
                })
            }
        };
        let (ok, fail) = r.elems.split_at(r.ok_len as usize);
        let fail = if r.same { ok } else { fail };
        Components {
            ok,
            fail,
            interner: &self.interner,
        }
    }
}
