//! Traced paths: the latest trace per 5-tuple (bounded), and what a flow's traces
//! say about the components a probe crossed (arrivals vouch for them, losses
//! vote for them).
//!
//! A complete trace names every component. A partial trace that is the latest
//! one (the agent re-traces right after a timeout) locates a hard break right
//! after its last answering hop, unless that hop is the destination's ToR
//! (silence there is also what arrival looks like); the last complete trace of the same 5-tuple,
//! when consistent with the partial one, names the component there. Without
//! any trace, an inter-ToR flow may have used any uplink of its ToRs (ECMP), so
//! its loss is spread over them.

use super::fabric::{FabricMap, MapLink};
use rocemesh_proto::path::TracedPath;
use std::net::IpAddr;
use std::sync::Arc;

/// A switch or link name inside an [`Element`]: shared, because a tick clones and drops
/// components by the hundred thousand (added-up flows, interning, findings).
pub(crate) type Name = Arc<str>;

/// A component tomography can blame.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Element {
    /// An RNIC with its cable and ToR port (by registry id).
    Rnic(u32),
    /// A switch-to-switch link (map name or `"<ip>-><ip>"`), both directions of it.
    Link(Name),
    /// One direction of a map link: packets crossing `link` towards the device `to`. A
    /// refinement of [`Element::Link`], not a component of its own: every crossing names
    /// both, so the link keeps all its evidence and its directions compete with it.
    Direction {
        /// The link's map name.
        link: Name,
        /// The device the crossing heads to.
        to: Name,
    },
    /// A switch of the fabric map, every port of it: crossed by whatever crosses one of
    /// its links, and, for a ToR, by whatever its RNICs send or receive.
    Switch(Name),
}

impl Element {
    /// True for one direction of a link (a refinement of the link, not a component).
    pub fn is_direction(&self) -> bool {
        matches!(self, Element::Direction { .. })
    }

    /// The link this element is or is a direction of; nothing for an RNIC or a switch.
    pub fn link(&self) -> Option<&str> {
        match self {
            Element::Link(l) | Element::Direction { link: l, .. } => Some(l),
            Element::Rnic(_) | Element::Switch(_) => None,
        }
    }
}

/// Crossing link `name` towards device `to`, at weight `w`: the link, and that direction
/// of it when the map knows the link (a `"<ip>-><ip>"` link is directed by its name).
/// A map link's components share the map's names.
fn cross(map: &FabricMap, name: &str, to: &str, w: f64, out: &mut Vec<(Element, f64)>) {
    let Some(l) = map.link(name) else {
        out.push((Element::Link(name.into()), w));
        return;
    };
    out.push((Element::Link(Name::clone(&l.name)), w));
    if let Some(to) = l.devices.iter().find(|d| ***d == *to) {
        out.push((
            Element::Direction {
                link: Name::clone(&l.name),
                to: Name::clone(to),
            },
            w,
        ));
    }
}

/// The end of `l` that is not `device`.
pub(crate) fn far_end<'m>(l: &'m MapLink, device: &str) -> &'m str {
    if *l.devices[0] == *device {
        &l.devices[1]
    } else {
        &l.devices[0]
    }
}

/// A traced 5-tuple (UDP), as tests name one.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Tuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

/// The traces known for one 5-tuple, as readers outside the tick get them: a copy.
#[derive(Debug, Clone)]
pub struct Traces {
    /// The newest trace, complete or not.
    pub latest: Arc<TracedPath>,
    /// The newest trace that reached the destination.
    pub complete: Option<Arc<TracedPath>>,
}

/// Hop code of a silent TTL in [`Known::hops`]; an answering hop is its address's index in
/// [`Addrs`] plus one.
const SILENT: u32 = 0;
/// [`Known::flags`]: the latest trace reached the destination (it is the complete one too).
const REACHED: u8 = 1;
/// [`Known::flags`]: the latest trace is of the ACK direction.
const ACK: u8 = 1 << 1;
/// [`Known::flags`]: an older complete trace is known (its hops follow the latest's).
const COMPLETE: u8 = 1 << 2;
/// [`Known::flags`]: that complete trace is of the ACK direction.
const COMPLETE_ACK: u8 = 1 << 3;
/// Addresses [`Addrs`] may hold beyond twice the hop codes stored before it is rebuilt.
const ADDRS_SLACK: usize = 1024;

/// Addresses of hops and of 5-tuples' ends, each held once: a stored address is a 4-byte
/// code where an `Option<IpAddr>` takes 17 bytes, and the few thousand switch addresses
/// of a fabric are shared by every trace that crosses them, an RNIC's by every 5-tuple
/// it sends or receives.
#[derive(Debug, Default)]
struct Addrs {
    ids: foldhash::HashMap<IpAddr, u32>,
    list: Vec<IpAddr>,
}

impl Addrs {
    /// The hop code of `hop`, interning its address.
    fn code(&mut self, hop: Option<IpAddr>) -> u32 {
        let Some(a) = hop else { return SILENT };
        let list = &mut self.list;
        *self.ids.entry(a).or_insert_with(|| {
            list.push(a);
            list.len() as u32
        })
    }

    /// The code of `a` if it is held (never [`SILENT`]).
    fn find(&self, a: IpAddr) -> Option<u32> {
        self.ids.get(&a).copied()
    }

    /// The hop a code stands for.
    fn hop(list: &[IpAddr], code: u32) -> Option<IpAddr> {
        code.checked_sub(1).map(|i| list[i as usize])
    }

    /// The address a code of an address held stands for.
    fn addr(list: &[IpAddr], code: u32) -> IpAddr {
        list[code as usize - 1]
    }
}

/// A [`Tuple`] as the store keys it: its addresses as [`Addrs`] codes (12 bytes, where the
/// tuple takes 40), so a table of a million 5-tuples holds no address twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
}

/// Address codes one stored entry holds: its key's two ends.
const KEY_CODES: usize = 2;

/// The traces of one 5-tuple in one allocation: the latest trace's hop codes, then those of
/// the newest complete one when that is an older trace.
#[derive(Debug)]
struct Known {
    /// Store-wide number of this version of the entry: a new one for every trace filed
    /// that changes its hops or flags.
    version: u64,
    latest_at: u64,
    complete_at: u64,
    hops: Box<[u32]>,
    latest_len: u8,
    flags: u8,
}

impl Known {
    /// `p` as the latest trace, with `older_complete` (its time, ACK flag and hop codes)
    /// kept unless `p` reached the destination itself.
    fn new(p: &TracedPath, older_complete: Option<(u64, bool, &[u32])>, addrs: &mut Addrs) -> Self {
        let mut flags = 0;
        if p.reached {
            flags |= REACHED;
        }
        if p.ack_direction {
            flags |= ACK;
        }
        let older_complete = older_complete.filter(|_| !p.reached);
        // The wire carries at most `MAX_HOPS` (16) hops; longer lists are cut to what a
        // `u8` length holds.
        let latest = &p.hops[..p.hops.len().min(usize::from(u8::MAX))];
        let mut hops = Vec::with_capacity(latest.len() + older_complete.map_or(0, |c| c.2.len()));
        hops.extend(latest.iter().map(|&h| addrs.code(h)));
        let mut complete_at = 0;
        if let Some((at, ack, codes)) = older_complete {
            flags |= COMPLETE;
            if ack {
                flags |= COMPLETE_ACK;
            }
            complete_at = at;
            hops.extend_from_slice(codes);
        }
        Self {
            version: 0,
            latest_at: p.traced_at_unix_ns,
            complete_at,
            hops: hops.into_boxed_slice(),
            latest_len: latest.len() as u8,
            flags,
        }
    }

    fn latest_codes(&self) -> &[u32] {
        &self.hops[..usize::from(self.latest_len)]
    }

    /// The latest trace: (time, ACK direction, hop codes).
    fn latest(&self) -> (u64, bool, &[u32]) {
        (self.latest_at, self.flags & ACK != 0, self.latest_codes())
    }

    /// The newest complete trace: (time, ACK direction, hop codes).
    fn complete(&self) -> Option<(u64, bool, &[u32])> {
        if self.flags & REACHED != 0 {
            Some((self.latest_at, self.flags & ACK != 0, self.latest_codes()))
        } else if self.flags & COMPLETE != 0 {
            let codes = &self.hops[usize::from(self.latest_len)..];
            Some((self.complete_at, self.flags & COMPLETE_ACK != 0, codes))
        } else {
            None
        }
    }
}

/// The traces of one 5-tuple as the store holds them, for [`route`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Traced<'a> {
    known: &'a Known,
    addrs: &'a [IpAddr],
    dst: IpAddr,
}

impl Traced<'_> {
    /// Changes whenever a trace of this 5-tuple with other hops (or flags) is filed (never
    /// 0): what [`route`] makes of the traces is the same while it is.
    pub(crate) fn version(&self) -> u64 {
        self.known.version
    }

    /// True when the latest trace reached the destination.
    fn reached(&self) -> bool {
        self.known.flags & REACHED != 0
    }

    /// Switch hops ([`switch_hops`]) of the latest trace.
    fn latest(&self) -> Vec<Option<IpAddr>> {
        switch_hops(self.known.latest_codes(), self.addrs, self.dst)
    }

    /// Switch hops of the newest complete trace.
    fn complete(&self) -> Option<Vec<Option<IpAddr>>> {
        let (_, _, codes) = self.known.complete()?;
        Some(switch_hops(codes, self.addrs, self.dst))
    }
}

/// Latest traces per 5-tuple, bounded: two generations of at most `max / 2`
/// entries each; a lookup revives an entry of the old generation, a full new
/// generation retires the old one (approximate LRU without per-entry links).
/// Hashed with foldhash: every uploaded trace is filed, and each tick looks up the
/// traces of the flows it routes.
#[derive(Debug)]
pub(crate) struct PathStore {
    current: foldhash::HashMap<Key, Known>,
    old: foldhash::HashMap<Key, Known>,
    max: usize,
    addrs: Addrs,
    /// Address codes held by both generations, keys and hops (bounds `addrs`).
    codes: usize,
    /// Version of the latest trace filed.
    version: u64,
}

impl PathStore {
    /// An empty store holding at most `max` 5-tuples.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            current: foldhash::HashMap::default(),
            old: foldhash::HashMap::default(),
            max: max.max(2),
            addrs: Addrs::default(),
            codes: 0,
            version: 0,
        }
    }

    /// Takes one uploaded trace; an older trace than the one on record is ignored.
    pub(crate) fn insert(&mut self, p: TracedPath) {
        let key = Key {
            src: self.addrs.code(Some(p.src)),
            dst: self.addrs.code(Some(p.dst)),
            sport: p.src_port,
            dport: p.dst_port,
        };
        if !self.current.contains_key(&key) {
            if self.current.len() >= self.max / 2 {
                // The retired generation's table, emptied, is the next one: full
                // size already, it never grows (rehashes) again.
                std::mem::swap(&mut self.old, &mut self.current);
                self.codes -= self
                    .current
                    .values()
                    .map(|k| k.hops.len() + KEY_CODES)
                    .sum::<usize>();
                self.current.clear();
            }
            let known = match self.old.remove(&key) {
                Some(revived) => revived,
                None => {
                    self.version += 1;
                    let known = Known {
                        version: self.version,
                        ..Known::new(&p, None, &mut self.addrs)
                    };
                    self.codes += known.hops.len() + KEY_CODES;
                    self.current.insert(key, known);
                    self.bound_addrs();
                    return;
                }
            };
            self.current.insert(key, known);
        }
        let Some(entry) = self.current.get_mut(&key) else {
            return;
        };
        if p.traced_at_unix_ns < entry.latest_at {
            return;
        }
        let mut known = Known::new(&p, entry.complete(), &mut self.addrs);
        // A trace taken again over the same hops keeps the version: routes are the same.
        if (known.flags, known.latest_len, &known.hops)
            == (entry.flags, entry.latest_len, &entry.hops)
        {
            known.version = entry.version;
        } else {
            self.version += 1;
            known.version = self.version;
        }
        self.codes = self.codes + known.hops.len() - entry.hops.len();
        *entry = known;
        self.bound_addrs();
    }

    /// Rebuilds the address table from the hop codes held once it holds more than twice
    /// as many addresses as codes (addresses of forgotten traces): bounded by the paths
    /// held, at an amortized constant cost per insert.
    fn bound_addrs(&mut self) {
        if self.addrs.list.len() <= 2 * self.codes + ADDRS_SLACK {
            return;
        }
        let old = std::mem::take(&mut self.addrs);
        let addrs = &mut self.addrs;
        let mut new_code = vec![SILENT; old.list.len()];
        let mut recode = |c: &mut u32| {
            if *c != SILENT {
                let was = *c as usize - 1;
                if new_code[was] == SILENT {
                    new_code[was] = addrs.code(Some(old.list[was]));
                }
                *c = new_code[was];
            }
        };
        for generation in [&mut self.current, &mut self.old] {
            // Keys change with their codes: re-filed into the same table, which keeps
            // its size.
            let entries: Vec<(Key, Known)> = generation.drain().collect();
            for (mut key, mut known) in entries {
                recode(&mut key.src);
                recode(&mut key.dst);
                known.hops.iter_mut().for_each(&mut recode);
                generation.insert(key, known);
            }
        }
    }

    /// The 5-tuples between addresses `a` and `b`, either way, if both are held: a flow's
    /// probes and their ACKs are looked up together, each address once.
    pub(crate) fn between(&self, a: IpAddr, b: IpAddr) -> Option<Between<'_>> {
        Some(Between {
            store: self,
            a: (self.addrs.find(a)?, a),
            b: (self.addrs.find(b)?, b),
        })
    }

    /// The traces of the 5-tuple from code `src` to `dst` (code and address).
    fn get_coded(
        &self,
        src: u32,
        (dst, dst_ip): (u32, IpAddr),
        sport: u16,
        dport: u16,
    ) -> Option<Traced<'_>> {
        let key = Key {
            src,
            dst,
            sport,
            dport,
        };
        let known = self.current.get(&key).or_else(|| self.old.get(&key))?;
        Some(Traced {
            known,
            addrs: &self.addrs.list,
            dst: dst_ip,
        })
    }

    /// The traces of a 5-tuple.
    #[cfg(test)]
    pub(crate) fn get(&self, t: &Tuple) -> Option<Traced<'_>> {
        self.between(t.src, t.dst)?.there(t.sport, t.dport)
    }

    /// Number of 5-tuples held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.current.len() + self.old.len()
    }

    /// Fills `out` with one stored trace of `key`, as uploaded.
    fn fill(&self, out: &mut TracedPath, key: &Key, (at, ack, codes): (u64, bool, &[u32])) {
        out.src = Addrs::addr(&self.addrs.list, key.src);
        out.dst = Addrs::addr(&self.addrs.list, key.dst);
        out.src_port = key.sport;
        out.dst_port = key.dport;
        out.traced_at_unix_ns = at;
        out.ack_direction = ack;
        out.hops.clear();
        out.hops
            .extend(codes.iter().map(|&c| Addrs::hop(&self.addrs.list, c)));
    }

    /// The traces whose latest trace satisfies `keep`, newest first, at most
    /// `limit` of them: a bounded copy for readers outside the diagnosis tick.
    pub(crate) fn newest(&self, keep: impl Fn(&TracedPath) -> bool, limit: usize) -> Vec<Traces> {
        let mut path = TracedPath {
            src: IpAddr::from([0, 0, 0, 0]),
            dst: IpAddr::from([0, 0, 0, 0]),
            src_port: 0,
            dst_port: 0,
            traced_at_unix_ns: 0,
            reached: false,
            ack_direction: false,
            hops: Vec::new(),
        };
        let mut found: Vec<(&Key, &Known)> = Vec::new();
        for (key, k) in self.current.iter().chain(self.old.iter()) {
            self.fill(&mut path, key, k.latest());
            path.reached = k.flags & REACHED != 0;
            if keep(&path) {
                found.push((key, k));
            }
        }
        let limit = limit.min(found.len());
        if limit < found.len() {
            found.select_nth_unstable_by_key(limit, |(_, k)| std::cmp::Reverse(k.latest_at));
            found.truncate(limit);
        }
        found.sort_unstable_by_key(|(_, k)| std::cmp::Reverse(k.latest_at));
        found
            .into_iter()
            .map(|(key, k)| {
                self.fill(&mut path, key, k.latest());
                path.reached = k.flags & REACHED != 0;
                let latest = Arc::new(path.clone());
                let complete = match k.complete() {
                    Some(_) if path.reached => Some(Arc::clone(&latest)),
                    Some(c) => {
                        self.fill(&mut path, key, c);
                        path.reached = true;
                        Some(Arc::new(path.clone()))
                    }
                    None => None,
                };
                Traces { latest, complete }
            })
            .collect()
    }
}

/// The 5-tuples between two addresses held by a [`PathStore`] ([`PathStore::between`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Between<'a> {
    store: &'a PathStore,
    /// Code and address of each end.
    a: (u32, IpAddr),
    b: (u32, IpAddr),
}

impl<'a> Between<'a> {
    /// The traces of the 5-tuple from the first address to the second, with these ports.
    pub(crate) fn there(&self, sport: u16, dport: u16) -> Option<Traced<'a>> {
        self.store.get_coded(self.a.0, self.b, sport, dport)
    }

    /// The traces of the 5-tuple from the second address back to the first.
    pub(crate) fn back(&self, sport: u16, dport: u16) -> Option<Traced<'a>> {
        self.store.get_coded(self.b.0, self.a, sport, dport)
    }
}

/// One end of a probe direction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct End<'a> {
    /// Registry id.
    pub rnic: u32,
    /// Address.
    pub ip: IpAddr,
    /// Registry ToR name.
    pub tor: &'a str,
    /// `"<host>/<ifname>"`.
    pub name: &'a str,
}

/// What one direction of a flow says about the components it crosses.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Route {
    /// Components an arriving packet vouches for, with weights (1 = surely crossed).
    pub ok: Vec<(Element, f64)>,
    /// Components a lost packet votes for, with weights.
    pub fail: Vec<(Element, f64)>,
    /// The device after which a fresh partial trace broke off, if it did.
    pub break_device: Option<String>,
    /// Hop list for evidence, e.g. `"h0/r0 t0 s1 t1 h2/r0"`.
    pub text: String,
    /// No trace of this 5-tuple is known: the links are ECMP alternatives only.
    pub untraced: bool,
}

/// Hop addresses of switches only (of hop codes `codes` of a trace towards `dst`): the
/// destination answering itself is dropped.
fn switch_hops(codes: &[u32], addrs: &[IpAddr], dst: IpAddr) -> Vec<Option<IpAddr>> {
    let mut hops: Vec<Option<IpAddr>> = codes.iter().map(|&c| Addrs::hop(addrs, c)).collect();
    while let Some(last) = hops.last() {
        if last.is_none() || *last == Some(dst) {
            hops.pop();
        } else {
            break;
        }
    }
    hops
}

/// Elements between consecutive answering hops; a single unanswered hop between
/// two known switches spreads over the map's candidates for it.
fn link_elements(map: &FabricMap, hops: &[Option<IpAddr>], out: &mut Vec<(Element, f64)>) {
    let answered: Vec<(usize, IpAddr)> = hops
        .iter()
        .enumerate()
        .filter_map(|(i, h)| h.map(|a| (i, a)))
        .collect();
    for w in answered.windows(2) {
        let ((i, a), (j, b)) = (w[0], w[1]);
        if j == i + 1 {
            cross(map, &map.link_into(a, b), &map.device(b), 1.0, out);
        } else if j == i + 2 {
            let (da, db) = (map.device(a), map.device(b));
            let via: Vec<(&MapLink, &str, &MapLink)> = map
                .links_of(&da)
                .filter_map(|l1| {
                    let x = far_end(l1, &da);
                    map.links_of(x)
                        .find(|l2| l2.devices.contains(&db))
                        .map(|l2| (l1, x, l2))
                })
                .collect();
            let w = 1.0 / via.len().max(1) as f64;
            for (l1, x, l2) in via {
                cross(map, &l1.name, x, w, out);
                cross(map, &l2.name, &db, w, out);
            }
        }
    }
}

fn describe(map: &FabricMap, hops: &[Option<IpAddr>], src: &End, dst: Option<&End>) -> String {
    let mut s = src.name.to_string();
    for h in hops {
        s.push(' ');
        match h {
            Some(a) => s.push_str(&map.device(*a)),
            None => s.push('*'),
        }
    }
    s.push(' ');
    s.push_str(dst.map_or("...", |d| d.name));
    s
}

/// Every component of a complete trace.
fn full_path(
    map: &FabricMap,
    hops: &[Option<IpAddr>],
    src: &End,
    dst: &End,
) -> Vec<(Element, f64)> {
    let mut v = vec![(Element::Rnic(src.rnic), 1.0)];
    link_elements(map, hops, &mut v);
    v.push((Element::Rnic(dst.rnic), 1.0));
    v
}

/// Candidates when only ToRs are known: either RNIC, or any link of either ToR.
fn ecmp_candidates(map: &FabricMap, src: &End, dst: &End, out: &mut Vec<(Element, f64)>) {
    out.push((Element::Rnic(src.rnic), 1.0));
    out.push((Element::Rnic(dst.rnic), 1.0));
    if src.tor == dst.tor {
        return;
    }
    // The source ToR's uplinks are crossed away from it, the destination's towards it.
    for (tor, up) in [(src.tor, true), (dst.tor, false)] {
        let links: Vec<&MapLink> = map.links_of(tor).collect();
        let w = 1.0 / links.len().max(1) as f64;
        for l in links {
            let to = if up { far_end(l, tor) } else { tor };
            cross(map, &l.name, to, w, out);
        }
    }
}

/// True when every answered hop of `partial` is the complete trace's hop at that TTL.
fn consistent(partial: &[Option<IpAddr>], complete: &[Option<IpAddr>]) -> bool {
    partial.len() <= complete.len()
        && partial
            .iter()
            .zip(complete)
            .all(|(h, c)| h.is_none() || h == c)
}

/// What a trace that went silent before `next` (reached over link `into`) blames: the
/// link, or, when `next` is a switch with its own link down to the destination's ToR,
/// that link too, half each. A switch that cannot route onwards (its link down to the
/// destination's ToR is gone) answers a TTL-limited probe with a rate-limited
/// "unreachable" or not at all, so its silence does not prove the link into it broke.
fn silent_next_hop(map: &FabricMap, into: &str, next: IpAddr, dst: &End) -> Vec<(Element, f64)> {
    let device = map.device(next);
    let beyond = map
        .link_between(&device, dst.tor)
        .filter(|l| *l.name != *into);
    let mut v = Vec::new();
    let w = if beyond.is_some() { 0.5 } else { 1.0 };
    cross(map, into, &device, w, &mut v);
    if let Some(b) = beyond {
        cross(map, &b.name, dst.tor, w, &mut v);
    }
    v
}

/// The component right after hop `k` of the partial trace `hops`, using the
/// consistent complete trace when there is one.
fn break_candidates(
    map: &FabricMap,
    hops: &[Option<IpAddr>],
    complete: Option<&[Option<IpAddr>]>,
    src: &End,
    dst: &End,
) -> (Vec<(Element, f64)>, Option<String>) {
    let Some(k) = hops.iter().rposition(Option::is_some) else {
        return (
            vec![(Element::Rnic(src.rnic), 1.0)],
            Some(src.name.to_string()),
        );
    };
    let Some(last) = hops[k] else {
        return (Vec::new(), None);
    };
    let device = map.device(last);
    if let Some(c) = complete
        && c.len() > k
        && consistent(&hops[..=k], c)
    {
        let elems = match c.get(k + 1) {
            None => vec![(Element::Rnic(dst.rnic), 1.0)],
            Some(Some(next)) => silent_next_hop(map, &map.link_into(last, *next), *next, dst),
            Some(None) => Vec::new(),
        };
        if !elems.is_empty() {
            return (elems, Some(device.to_string()));
        }
    }
    let incoming = k
        .checked_sub(1)
        .and_then(|i| hops[i])
        .map(|prev| map.link_into(prev, last));
    // Routing is shortest-path: a device with a link straight to the destination's ToR
    // (a spine of a two-tier Clos) forwards over that link, whatever ECMP chose before.
    if let Some(l) = map
        .link_between(&device, dst.tor)
        .filter(|l| incoming.as_deref() != Some(&*l.name))
    {
        let mut v = Vec::new();
        cross(map, &l.name, dst.tor, 1.0, &mut v);
        return (v, Some(device.to_string()));
    }
    let links: Vec<&MapLink> = map
        .links_of(&device)
        .filter(|l| incoming.as_deref() != Some(&*l.name))
        .collect();
    let w = 1.0 / links.len().max(1) as f64;
    // The silent next hop may be a switch that only stopped answering traceroute (ICMP
    // rate limit) while the loss is further on: each ECMP choice also carries the rest
    // of its way, the next switch's link down to the destination's ToR.
    let mut cands: Vec<(Element, f64)> = Vec::new();
    for l in links {
        let next = far_end(l, &device);
        cross(map, &l.name, next, w, &mut cands);
        if let Some(down) = map.link_between(next, dst.tor)
            && !cands
                .iter()
                .any(|(e, _)| matches!(e, Element::Link(l) if **l == *down.name))
        {
            cross(map, &down.name, dst.tor, w, &mut cands);
        }
    }
    (cands, Some(device.to_string()))
}

/// What the traces of one direction (`src` -> `dst`) say; the hop list text is
/// only written `with_text` (it is evidence for failed flows, not needed otherwise).
pub(crate) fn route(
    map: &FabricMap,
    traces: Option<Traced<'_>>,
    src: &End,
    dst: &End,
    with_text: bool,
) -> Route {
    let text = |hops: &[Option<IpAddr>], to: Option<&End>| {
        if with_text {
            describe(map, hops, src, to)
        } else {
            String::new()
        }
    };
    let Some(t) = traces.filter(|_| src.tor != dst.tor) else {
        let mut fail = Vec::new();
        ecmp_candidates(map, src, dst, &mut fail);
        // An arrival vouches for each candidate as much as a loss votes for it.
        let ok = fail.clone();
        let via = if src.tor == dst.tor { src.tor } else { "..." };
        let text = if with_text {
            format!("{} {via} {}", src.name, dst.name)
        } else {
            String::new()
        };
        return Route {
            ok,
            fail,
            break_device: None,
            text,
            untraced: src.tor != dst.tor,
        };
    };
    let complete = t.complete();
    if t.reached() {
        let hops = t.latest();
        let path = full_path(map, &hops, src, dst);
        return Route {
            ok: path.clone(),
            fail: path,
            break_device: None,
            text: text(&hops, Some(dst)),
            untraced: false,
        };
    }
    let hops = t.latest();
    // Silence after the destination's ToR is what arrival looks like too (the agent
    // cannot tell them apart after a timeout): no break is located, the whole path votes.
    let last = hops.iter().rev().flatten().next();
    if last.is_some_and(|&a| *map.device(a) == *dst.tor) {
        let path = match &complete {
            Some(c) if consistent(&hops, c) => full_path(map, c, src, dst),
            _ => full_path(map, &hops, src, dst),
        };
        return Route {
            ok: path.clone(),
            fail: path,
            break_device: None,
            text: text(&hops, Some(dst)),
            untraced: false,
        };
    }
    let (fail, break_device) = break_candidates(map, &hops, complete.as_deref(), src, dst);
    let ok = match &complete {
        Some(c) => full_path(map, c, src, dst),
        None => {
            let mut v = vec![(Element::Rnic(src.rnic), 1.0)];
            link_elements(map, &hops, &mut v);
            v
        }
    };
    Route {
        ok,
        fail,
        break_device,
        text: text(&hops, None),
        untraced: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::fabric::CLOS_2X2 as MAP;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn trace(hops: &[&str], reached: bool, at: u64) -> TracedPath {
        TracedPath {
            src: ip("198.18.0.1"),
            dst: ip("198.18.1.1"),
            src_port: 50_000,
            dst_port: 4791,
            traced_at_unix_ns: at,
            reached,
            ack_direction: false,
            hops: hops
                .iter()
                .map(|h| if *h == "*" { None } else { Some(ip(h)) })
                .collect(),
        }
    }

    /// The 5-tuple `t` traces.
    fn tuple_of(t: &TracedPath) -> Tuple {
        Tuple {
            src: t.src,
            dst: t.dst,
            sport: t.src_port,
            dport: t.dst_port,
        }
    }

    /// The 5-tuple `trace` traces from `a` to `b`.
    fn probed_tuple(a: &End, b: &End) -> Tuple {
        Tuple {
            src: a.ip,
            dst: b.ip,
            sport: 50_000,
            dport: 4791,
        }
    }

    fn ends() -> (End<'static>, End<'static>) {
        (
            End {
                rnic: 1,
                ip: ip("198.18.0.1"),
                tor: "t0",
                name: "h0/r0",
            },
            End {
                rnic: 2,
                ip: ip("198.18.1.1"),
                tor: "t1",
                name: "h1/r0",
            },
        )
    }

    fn link(n: &str) -> Element {
        Element::Link(n.into())
    }

    /// Link `n` crossed towards `to`.
    fn way(n: &str, to: &str) -> Element {
        Element::Direction {
            link: n.into(),
            to: to.into(),
        }
    }

    #[test]
    fn complete_trace_names_every_component() {
        let map = FabricMap::parse(MAP).unwrap();
        let mut store = PathStore::new(100);
        // Via s1; the destination answering itself is not a switch.
        store.insert(trace(
            &["198.18.0.0", "198.19.0.3", "198.19.0.6", "198.18.1.1"],
            true,
            1,
        ));
        let (a, b) = ends();
        let key = probed_tuple(&a, &b);
        let r = route(&map, store.get(&key), &a, &b, true);
        let names: Vec<_> = r.fail.iter().map(|(e, _)| e.clone()).collect();
        // Each link with the direction it is crossed in: up into s1, down into t1.
        assert_eq!(
            names,
            [
                Element::Rnic(1),
                link("t0-s1"),
                way("t0-s1", "s1"),
                link("t1-s1"),
                way("t1-s1", "t1"),
                Element::Rnic(2)
            ]
        );
        assert_eq!(r.ok, r.fail);
        assert_eq!(r.text, "h0/r0 t0 s1 t1 h1/r0");
        // An older trace arriving late changes nothing.
        store.insert(trace(&["198.18.0.0"], false, 0));
        assert_eq!(route(&map, store.get(&key), &a, &b, true), r);
    }

    #[test]
    fn fresh_partial_trace_points_at_the_break() {
        let map = FabricMap::parse(MAP).unwrap();
        let mut store = PathStore::new(100);
        let (a, b) = ends();
        let key = probed_tuple(&a, &b);
        store.insert(trace(&["198.18.0.0", "198.19.0.3", "198.19.0.6"], true, 1));
        // Broke after t0: the link t0 takes towards s1 (from the complete trace), or s1
        // could not route on (a silent s1 may just have lost its link down to t1).
        store.insert(trace(&["198.18.0.0", "*", "*"], false, 2));
        let r = route(&map, store.get(&key), &a, &b, true);
        assert_eq!(
            r.fail,
            [
                (link("t0-s1"), 0.5),
                (way("t0-s1", "s1"), 0.5),
                (link("t1-s1"), 0.5),
                (way("t1-s1", "t1"), 0.5)
            ]
        );
        assert_eq!(r.break_device.as_deref(), Some("t0"));
        assert_eq!(r.ok.len(), 6, "arrivals still vouch for the complete path");
        // Silent after the destination ToR: as likely arrival (a re-trace after a lost
        // ACK looks like this), so no break is located and the whole path votes.
        store.insert(trace(&["198.18.0.0", "198.19.0.3", "198.19.0.6"], false, 3));
        let r = route(&map, store.get(&key), &a, &b, true);
        assert_eq!(r.break_device, None);
        assert_eq!(r.fail.len(), 6);
        assert_eq!(r.fail, r.ok);
        // Nothing answered: the prober's own RNIC.
        store.insert(trace(&["*", "*"], false, 4));
        assert_eq!(
            route(&map, store.get(&key), &a, &b, true).fail,
            [(Element::Rnic(1), 1.0)]
        );
    }

    #[test]
    fn unknown_parts_spread_over_candidates() {
        let map = FabricMap::parse(MAP).unwrap();
        let (a, b) = ends();
        // No trace: either RNIC, or any uplink of either ToR at 1/2 each, crossed up from
        // the source's ToR and down into the destination's.
        let r = route(&map, None, &a, &b, true);
        assert_eq!(r.fail.len(), 10);
        assert!(r.fail.contains(&(link("t1-s0"), 0.5)));
        assert!(r.fail.contains(&(way("t1-s0", "t1"), 0.5)));
        assert!(r.fail.contains(&(way("t0-s0", "s0"), 0.5)));
        assert!(!r.fail.contains(&(way("t0-s0", "t0"), 0.5)));
        // Partial trace without a complete one: t0's links except the one it came in on.
        let mut store = PathStore::new(100);
        store.insert(trace(&["198.18.0.0", "*"], false, 1));
        let key = probed_tuple(&a, &b);
        // Each choice carries the rest of its way (the spine may only have stopped
        // answering traceroute while the loss is on its link down to t1).
        let r = route(&map, store.get(&key), &a, &b, true);
        assert_eq!(
            r.fail,
            [
                (link("t0-s0"), 0.5),
                (way("t0-s0", "s0"), 0.5),
                (link("t1-s0"), 0.5),
                (way("t1-s0", "t1"), 0.5),
                (link("t0-s1"), 0.5),
                (way("t0-s1", "s1"), 0.5),
                (link("t1-s1"), 0.5),
                (way("t1-s1", "t1"), 0.5)
            ]
        );
        // Broke right after a spine (the hop before it silent, so the way in is unknown):
        // the spine's link down to the destination's ToR, not any of its links.
        store.insert(trace(&["*", "198.19.0.3", "*"], false, 2));
        let r = route(&map, store.get(&key), &a, &b, true);
        assert_eq!(r.fail, [(link("t1-s1"), 1.0), (way("t1-s1", "t1"), 1.0)]);
        assert_eq!(r.break_device.as_deref(), Some("s1"));
        // An unanswered spine between two known ToRs: either spine's pair of links.
        store.insert(trace(&["198.18.0.0", "*", "198.19.0.6"], true, 3));
        let r = route(&map, store.get(&key), &a, &b, true);
        assert!(r.fail.contains(&(link("t0-s1"), 0.5)) && r.fail.contains(&(link("t1-s0"), 0.5)));
        assert!(
            r.fail.contains(&(way("t0-s1", "s1"), 0.5))
                && r.fail.contains(&(way("t1-s0", "t1"), 0.5))
        );
    }

    #[test]
    fn newest_is_filtered_bounded_and_newest_first() {
        // Small store: entries spread over both generations.
        let mut store = PathStore::new(6);
        for port in 0..5u16 {
            let mut t = trace(&["198.18.0.0"], port % 2 == 0, u64::from(port) * 10);
            t.src_port = port;
            store.insert(t);
        }
        assert_eq!(store.len(), 5);
        let ports = |v: Vec<Traces>| v.iter().map(|t| t.latest.src_port).collect::<Vec<_>>();
        assert_eq!(ports(store.newest(|_| true, 100)), [4, 3, 2, 1, 0]);
        assert_eq!(ports(store.newest(|_| true, 2)), [4, 3]);
        assert_eq!(ports(store.newest(|p| !p.reached, 100)), [3, 1]);
        assert!(store.newest(|p| p.dst_port == 1, 100).is_empty());
        // A newer partial trace of a 5-tuple keeps its complete one alongside.
        let mut broken = trace(&["*"], false, 100);
        broken.src_port = 0;
        store.insert(broken);
        let top = &store.newest(|_| true, 1)[0];
        assert_eq!((top.latest.src_port, top.latest.reached), (0, false));
        assert_eq!(top.complete.as_ref().map(|c| c.traced_at_unix_ns), Some(0));
    }

    #[test]
    fn address_table_is_rebuilt_from_the_traces_held() {
        let map = FabricMap::parse(MAP).unwrap();
        let mut store = PathStore::new(100);
        let (a, b) = ends();
        let key = probed_tuple(&a, &b);
        store.insert(trace(&["198.18.0.0", "198.19.0.3", "198.19.0.6"], true, 0));
        let before = route(&map, store.get(&key), &a, &b, true);
        // Newer partial traces of another 5-tuple, each through addresses never seen again:
        // the table forgets them, and the complete trace above keeps its hops.
        for at in 1..5_000u32 {
            let mut t = trace(&["198.18.0.0", "*"], false, u64::from(at));
            t.src_port = 1;
            t.hops[1] = Some(IpAddr::from(at.to_be_bytes()));
            store.insert(t);
            assert!(store.addrs.list.len() <= 2 * store.codes + ADDRS_SLACK);
        }
        assert!(store.addrs.list.len() < 5_000);
        assert_eq!(route(&map, store.get(&key), &a, &b, true), before);
        let t = &store.newest(|p| p.src_port == 1, 1)[0];
        assert_eq!(t.latest.hops[1], Some(IpAddr::from(4_999u32.to_be_bytes())));
    }

    /// The ends of forgotten 5-tuples leave the address table too, and the 5-tuples kept
    /// read back with their own ends after it is rebuilt.
    #[test]
    fn forgotten_ends_leave_the_address_table() {
        let mut store = PathStore::new(100);
        let kept = trace(&["198.18.0.0", "198.18.2.0"], true, 0);
        let key = tuple_of(&kept);
        let end = |at: u32| IpAddr::from((0x0a00_0000 + at).to_be_bytes());
        // Every 5-tuple held, the kept one aside, has the end it was traced from.
        let check = |store: &PathStore| {
            let held = store.newest(|_| true, 100);
            assert!(held.len() > 40);
            for t in held.iter().map(|t| &t.latest) {
                assert_eq!(t.dst, kept.dst);
                if t.src != kept.src {
                    assert_eq!(t.src, end(t.traced_at_unix_ns as u32));
                }
            }
        };
        let mut rebuilt = 0;
        for at in 1..5_000u32 {
            let mut t = trace(&["198.18.0.0", "198.18.2.0"], true, u64::from(at));
            t.src = end(at);
            let before = store.addrs.list.len();
            store.insert(t);
            if at % 20 == 0 {
                // Looked up often enough to stay.
                store.insert(TracedPath {
                    traced_at_unix_ns: u64::from(at),
                    ..kept.clone()
                });
            }
            assert!(store.addrs.list.len() <= 2 * store.codes + ADDRS_SLACK);
            if store.addrs.list.len() < before {
                rebuilt += 1;
                check(&store);
            }
        }
        assert!(rebuilt >= 2);
        assert!(store.addrs.list.len() < 2_000);
        assert_eq!(store.get(&key).unwrap().known.latest_at, 4_980);
        check(&store);
    }

    /// The version routes are remembered by changes with the hops, not with the time.
    #[test]
    fn a_trace_taken_again_over_the_same_hops_keeps_its_version() {
        let mut store = PathStore::new(100);
        let t = trace(&["198.18.0.0", "198.18.2.0"], true, 1);
        let key = tuple_of(&t);
        store.insert(t);
        let version = |s: &PathStore| s.get(&key).unwrap().version();
        let first = version(&store);
        store.insert(trace(&["198.18.0.0", "198.18.2.0"], true, 2));
        assert_eq!(version(&store), first);
        // Cut short after the ToR: another route.
        store.insert(trace(&["198.18.0.0", "*"], false, 3));
        let cut = version(&store);
        assert_ne!(cut, first);
        // Complete again: the latest and the complete trace are one again.
        store.insert(trace(&["198.18.0.0", "198.18.2.0"], true, 4));
        assert_ne!(version(&store), cut);
    }

    #[test]
    fn store_is_bounded() {
        let mut store = PathStore::new(10);
        for port in 0..100u16 {
            let mut t = trace(&["198.18.0.0"], true, 1);
            t.src_port = port;
            store.insert(t);
            assert!(store.len() <= 10);
        }
        let (a, b) = ends();
        assert!(
            store
                .get(&Tuple {
                    src: a.ip,
                    dst: b.ip,
                    sport: 99,
                    dport: 4791
                })
                .is_some()
        );
        assert!(
            store
                .get(&Tuple {
                    src: a.ip,
                    dst: b.ip,
                    sport: 0,
                    dport: 4791
                })
                .is_none()
        );
    }
}
