//! RNIC id -> (host, ToR) cache loaded from the `rnics` table, plus the names,
//! addresses and QPNs diagnosis needs (off the hot path).
//!
//! Ingest resolves two ids per record, so the cache is a dense `Vec` indexed by
//! RNIC id with ToR names interned to `u16`. Interned ids are stable for the life
//! of the process (names are only ever appended), so ToR-pair aggregates keyed
//! by them stay valid across refreshes.

use anyhow::Context;
use rocemesh_store::Db;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// Largest RNIC id the dense cache accepts; larger ids are ignored with a warning.
pub const MAX_RNIC_ID: u32 = (1 << 22) - 1;

/// What ingest needs to know about an RNIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RnicEntry {
    /// Owning host.
    pub host_id: u32,
    /// Interned ToR name.
    pub tor: u16,
}

/// What diagnosis needs to know about an RNIC: how to name it, where it sits,
/// which QPN and agent epoch are current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RnicMeta {
    /// `"<host>/<ifname>"`, the component name of RNIC problems.
    pub name: String,
    /// Host name.
    pub host: String,
    /// The RNIC's address (maps traced path endpoints to RNICs).
    pub ip: IpAddr,
    /// QPN of its agent's current incarnation.
    pub qpn: u32,
    /// Epoch of the agent that registered it last.
    pub epoch: u32,
}

/// Immutable snapshot of the registry, swapped whole on refresh.
#[derive(Debug, Default)]
pub struct Registry {
    rnics: Vec<Option<RnicEntry>>,
    tors: Arc<[String]>,
    meta: HashMap<u32, RnicMeta>,
    by_ip: HashMap<IpAddr, u32>,
    hosts: HashMap<u32, String>,
}

impl Registry {
    /// Builds a snapshot from (id, entry) pairs and the interned ToR names.
    pub fn new(entries: impl IntoIterator<Item = (u32, RnicEntry)>, tors: Arc<[String]>) -> Self {
        let mut rnics = Vec::new();
        for (id, e) in entries {
            let i = id as usize;
            if rnics.len() <= i {
                rnics.resize(i + 1, None);
            }
            rnics[i] = Some(e);
        }
        Self {
            rnics,
            tors,
            ..Self::default()
        }
    }

    /// Adds the diagnosis details of RNIC `id` (its host gets named after `meta.host`).
    pub fn set_meta(&mut self, id: u32, meta: RnicMeta) {
        if let Some(e) = self.get(id) {
            self.hosts.insert(e.host_id, meta.host.clone());
        }
        self.by_ip.insert(meta.ip, id);
        self.meta.insert(id, meta);
    }

    /// Diagnosis details of an RNIC.
    pub fn meta(&self, id: u32) -> Option<&RnicMeta> {
        self.meta.get(&id)
    }

    /// The RNIC owning an address.
    pub fn rnic_by_ip(&self, ip: IpAddr) -> Option<u32> {
        self.by_ip.get(&ip).copied()
    }

    /// Name of a host that has at least one RNIC.
    pub fn host_name(&self, host_id: u32) -> Option<&str> {
        self.hosts.get(&host_id).map(String::as_str)
    }

    /// Ids of every host with at least one registered RNIC.
    pub fn host_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.hosts.keys().copied()
    }

    /// Ids of every registered RNIC.
    pub fn rnic_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.rnics
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_some())
            .map(|(i, _)| i as u32)
    }

    /// The RNIC with this id, if registered.
    #[inline]
    pub fn get(&self, id: u32) -> Option<RnicEntry> {
        self.rnics.get(id as usize).copied().flatten()
    }

    /// One past the largest registered id (dense table length).
    pub fn id_bound(&self) -> usize {
        self.rnics.len()
    }

    /// Name of an interned ToR.
    pub fn tor_name(&self, tor: u16) -> &str {
        self.tors.get(usize::from(tor)).map_or("?", String::as_str)
    }
}

/// Loads snapshots from the database, keeping ToR interning stable between loads.
#[derive(Debug, Default)]
pub struct RegistryLoader {
    ids: HashMap<String, u16>,
    names: Vec<String>,
}

impl RegistryLoader {
    /// Reads every RNIC from the `rnics` table into a fresh snapshot.
    pub async fn load(&mut self, db: &Db) -> anyhow::Result<Registry> {
        type Row = (i64, i64, Option<String>, String, String, i64, i64, String);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT r.id, r.host_id, r.tor, r.ifname, r.ip, r.qpn, r.epoch, h.name \
             FROM rnics r JOIN hosts h ON h.id = r.host_id",
        )
        .fetch_all(db.pool())
        .await
        .context("reading the RNIC registry")?;
        let mut entries = Vec::with_capacity(rows.len());
        let mut metas = Vec::with_capacity(rows.len());
        for (id, host_id, tor, ifname, ip, qpn, epoch, host) in rows {
            let (Ok(id), Ok(host_id)) = (u32::try_from(id), u32::try_from(host_id)) else {
                tracing::warn!(id, host_id, "RNIC with out-of-range id ignored");
                continue;
            };
            if id > MAX_RNIC_ID {
                tracing::warn!(
                    id,
                    max = MAX_RNIC_ID,
                    "RNIC id too large for the analyzer cache, ignored"
                );
                continue;
            }
            let Some(tor) = self.intern(tor.as_deref().unwrap_or("")) else {
                tracing::warn!(id, "too many distinct ToRs, RNIC ignored");
                continue;
            };
            entries.push((id, RnicEntry { host_id, tor }));
            match ip.parse::<IpAddr>() {
                Ok(ip) => metas.push((
                    id,
                    RnicMeta {
                        name: format!("{host}/{ifname}"),
                        host,
                        ip,
                        qpn: qpn as u32,
                        epoch: epoch as u32,
                    },
                )),
                Err(_) => tracing::warn!(id, ip, "RNIC with an unparsable address: not diagnosed"),
            }
        }
        let mut registry = Registry::new(entries, self.names.clone().into());
        for (id, meta) in metas {
            registry.set_meta(id, meta);
        }
        Ok(registry)
    }

    fn intern(&mut self, name: &str) -> Option<u16> {
        if let Some(&id) = self.ids.get(name) {
            return Some(id);
        }
        let id = u16::try_from(self.names.len()).ok()?;
        self.ids.insert(name.to_owned(), id);
        self.names.push(name.to_owned());
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_lookup_and_interning() {
        let mut l = RegistryLoader::default();
        let a = l.intern("tor-a");
        let b = l.intern("tor-b");
        assert_eq!((a, b, l.intern("tor-a")), (Some(0), Some(1), Some(0)));
        let r = Registry::new(
            [(5, RnicEntry { host_id: 2, tor: 1 })],
            l.names.clone().into(),
        );
        assert_eq!(r.get(5), Some(RnicEntry { host_id: 2, tor: 1 }));
        assert_eq!((r.get(4), r.get(6), r.get(u32::MAX)), (None, None, None));
        assert_eq!(
            (r.id_bound(), r.tor_name(1), r.tor_name(9)),
            (6, "tor-b", "?")
        );
    }
}
