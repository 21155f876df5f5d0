//! Training-task health (Pulse §6.2, C4D §III-A): is a task hung or slow, is that the
//! communication or the computation, and which rank is the straggler?
//!
//! [`assess`] reads the per-RNIC throughput series of a task's ranks (bytes per sampling
//! interval, tx + rx) as bursts of collective communication separated by computation.
//! Each iteration window (one burst onset to the next) is judged against the task's own
//! healthy rhythm: a window far longer than the baseline period is slow, traffic that
//! stops for several periods is a hang. Within a bad window the ranks are compared with
//! their peers: a rank that stays active far longer than its peers (a slow link stretches
//! its transfer; Pulse's "actual communication time") is a communication straggler; a rank
//! that starts its burst late while it transfers normally (its computation ran long) is a
//! non-communication straggler; in a hang the rank that moved the least in the last burst
//! stopped first. Probe health on the task's skeleton pairs ([`attribute`]: C4D's
//! row/column reading of a source × destination matrix) confirms a communication cause
//! and names the source, destination, endpoint or connection at fault.

mod bursts;
mod classify;
mod matrix;

pub use classify::{Tally, assess, confirm_hang, tallies};
pub use matrix::attribute;

use rocemesh_proto::api::{ComponentKind, ProblemKind};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Throughput of a task's ranks over the same sampling intervals.
#[derive(Debug, Clone, PartialEq)]
pub struct Throughput {
    /// Sampling interval, ms.
    pub interval_ms: u32,
    /// Start of the first interval, ms since the Unix epoch.
    pub start_ms: i64,
    /// Bytes (tx + rx) per interval, one series per rank, all of the same length.
    pub bytes: Vec<Vec<f64>>,
    /// Bytes sent per interval (part of `bytes`), one series per rank of the same length,
    /// or empty where only totals are known. In a hang the rank that stopped sending first
    /// is the straggler when its total does not single it out: a rank stopped in the
    /// middle of a send and the successor it stopped feeding moved the same bytes.
    pub sent: Vec<Vec<f64>>,
    /// Data-parallel groups (rank indices): a rank is compared with its group's peers,
    /// since pipeline stages burst at different offsets. Empty: every rank with every rank.
    pub groups: Vec<Vec<usize>>,
}

/// Probe outcomes of one (source rank, destination rank) skeleton pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairHealth {
    /// Index of the probing rank.
    pub src: usize,
    /// Index of the probed rank.
    pub dst: usize,
    /// Probes sent.
    pub probes: u64,
    /// Probes lost (timed out).
    pub lost: u64,
    /// Median network RTT of the answered probes, µs.
    pub rtt_us: Option<f64>,
    /// Both ranks sit under one ToR: the pair's probes cross fewer hops than a pair's
    /// across ToRs, so its RTT is judged against pairs of its own kind.
    pub local: bool,
}

impl PairHealth {
    /// A pair from stored probe counts: negative counts read as none, more lost than sent
    /// as all lost, the RTT in ns; `tors` are the ends' ToRs where known.
    pub fn from_counts<T: PartialEq>(
        (src, dst): (usize, usize),
        probes: i64,
        lost: i64,
        rtt_ns: Option<i64>,
        tors: (Option<T>, Option<T>),
    ) -> Self {
        PairHealth {
            src,
            dst,
            probes: probes.max(0) as u64,
            lost: lost.clamp(0, probes.max(0)) as u64,
            rtt_us: rtt_ns.map(|ns| ns as f64 / 1_000.0),
            local: tors.0.is_some() && tors.0 == tors.1,
        }
    }
}

/// Thresholds of the assessment; the defaults suit sampling intervals of at most a tenth
/// of an iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// A window longer than this many baseline periods is slow.
    pub slow_factor: f64,
    /// Traffic silent for this many baseline periods is a hang.
    pub hang_factor: f64,
    /// A rank active this many times longer than its peers' median is a communication
    /// straggler.
    pub comm_stretch: f64,
    /// A pair losing at least this fraction of its probes is bad.
    pub loss_bad: f64,
    /// ... and at least this many probes.
    pub min_lost: u64,
    /// A pair whose median RTT exceeds this many times the task's median is bad.
    pub rtt_factor: f64,
    /// Pairs with fewer probes are not judged.
    pub min_probes: u64,
    /// Straggler pairs losing at least this fraction make a hang a communication hang.
    /// Low, since outcomes are stored per SLA period: the period that straddles a hang's
    /// start carries the probes answered before it, so a dead endpoint's loss reads
    /// diluted, and a stopped process (its host answers) loses next to none.
    pub hang_loss: f64,
    /// Healthy iteration period, when known; otherwise learned from the series.
    pub baseline_period_ms: Option<f64>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            slow_factor: 1.25,
            hang_factor: 3.0,
            comm_stretch: 1.5,
            loss_bad: 0.003,
            min_lost: 3,
            rtt_factor: 2.0,
            min_probes: 20,
            hang_loss: 0.25,
            baseline_period_ms: None,
        }
    }
}

/// What one iteration window was.
#[derive(
    Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum WindowClass {
    /// On the task's rhythm.
    Healthy,
    /// Slower than the rhythm; a rank's transfers stretched or its probes failed.
    CommunicationSlow,
    /// Slower than the rhythm; a rank started its transfers late, the network was healthy.
    NonCommunicationSlow,
    /// Traffic stopped; the straggler's probes fail.
    CommunicationHang,
    /// Traffic stopped; the straggler still answers probes (its process stopped).
    NonCommunicationHang,
}

impl WindowClass {
    /// Every class, healthy first.
    pub const ALL: [WindowClass; 5] = [
        Self::Healthy,
        Self::CommunicationSlow,
        Self::NonCommunicationSlow,
        Self::CommunicationHang,
        Self::NonCommunicationHang,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::CommunicationSlow => "communication_slow",
            Self::NonCommunicationSlow => "non_communication_slow",
            Self::CommunicationHang => "communication_hang",
            Self::NonCommunicationHang => "non_communication_hang",
        }
    }

    /// True for the two hang classes.
    pub fn is_hang(self) -> bool {
        matches!(self, Self::CommunicationHang | Self::NonCommunicationHang)
    }
}

/// One judged iteration window.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Window {
    /// Burst onset that opens the window, ms since the Unix epoch.
    pub from_ms: i64,
    /// Next onset (or, for a hang, the end of the series).
    pub to_ms: i64,
    /// The verdict.
    pub class: WindowClass,
    /// Index of the straggler rank, when one stands out.
    pub straggler: Option<usize>,
    /// Why, in one sentence.
    pub evidence: String,
}

/// Which side of a skeleton pair a probe attribution blames.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Blame {
    /// A bad row: the rank as a source.
    Source,
    /// A bad column: the rank as a destination.
    Destination,
    /// Row and column: the rank's RNIC or access link.
    Endpoint,
    /// An isolated cell: the connection or its path.
    Connection,
}

/// A problem read off the probe matrix, with its evidence.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Attribution {
    /// Side blamed.
    pub blame: Blame,
    /// What kind of problem it is (loss: RNIC or flow fault; RTT only: high latency).
    pub kind: ProblemKind,
    /// Kind of component blamed (an RNIC, or a flow for a connection).
    pub component_kind: ComponentKind,
    /// Rank blamed (source, destination or endpoint).
    pub rank: Option<usize>,
    /// The connection blamed, `(src, dst)` rank indices.
    pub pair: Option<(usize, usize)>,
    /// Bad cells explained by this attribution.
    pub bad_cells: u32,
    /// Cells of that row/column (or 1).
    pub cells: u32,
    /// Loss over the explained cells.
    pub loss: f64,
    /// Evidence in one sentence (rank indices; callers name them).
    pub evidence: String,
}

/// The health of one task over an interval.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Health {
    /// Healthy iteration period used, ms (configured or learned).
    pub baseline_period_ms: Option<f64>,
    /// Judged windows, oldest first.
    pub windows: Vec<Window>,
    /// Probe matrix attributions, strongest first (in a verdict: from the stored outcomes
    /// of the task's RNIC pairs in the SLA periods overlapping the interval; the analyzer
    /// also files those of the newest period as problems).
    pub attributions: Vec<Attribution>,
    /// Why nothing could be judged, when that is so.
    pub note: Option<String>,
}

impl Health {
    /// The worst class among the windows (hangs over slows over healthy), with the
    /// newest window of that class.
    pub fn worst(&self) -> Option<&Window> {
        self.windows
            .iter()
            .max_by_key(|w| (severity(w.class), w.from_ms))
    }
}

fn severity(c: WindowClass) -> u8 {
    match c {
        WindowClass::Healthy => 0,
        WindowClass::NonCommunicationSlow | WindowClass::CommunicationSlow => 1,
        WindowClass::NonCommunicationHang | WindowClass::CommunicationHang => 2,
    }
}

/// Value at quantile `q` in [0, 1] of `v` (sorted copy); `None` when empty.
fn quantile(v: &[f64], q: f64) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let i = ((s.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    Some(s[i])
}
