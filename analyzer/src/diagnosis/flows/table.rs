//! Per-flow state in a dense table: each (prober, target, source port, destination port)
//! interned to an index once, its successful probes counted per bucket of the window's
//! ring (arrivals, slow ones, least RTT) with running window totals, and its RTT baseline.
//!
//! The index is per prober RNIC: each RNIC's flows sorted by (target, ports). An upload
//! holds one host's results, so interning searches a few small lists that stay in cache,
//! where one table of every flow (millions at 50k RNICs) missed the cache per result.
//! Each RNIC also lists the flows it is probed by (RNIC verdicts).

use rocemesh_proto::ProbeClass;

/// A flow: prober RNIC, target RNIC and the probe's UDP ports.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct FlowKey {
    /// Probing RNIC id.
    pub prober: u32,
    /// Target RNIC id.
    pub target: u32,
    /// UDP source port.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
}

/// Successful probes of one flow in one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Arrivals (at most `u16::MAX` per bucket are counted).
    pub ok: u16,
    /// Of which slow when they arrived.
    pub slow: u16,
    /// Least network RTT, ns (`u32::MAX` when empty).
    pub min_rtt: u32,
}

impl Slot {
    /// No arrivals.
    pub(crate) const EMPTY: Self = Self {
        ok: 0,
        slow: 0,
        min_rtt: u32::MAX,
    };
}

/// One flow's window totals and baseline.
#[derive(Debug, Clone)]
pub(crate) struct Flow {
    /// The flow.
    pub key: FlowKey,
    /// Pinglist class of its latest result.
    pub class: ProbeClass,
    /// Arrivals in the window.
    pub ok: u32,
    /// Arrivals judged slow in the window.
    pub slow: u32,
    /// Least network RTT in the window, ns (`u32::MAX` without arrivals).
    pub min_rtt: u32,
    /// RTT baseline, ns: follows the window minimum (down at once, up slowly).
    pub baseline: Option<f64>,
    /// Whether its latest RTT was taken by NIC timestamps at both ends.
    pub nic: bool,
    live: bool,
}

/// A prober's flow in its sorted list: (target, source port, destination port) and the
/// flow's index.
type Entry = (u32, u16, u16, u32);

/// Flows per page of the table's storage (a power of two: an index splits into page and
/// offset with a shift and a mask).
const PAGE_BITS: u32 = 10;
/// Flows per page.
const PAGE: usize = 1 << PAGE_BITS;

/// A page of flows and their bucket counts, allocated at its full size once: the table
/// grows a page at a time, so at most one page is allocated and unused, where arrays grown
/// by doubling leave up to half of themselves unused and copy everything as they grow.
#[derive(Debug)]
struct Page {
    /// At most [`PAGE`] flows (capacity exactly that).
    flows: Vec<Flow>,
    /// Bucket counts, `slots_per_flow` per flow slot of the page (flow-major: one flow's
    /// ring is adjacent).
    slots: Box<[Slot]>,
}

/// The flows of the window; indices stay valid until a flow is forgotten.
#[derive(Debug)]
pub(crate) struct FlowTable {
    slots_per_flow: usize,
    max_flows: usize,
    count: usize,
    /// One past the largest index in use.
    bound: usize,
    pages: Vec<Page>,
    free: Vec<u32>,
    /// Per prober RNIC id: its flows, sorted.
    by_prober: Vec<Vec<Entry>>,
    /// Per target RNIC id: the indices of the flows probing it.
    by_target: Vec<Vec<u32>>,
}

/// Page and offset of flow index `i`.
#[inline]
fn split(i: u32) -> (usize, usize) {
    ((i >> PAGE_BITS) as usize, i as usize & (PAGE - 1))
}

impl FlowTable {
    /// An empty table of at most `max_flows` flows with `slots_per_flow` buckets each.
    pub(crate) fn new(slots_per_flow: usize, max_flows: usize) -> Self {
        Self {
            slots_per_flow,
            max_flows,
            count: 0,
            bound: 0,
            pages: Vec::new(),
            free: Vec::new(),
            by_prober: Vec::new(),
            by_target: Vec::new(),
        }
    }

    /// Flows tracked.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// One past the largest index in use.
    pub(crate) fn bound(&self) -> usize {
        self.bound
    }

    /// Where `key` is (`Ok`) or would go (`Err`) in its prober's list.
    fn search(&self, key: &FlowKey) -> Result<usize, usize> {
        let list = self
            .by_prober
            .get(key.prober as usize)
            .map_or(&[][..], Vec::as_slice);
        list.binary_search_by(|&(t, s, d, _)| (t, s, d).cmp(&(key.target, key.sport, key.dport)))
    }

    /// The index of a flow, `None` when unknown.
    #[cfg(test)]
    pub(crate) fn find(&self, key: &FlowKey) -> Option<u32> {
        let at = self.search(key).ok()?;
        Some(self.by_prober[key.prober as usize][at].3)
    }

    /// The index of a flow, added if new; `None` when the table is full.
    pub(crate) fn intern(&mut self, key: FlowKey, class: ProbeClass) -> Option<u32> {
        let at = match self.search(&key) {
            Ok(at) => return Some(self.by_prober[key.prober as usize][at].3),
            Err(at) => at,
        };
        if self.count >= self.max_flows {
            return None;
        }
        let flow = Flow {
            key,
            class,
            ok: 0,
            slow: 0,
            min_rtt: u32::MAX,
            baseline: None,
            nic: false,
            live: true,
        };
        let i = match self.free.pop() {
            Some(i) => {
                *self.get_mut(i) = flow;
                i
            }
            None => {
                if self.bound.is_multiple_of(PAGE) {
                    self.pages.push(Page {
                        flows: Vec::with_capacity(PAGE),
                        slots: vec![Slot::EMPTY; PAGE * self.slots_per_flow].into_boxed_slice(),
                    });
                }
                self.pages[self.bound / PAGE].flows.push(flow);
                self.bound += 1;
                (self.bound - 1) as u32
            }
        };
        self.count += 1;
        grown(&mut self.by_prober, key.prober).insert(at, (key.target, key.sport, key.dport, i));
        grown(&mut self.by_target, key.target).push(i);
        Some(i)
    }

    /// A flow by index.
    pub(crate) fn get(&self, i: u32) -> &Flow {
        let (p, at) = split(i);
        &self.pages[p].flows[at]
    }

    /// A flow by index, to set its class.
    pub(crate) fn get_mut(&mut self, i: u32) -> &mut Flow {
        let (p, at) = split(i);
        &mut self.pages[p].flows[at]
    }

    /// The bucket counts of a flow.
    pub(crate) fn ring(&self, i: u32) -> &[Slot] {
        let (p, at) = split(i);
        let at = at * self.slots_per_flow;
        &self.pages[p].slots[at..at + self.slots_per_flow]
    }

    /// Counts an arrival with this RTT in slot `slot` of flow `i`.
    pub(crate) fn arrive(&mut self, i: u32, slot: usize, rtt_ns: u32, slow: bool) {
        let (p, at) = split(i);
        let page = &mut self.pages[p];
        let f = &mut page.flows[at];
        let s = &mut page.slots[at * self.slots_per_flow + slot];
        s.min_rtt = s.min_rtt.min(rtt_ns);
        f.min_rtt = f.min_rtt.min(rtt_ns);
        if s.ok == u16::MAX {
            return;
        }
        s.ok += 1;
        f.ok += 1;
        if slow {
            s.slow += 1;
            f.slow += 1;
        }
    }

    /// Indices of every flow tracked (in index order).
    pub(crate) fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        self.pages
            .iter()
            .flat_map(|p| &p.flows)
            .enumerate()
            .filter(|(_, f)| f.live)
            .map(|(i, _)| i as u32)
    }

    /// Flows RNIC `r` probes or is probed by.
    pub(crate) fn touching(&self, r: u32) -> impl Iterator<Item = u32> + '_ {
        of(&self.by_prober, r)
            .iter()
            .map(|e| e.3)
            .chain(of(&self.by_target, r).iter().copied())
    }

    /// Flows probing from RNIC `prober` to RNIC `target`.
    pub(crate) fn between(&self, prober: u32, target: u32) -> impl Iterator<Item = u32> + '_ {
        let list = of(&self.by_prober, prober);
        let from = list.partition_point(|e| e.0 < target);
        list[from..]
            .iter()
            .take_while(move |e| e.0 == target)
            .map(|e| e.3)
    }

    /// Forgets every arrival (flows keep their baselines until the next sweep).
    #[cfg(test)]
    pub(crate) fn forget_results(&mut self) {
        for p in &mut self.pages {
            p.slots.fill(Slot::EMPTY);
            for f in &mut p.flows {
                (f.ok, f.slow, f.min_rtt) = (0, 0, u32::MAX);
            }
        }
    }

    /// Clears the slots `expired` of every flow (their buckets left the window), then
    /// hands each flow to `keep`, which may update it; flows it refuses are forgotten.
    pub(crate) fn sweep(
        &mut self,
        expired: &[usize],
        mut keep: impl FnMut(u32, &mut Flow) -> bool,
    ) {
        let n = self.slots_per_flow;
        let flows = self
            .pages
            .iter_mut()
            .flat_map(|p| p.flows.iter_mut().zip(p.slots.chunks_exact_mut(n)));
        for (i, (f, ring)) in flows.enumerate() {
            if !f.live {
                continue;
            }
            let mut min_gone = false;
            for &s in expired {
                let old = std::mem::replace(&mut ring[s], Slot::EMPTY);
                f.ok -= u32::from(old.ok);
                f.slow -= u32::from(old.slow);
                min_gone |= old.min_rtt == f.min_rtt;
            }
            if min_gone {
                f.min_rtt = ring.iter().map(|s| s.min_rtt).min().unwrap_or(u32::MAX);
            }
            if !keep(i as u32, f) {
                f.live = false;
                ring.fill(Slot::EMPTY);
                self.count -= 1;
                self.free.push(i as u32);
                let k = f.key;
                if let Some(l) = self.by_prober.get_mut(k.prober as usize) {
                    l.retain(|e| e.3 != i as u32);
                }
                if let Some(l) = self.by_target.get_mut(k.target as usize)
                    && let Some(at) = l.iter().position(|&x| x == i as u32)
                {
                    l.swap_remove(at);
                }
            }
        }
    }
}

/// The list of RNIC `r` in RNIC-indexed lists.
fn of<T>(lists: &[Vec<T>], r: u32) -> &[T] {
    lists.get(r as usize).map_or(&[], Vec::as_slice)
}

/// The list of RNIC `r`, the lists grown to hold it (RNIC ids are bounded by the registry).
fn grown<T>(lists: &mut Vec<Vec<T>>, r: u32) -> &mut Vec<T> {
    let r = r as usize;
    if lists.len() <= r {
        lists.resize_with(r + 1, Vec::new);
    }
    &mut lists[r]
}
