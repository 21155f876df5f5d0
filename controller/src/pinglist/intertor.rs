//! Inter-ToR 5-tuples (R-Pingmesh §4.1, Eq. 1): each ToR gets k slots; each slot is a
//! 5-tuple from one of its RNICs to an RNIC under another ToR, chosen by a seeded hash of
//! (ToR, slot, slot generation). A fraction of the slots gets a new generation every
//! rotation period, so the probed 5-tuples change slowly and silent per-flow drops on any
//! 5-tuple are eventually hit.

use super::PortRange;
use crate::hash::stable_hash;
use crate::registry::RnicRecord;
use std::collections::BTreeMap;

/// One inter-ToR 5-tuple.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tuple<'a> {
    pub(crate) src: &'a RnicRecord,
    pub(crate) dst: &'a RnicRecord,
    pub(crate) src_port: u16,
}

/// Generation of slot `i` (of `k`) at rotation `r` when `m` slots are refreshed per
/// rotation: refreshes walk the slots cyclically, so from `r` to `r + 1` exactly `m`
/// generations step by one (for `m <= k`).
pub(crate) fn slot_generation(i: u32, k: u32, m: u32, rotation: u64) -> u64 {
    let numerator = u128::from(rotation) * u128::from(m) + u128::from(k - 1 - i);
    (numerator / u128::from(k)) as u64
}

/// Rendezvous choice: the member with the highest hash. Adding or removing an RNIC only
/// moves the slots that pick that RNIC, so pinglists stay stable while hosts churn.
fn pick<'a>(group: &[&'a RnicRecord], seed: u64, role: &[u8]) -> &'a RnicRecord {
    group
        .iter()
        .copied()
        .max_by_key(|r| stable_hash(&[&seed.to_le_bytes(), role, &r.id.to_le_bytes()]))
        .expect("ToR groups are never empty")
}

/// The inter-ToR tuples of every ToR (k per ToR, in ToR order, then slot order); empty with fewer
/// than two ToRs. ToR `j`'s slot `i` targets the ToR `1 + (i + generation * k) mod (T-1)`
/// places after it, so each ToR is also the destination of exactly one slot `i` of
/// some ToR: incoming uplinks are covered as evenly as outgoing ones, and over rotations
/// every ToR pair gets probed.
pub(crate) fn tuples<'a>(
    groups: &BTreeMap<&'a str, Vec<&'a RnicRecord>>,
    k: u32,
    m: u32,
    rotation: u64,
    ports: PortRange,
) -> Vec<Tuple<'a>> {
    let tors: Vec<(&str, &Vec<&RnicRecord>)> = groups.iter().map(|(name, g)| (*name, g)).collect();
    let t = tors.len() as u64;
    if t < 2 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(tors.len() * k as usize);
    for (j, (name, group)) in tors.iter().enumerate() {
        for i in 0..k {
            let generation = slot_generation(i, k, m, rotation);
            let seed = stable_hash(&[
                b"intertor",
                name.as_bytes(),
                &i.to_le_bytes(),
                &generation.to_le_bytes(),
            ]);
            let offset = 1 + (u64::from(i) + generation.wrapping_mul(u64::from(k))) % (t - 1);
            let (_, dst_group) = tors[((j as u64 + offset) % t) as usize];
            out.push(Tuple {
                src: pick(group, seed, b"src"),
                dst: pick(dst_group, seed, b"dst"),
                src_port: ports.pick(stable_hash(&[&seed.to_le_bytes(), b"port"])),
            });
        }
    }
    out
}
