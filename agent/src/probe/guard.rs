//! The gate of every engine: received PROBEs and ACKs must carry a valid cluster MAC
//! (when the controller requires it) bound to the flow they arrive on and, for PROBEs, a
//! send time within the tag window, and each source IP gets at most a token bucket's
//! worth of answers, so a responder is no amplifier. It also tags what we send.

use rocemesh_proto::api::ProbeAuth;
use rocemesh_proto::packet::Wire;
use rocemesh_proto::probe_auth::{AuthError, Flow, Keyring};
use rocemesh_proto::{Packet, PacketKind};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

/// Sustained answers per source per second when the controller says nothing (an older
/// controller, or engines run without one): far above any pinglist's per-target rate.
pub(crate) const DEFAULT_SOURCE_PPS: f64 = 2_000.0;
/// Burst per source when the controller says nothing.
pub(crate) const DEFAULT_SOURCE_BURST: u32 = 200;
/// Most source IPs with a bucket; beyond it idle (refilled) buckets are dropped first,
/// then the longest-unseen one.
pub(crate) const MAX_SOURCES: usize = 4096;
/// Reasons a received packet is refused, in counter order ([`Reject::reason`]).
pub(crate) const REJECT_REASONS: [&str; 6] = [
    "no_key",
    "untagged",
    "unknown_key",
    "bad_tag",
    "stale",
    "rate_limited",
];

/// What the controller's probe settings make of received and sent packets.
#[derive(Debug, Clone)]
pub enum Auth {
    /// No word from the controller yet (agent start): nothing is answered or trusted.
    Closed,
    /// Authentication off: packets go untagged, tags are ignored.
    Off,
    /// Every PROBE/ACK must verify under one of these keys; ours are signed.
    Required(Box<Keyring>),
}

/// The settings every engine of an agent shares (swapped whole by the control thread).
#[derive(Debug, Clone)]
pub struct GuardSettings {
    /// Packet authentication.
    pub auth: Auth,
    /// Sustained PROBE answers per second per source IP.
    pub source_pps: f64,
    /// Bucket size per source IP.
    pub source_burst: u32,
}

impl GuardSettings {
    /// Authentication off with the default limits: an engine without a controller.
    pub fn open() -> Self {
        Self {
            auth: Auth::Off,
            source_pps: DEFAULT_SOURCE_PPS,
            source_burst: DEFAULT_SOURCE_BURST,
        }
    }

    /// Nothing answered until the controller hands out keys: an agent at start.
    pub fn closed() -> Self {
        Self {
            auth: Auth::Closed,
            ..Self::open()
        }
    }

    /// The settings the controller sent; `None` (an older controller) is [`Self::open`].
    pub fn from_api(auth: Option<&ProbeAuth>) -> anyhow::Result<Self> {
        let Some(a) = auth else {
            return Ok(Self::open());
        };
        anyhow::ensure!(
            a.source_pps.is_finite() && a.source_pps > 0.0 && a.source_burst > 0,
            "probe answer limit {} pps / burst {} is not positive",
            a.source_pps,
            a.source_burst
        );
        let auth = match Keyring::from_api(a)? {
            Some(ring) => Auth::Required(Box::new(ring)),
            None => Auth::Off,
        };
        Ok(Self {
            auth,
            source_pps: a.source_pps,
            source_burst: a.source_burst,
        })
    }

    /// The wire form of `pkt` sent on `flow`: tagged (for this flow, and a PROBE for
    /// now) when authentication is on.
    pub fn encode(&self, pkt: &Packet, flow: &Flow) -> Wire {
        match &self.auth {
            Auth::Required(ring) => ring.seal(pkt, flow, now_ms()),
            Auth::Closed | Auth::Off => Wire::new(pkt),
        }
    }
}

/// The wall clock in ms since the Unix epoch (the time a PROBE tag carries).
fn now_ms() -> u64 {
    rocemesh_proto::now_unix_ns() / 1_000_000
}

/// Why a received packet was refused (counted under [`Self::reason`], never answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reject {
    /// No keys from the controller yet.
    NoKey,
    /// The MAC check failed.
    Auth(AuthError),
    /// The source used up its bucket.
    RateLimited,
}

impl Reject {
    /// Stable short name: one of [`REJECT_REASONS`].
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Self::NoKey => "no_key",
            Self::Auth(e) => e.reason(),
            Self::RateLimited => "rate_limited",
        }
    }
}

/// A token bucket of one source.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// One engine's gate: the shared settings plus its own per-source buckets.
#[derive(Debug)]
pub(crate) struct ProbeGuard {
    settings: Arc<GuardSettings>,
    buckets: HashMap<IpAddr, Bucket>,
}

impl ProbeGuard {
    /// A gate applying `settings`.
    pub(crate) fn new(settings: Arc<GuardSettings>) -> Self {
        Self {
            settings,
            buckets: HashMap::new(),
        }
    }

    /// New keys or limits; the buckets carry over (clamped to the new burst).
    pub(crate) fn set(&mut self, settings: Arc<GuardSettings>) {
        self.settings = settings;
    }

    /// The settings in force (to tag what is sent).
    pub(crate) fn settings(&self) -> &Arc<GuardSettings> {
        &self.settings
    }

    /// Admits a decoded packet `raw` seen on `flow`: PROBEs and ACKs must verify, PROBEs
    /// must find a token of the sender's bucket. TRACE packets are never answered and pass.
    pub(crate) fn admit(
        &mut self,
        pkt: &Packet,
        raw: &[u8],
        flow: &Flow,
        now: Instant,
    ) -> Result<(), Reject> {
        if pkt.kind == PacketKind::Trace {
            return Ok(());
        }
        match &self.settings.auth {
            Auth::Closed => return Err(Reject::NoKey),
            Auth::Off => {}
            Auth::Required(ring) => ring.verify(raw, flow, now_ms()).map_err(Reject::Auth)?,
        }
        if pkt.kind == PacketKind::Probe && !self.take_token(flow.src, now) {
            return Err(Reject::RateLimited);
        }
        Ok(())
    }

    /// Takes one answer token of `peer`'s bucket (a new source starts full).
    fn take_token(&mut self, peer: IpAddr, now: Instant) -> bool {
        let (pps, burst) = (
            self.settings.source_pps,
            f64::from(self.settings.source_burst),
        );
        if !self.buckets.contains_key(&peer) && self.buckets.len() >= MAX_SOURCES {
            self.evict(now, pps, burst);
        }
        let b = self.buckets.entry(peer).or_insert(Bucket {
            tokens: burst,
            last: now,
        });
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + elapsed * pps).min(burst);
        b.last = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Makes room: drops every bucket that has refilled (forgetting it changes nothing),
    /// else the longest-unseen one.
    fn evict(&mut self, now: Instant, pps: f64, burst: f64) {
        let before = self.buckets.len();
        self.buckets.retain(|_, b| {
            b.tokens + now.saturating_duration_since(b.last).as_secs_f64() * pps < burst
        });
        if self.buckets.len() < before {
            return;
        }
        if let Some(oldest) = self
            .buckets
            .iter()
            .min_by_key(|(_, b)| b.last)
            .map(|(ip, _)| *ip)
        {
            self.buckets.remove(&oldest);
        }
    }

    #[cfg(test)]
    /// Sources with a bucket (bounded by [`MAX_SOURCES`]).
    pub(crate) fn tracked_sources(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::ProbeClass;
    use std::time::Duration;

    fn ring(id: u8, byte: u8) -> Keyring {
        Keyring::new(id, &[(id, [byte; 32])]).unwrap()
    }

    fn settings(auth: Auth, pps: f64, burst: u32) -> Arc<GuardSettings> {
        Arc::new(GuardSettings {
            auth,
            source_pps: pps,
            source_burst: burst,
        })
    }

    fn probe() -> Packet {
        Packet::probe(ProbeClass::TorMesh, 1, 2, 3, 4, 5, 6)
    }

    fn from(src: &str) -> Flow {
        Flow {
            src: src.parse().unwrap(),
            src_port: 50_000,
            dst: "10.0.9.9".parse().unwrap(),
            dst_port: 4791,
        }
    }

    #[test]
    fn required_mode_admits_only_valid_tags() {
        let mut g = ProbeGuard::new(settings(Auth::Required(Box::new(ring(1, 7))), 1e6, 1000));
        let peer = from("10.0.0.1");
        let now = Instant::now();
        let good = g.settings().encode(&probe(), &peer);
        assert_eq!(g.admit(&probe(), good.as_bytes(), &peer, now), Ok(()));
        // The same bytes seen from another address are a replay.
        assert_eq!(
            g.admit(&probe(), good.as_bytes(), &from("10.0.0.2"), now),
            Err(Reject::Auth(AuthError::BadTag))
        );
        let plain = probe().encode();
        assert_eq!(
            g.admit(&probe(), &plain, &peer, now),
            Err(Reject::Auth(AuthError::Untagged))
        );
        let foreign = ring(1, 8).seal(&probe(), &peer, 0);
        assert_eq!(
            g.admit(&probe(), foreign.as_bytes(), &peer, now)
                .unwrap_err()
                .reason(),
            "bad_tag"
        );
        let stale = ring(1, 7).seal(&probe(), &peer, 1_000);
        assert_eq!(
            g.admit(&probe(), stale.as_bytes(), &peer, now)
                .unwrap_err()
                .reason(),
            "stale"
        );
        let ack = probe().ack1(5);
        assert!(g.admit(&ack, &ack.encode(), &peer, now).is_err());
        // TRACE packets are never answered: they pass untagged.
        let trace = probe().trace();
        assert_eq!(g.admit(&trace, &trace.encode(), &peer, now), Ok(()));
    }

    #[test]
    fn closed_refuses_and_off_ignores_tags() {
        let peer = from("10.0.0.1");
        let now = Instant::now();
        let mut g = ProbeGuard::new(Arc::new(GuardSettings::closed()));
        assert_eq!(
            g.admit(&probe(), &probe().encode(), &peer, now),
            Err(Reject::NoKey)
        );
        g.set(Arc::new(GuardSettings::open()));
        assert_eq!(g.admit(&probe(), &probe().encode(), &peer, now), Ok(()));
        let tagged = ring(3, 1).seal(&probe(), &peer, 0);
        assert_eq!(g.admit(&probe(), tagged.as_bytes(), &peer, now), Ok(()));
        assert_eq!(g.settings().encode(&probe(), &peer), Wire::new(&probe()));
    }

    #[test]
    fn bucket_bounds_answers_per_source_and_refills() {
        let mut g = ProbeGuard::new(settings(Auth::Off, 100.0, 10));
        let (a, b) = (from("10.0.0.1"), from("10.0.0.2"));
        let t0 = Instant::now();
        let raw = probe().encode();
        let admitted = (0..50)
            .filter(|_| g.admit(&probe(), &raw, &a, t0).is_ok())
            .count();
        assert_eq!(admitted, 10);
        assert_eq!(g.admit(&probe(), &raw, &a, t0), Err(Reject::RateLimited));
        // Another source has its own bucket; ACKs are not limited.
        assert_eq!(g.admit(&probe(), &raw, &b, t0), Ok(()));
        let ack = probe().ack1(5);
        assert_eq!(g.admit(&ack, &ack.encode(), &a, t0), Ok(()));
        // 50 ms at 100 pps: five more answers.
        let t1 = t0 + Duration::from_millis(50);
        let admitted = (0..50)
            .filter(|_| g.admit(&probe(), &raw, &a, t1).is_ok())
            .count();
        assert_eq!(admitted, 5);
    }

    #[test]
    fn source_table_stays_bounded() {
        let mut g = ProbeGuard::new(settings(Auth::Off, 1.0, 2));
        let t0 = Instant::now();
        let raw = probe().encode();
        for i in 0..(MAX_SOURCES as u32 + 500) {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            let flow = Flow {
                src: ip,
                ..from("10.0.0.1")
            };
            assert_eq!(g.admit(&probe(), &raw, &flow, t0), Ok(()));
            assert!(g.tracked_sources() <= MAX_SOURCES);
        }
        assert_eq!(g.tracked_sources(), MAX_SOURCES);
    }
}
