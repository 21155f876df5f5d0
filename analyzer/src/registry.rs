//! RNIC id -> (host, ToR) cache loaded from the registered RNICs, plus the names,
//! addresses and QPNs diagnosis needs (off the hot path).
//!
//! Ingest resolves two ids per record, so the cache is a dense `Vec` indexed by
//! RNIC id with ToR names interned to `u16`. Interned ids are stable for the life
//! of the process (names are only ever appended), so ToR-pair aggregates keyed
//! by them stay valid across refreshes.

use rocemesh_proto::api::EndpointLabel;
use rocemesh_store::{Db, EndpointLabelRow, RegisteredRnic, TaskMember};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// Largest RNIC id the dense cache accepts; larger ids are ignored with a warning.
pub(crate) const MAX_RNIC_ID: u32 = (1 << 22) - 1;

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
    /// When that agent registered it, ms since the Unix epoch (the agent's start as the
    /// controller saw it, which an analyzer restart does not move).
    pub registered_at_ms: i64,
}

/// Immutable snapshot of the registry, swapped whole on refresh.
#[derive(Debug, Default)]
pub struct Registry {
    rnics: Vec<Option<RnicEntry>>,
    tors: Arc<[String]>,
    meta: HashMap<u32, RnicMeta>,
    by_ip: HashMap<IpAddr, u32>,
    by_name: HashMap<String, u32>,
    hosts: HashMap<u32, String>,
    labels: HashMap<u32, Vec<EndpointLabel>>,
    /// Interned tasks each RNIC id serves (dense like `rnics`; empty for most).
    tasks_of: Vec<Box<[u32]>>,
    /// Name and database id of each interned task.
    task_names: Arc<[(String, u32)]>,
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
        self.by_name.insert(meta.name.clone(), id);
        self.meta.insert(id, meta);
    }

    /// Sets the Kubernetes labels of the task endpoints on each RNIC.
    pub fn set_labels(&mut self, labels: HashMap<u32, Vec<EndpointLabel>>) {
        self.labels = labels;
    }

    /// Sets the interned tasks of each RNIC and the names behind the task ids.
    pub fn set_tasks(&mut self, tasks: HashMap<u32, Vec<u32>>, names: Arc<[(String, u32)]>) {
        let mut dense: Vec<Box<[u32]>> = Vec::new();
        for (id, mut t) in tasks {
            let i = id as usize;
            if dense.len() <= i {
                dense.resize_with(i + 1, Box::default);
            }
            t.sort_unstable();
            t.dedup();
            dense[i] = t.into_boxed_slice();
        }
        self.tasks_of = dense;
        self.task_names = names;
    }

    /// Interned ids of the tasks with an endpoint on RNIC `id` (ingest's per-record lookup).
    #[inline]
    pub fn tasks_of(&self, id: u32) -> &[u32] {
        self.tasks_of.get(id as usize).map_or(&[], |t| t)
    }

    /// Name of an interned task.
    pub fn task_name(&self, task: u32) -> &str {
        self.task_names
            .get(task as usize)
            .map_or("?", |t| t.0.as_str())
    }

    /// Name of the task with database id `id`.
    pub fn task_name_by_id(&self, id: u32) -> Option<&str> {
        self.task_names
            .iter()
            .find(|t| t.1 == id)
            .map(|t| t.0.as_str())
    }

    /// Database id of an interned task.
    pub fn task_id(&self, task: u32) -> Option<u32> {
        self.task_names.get(task as usize).map(|t| t.1)
    }

    /// The RNIC named `"<host>/<ifname>"`.
    pub fn rnic_by_name(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// Kubernetes labels of the task endpoints on an RNIC (none when it is in no task).
    pub fn labels(&self, id: u32) -> &[EndpointLabel] {
        self.labels.get(&id).map_or(&[], Vec::as_slice)
    }

    /// [`Self::labels`] of the RNIC named `"<host>/<ifname>"`.
    pub fn labels_by_name(&self, name: &str) -> &[EndpointLabel] {
        self.by_name.get(name).map_or(&[], |&id| self.labels(id))
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
pub(crate) struct RegistryLoader {
    ids: HashMap<String, u16>,
    names: Vec<String>,
    /// Task names interned like ToRs: ids stay valid in open SLA periods across loads.
    task_ids: HashMap<String, u32>,
    task_names: Vec<(String, u32)>,
}

impl RegistryLoader {
    /// Reads every registered RNIC into a fresh snapshot.
    pub(crate) async fn load(&mut self, db: &Db) -> anyhow::Result<Registry> {
        let rows = db.inventory().registered_rnics().await?;
        let mut entries = Vec::with_capacity(rows.len());
        let mut metas = Vec::with_capacity(rows.len());
        for RegisteredRnic {
            id,
            host_id,
            tor,
            ifname,
            ip,
            qpn,
            epoch,
            registered_at_ms,
            host,
        } in rows
        {
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
                        registered_at_ms,
                    },
                )),
                Err(_) => tracing::warn!(id, ip, "RNIC with an unparsable address: not diagnosed"),
            }
        }
        let mut registry = Registry::new(entries, self.names.clone().into());
        for (id, meta) in metas {
            registry.set_meta(id, meta);
        }
        registry.set_labels(load_labels(db).await?);
        let members = db.inventory().task_members().await?;
        let mut tasks: HashMap<u32, Vec<u32>> = HashMap::new();
        for TaskMember {
            rnic_id: id,
            task,
            task_id,
        } in members
        {
            let (Ok(id), Ok(task_id)) = (u32::try_from(id), u32::try_from(task_id)) else {
                continue;
            };
            if id > MAX_RNIC_ID {
                continue;
            }
            let next = self.task_names.len() as u32;
            let t = *self.task_ids.entry(task.clone()).or_insert_with(|| {
                self.task_names.push((task.clone(), task_id));
                next
            });
            // A task deleted and created again under its name has a new id.
            self.task_names[t as usize].1 = task_id;
            tasks.entry(id).or_default().push(t);
        }
        registry.set_tasks(tasks, self.task_names.clone().into());
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

/// Task endpoints that name a namespace or a pod, per registered RNIC id (an endpoint
/// names its RNIC by host and interface; endpoints of unregistered RNICs are left out).
pub(crate) async fn load_labels(db: &Db) -> anyhow::Result<HashMap<u32, Vec<EndpointLabel>>> {
    let rows = db.inventory().endpoint_labels().await?;
    let mut labels: HashMap<u32, Vec<EndpointLabel>> = HashMap::new();
    for EndpointLabelRow {
        rnic_id,
        task,
        namespace,
        pod,
    } in rows
    {
        let Ok(id) = u32::try_from(rnic_id) else {
            continue;
        };
        labels.entry(id).or_default().push(EndpointLabel {
            task,
            namespace,
            pod,
        });
    }
    Ok(labels)
}

/// RNICs 1..=4 on hosts h1..h4 (`h{r}/r0` at 198.18.0.r), RNIC r under ToR `tor(r)` of
/// `tors`, every RNIC an endpoint of task 0 named `job` with id `task_id`: the fabric of
/// the analyzer's unit tests.
#[cfg(test)]
pub(crate) fn four_rnics_one_task(
    tors: &[&str],
    tor: impl Fn(u32) -> u16,
    task_id: u32,
) -> Registry {
    let mut reg = Registry::new(
        (1..=4).map(|r| {
            let e = RnicEntry {
                host_id: r,
                tor: tor(r),
            };
            (r, e)
        }),
        tors.iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .into(),
    );
    for r in 1..=4u32 {
        reg.set_meta(
            r,
            RnicMeta {
                name: format!("h{r}/r0"),
                host: format!("h{r}"),
                ip: format!("198.18.0.{r}").parse().unwrap(),
                qpn: 7,
                epoch: 1,
                registered_at_ms: 0,
            },
        );
    }
    reg.set_tasks(
        (1..=4).map(|r| (r, vec![0])).collect(),
        Arc::from(vec![("job".to_string(), task_id)]),
    );
    reg
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

#[cfg(test)]
mod label_tests {
    use super::*;
    use crate::sla::{SlaQuery, query};
    use rocemesh_proto::api::SlaScope;
    use rocemesh_proto::testing::rnic_sla_row;

    async fn seed(db: &Db) {
        for sql in [
            "INSERT INTO hosts (id, name, epoch, registrations, registered_at_ms) VALUES (1, 'h0', 1, 1, 0)",
            "INSERT INTO rnics (id, host_id, ifname, ip, qpn, port, tor, epoch, registered_at_ms) \
             VALUES (5, 1, 'r0', '10.0.0.5', 7, 4791, 't0', 1, 0)",
            "INSERT INTO rnics (id, host_id, ifname, ip, qpn, port, tor, epoch, registered_at_ms) \
             VALUES (6, 1, 'r1', '10.0.0.6', 7, 4791, 't0', 1, 0)",
            "INSERT INTO tasks (id, name, created_at_ms, updated_at_ms) VALUES (1, 'llm', 0, 0)",
            "INSERT INTO task_endpoints (task_id, pos, host, rnic, rail, namespace, pod, ready) \
             VALUES (1, 0, 'h0', 'r0', 0, 'team-a', 'trainer-0', 1)",
            "INSERT INTO task_endpoints (task_id, pos, host, rnic, rail, namespace, pod, ready) \
             VALUES (1, 1, 'h9', 'r0', 0, 'team-a', 'trainer-1', 1)",
        ] {
            sqlx::query(sql).execute(db.pool()).await.unwrap();
        }
    }

    #[tokio::test]
    async fn task_endpoints_label_registry_rnics_and_rnic_sla_rows() {
        for (name, db) in rocemesh_store::test_databases().await {
            seed(&db).await;
            let reg = RegistryLoader::default().load(&db).await.unwrap();
            let want = vec![EndpointLabel {
                task: "llm".into(),
                namespace: Some("team-a".into()),
                pod: Some("trainer-0".into()),
            }];
            assert_eq!(reg.labels(5), want, "{name}");
            assert_eq!(reg.labels_by_name("h0/r0"), want, "{name}");
            assert!(reg.labels(6).is_empty() && reg.labels_by_name("h9/r0").is_empty());
            let row = |key: &str| rnic_sla_row(key, 0, 1, 1);
            db.sla().persist(&[row("5"), row("6")]).await.unwrap();
            let rows = query(
                &db,
                &SlaQuery {
                    scope: SlaScope::Rnic,
                    key: None,
                    from_ms: None,
                    to_ms: None,
                    limit: None,
                },
            )
            .await
            .unwrap();
            let labels: Vec<_> = rows
                .iter()
                .map(|r| (r.key.as_str(), r.labels.len()))
                .collect();
            assert_eq!(labels, [("5", 1), ("6", 0)], "{name}");
            assert_eq!(rows[0].labels, want);
        }
    }
}
