//! Latency part of tomography's evidence: the RNIC pairs whose latency detectors
//! stand behind a high-latency verdict, with what fired and the numbers.

use super::{Inputs, rnic_name};
use crate::diagnosis::tomography::{Finding, ObsSet};
use rocemesh_proto::api::{Evidence, LatencyPairEvidence};
use std::collections::BTreeMap;

/// Pairs listed per verdict at most (the rest are counted in the detail).
const MAX_PAIRS: usize = 16;
/// Slow paths listed per pair at most.
const MAX_PATHS: usize = 3;

/// Adds to `e` the alarmed pairs whose slow flows cross a component of `findings`.
/// `slow[i]` is the latency observation of one flow of pair `pairs[i]` (the flows' own
/// observations come first).
pub(super) fn attach_pairs(
    inp: &Inputs,
    slow: &ObsSet,
    pairs: &[(u32, u32)],
    findings: &[Finding],
    e: &mut Evidence,
) {
    let mut per_pair: BTreeMap<(u32, u32), (u64, u64, Vec<String>)> = BTreeMap::new();
    let elements = slow.elements();
    for (i, (obs, &(p, t))) in slow.iter().zip(pairs).enumerate() {
        let crosses = slow
            .fail_elems(i)
            .any(|(el, _)| findings.iter().any(|f| f.element == elements[el]));
        if obs.fail <= 0.0 || !crosses || inp.latency.get(p, t).is_none() {
            continue;
        }
        let entry = per_pair.entry((p, t)).or_default();
        entry.0 += obs.fail.round() as u64;
        entry.1 += (obs.fail + obs.ok).round() as u64;
        let text = slow.text(i);
        if entry.2.len() < MAX_PATHS && !entry.2.iter().any(|x| x == text) {
            entry.2.push(text.to_string());
        }
    }
    if per_pair.is_empty() {
        return;
    }
    let total = per_pair.len();
    let mut list: Vec<LatencyPairEvidence> = per_pair
        .into_iter()
        .filter_map(|((p, t), (slow_probes, probes, paths))| {
            let a = inp.latency.get(p, t)?;
            let label = |r: u32| inp.registry.labels(r).to_vec();
            Some(LatencyPairEvidence {
                prober: rnic_name(inp, p),
                target: rnic_name(inp, t),
                detector: a.detector(),
                since_ms: a.since_ms,
                window: a.window_stats(),
                reference_ns: a.reference_ns,
                slow_above_ns: a.slow_above_ns,
                lof: a.short_term.map(|v| v.lof),
                shift: a.short_term.map(|v| v.shift),
                z: a.long_term.map(|z| z.z),
                p_value: a.long_term.map(|z| z.p_value),
                ln_shift: a.long_term.map(|z| z.ln_shift),
                slow_probes,
                probes,
                paths,
                prober_labels: label(p),
                target_labels: label(t),
            })
        })
        .collect();
    list.sort_by_key(|x| std::cmp::Reverse(x.slow_probes));
    list.truncate(MAX_PAIRS);
    let short = list.iter().filter(|x| x.lof.is_some()).count();
    let long = list.iter().filter(|x| x.z.is_some()).count();
    let top = &list[0];
    e.detail.push_str(&format!(
        "; latency detectors: {total} anomalous RNIC pairs through it (short-term LOF {short}, \
         long-term z-test {long}), e.g. {}->{}: window p50 {:.0} ns vs {:.0} ns before ({})",
        top.prober, top.target, top.window.p50_ns, top.reference_ns, top.detector
    ));
    e.latency_pairs = list;
}
