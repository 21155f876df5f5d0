//! Each inter-ToR flow's components, remembered across ticks. Tomography adds up every
//! healthy flow on each tick it runs, and routing each one afresh (trace lookups,
//! component names built, compared and hashed) took most of a tick at 10k RNICs. A
//! flow's components are a function of its ends and of the traces of its two directions
//! alone, so they are kept, as interned ids, until a trace of either direction with other
//! hops is filed or an end changes address or ToR. A same-ToR flow's components are its
//! two RNICs and their ToR whatever its traces: they are not remembered but read from
//! [`Interner`] ids each tick ([`Ends`]).

use crate::diagnosis::flows::table::FlowKey;
use crate::diagnosis::paths::{Element, Name};
pub(super) use crate::diagnosis::tomography::Interner;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;

/// Interned components the memo may hold beyond one per RNIC and four per remembered
/// flow before it starts afresh: hop addresses the map does not know name links of their
/// own, so stray traces must not grow it without bound.
const ELEMENTS_SLACK: usize = 65_536;

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
    /// The last [`RouteMemo::begin`] after which it was asked for.
    used: u32,
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

/// Flows' components by flow-table index, kept while their [`Stamp`] holds and the flow
/// is asked for on every tick tomography runs.
#[derive(Debug, Default)]
pub(super) struct RouteMemo {
    interner: Interner,
    flows: foldhash::HashMap<u32, Remembered>,
    /// Ticks begun.
    ticks: u32,
}

impl RouteMemo {
    /// Starts a tick over RNIC ids below `rnics`: forgets the flows not asked for in the
    /// tick before (gone, or same-ToR now), and everything when the interner outgrew
    /// what the RNICs and the flows remembered can name.
    pub(super) fn begin(&mut self, rnics: usize) {
        let last = self.ticks;
        self.flows.retain(|_, r| r.used == last);
        if self.interner.len() > rnics + 4 * self.flows.len() + ELEMENTS_SLACK {
            *self = Self {
                ticks: last,
                ..Self::default()
            };
        }
        self.ticks = last.wrapping_add(1);
    }

    /// The interner (ids stay valid until the next [`RouteMemo::begin`]).
    pub(super) fn interner(&mut self) -> &mut Interner {
        &mut self.interner
    }

    /// The components of the flow at index `i`: those remembered when `stamp` is
    /// theirs, else what `compute` gives (arrival components, loss components), then
    /// remembered.
    pub(super) fn components(
        &mut self,
        i: u32,
        stamp: Stamp,
        compute: impl FnOnce() -> (Weighted, Weighted),
    ) -> Components<'_> {
        let interner = &mut self.interner;
        let r = match self.flows.entry(i) {
            Entry::Occupied(e) if e.get().stamp == stamp => e.into_mut(),
            Entry::Occupied(mut e) => {
                e.insert(remember(interner, stamp, compute()));
                e.into_mut()
            }
            Entry::Vacant(e) => e.insert(remember(interner, stamp, compute())),
        };
        r.used = self.ticks;
        let (ok, fail) = r.elems.split_at(r.ok_len as usize);
        let fail = if r.same { ok } else { fail };
        Components {
            ok,
            fail,
            interner: &self.interner,
        }
    }
}

/// Components `(ok, fail)` of a flow, interned.
fn remember(interner: &mut Interner, stamp: Stamp, (ok, fail): (Weighted, Weighted)) -> Remembered {
    let same = ok == fail;
    let elems = ok
        .iter()
        .chain(if same { &[][..] } else { &fail[..] })
        .map(|(e, w)| (interner.id(e), *w as f32))
        .collect();
    Remembered {
        stamp,
        elems,
        ok_len: ok.len() as u32,
        same,
        used: 0,
    }
}

/// Per RNIC, the ids of its component and of its ToR's (when the map knows the ToR),
/// for one tick: a same-ToR flow's components are read from here.
#[derive(Debug)]
pub(super) struct Ends {
    ids: Vec<Option<(u32, Option<u32>)>>,
}

impl Ends {
    /// Room for RNIC ids below `bound`.
    pub(super) fn new(bound: usize) -> Self {
        Self {
            ids: vec![None; bound],
        }
    }

    /// The components of a flow between RNICs `a` and `b` under ToR `tor` (the map's
    /// name, if it knows it), as routing names them: the two RNICs, then the ToR.
    pub(super) fn same_tor(
        &mut self,
        interner: &mut Interner,
        (a, b): (u32, u32),
        tor: Option<&Name>,
    ) -> ([(u32, f32); 3], usize) {
        let mut id = |r: u32| -> (u32, Option<u32>) {
            let slot = &mut self.ids[r as usize];
            *slot.get_or_insert_with(|| {
                (
                    interner.id(&Element::Rnic(r)),
                    tor.map(|t| interner.id(&Element::Switch(Name::clone(t)))),
                )
            })
        };
        let ((a, tor), (b, _)) = (id(a), id(b));
        match tor {
            Some(t) => ([(a, 1.0), (b, 1.0), (t, 1.0)], 3),
            None => ([(a, 1.0), (b, 1.0), (0, 0.0)], 2),
        }
    }
}
