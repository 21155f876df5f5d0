//! Comm info of the RNIC at the far end of a service flow (responder port, current QPN,
//! RNIC id), from `GET {controller}/api/v1/rnics/by-ip/{ip}`, cached.
//!
//! Known RNICs are refreshed every [`REFRESH`]; unknown ones (404) and failed look-ups are
//! retried after [`RETRY`]; a service probe timeout marks the entry stale (the peer's QPN
//! may have been reset) and it is fetched again, at most once per [`MIN_REFETCH`].

use crate::http_client::http_agent;
use anyhow::{Context, Result, bail};
use rocemesh_proto::api::{API_PREFIX, RnicInfo};
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long a known RNIC's comm info is used before it is fetched again.
pub(crate) const REFRESH: Duration = Duration::from_secs(300);
/// When an unknown RNIC or a failed look-up is tried again.
pub(crate) const RETRY: Duration = Duration::from_secs(10);
/// Shortest time between two fetches of one IP when its probes keep timing out.
pub(crate) const MIN_REFETCH: Duration = Duration::from_secs(5);
/// Timeout of one look-up.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest comm-info body accepted.
const MAX_BODY: u64 = 64 * 1024;

/// Finds the RNIC owning an IP; `Ok(None)` when nobody registered it.
pub(crate) trait CommLookup {
    /// Looks `ip` up.
    fn lookup(&self, ip: IpAddr) -> Result<Option<RnicInfo>>;
}

/// The controller's `GET /api/v1/rnics/by-ip/{ip}`.
#[derive(Debug)]
pub(crate) struct HttpCommLookup {
    http: ureq::Agent,
    base: String,
}

impl HttpCommLookup {
    /// A client of the controller at `controller_url`.
    pub(crate) fn new(controller_url: &str) -> Self {
        Self {
            http: http_agent(LOOKUP_TIMEOUT),
            base: controller_url.trim_end_matches('/').to_string(),
        }
    }
}

impl CommLookup for HttpCommLookup {
    fn lookup(&self, ip: IpAddr) -> Result<Option<RnicInfo>> {
        let url = format!("{}{API_PREFIX}/rnics/by-ip/{ip}", self.base);
        let mut resp = self
            .http
            .get(&url)
            .call()
            .with_context(|| format!("GET {url}"))?;
        match resp.status().as_u16() {
            200 => {
                let info: RnicInfo = resp
                    .body_mut()
                    .with_config()
                    .limit(MAX_BODY)
                    .read_json()
                    .with_context(|| format!("GET {url}: bad comm info"))?;
                if info.ip != ip {
                    bail!("GET {url}: answered for {} instead", info.ip);
                }
                Ok(Some(info))
            }
            404 => Ok(None),
            s => bail!("GET {url}: HTTP {s}"),
        }
    }
}

#[derive(Debug)]
struct Entry {
    info: Option<RnicInfo>,
    fetched: Instant,
    /// When to fetch again.
    due: Instant,
}

/// Comm info by IP, bounded by the caller ([`CommCache::retain`] with the live flows).
#[derive(Debug, Default)]
pub(crate) struct CommCache {
    entries: HashMap<IpAddr, Entry>,
}

impl CommCache {
    /// The comm info of `ip` at `now`, fetched through `lookup` when missing or due. A
    /// failed fetch keeps what was known (and is logged).
    pub(crate) fn get(
        &mut self,
        ip: IpAddr,
        now: Instant,
        lookup: &dyn CommLookup,
    ) -> Option<&RnicInfo> {
        let due = self.entries.get(&ip).is_none_or(|e| now >= e.due);
        if due {
            let old = self.entries.remove(&ip).and_then(|e| e.info);
            let entry = match lookup.lookup(ip) {
                Ok(Some(info)) => Entry {
                    info: Some(info),
                    fetched: now,
                    due: now + REFRESH,
                },
                Ok(None) => Entry {
                    info: None,
                    fetched: now,
                    due: now + RETRY,
                },
                Err(e) => {
                    tracing::warn!(%ip, error = %format!("{e:#}"), "service flow: comm info look-up failed");
                    Entry {
                        info: old,
                        fetched: now,
                        due: now + RETRY,
                    }
                }
            };
            self.entries.insert(ip, entry);
        }
        self.entries.get(&ip).and_then(|e| e.info.as_ref())
    }

    /// Marks `ip` for a fetch at the next [`CommCache::get`] (its probes time out: its
    /// QPN may be stale), but not sooner than [`MIN_REFETCH`] after the last fetch.
    pub(crate) fn invalidate(&mut self, ip: IpAddr) {
        if let Some(e) = self.entries.get_mut(&ip) {
            e.due = e.due.min(e.fetched + MIN_REFETCH);
        }
    }

    /// Keeps only the IPs for which `keep` holds (those of live flows).
    pub(crate) fn retain(&mut self, keep: impl Fn(&IpAddr) -> bool) {
        self.entries.retain(|ip, _| keep(ip));
    }

    #[cfg(test)]
    /// True when nothing is cached.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    /// A controller stand-in: a table of RNICs, every look-up logged.
    #[derive(Default)]
    pub(crate) struct FakeLookup {
        pub rnics: RefCell<HashMap<IpAddr, RnicInfo>>,
        pub down: RefCell<bool>,
        pub calls: RefCell<Vec<IpAddr>>,
    }

    impl FakeLookup {
        pub(crate) fn add(&self, ip: &str, id: u32, qpn: u32) {
            let ip: IpAddr = ip.parse().unwrap();
            self.rnics.borrow_mut().insert(ip, info(ip, id, qpn));
        }
    }

    pub(crate) fn info(ip: IpAddr, id: u32, qpn: u32) -> RnicInfo {
        RnicInfo {
            id,
            host_id: 1,
            host: "h".into(),
            ifname: "r0".into(),
            ip,
            gid: None,
            qpn,
            port: 4792,
            tor: "t0".into(),
            rail: None,
            epoch: 1,
            registered_at_ms: 0,
        }
    }

    impl CommLookup for FakeLookup {
        fn lookup(&self, ip: IpAddr) -> Result<Option<RnicInfo>> {
            self.calls.borrow_mut().push(ip);
            if *self.down.borrow() {
                bail!("connection refused");
            }
            Ok(self.rnics.borrow().get(&ip).cloned())
        }
    }

    #[test]
    fn cached_refreshed_and_refetched_on_timeouts() {
        let fake = FakeLookup::default();
        fake.add("10.0.0.2", 2, 100);
        let ip: IpAddr = "10.0.0.2".parse().unwrap();
        let mut cache = CommCache::default();
        let t0 = Instant::now();
        assert_eq!(cache.get(ip, t0, &fake).map(|i| i.qpn), Some(100));
        assert_eq!(
            cache
                .get(ip, t0 + Duration::from_secs(299), &fake)
                .unwrap()
                .qpn,
            100
        );
        assert_eq!(fake.calls.borrow().len(), 1, "served from the cache");
        // The peer restarted with a new QPN: seen at the 5-minute refresh...
        fake.add("10.0.0.2", 2, 200);
        let t1 = t0 + REFRESH;
        assert_eq!(cache.get(ip, t1, &fake).unwrap().qpn, 200);
        // ... or at once after a timeout, but at most every MIN_REFETCH.
        fake.add("10.0.0.2", 2, 300);
        cache.invalidate(ip);
        assert_eq!(
            cache
                .get(ip, t1 + Duration::from_secs(1), &fake)
                .unwrap()
                .qpn,
            200
        );
        assert_eq!(cache.get(ip, t1 + MIN_REFETCH, &fake).unwrap().qpn, 300);
        assert_eq!(fake.calls.borrow().len(), 3);
    }

    #[test]
    fn unknown_and_unreachable_are_retried_and_keep_what_was_known() {
        let fake = FakeLookup::default();
        let ip: IpAddr = "10.0.0.3".parse().unwrap();
        let mut cache = CommCache::default();
        let t0 = Instant::now();
        assert!(cache.get(ip, t0, &fake).is_none());
        fake.add("10.0.0.3", 3, 7);
        assert!(
            cache.get(ip, t0 + Duration::from_secs(1), &fake).is_none(),
            "404 cached"
        );
        assert_eq!(cache.get(ip, t0 + RETRY, &fake).unwrap().qpn, 7);
        *fake.down.borrow_mut() = true;
        let t1 = t0 + RETRY + REFRESH;
        assert_eq!(cache.get(ip, t1, &fake).unwrap().qpn, 7, "kept while down");
        assert_eq!(fake.calls.borrow().len(), 3);
        assert_eq!(
            cache
                .get(ip, t1 + Duration::from_secs(1), &fake)
                .unwrap()
                .qpn,
            7
        );
        assert_eq!(fake.calls.borrow().len(), 3, "retried only after RETRY");
        cache.retain(|_| false);
        assert!(cache.is_empty());
    }
}
