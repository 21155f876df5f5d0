//! RNIC id -> (host, ToR) cache loaded from the `rnics` table.
//!
//! Ingest resolves two ids per record, so the cache is a dense `Vec` indexed by
//! RNIC id with ToR names interned to `u16`. Interned ids are stable for the life
//! of the process (names are only ever appended), so ToR-pair aggregates keyed
//! by them stay valid across refreshes.

use anyhow::Context;
use rocemesh_store::Db;
use std::collections::HashMap;
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

/// Immutable snapshot of the registry, swapped whole on refresh.
#[derive(Debug, Default)]
pub struct Registry {
    rnics: Vec<Option<RnicEntry>>,
    tors: Arc<[String]>,
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
        Self { rnics, tors }
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
        let rows: Vec<(i64, i64, Option<String>)> =
            sqlx::query_as("SELECT id, host_id, tor FROM rnics")
                .fetch_all(db.pool())
                .await
                .context("reading the RNIC registry")?;
        let mut entries = Vec::with_capacity(rows.len());
        for (id, host_id, tor) in rows {
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
        }
        Ok(Registry::new(entries, self.names.clone().into()))
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
