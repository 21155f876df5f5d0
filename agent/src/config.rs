//! Agent configuration: what the binary reads from its config file and command line.

use anyhow::{Context, Result, bail, ensure};
use rocemesh_proto::api::{MAX_NAME_LEN, MAX_RNICS_PER_HOST};
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// Default UDP port of every responder (RoCE uses 4791; we sit next to it).
pub(crate) const DEFAULT_PORT: u16 = 4792;
/// Default capacity of the result buffer, in records.
pub(crate) const DEFAULT_BUFFER_CAPACITY: usize = 100_000;

/// Everything the agent needs to start.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Host name registered with the controller (unique in the cluster).
    #[serde(default = "crate::discovery::hostname")]
    pub host: String,
    /// Base URL of the controller, e.g. `http://controller:8080`.
    pub controller_url: String,
    /// Analyzer base URL overriding the one the controller hands out.
    #[serde(default)]
    pub analyzer_url: Option<String>,
    /// The RNICs to probe from and answer on (at least one).
    pub rnics: Vec<RnicConfig>,
    /// UDP port of every responder.
    #[serde(default = "default_port")]
    pub port: u16,
    /// DSCP of probes and ACKs (0..=63), so they ride the RoCE traffic class.
    #[serde(default)]
    pub dscp: Option<u8>,
    /// Results kept while the analyzer is unreachable; the oldest are dropped beyond it.
    #[serde(default = "default_buffer_capacity")]
    pub buffer_capacity: usize,
    /// Try to switch the NICs to hardware timestamping (`SIOCSHWTSTAMP`, needs root).
    #[serde(default)]
    pub hardware_timestamps: bool,
    /// Send the probes of the controller's pinglists. `false` keeps this host a responder
    /// only: it registers, answers and traces its ACK paths but sends no probes (a host
    /// that must stay reachable without adding probe load, or one side of a cost benchmark).
    #[serde(default = "default_true")]
    pub probing: bool,
    /// Trace the path of every probe and ACK 5-tuple (traceroute on the 5-tuple itself).
    #[serde(default = "default_true")]
    pub trace_enabled: bool,
    /// Highest TTL of a trace (1..=16).
    #[serde(default = "default_trace_max_hops")]
    pub trace_max_hops: u8,
    /// TRACE packets per second for the whole agent (switches rate-limit their ICMP).
    #[serde(default = "default_trace_pps")]
    pub trace_pps: f64,
    /// How often every 5-tuple is traced again (timeouts trigger a trace at once).
    #[serde(default = "default_trace_refresh_ms")]
    #[serde(rename = "trace_refresh", with = "rocemesh_proto::duration::millis")]
    pub trace_refresh_ms: u64,
    /// Probe transport of every RNIC (`auto`: verbs where an RDMA device carries the IP).
    #[serde(default)]
    pub transport: TransportKind,
    /// Hooks of the service tracer (`auto`: kernel route, else user route).
    #[serde(default)]
    pub service_tracing: ServiceTracing,
    /// libibverbs files the user route hooks besides those found on the host and in
    /// running processes (libraries at unusual paths; tests).
    #[serde(default)]
    pub service_libraries: Vec<PathBuf>,
    /// Sample every RNIC's tx/rx bytes for the controller (SkeletonHunter skeleton inference).
    #[serde(default = "default_true")]
    pub sampling_enabled: bool,
    /// Throughput sampling interval (10ms..=1s).
    #[serde(default = "default_sample_interval_ms")]
    #[serde(rename = "sample_interval", with = "rocemesh_proto::duration::millis")]
    pub sample_interval_ms: u64,
    /// How often buffered samples are POSTed to the controller.
    #[serde(default = "default_sample_upload_ms")]
    #[serde(rename = "sample_upload", with = "rocemesh_proto::duration::millis")]
    pub sample_upload_ms: u64,
    /// File holding the bearer token of the server's `agent` role (read at start; the
    /// binary also takes `--token-file` or `ROCEMESH_TOKEN`).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// CA certificates (PEM) that https controller/analyzer URLs must chain to (default:
    /// the public web roots). Invalid certificates are always refused.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain (PEM) shown to a server that requires mutual TLS.
    #[serde(default)]
    pub client_cert_file: Option<PathBuf>,
    /// Private key (PEM) of `client_cert_file`.
    #[serde(default)]
    pub client_key_file: Option<PathBuf>,
    /// Serve the agent's self-metrics at `GET /metrics` on this address (off when unset).
    #[serde(default)]
    pub metrics_listen: Option<SocketAddr>,
}

/// Which transport the RNIC engines use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// Verbs when an RDMA device carries the RNIC's IP, else UDP (decided per RNIC).
    #[default]
    Auto,
    /// UDP sockets with kernel timestamps (any Ethernet).
    Udp,
    /// A UD QP per RNIC (real RoCE); failing to open it is a start error.
    Verbs,
}

impl std::str::FromStr for TransportKind {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "udp" => Ok(Self::Udp),
            "verbs" => Ok(Self::Verbs),
            _ => bail!("unknown transport {s:?} (expected auto, udp or verbs)"),
        }
    }
}

/// Which hooks discover service RC connections (R-Pingmesh §4.2.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceTracing {
    /// Kernel route when ib_core BTF and kprobes are usable, else the user route.
    #[default]
    Auto,
    /// kprobes on ib_core.
    Kernel,
    /// uprobes on every libibverbs copy found.
    User,
    /// No service tracing.
    Off,
}

impl std::str::FromStr for ServiceTracing {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "kernel" => Ok(Self::Kernel),
            "user" => Ok(Self::User),
            "off" => Ok(Self::Off),
            _ => bail!("unknown service tracing route {s:?} (expected auto, kernel, user or off)"),
        }
    }
}

/// Default highest TTL of a trace: a 3-tier Clos is at most 5 routers deep.
pub(crate) const DEFAULT_TRACE_MAX_HOPS: u8 = 8;
/// Default TRACE packets per second per agent.
pub(crate) const DEFAULT_TRACE_PPS: f64 = 40.0;
/// Default refresh period of every traced path.
pub(crate) const DEFAULT_TRACE_REFRESH_MS: u64 = 60_000;

fn default_true() -> bool {
    true
}

fn default_trace_max_hops() -> u8 {
    DEFAULT_TRACE_MAX_HOPS
}

fn default_trace_pps() -> f64 {
    DEFAULT_TRACE_PPS
}

fn default_trace_refresh_ms() -> u64 {
    DEFAULT_TRACE_REFRESH_MS
}

/// Default throughput sampling interval.
pub(crate) const DEFAULT_SAMPLE_INTERVAL_MS: u64 = 1_000;
/// Default upload period of throughput samples.
pub(crate) const DEFAULT_SAMPLE_UPLOAD_MS: u64 = 10_000;

fn default_sample_interval_ms() -> u64 {
    DEFAULT_SAMPLE_INTERVAL_MS
}

fn default_sample_upload_ms() -> u64 {
    DEFAULT_SAMPLE_UPLOAD_MS
}

fn default_port() -> u16 {
    DEFAULT_PORT
}

fn default_buffer_capacity() -> usize {
    DEFAULT_BUFFER_CAPACITY
}

impl AgentConfig {
    /// A configuration with every optional field at its default.
    pub fn new(controller_url: impl Into<String>, rnics: Vec<RnicConfig>) -> Self {
        Self {
            host: crate::discovery::hostname(),
            controller_url: controller_url.into(),
            analyzer_url: None,
            rnics,
            port: DEFAULT_PORT,
            dscp: None,
            buffer_capacity: DEFAULT_BUFFER_CAPACITY,
            hardware_timestamps: false,
            probing: true,
            trace_enabled: true,
            trace_max_hops: DEFAULT_TRACE_MAX_HOPS,
            trace_pps: DEFAULT_TRACE_PPS,
            trace_refresh_ms: DEFAULT_TRACE_REFRESH_MS,
            transport: TransportKind::Auto,
            service_tracing: ServiceTracing::Auto,
            service_libraries: Vec::new(),
            sampling_enabled: true,
            sample_interval_ms: DEFAULT_SAMPLE_INTERVAL_MS,
            sample_upload_ms: DEFAULT_SAMPLE_UPLOAD_MS,
            token_file: None,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
            metrics_listen: None,
        }
    }

    /// Checks the values that would otherwise fail later and less clearly.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            !self.host.is_empty() && self.host.len() <= MAX_NAME_LEN,
            "host name must be 1..={MAX_NAME_LEN} bytes"
        );
        ensure!(
            self.controller_url.starts_with("http://")
                || self.controller_url.starts_with("https://"),
            "controller_url must be an http(s) URL, got {:?}",
            self.controller_url
        );
        ensure!(
            !self.rnics.is_empty(),
            "at least one RNIC must be configured"
        );
        ensure!(
            self.rnics.len() <= MAX_RNICS_PER_HOST,
            "at most {MAX_RNICS_PER_HOST} RNICs per host"
        );
        ensure!(self.port != 0, "port must not be 0");
        ensure!(
            self.buffer_capacity > 0,
            "buffer_capacity must be at least 1"
        );
        if let Some(d) = self.dscp {
            ensure!(d <= 63, "dscp must be 0..=63, got {d}");
        }
        let max = rocemesh_proto::path::MAX_HOPS;
        ensure!(
            (1..=max).contains(&usize::from(self.trace_max_hops)),
            "trace_max_hops must be 1..={max}, got {}",
            self.trace_max_hops
        );
        ensure!(
            self.trace_pps.is_finite() && (0.1..=10_000.0).contains(&self.trace_pps),
            "trace_pps must be 0.1..=10000, got {}",
            self.trace_pps
        );
        ensure!(
            self.trace_refresh_ms >= 1_000,
            "trace_refresh must be at least 1s, got {} ms",
            self.trace_refresh_ms
        );
        ensure!(
            (10..=1_000).contains(&self.sample_interval_ms),
            "sample_interval must be 10ms..=1s, got {} ms",
            self.sample_interval_ms
        );
        ensure!(
            (self.sample_interval_ms..=3_600_000).contains(&self.sample_upload_ms),
            "sample_upload must be sample_interval..=1h, got {} ms",
            self.sample_upload_ms
        );
        for (i, r) in self.rnics.iter().enumerate() {
            r.validate()?;
            ensure!(
                !self.rnics[..i].iter().any(|o| o.name == r.name),
                "RNIC name {:?} given twice",
                r.name
            );
        }
        Ok(())
    }
}

/// One RNIC: a name plus either its IP or the interface carrying it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RnicConfig {
    /// Stable name registered with the controller (e.g. `mlx5_0`).
    pub name: String,
    /// IP address to probe from and answer on.
    #[serde(default)]
    pub ip: Option<IpAddr>,
    /// Interface whose address is used when `ip` is not given.
    #[serde(default)]
    pub interface: Option<String>,
    /// ToR name, when known.
    #[serde(default)]
    pub tor: Option<String>,
    /// Rail index in a rail-optimized fabric.
    #[serde(default)]
    pub rail: Option<u32>,
    /// RDMA device carrying this RNIC (e.g. `mlx5_0`); found from the IP when not given.
    #[serde(default)]
    pub rdma_device: Option<String>,
    /// GID index override of the verbs transport (needs `rdma_device`); by default the
    /// RoCEv2 GID holding the RNIC's IP is used.
    #[serde(default)]
    pub gid_index: Option<u32>,
}

impl RnicConfig {
    /// Parses the command-line form `name=ip[,tor=T][,rail=N][,device=D][,gid_index=N]`
    /// or `name=@ifname[,...]`.
    pub fn parse(spec: &str) -> Result<RnicConfig> {
        let mut parts = spec.split(',');
        let head = parts.next().unwrap_or_default();
        let (name, addr) = head.split_once('=').with_context(|| {
            format!("RNIC spec {spec:?}: expected name=ip or name=@interface first")
        })?;
        let mut rnic = RnicConfig {
            name: name.trim().to_string(),
            ip: None,
            interface: None,
            tor: None,
            rail: None,
            rdma_device: None,
            gid_index: None,
        };
        let addr = addr.trim();
        if let Some(ifname) = addr.strip_prefix('@') {
            rnic.interface = Some(ifname.to_string());
        } else {
            rnic.ip =
                Some(addr.parse().with_context(|| {
                    format!("RNIC spec {spec:?}: {addr:?} is not an IP address")
                })?);
        }
        for part in parts {
            let (key, value) = part
                .split_once('=')
                .with_context(|| format!("RNIC spec {spec:?}: {part:?} is not key=value"))?;
            match key.trim() {
                "tor" => rnic.tor = Some(value.trim().to_string()),
                "rail" => {
                    rnic.rail = Some(
                        value
                            .trim()
                            .parse()
                            .with_context(|| format!("RNIC spec {spec:?}: bad rail {value:?}"))?,
                    )
                }
                "device" => rnic.rdma_device = Some(value.trim().to_string()),
                "gid_index" => {
                    rnic.gid_index =
                        Some(value.trim().parse().with_context(|| {
                            format!("RNIC spec {spec:?}: bad gid_index {value:?}")
                        })?)
                }
                other => bail!(
                    "RNIC spec {spec:?}: unknown key {other:?} (expected tor, rail, device or gid_index)"
                ),
            }
        }
        rnic.validate()?;
        Ok(rnic)
    }

    fn validate(&self) -> Result<()> {
        let name_ok = |s: &str| !s.is_empty() && s.len() <= MAX_NAME_LEN;
        ensure!(
            name_ok(&self.name),
            "RNIC name must be 1..={MAX_NAME_LEN} bytes"
        );
        ensure!(
            self.ip.is_some() || self.interface.is_some(),
            "RNIC {}: give an ip or an interface",
            self.name
        );
        if let Some(i) = &self.interface {
            ensure!(
                !i.is_empty() && i.len() < libc::IFNAMSIZ,
                "RNIC {}: bad interface name {i:?}",
                self.name
            );
        }
        if let Some(t) = &self.tor {
            ensure!(
                name_ok(t),
                "RNIC {}: ToR name must be 1..={MAX_NAME_LEN} bytes",
                self.name
            );
        }
        if let Some(d) = &self.rdma_device {
            ensure!(
                name_ok(d),
                "RNIC {}: RDMA device name must be 1..={MAX_NAME_LEN} bytes",
                self.name
            );
        }
        if let Some(i) = self.gid_index {
            ensure!(
                self.rdma_device.is_some(),
                "RNIC {}: gid_index {i} needs the RDMA device (device=...)",
                self.name
            );
            ensure!(
                i <= u32::from(u8::MAX),
                "RNIC {}: gid_index must be 0..=255, got {i}",
                self.name
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_cli_forms() {
        let r = RnicConfig::parse("mlx5_0=10.0.0.1,tor=tor-a,rail=3").unwrap();
        assert_eq!(r.name, "mlx5_0");
        assert_eq!(r.ip, Some("10.0.0.1".parse().unwrap()));
        assert_eq!((r.tor.as_deref(), r.rail), (Some("tor-a"), Some(3)));
        let r = RnicConfig::parse("n1=@eth1").unwrap();
        assert_eq!((r.ip, r.interface.as_deref()), (None, Some("eth1")));
        assert_eq!(
            RnicConfig::parse("v6=fd00::1").unwrap().ip,
            Some("fd00::1".parse().unwrap())
        );
    }

    #[test]
    fn transport_and_service_tracing_fields() {
        let cfg: AgentConfig = toml::from_str(
            "controller_url = \"http://c:1\"\n[[rnics]]\nname = \"a\"\nip = \"10.0.0.1\"\n",
        )
        .unwrap();
        assert_eq!(
            (cfg.transport, cfg.service_tracing),
            (TransportKind::Auto, ServiceTracing::Auto)
        );
        assert!(cfg.service_libraries.is_empty());
        let cfg: AgentConfig = toml::from_str(
            "controller_url = \"http://c:1\"\ntransport = \"verbs\"\nservice_tracing = \"user\"\n\
             service_libraries = [\"/opt/lib/libibverbs.so.1\"]\n\
             [[rnics]]\nname = \"a\"\nip = \"10.0.0.1\"\nrdma_device = \"mlx5_0\"\ngid_index = 3\n",
        )
        .unwrap();
        assert_eq!(
            (cfg.transport, cfg.service_tracing),
            (TransportKind::Verbs, ServiceTracing::User)
        );
        assert_eq!(
            cfg.service_libraries,
            vec![PathBuf::from("/opt/lib/libibverbs.so.1")]
        );
        assert_eq!(
            (cfg.rnics[0].rdma_device.as_deref(), cfg.rnics[0].gid_index),
            (Some("mlx5_0"), Some(3))
        );
        cfg.validate().unwrap();
        assert!(
            toml::from_str::<AgentConfig>(
                "controller_url = \"http://c:1\"\ntransport = \"rdma\"\nrnics = []\n"
            )
            .is_err()
        );
        // Command-line forms.
        assert_eq!(
            "Verbs".parse::<TransportKind>().unwrap(),
            TransportKind::Verbs
        );
        assert_eq!(
            " off ".parse::<ServiceTracing>().unwrap(),
            ServiceTracing::Off
        );
        assert!(
            format!("{:#}", "rdma".parse::<TransportKind>().unwrap_err())
                .contains("auto, udp or verbs")
        );
        assert!("kprobe".parse::<ServiceTracing>().is_err());
        let r = RnicConfig::parse("mlx5_0=10.0.0.1,device=mlx5_0,gid_index=3").unwrap();
        assert_eq!(
            (r.rdma_device.as_deref(), r.gid_index),
            (Some("mlx5_0"), Some(3))
        );
    }

    #[test]
    fn parse_errors_say_what_is_wrong() {
        for (spec, needle) in [
            ("mlx5_0", "expected name=ip"),
            ("a=10.0.0.300", "not an IP address"),
            ("a=10.0.0.1,rail=x", "bad rail"),
            ("a=10.0.0.1,color=red", "unknown key"),
            ("a=10.0.0.1,tor", "not key=value"),
            ("=10.0.0.1", "RNIC name"),
            ("a=@", "bad interface"),
            ("a=@waytoolonginterfacename", "bad interface"),
            ("a=10.0.0.1,gid_index=1", "needs the RDMA device"),
            ("a=10.0.0.1,device=d,gid_index=x", "bad gid_index"),
            ("a=10.0.0.1,device=d,gid_index=256", "0..=255"),
        ] {
            let err = format!("{:#}", RnicConfig::parse(spec).unwrap_err());
            assert!(err.contains(needle), "{spec}: {err}");
        }
    }

    #[test]
    fn config_file_defaults_and_validation() {
        let cfg: AgentConfig = toml::from_str(
            "controller_url = \"http://c:1\"\n[[rnics]]\nname = \"a\"\nip = \"127.0.0.1\"\n",
        )
        .unwrap();
        assert_eq!(
            (cfg.port, cfg.buffer_capacity, cfg.hardware_timestamps),
            (DEFAULT_PORT, DEFAULT_BUFFER_CAPACITY, false)
        );
        assert!(cfg.trace_enabled);
        assert_eq!(
            (cfg.trace_max_hops, cfg.trace_pps, cfg.trace_refresh_ms),
            (8, 40.0, 60_000)
        );
        assert!(!cfg.host.is_empty());
        cfg.validate().unwrap();
        assert!(
            toml::from_str::<AgentConfig>("controller_url = \"x\"\nrnics = []\nbogus = 1\n")
                .is_err()
        );
        let mut bad = cfg.clone();
        bad.rnics.push(bad.rnics[0].clone());
        assert!(format!("{:#}", bad.validate().unwrap_err()).contains("twice"));
        let mut bad = cfg.clone();
        bad.dscp = Some(64);
        assert!(bad.validate().is_err());
        for (hops, pps, refresh, needle) in [
            (0, 40.0, 60_000, "trace_max_hops"),
            (17, 40.0, 60_000, "trace_max_hops"),
            (8, 0.0, 60_000, "trace_pps"),
            (8, f64::NAN, 60_000, "trace_pps"),
            (8, 40.0, 10, "trace_refresh"),
        ] {
            let bad = AgentConfig {
                trace_max_hops: hops,
                trace_pps: pps,
                trace_refresh_ms: refresh,
                ..cfg.clone()
            };
            assert!(
                format!("{:#}", bad.validate().unwrap_err()).contains(needle),
                "{needle}"
            );
        }
        let traced: AgentConfig = toml::from_str(
            "controller_url = \"http://c:1\"\ntrace_enabled = false\ntrace_pps = 5.5\ntrace_max_hops = 4\ntrace_refresh = \"2s\"\n[[rnics]]\nname = \"a\"\nip = \"127.0.0.1\"\n",
        )
        .unwrap();
        assert_eq!(
            (
                traced.trace_enabled,
                traced.trace_pps,
                traced.trace_max_hops,
                traced.trace_refresh_ms
            ),
            (false, 5.5, 4, 2000)
        );
        traced.validate().unwrap();
    }

    #[test]
    fn sampling_fields_default_and_are_bounded() {
        let base = "controller_url = \"http://c:1\"\n[[rnics]]\nname = \"a\"\nip = \"127.0.0.1\"\n";
        let cfg: AgentConfig = toml::from_str(base).unwrap();
        assert_eq!(
            (
                cfg.sampling_enabled,
                cfg.sample_interval_ms,
                cfg.sample_upload_ms
            ),
            (true, 1_000, 10_000)
        );
        let cfg: AgentConfig = toml::from_str(&format!(
            "sampling_enabled = false\nsample_interval = \"100ms\"\nsample_upload = \"500ms\"\n{base}"
        ))
        .unwrap();
        assert_eq!(
            (
                cfg.sampling_enabled,
                cfg.sample_interval_ms,
                cfg.sample_upload_ms
            ),
            (false, 100, 500)
        );
        cfg.validate().unwrap();
        for (interval, upload, needle) in [
            (1_001, 10_000, "sample_interval"),
            (0, 10_000, "sample_interval"),
            (1_000, 999, "sample_upload"),
            (1_000, 3_600_001, "sample_upload"),
        ] {
            let bad = AgentConfig {
                sample_interval_ms: interval,
                sample_upload_ms: upload,
                ..cfg.clone()
            };
            assert!(
                format!("{:#}", bad.validate().unwrap_err()).contains(needle),
                "{needle}"
            );
        }
    }
}
