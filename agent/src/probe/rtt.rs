//! The six-timestamp arithmetic, with the fallbacks that keep every emitted value sane.
//!
//! network RTT = (⑤−②)−(④−③); prober delay = (⑥−①)−(⑤−②); responder delay = ④−③.
//! Each difference is taken on one clock: ②/⑤ on the prober's kernel or NIC clock,
//! ①/⑥ on its monotonic application clock, ③/④ on the responder's.

use crate::transport::Stamp;
use rocemesh_proto::TimestampSource;

/// Slack allowed between the wall clock at ① and the kernel software stamp ②.
const WALL_SLACK_NS: u64 = 1_000_000;

/// What the prober knows about one answered probe.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timings {
    /// Wall clock at ① (ns since the Unix epoch), to sanity-check software ②.
    pub t1_wall_ns: u64,
    /// ⑥−① on the monotonic application clock.
    pub app_rtt_ns: u64,
    /// ② kernel/NIC send stamp of the PROBE.
    pub t2: Option<Stamp>,
    /// ⑤ kernel/NIC receive stamp of ACK1.
    pub t5: Option<Stamp>,
    /// ④−③ as reported in ACK2.
    pub responder_delay_ns: u64,
    /// How the responder measured ④−③.
    pub responder_ts: TimestampSource,
}

/// The delays of one OK probe, ready for a `ProbeResult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delays {
    /// Network RTT.
    pub network_rtt_ns: u32,
    /// Prober processing delay (0 when only application stamps exist).
    pub prober_delay_ns: u32,
    /// Responder processing delay.
    pub responder_delay_ns: u32,
    /// ⑥−①.
    pub app_rtt_ns: u32,
    /// The weakest stamp the network RTT depends on.
    pub ts_source: TimestampSource,
}

fn clamp(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Kernel RTT ⑤−② when both stamps exist, share a clock and make sense.
fn kernel_rtt(t: &Timings) -> Option<(u64, TimestampSource)> {
    let (t2, t5) = (t.t2?, t.t5?);
    if t2.source != t5.source || t5.ns <= t2.ns {
        return None;
    }
    let rtt = t5.ns - t2.ns;
    if rtt > t.app_rtt_ns || rtt <= t.responder_delay_ns {
        return None;
    }
    // Software stamps share CLOCK_REALTIME with ①: ② must fall inside the exchange,
    // otherwise it belongs to another send (or the clock stepped).
    if t2.source == TimestampSource::Software
        && (t2.ns + WALL_SLACK_NS < t.t1_wall_ns
            || t2.ns > t.t1_wall_ns + t.app_rtt_ns + WALL_SLACK_NS)
    {
        return None;
    }
    Some((rtt, t2.source))
}

/// Computes the delays, falling back to application stamps (flagged `App`) when the
/// kernel stamps are missing, inconsistent or absurd. Never negative, never wrapped.
pub(crate) fn delays(t: &Timings) -> Delays {
    match kernel_rtt(t) {
        Some((rtt, source)) => Delays {
            network_rtt_ns: clamp(rtt - t.responder_delay_ns),
            prober_delay_ns: clamp(t.app_rtt_ns - rtt),
            responder_delay_ns: clamp(t.responder_delay_ns),
            app_rtt_ns: clamp(t.app_rtt_ns),
            ts_source: source.min(t.responder_ts),
        },
        None => Delays {
            network_rtt_ns: clamp(t.app_rtt_ns.saturating_sub(t.responder_delay_ns)),
            prober_delay_ns: 0,
            responder_delay_ns: clamp(t.responder_delay_ns),
            app_rtt_ns: clamp(t.app_rtt_ns),
            ts_source: TimestampSource::App,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TimestampSource::{App, Hardware, Software};

    const WALL: u64 = 1_700_000_000_000_000_000;

    fn sw(ns: u64) -> Option<Stamp> {
        Some(Stamp {
            ns: WALL + ns,
            source: Software,
        })
    }

    fn base() -> Timings {
        // ① at 0, ② at 20 µs, ⑤ at 73 µs, ⑥ at 109 µs; responder held it 20 µs.
        Timings {
            t1_wall_ns: WALL,
            app_rtt_ns: 109_000,
            t2: sw(20_000),
            t5: sw(73_000),
            responder_delay_ns: 20_000,
            responder_ts: Software,
        }
    }

    #[test]
    fn kernel_path_splits_the_rtt() {
        let d = delays(&base());
        assert_eq!(
            d,
            Delays {
                network_rtt_ns: 33_000,
                prober_delay_ns: 56_000,
                responder_delay_ns: 20_000,
                app_rtt_ns: 109_000,
                ts_source: Software
            }
        );
        // The result is only as good as the responder's stamps.
        assert_eq!(
            delays(&Timings {
                responder_ts: App,
                ..base()
            })
            .ts_source,
            App
        );
        let hw = |ns| {
            Some(Stamp {
                ns,
                source: Hardware,
            })
        };
        let d = delays(&Timings {
            t2: hw(5_000),
            t5: hw(58_000),
            responder_ts: Hardware,
            ..base()
        });
        assert_eq!((d.network_rtt_ns, d.ts_source), (33_000, Hardware));
    }

    #[test]
    fn missing_or_bad_kernel_stamps_fall_back_to_app() {
        let app = |t: Timings| {
            let d = delays(&t);
            assert_eq!(d.ts_source, App, "{t:?}");
            assert_eq!(d.prober_delay_ns, 0);
            d.network_rtt_ns
        };
        assert_eq!(app(Timings { t2: None, ..base() }), 89_000);
        assert_eq!(app(Timings { t5: None, ..base() }), 89_000);
        // ⑤ before ②: negative kernel RTT.
        assert_eq!(
            app(Timings {
                t5: sw(10_000),
                ..base()
            }),
            89_000
        );
        // Kernel RTT larger than the application RTT: absurd.
        assert_eq!(
            app(Timings {
                t5: sw(200_000),
                ..base()
            }),
            89_000
        );
        // Mixed clocks are never subtracted.
        assert_eq!(
            app(Timings {
                t5: Some(Stamp {
                    ns: WALL + 73_000,
                    source: Hardware
                }),
                ..base()
            }),
            89_000
        );
        // A ② from long before ① belongs to some other send.
        assert_eq!(
            app(Timings {
                t2: sw(0).map(|s| Stamp {
                    ns: s.ns - 5_000_000,
                    ..s
                }),
                ..base()
            }),
            89_000
        );
        // Responder delay exceeding the kernel RTT: would be negative.
        assert_eq!(
            app(Timings {
                responder_delay_ns: 60_000,
                ..base()
            }),
            49_000
        );
        // ... or even the application RTT: zero, never wrapped.
        assert_eq!(
            app(Timings {
                responder_delay_ns: 500_000,
                ..base()
            }),
            0
        );
    }

    #[test]
    fn huge_values_saturate() {
        let t = Timings {
            app_rtt_ns: u64::MAX,
            t2: None,
            responder_delay_ns: 0,
            ..base()
        };
        let d = delays(&t);
        assert_eq!((d.network_rtt_ns, d.app_rtt_ns), (u32::MAX, u32::MAX));
    }
}
