//! Time policy of findings and problems, in one place: when a finding that may be the
//! first sign of something larger is reported (onset holds), how long an RNIC verdict
//! is reported, and when a problem whose symptom stopped ends (resolution).
//!
//! The resolution rule: a problem's evidence is the failures in the diagnosis window, so
//! its last evidence is at most one window after its symptom stops; it resolves once it
//! has had no evidence for `resolve_after_ms`. A problem thus ends within one window +
//! `resolve_after_ms` after the symptom stops, and a flap (failures again before that)
//! stays one problem.

use crate::config::DiagnosisConfig;
use rocemesh_proto::api::ProblemKind;
use std::collections::HashMap;
use std::hash::Hash;

/// Findings held back until they have persisted: first and latest time each was found.
#[derive(Debug)]
pub(crate) struct Onset<K> {
    pending: HashMap<K, (i64, i64)>,
}

impl<K> Default for Onset<K> {
    fn default() -> Self {
        Self {
            pending: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash> Onset<K> {
    /// Notes `key` found at `now_ms`; true once it has been found for at least `hold_ms`
    /// (without a gap that [`Self::forget_before`] dropped it for).
    pub(crate) fn confirm(&mut self, key: K, now_ms: i64, hold_ms: i64) -> bool {
        let (first, last) = self.pending.entry(key).or_insert((now_ms, now_ms));
        *last = now_ms;
        now_ms - *first >= hold_ms
    }

    /// When the hold of `key` began, if it is held.
    pub(crate) fn since(&self, key: &K) -> Option<i64> {
        self.pending.get(key).map(|&(first, _)| first)
    }

    /// Forgets findings not seen since `before_ms`: their hold starts again.
    pub(crate) fn forget_before(&mut self, before_ms: i64) {
        self.pending.retain(|_, (_, last)| *last >= before_ms);
    }

    /// Drops the hold of `key` (it is reported anyway).
    pub(crate) fn remove(&mut self, key: &K) {
        self.pending.remove(key);
    }
}

/// A held finding missing for more than two ticks starts its hold again.
pub(crate) fn hold_gap_ms(tick_ms: u64) -> i64 {
    2 * tick_ms as i64
}

/// How long after an analyzer start a restored problem of `kind` is not resolved for lack
/// of evidence: a fresh analyzer has less than one window of it, and judges a host silent
/// since before it started only after `host_silent_ms` (every live agent has uploaded by
/// then), so a restored host-down problem waits for that too.
pub(crate) fn restore_hold_ms(kind: ProblemKind, c: &DiagnosisConfig) -> i64 {
    let hold = match kind {
        ProblemKind::HostDown => c.window_ms.max(c.host_silent_ms),
        _ => c.window_ms,
    };
    hold as i64
}

/// How long after a shard takeover a taken-over problem is not resolved for lack of
/// evidence: its evidence returns once the dead instance's agents have moved here (they
/// may take `host_down_after`) and their paths are traced again (`paths_settle`).
pub(crate) fn takeover_hold_ms(c: &DiagnosisConfig) -> i64 {
    (c.host_down_after_ms + c.paths_settle_ms) as i64
}

/// True when a problem whose latest evidence was at `evidence_ms` is resolved at `now_ms`.
pub(crate) fn resolved(now_ms: i64, evidence_ms: i64, resolve_after_ms: i64) -> bool {
    now_ms - evidence_ms >= resolve_after_ms
}

/// True when an RNIC verdict made at `made_ms` is still reported at `now_ms`: in the tick
/// that made it, or while probes to or from the RNIC still fail in the window (`failing`),
/// so the problem resolves like any other once they stop. The verdict keeps explaining
/// the RNIC's timeouts for longer (`rnic_sticky_ms`), but is not reported for that long.
pub(crate) fn rnic_reported(made_ms: i64, now_ms: i64, failing: bool) -> bool {
    made_ms >= now_ms || failing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onset_holds_confirm_after_the_hold_and_restart_after_a_gap() {
        // (time found, hold, expected confirm); the gap of 2 ticks (2 s) drops a hold.
        let table: &[(&[i64], i64, &[bool])] = &[
            (
                &[0, 1_000, 2_000, 3_000],
                2_000,
                &[false, false, true, true],
            ),
            (&[0], 0, &[true]),
            // Missing at 1 s and 2 s, back at 4 s: older than the gap, so a new hold.
            (
                &[0, 4_000, 5_000, 6_000],
                2_000,
                &[false, false, false, true],
            ),
            // A one-tick gap keeps the hold running.
            (&[0, 2_000, 3_000], 3_000, &[false, false, true]),
        ];
        for (times, hold, want) in table {
            let mut o = Onset::default();
            let got: Vec<bool> = times
                .iter()
                .map(|&t| {
                    o.forget_before(t - hold_gap_ms(1_000));
                    o.confirm("x", t, *hold)
                })
                .collect();
            assert_eq!(&got, want, "found at {times:?}, hold {hold}");
        }
    }

    #[test]
    fn resolution_and_rnic_reports() {
        // (now, latest evidence, resolve_after, resolved)
        let table = [
            (10_000, 10_000, 5_000, false),
            (14_999, 10_000, 5_000, false),
            (15_000, 10_000, 5_000, true),
            (15_000, 10_000, 0, true),
        ];
        for (now, evidence, after, want) in table {
            assert_eq!(
                resolved(now, evidence, after),
                want,
                "{now} {evidence} {after}"
            );
        }
        // (verdict made, now, its probes failing, reported)
        let table = [
            (5_000, 5_000, false, true),
            (5_000, 6_000, true, true),
            (5_000, 6_000, false, false),
        ];
        for (made, now, failing, want) in table {
            assert_eq!(
                rnic_reported(made, now, failing),
                want,
                "{made} {now} {failing}"
            );
        }
    }
}
