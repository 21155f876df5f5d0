//! JSON types of the REST API under `/api/v1`, shared by the controller, the analyzer,
//! the agent and the operator tools so both ends of every call agree by construction.

use crate::packet::ProbeClass;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use utoipa::ToSchema;

/// Path prefix of every API route.
pub const API_PREFIX: &str = "/api/v1";

/// Longest host, interface, ToR or GID string accepted anywhere.
pub const MAX_NAME_LEN: usize = 253;
/// Most RNICs one agent may register.
pub const MAX_RNICS_PER_HOST: usize = 64;

/// Header of pinglist answers naming the analyzer the polling agent uploads to now:
/// under scale-out the controller sets it, and agents follow it when shard owners change.
pub const ANALYZER_HEADER: &str = "x-rocemesh-analyzer";
/// Longest analyzer URL taken from [`ANALYZER_HEADER`].
const MAX_ANALYZER_URL: usize = 512;

/// `value` of [`ANALYZER_HEADER`] as an analyzer base URL (no trailing `/`) when it is a
/// plausible `http(s)://host...` URL of bounded length; anything else is ignored.
pub fn analyzer_url(value: &str) -> Option<String> {
    let v = value.trim().trim_end_matches('/');
    let rest = v
        .strip_prefix("http://")
        .or_else(|| v.strip_prefix("https://"))?;
    let ok =
        v.len() <= MAX_ANALYZER_URL && !rest.is_empty() && v.bytes().all(|b| b.is_ascii_graphic());
    ok.then(|| v.to_string())
}

/// Error body of every non-2xx JSON response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct ErrorBody {
    /// Human-readable reason.
    pub error: String,
}

/// One RNIC as an agent reports it at start-up.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RnicRegistration {
    /// Interface name on the host (e.g. `mlx5_0` or `eth1`).
    pub ifname: String,
    /// IP address the RNIC probes from and answers on.
    #[schema(value_type = String)]
    pub ip: IpAddr,
    /// RoCE GID (verbs transport), if any.
    #[serde(default)]
    pub gid: Option<String>,
    /// QPN of the probing UD QP (udp transport: a per-start random 24-bit id).
    pub qpn: u32,
    /// UDP port the responder listens on.
    pub port: u16,
    /// ToR name, when the host knows it (config or node label).
    #[serde(default)]
    pub tor: Option<String>,
    /// Rail index of the RNIC in a rail-optimized fabric.
    #[serde(default)]
    pub rail: Option<u32>,
    /// Default gateway of the interface, used to infer the ToR.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub gateway: Option<IpAddr>,
}

/// `POST /api/v1/agents/register`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// Host name (unique in the cluster).
    pub host: String,
    /// Agent epoch: a new value at every agent start.
    pub epoch: u32,
    /// The host's RNICs.
    pub rnics: Vec<RnicRegistration>,
}

/// Reply to a registration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct RegisterResponse {
    /// Controller-assigned host id, stable across agent restarts.
    pub host_id: u32,
    /// The epoch now on record.
    pub epoch: u32,
    /// The registered RNICs with their ids.
    pub rnics: Vec<RnicInfo>,
    /// Base URL of the analyzer to upload to; `None` = the controller's own URL.
    pub analyzer_url: Option<String>,
    /// How often to upload result batches.
    pub upload_period_ms: u64,
    /// How often to poll the pinglist.
    pub pinglist_poll_ms: u64,
    /// Probe keys and the per-source answer limit; absent (an older controller): probe
    /// authentication off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_auth: Option<ProbeAuth>,
    /// This host's upload key (a new one at every registration): sent with every result
    /// batch in the `x-rocemesh-host-key` header, it proves the batch's host. Absent: an
    /// older controller, uploads carry none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub upload_key: Option<crate::host_key::HostKey>,
}

/// How agents authenticate probe packets and bound what they answer (issue 8): the cluster
/// keys (see [`crate::probe_auth`]) and a per-source token bucket.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct ProbeAuth {
    /// Id of the key PROBEs and ACKs are signed with; `None`: authentication off (packets
    /// go untagged and tags are ignored).
    pub sign_key: Option<u8>,
    /// Every key accepted on receipt (previous, signing, next).
    pub keys: Vec<ProbeKey>,
    /// PROBEs per second one source IP gets answered, sustained (token refill).
    pub source_pps: f64,
    /// PROBEs one source IP gets answered in a burst (bucket size).
    pub source_burst: u32,
    /// A tagged PROBE is answered only while its send time is this close to the
    /// responder's clock (either way): a captured probe replays for at most this long.
    #[serde(
        default = "crate::probe_auth::default_tag_window",
        with = "humantime_serde"
    )]
    #[schema(value_type = String, example = "30s")]
    pub tag_window: std::time::Duration,
}

/// One cluster probe key.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct ProbeKey {
    /// Key id: byte 48 of a tagged packet.
    pub id: u8,
    /// The 32-byte key, lowercase hex.
    pub key: String,
}

/// Never prints the key: responses are logged in debug output.
impl std::fmt::Debug for ProbeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeKey")
            .field("id", &self.id)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// An RNIC as the registry knows it (also the comm info a prober needs).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct RnicInfo {
    /// Controller-assigned id, stable for (host, ifname).
    pub id: u32,
    /// Host id.
    pub host_id: u32,
    /// Host name.
    pub host: String,
    /// Interface name.
    pub ifname: String,
    /// IP address.
    #[schema(value_type = String)]
    pub ip: IpAddr,
    /// RoCE GID, if any.
    pub gid: Option<String>,
    /// Current QPN.
    pub qpn: u32,
    /// Responder UDP port.
    pub port: u16,
    /// Resolved ToR name.
    pub tor: String,
    /// Rail index.
    pub rail: Option<u32>,
    /// Epoch of the agent that registered it last.
    pub epoch: u32,
    /// When it was last registered, ms since the Unix epoch.
    pub registered_at_ms: i64,
}

/// A host and its agent's incarnation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct HostInfo {
    /// Host id.
    pub id: u32,
    /// Host name.
    pub host: String,
    /// Current agent epoch.
    pub epoch: u32,
    /// How many times the host has registered (agent starts).
    pub registrations: i64,
    /// Last registration, ms since the Unix epoch.
    pub registered_at_ms: i64,
}

/// One probe target in a pinglist.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Hash, ToSchema)]
pub struct PingTarget {
    /// Target RNIC id.
    pub rnic_id: u32,
    /// Target IP.
    #[schema(value_type = String)]
    pub ip: IpAddr,
    /// Target responder port.
    pub port: u16,
    /// Target QPN as the registry knows it.
    pub qpn: u32,
    /// UDP source port to probe with (selects the ECMP path).
    pub src_port: u16,
}

/// One list of targets probed at a common rate.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct ProbeList {
    /// Pinglist class.
    pub class: ProbeClass,
    /// Probes per second for the whole list; each target gets `pps / entries.len()`.
    pub pps: f64,
    /// Targets, probed in a freshly shuffled order every round.
    pub entries: Vec<PingTarget>,
}

/// All lists of one RNIC.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct RnicPinglist {
    /// Probing RNIC id.
    pub rnic_id: u32,
    /// Its lists.
    pub lists: Vec<ProbeList>,
}

/// `GET /api/v1/pinglists/{host_id}`: everything one agent probes. The response
/// carries an `ETag`; a poll with a matching `If-None-Match` gets `304`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Pinglist {
    /// Host id.
    pub host_id: u32,
    /// Content version (the ETag value).
    pub version: String,
    /// Probe timeout in ms.
    pub timeout_ms: u64,
    /// Per-RNIC lists.
    pub rnics: Vec<RnicPinglist>,
    /// The current probe keys and answer limit (they rotate; the ETag changes with them);
    /// absent (an older controller): probe authentication off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_auth: Option<ProbeAuth>,
}

/// One ToR and its RNICs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct TorInfo {
    /// ToR name.
    pub name: String,
    /// RNIC ids under it.
    pub rnics: Vec<u32>,
}

/// `GET /api/v1/topology`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct TopologyInfo {
    /// ToRs.
    pub tors: Vec<TorInfo>,
    /// Parallel cross-ToR paths (N of R-Pingmesh Eq. 1).
    pub parallel_paths: u32,
    /// 5-tuples per ToR (k of Eq. 1).
    pub tuples_per_tor: u32,
}

/// Aggregation scope of an SLA row.
#[derive(
    Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SlaScope {
    /// The whole cluster; key `"cluster"`.
    Cluster,
    /// A ToR pair; key `"<src tor>-><dst tor>"`.
    TorPair,
    /// An RNIC as probe target (RTT, responder delay, timeouts) and as prober
    /// (prober delay); key = RNIC id.
    Rnic,
    /// A training task's service network: probes between two of its endpoints' RNICs;
    /// key = task name.
    Task,
    /// Probes on service 5-tuples (task skeleton pairs and traced service connections,
    /// R-Pingmesh §5); key `"service"`.
    Service,
}

impl SlaScope {
    /// Stable lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cluster => "cluster",
            Self::TorPair => "tor_pair",
            Self::Rnic => "rnic",
            Self::Task => "task",
            Self::Service => "service",
        }
    }

    /// The scope with this [`Self::as_str`] name.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Cluster,
            Self::TorPair,
            Self::Rnic,
            Self::Task,
            Self::Service,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
}

/// Percentiles of one delay metric, in nanoseconds; `None` without samples.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default, ToSchema)]
pub struct Quantiles {
    /// Median.
    pub p50: Option<u64>,
    /// 90th percentile.
    pub p90: Option<u64>,
    /// 99th percentile.
    pub p99: Option<u64>,
    /// 99.9th percentile.
    pub p999: Option<u64>,
}

/// SLA figures of one scope over one analysis period.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct SlaRow {
    /// Period start, ms since the Unix epoch.
    pub period_start_ms: i64,
    /// Period length in ms.
    pub period_ms: i64,
    /// Scope.
    pub scope: SlaScope,
    /// Scope key.
    pub key: String,
    /// Probes in the period.
    pub probes: i64,
    /// Of which timed out.
    pub timeouts: i64,
    /// `timeouts / probes`.
    pub timeout_rate: f64,
    /// Timeouts on probes to or from an RNIC with an RNIC-fault problem (R-Pingmesh §5:
    /// RNIC drops); host-down, agent-restart and host-noise timeouts are neither kind.
    #[serde(default)]
    pub rnic_drops: i64,
    /// Timeouts left to the switch network (R-Pingmesh §5: switch network drops).
    #[serde(default)]
    pub switch_drops: i64,
    /// `rnic_drops / probes`.
    #[serde(default)]
    pub rnic_drop_rate: f64,
    /// `switch_drops / probes`.
    #[serde(default)]
    pub switch_drop_rate: f64,
    /// Network RTT percentiles.
    pub network_rtt_ns: Quantiles,
    /// Prober processing delay percentiles.
    pub prober_delay_ns: Quantiles,
    /// Responder processing delay percentiles.
    pub responder_delay_ns: Quantiles,
    /// Application RTT percentiles (what a software pinger would see).
    pub app_rtt_ns: Quantiles,
    /// RNIC scope: Kubernetes labels of the task endpoints on this RNIC.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<EndpointLabel>,
}

/// Reply to a result upload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct UploadAck {
    /// Records taken into aggregation.
    pub accepted: u64,
    /// Records dropped (unknown RNIC, outside every open period).
    pub dropped: u64,
    /// True when the batch was a retry already counted.
    pub duplicate: bool,
    /// Random id of the analyzer process that took the batch (0: not an analyzer). A
    /// change tells the agent it talks to a fresh analyzer (a restart, or another
    /// instance after a shard move) that has none of its traced paths yet.
    #[serde(default)]
    pub instance: u64,
}

/// What kind of component a problem is blamed on.
#[derive(
    Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ComponentKind {
    /// An RNIC, its cable or the ToR port it plugs into (R-Pingmesh cannot tell them apart);
    /// name `"<host>/<ifname>"`.
    Rnic,
    /// A switch-to-switch link; name from the fabric map (e.g. `"t0-s1"`), else
    /// `"<ip>-><ip>"` of the traceroute hops around it.
    Link,
    /// A switch; name from the fabric map (e.g. `"s1"`), else its hop address.
    Switch,
    /// A host (down, or too busy to answer: CPU noise); name = host name.
    Host,
    /// The rocemesh agent itself (restart, QPN reset); name = host name.
    Agent,
    /// One probed 5-tuple whose failures no single component explains better than the
    /// others (a silent per-flow drop, a fault only one flow crosses); name
    /// `"<prober rnic> -> <target rnic> sport <port>"`, the components that could be at
    /// fault in [`Evidence::candidates`].
    Flow,
}

impl ComponentKind {
    /// The wire name (`"rnic"`, `"link"`, ...), as problems and reports spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rnic => "rnic",
            Self::Link => "link",
            Self::Switch => "switch",
            Self::Host => "host",
            Self::Agent => "agent",
            Self::Flow => "flow",
        }
    }
}

/// A component by kind and name: what a problem blames, what a fault was applied to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Component {
    /// Kind.
    pub kind: ComponentKind,
    /// Name (fabric-map link and switch names, `"<host>/<ifname>"` RNICs, host names).
    pub name: String,
}

impl Component {
    /// A component of `kind` named `name`.
    pub fn new(kind: ComponentKind, name: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
        }
    }

    /// `kind:name`, as reports print it.
    pub fn label(&self) -> String {
        format!("{}:{}", self.kind.as_str(), self.name)
    }
}

/// The category of a problem; decides whether the network is to blame.
#[derive(
    Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// The agent stopped uploading (R-Pingmesh: host down). Not a network problem.
    HostDown,
    /// Probes named a stale QPN: the agent restarted. Not a network problem.
    AgentRestart,
    /// A host's RNICs fail together or its processing delay is high: CPU, not network.
    HostNoise,
    /// An RNIC drops or is down (ToR-mesh evidence).
    RnicFault,
    /// A switch link drops, corrupts, flaps or is down (tomography).
    LinkFault,
    /// A whole switch misbehaves (tomography over its links).
    SwitchFault,
    /// Latency on a component is anomalous (no loss).
    HighLatency,
    /// Probes of one 5-tuple fail and the evidence cannot single out a component: the
    /// problem names the flow and lists every candidate of its forward and ACK paths.
    FlowFault,
}

impl ProblemKind {
    /// True when this kind of problem is the network's fault.
    pub fn is_network(self) -> bool {
        matches!(
            self,
            Self::RnicFault
                | Self::LinkFault
                | Self::SwitchFault
                | Self::HighLatency
                | Self::FlowFault
        )
    }
}

/// Lifecycle of a problem.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProblemState {
    /// The symptom is present.
    Active,
    /// The symptom stopped; kept for history.
    Resolved,
}

/// How much a problem matters to the services (R-Pingmesh §4.3.4): assessed by the impact
/// loop from where the problem sits and how the affected tasks perform.
#[derive(
    Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord, ToSchema,
)]
pub enum Priority {
    /// In the service network and a task it affects performs worse than it tolerates.
    P0,
    /// In the service network, no affected task degraded beyond its threshold.
    P1,
    /// Outside the service network (no active task uses the component).
    P2,
}

impl Priority {
    /// The wire name (`"P0"`, `"P1"`, `"P2"`), also the `problems.priority` column value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::P0 => "P0",
            Self::P1 => "P1",
            Self::P2 => "P2",
        }
    }

    /// Parses a wire name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "P0" => Some(Self::P0),
            "P1" => Some(Self::P1),
            "P2" => Some(Self::P2),
            _ => None,
        }
    }
}

/// The numbers behind a verdict.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default, ToSchema)]
pub struct Evidence {
    /// Probes considered for this component in the last window.
    pub probes: u64,
    /// Of which timed out (or were anomalous).
    pub timeouts: u64,
    /// Tomography votes: failed paths crossing the component.
    pub votes: u64,
    /// Paths through the component that succeeded in the same window.
    pub ok_paths: u64,
    /// A few example paths (hop lists) behind the verdict.
    pub example_paths: Vec<String>,
    /// Free-text explanation (which rule fired, thresholds).
    pub detail: String,
    /// Problems on an RNIC: Kubernetes labels of the task endpoints on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<EndpointLabel>,
    /// High latency: the RNIC pairs whose latency detectors fired, behind the verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_pairs: Vec<LatencyPairEvidence>,
    /// Link problems: the faulty direction when only one direction of the link is at
    /// fault (absent when both are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<LinkDirection>,
    /// Flow problems: every component that could explain the failures, most likely first.
    /// Other problems, when the probes cannot tell the named component from others (a
    /// 2-ToR fabric's spine and its links; a ToR and its only RNIC): the named component
    /// first, then each indistinguishable one, with equal shares.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<SuspectComponent>,
    /// Link and switch problems: the tasks and service flows whose traced 5-tuples cross
    /// the component, largest share of its traffic first (Vedrfolnir §III-D; bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blamed: Vec<BlamedFlow>,
}

/// A task, or a service flow in no task, crossing a problem's link or switch, with its
/// share of the traffic there.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct BlamedFlow {
    /// Task name, or the flow as `host/ifname -> host/ifname sport N`.
    pub name: String,
    /// Task database id; absent for a flow in no task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<u32>,
    /// Traced service 5-tuples behind it that cross the component.
    pub flows: u32,
    /// Estimated bytes per second it puts there (its RNICs' sampled throughput spread over
    /// their service flows); absent when no throughput of its RNICs is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_s: Option<f64>,
    /// Share in [0, 1] of the component's estimated traffic — by bytes when any crossing
    /// flow's throughput is known, else by flow count.
    pub share: f64,
}

/// One direction of a link: traffic leaving device `from` towards device `to` (fabric-map
/// device names, e.g. `s0` -> `t2`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Hash, ToSchema)]
pub struct LinkDirection {
    /// Device the faulty direction leaves.
    pub from: String,
    /// Device the faulty direction enters.
    pub to: String,
}

/// A component that may be behind a problem, with how likely it is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct SuspectComponent {
    /// Kind of component.
    pub component_kind: ComponentKind,
    /// Component name (as in [`Problem::component`]).
    pub component: String,
    /// Link suspects: the direction the flow's path crosses it in, or the direction of
    /// the link that a problem's one-way fault may be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<LinkDirection>,
    /// Share of the likelihood in [0, 1]; the candidates of one problem sum to at most 1.
    pub confidence: f64,
}

/// Kubernetes identity of one training-task endpoint (from the task spec), carried by
/// results about its RNIC so operators see whose pods a problem touches.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct EndpointLabel {
    /// Task name.
    pub task: String,
    /// Kubernetes namespace, if the task spec names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Pod (container), if the task spec names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
}

/// The seven statistics of one RNIC pair's network RTTs over one short window
/// (SkeletonHunter §5.2), in ns.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default, ToSchema)]
pub struct LatencyWindowStats {
    /// 25th percentile.
    pub p25_ns: f64,
    /// Median.
    pub p50_ns: f64,
    /// 75th percentile.
    pub p75_ns: f64,
    /// Smallest sample.
    pub min_ns: f64,
    /// Mean.
    pub mean_ns: f64,
    /// Standard deviation.
    pub std_ns: f64,
    /// Largest sample.
    pub max_ns: f64,
}

/// One RNIC pair behind a high-latency verdict: which detector fired and the numbers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct LatencyPairEvidence {
    /// Probing RNIC (`"<host>/<ifname>"`).
    pub prober: String,
    /// Target RNIC.
    pub target: String,
    /// `short_term_lof`, `long_term_ztest`, or both joined by `+`.
    pub detector: String,
    /// When the pair became anomalous, ms since the Unix epoch.
    pub since_ms: i64,
    /// The pair's latest closed short window.
    pub window: LatencyWindowStats,
    /// The pair's level before the anomaly (median of the look-back windows' medians,
    /// or the long-term baseline's median), ns.
    pub reference_ns: f64,
    /// Probes of the pair above this RTT count as slow in latency tomography, ns.
    pub slow_above_ns: f64,
    /// Short-term: local outlier factor of the window that fired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lof: Option<f64>,
    /// Short-term: that window's median rise over the look-back median (0.5 = +50 %).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shift: Option<f64>,
    /// Long-term: z statistic of the long window against the log-normal baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub z: Option<f64>,
    /// Long-term: one-sided p-value of that z-test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    /// Long-term: rise of the mean ln RTT over the baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ln_shift: Option<f64>,
    /// Slow probes of the pair through the component in the diagnosis window.
    pub slow_probes: u64,
    /// All probes of the pair through the component in that window.
    pub probes: u64,
    /// Hop lists of the pair's slow flows (a few).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// Kubernetes labels of the prober's task endpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prober_labels: Vec<EndpointLabel>,
    /// Kubernetes labels of the target's task endpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_labels: Vec<EndpointLabel>,
}

/// A diagnosed problem, as stored and served under `/api/v1/problems`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Problem {
    /// Database id.
    pub id: i64,
    /// Category.
    pub kind: ProblemKind,
    /// Kind of the blamed component.
    pub component_kind: ComponentKind,
    /// Name of the blamed component.
    pub component: String,
    /// Active or resolved.
    pub state: ProblemState,
    /// Confidence in [0, 1].
    pub confidence: f64,
    /// True when the network is to blame (`kind.is_network()`).
    pub network: bool,
    /// First evidence, ms since the Unix epoch.
    pub first_seen_ms: i64,
    /// Latest evidence.
    pub last_seen_ms: i64,
    /// When it was resolved.
    pub resolved_ms: Option<i64>,
    /// Evidence at the latest update.
    pub evidence: Evidence,
    /// Impact priority; `None` until the impact loop has assessed the problem.
    #[serde(default)]
    pub priority: Option<Priority>,
    /// Ids of the tasks whose service network the problem sits in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub affected_tasks: Vec<u32>,
}

/// Per-RNIC byte counters of one host, sampled every `interval_ms` (SkeletonHunter
/// §5.1: burst cycles of RNIC throughput). `POST /api/v1/throughput` to the controller.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ThroughputUpload {
    /// Host id from registration.
    pub host_id: u32,
    /// Agent epoch.
    pub epoch: u32,
    /// Sampling interval (at most 1000 ms).
    pub interval_ms: u32,
    /// One series per RNIC.
    pub series: Vec<RnicSeries>,
}

/// Consecutive samples of one RNIC: bytes transferred in each interval.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RnicSeries {
    /// RNIC id.
    pub rnic_id: u32,
    /// Start of the first interval, ms since the Unix epoch.
    pub start_ms: i64,
    /// Bytes sent per interval.
    pub tx_bytes: Vec<u64>,
    /// Bytes received per interval.
    pub rx_bytes: Vec<u64>,
}

/// One endpoint (RNIC) of a training task.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskEndpoint {
    /// Host name.
    pub host: String,
    /// RNIC name on the host (its registered `ifname`).
    pub rnic: String,
    /// Rail index (defaults to the RNIC's registered rail).
    #[serde(default)]
    pub rail: Option<u32>,
    /// Kubernetes namespace of the container, if any.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Pod (container) name, if any.
    #[serde(default)]
    pub pod: Option<String>,
    /// The endpoint registered itself ready to be probed (incremental activation).
    #[serde(default)]
    pub ready: bool,
}

impl TaskEndpoint {
    /// The endpoint `rnic` on `host`, without rail, pod or readiness.
    pub fn new(host: &str, rnic: &str) -> Self {
        Self {
            host: host.into(),
            rnic: rnic.into(),
            rail: None,
            namespace: None,
            pod: None,
            ready: false,
        }
    }
}

/// `POST /api/v1/tasks` / `PUT /api/v1/tasks/{id}`: a training task and its endpoints.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Task name (unique).
    pub name: String,
    /// Its endpoints.
    pub endpoints: Vec<TaskEndpoint>,
}

/// Lifecycle phase of a task's pinglist (SkeletonHunter §5.1).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskPhase {
    /// Basic same-rail pinglist, endpoints activated as they register ready.
    Preload,
    /// Runtime: the inferred skeleton drives the pinglist.
    Skeleton,
    /// Runtime, but the skeleton failed the fidelity check: the basic list stays.
    BasicFallback,
}

/// The inferred traffic skeleton of a task.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct SkeletonInfo {
    /// Inferred data-parallel degree.
    pub dp: u32,
    /// Inferred TP × PP.
    pub tp_pp: u32,
    /// RNIC ids grouped by position across DP replicas.
    pub groups: Vec<Vec<u32>>,
    /// Probe pairs of the skeleton.
    pub pairs: usize,
    /// Why the basic list was kept, when it was.
    pub fallback_reason: Option<String>,
}

/// A task as the controller serves it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct TaskInfo {
    /// Task id.
    pub id: u32,
    /// Name.
    pub name: String,
    /// Endpoints, with resolved RNIC ids (`None` = not registered yet).
    pub endpoints: Vec<(TaskEndpoint, Option<u32>)>,
    /// Pinglist phase.
    pub phase: TaskPhase,
    /// Probe pairs in the full mesh, the basic list and the active list.
    pub full_mesh_pairs: usize,
    /// Same-rail pairs.
    pub basic_pairs: usize,
    /// Pairs probed now (ready endpoints only).
    pub active_pairs: usize,
    /// The skeleton, once inferred.
    pub skeleton: Option<SkeletonInfo>,
}

#[cfg(test)]
mod tests {
    use super::analyzer_url;

    #[test]
    fn analyzer_header_values_are_checked() {
        assert_eq!(
            analyzer_url(" https://a.example:8443/ ").as_deref(),
            Some("https://a.example:8443")
        );
        assert_eq!(
            analyzer_url("http://127.0.0.1:9").as_deref(),
            Some("http://127.0.0.1:9")
        );
        for bad in [
            "",
            "http://",
            "ftp://x",
            "127.0.0.1:80",
            "http://a b",
            "http://\u{e9}",
        ] {
            assert_eq!(analyzer_url(bad), None, "{bad:?}");
        }
        assert_eq!(analyzer_url(&format!("http://{}", "a".repeat(600))), None);
    }
}
