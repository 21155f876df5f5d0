//! The in-memory registry of hosts and RNICs (R-Pingmesh §4.1: the latest communication
//! info of every RNIC). It mirrors the database: loaded from it at start, and every change
//! is planned here, written to the database in one transaction, then applied here.

mod db;
pub(crate) mod validate;

use crate::topology::Topology;
use rocemesh_proto::api::{HostInfo, RegisterRequest, RnicInfo};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

pub(crate) use db::{load, save_placement};
pub(crate) use rocemesh_store::{HostRecord, RegistrationPlan, RnicRecord};

/// Where an RNIC sits under the topology in force: its ToR and rail.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Placement {
    pub(crate) id: u32,
    pub(crate) tor: String,
    pub(crate) rail: Option<u32>,
}

impl Placement {
    /// The place of `r` (of host `host`) from its hints and `topology`.
    pub(crate) fn of(r: &RnicRecord, host: &str, topology: &Topology) -> Self {
        Self {
            id: r.id,
            tor: topology.resolve(host, &r.ifname, r.tor_hint.as_deref(), r.gateway),
            rail: topology.rail(host, &r.ifname, r.rail_hint),
        }
    }

    /// Whether `r` already sits there.
    pub(crate) fn same_as(&self, r: &RnicRecord) -> bool {
        self.tor == r.tor && self.rail == r.rail
    }
}

/// Hosts and RNICs by id, plus the indexes the API needs.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    hosts: BTreeMap<u32, HostRecord>,
    rnics: BTreeMap<u32, RnicRecord>,
    host_by_name: HashMap<String, u32>,
    rnic_by_ip: HashMap<IpAddr, u32>,
    /// RNICs per resolved ToR (for `max_rnics_per_tor`).
    per_tor: HashMap<String, usize>,
    /// Bumped by every change, so derived data (pinglists) knows when to rebuild.
    generation: u64,
}

impl Registry {
    /// Builds the registry from loaded rows.
    pub(crate) fn from_records(hosts: Vec<HostRecord>, rnics: Vec<RnicRecord>) -> Self {
        let mut reg = Registry::default();
        for h in hosts {
            reg.host_by_name.insert(h.name.clone(), h.id);
            reg.hosts.insert(h.id, h);
        }
        for r in rnics {
            reg.insert_rnic(r);
        }
        reg
    }

    fn insert_rnic(&mut self, r: RnicRecord) {
        self.rnic_by_ip.insert(r.ip, r.id);
        *self.per_tor.entry(r.tor.clone()).or_default() += 1;
        self.rnics.insert(r.id, r);
    }

    fn remove_rnic(&mut self, id: u32) {
        if let Some(r) = self.rnics.remove(&id) {
            self.rnic_by_ip.remove(&r.ip);
            if let Some(n) = self.per_tor.get_mut(&r.tor) {
                *n -= 1;
                if *n == 0 {
                    self.per_tor.remove(&r.tor);
                }
            }
        }
    }

    /// The same registry with a generation above `old` (a reload must invalidate what
    /// was derived from the registry it replaces).
    pub(crate) fn after(mut self, old: u64) -> Self {
        self.generation = old + 1;
        self
    }

    /// Change counter (see the field).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// A host by id.
    pub(crate) fn host(&self, id: u32) -> Option<&HostRecord> {
        self.hosts.get(&id)
    }

    /// All hosts, by id.
    pub(crate) fn hosts(&self) -> impl Iterator<Item = &HostRecord> {
        self.hosts.values()
    }

    /// An RNIC by id.
    pub(crate) fn rnic(&self, id: u32) -> Option<&RnicRecord> {
        self.rnics.get(&id)
    }

    /// All RNICs, by id.
    pub(crate) fn rnics(&self) -> impl Iterator<Item = &RnicRecord> {
        self.rnics.values()
    }

    /// The RNICs of one host, by id.
    pub(crate) fn rnics_of(&self, host_id: u32) -> impl Iterator<Item = &RnicRecord> {
        self.rnics.values().filter(move |r| r.host_id == host_id)
    }

    /// The API view of an RNIC.
    pub(crate) fn rnic_info(&self, id: u32) -> Option<RnicInfo> {
        let r = self.rnics.get(&id)?;
        let host = self
            .hosts
            .get(&r.host_id)
            .map(|h| h.name.clone())
            .unwrap_or_default();
        Some(RnicInfo {
            id: r.id,
            host_id: r.host_id,
            host,
            ifname: r.ifname.clone(),
            ip: r.ip,
            gid: r.gid.clone(),
            qpn: r.qpn,
            port: r.port,
            tor: r.tor.clone(),
            rail: r.rail,
            epoch: r.epoch,
            registered_at_ms: r.registered_at_ms,
        })
    }

    /// The RNIC owning an IP.
    pub(crate) fn rnic_by_ip(&self, ip: IpAddr) -> Option<RnicInfo> {
        self.rnic_info(*self.rnic_by_ip.get(&ip)?)
    }

    /// The API view of a host.
    pub(crate) fn host_info(&self, id: u32) -> Option<HostInfo> {
        self.hosts.get(&id).map(|h| HostInfo {
            id: h.id,
            host: h.name.clone(),
            epoch: h.epoch,
            registrations: h.registrations,
            registered_at_ms: h.registered_at_ms,
        })
    }

    /// Plans a (validated) registration: keeps RNIC ids stable per (host, ifname), drops
    /// the host's RNICs it no longer reports, refuses IPs owned by another host.
    pub(crate) fn plan_registration(
        &self,
        req: &RegisterRequest,
        topology: &Topology,
        max_rnics_per_tor: usize,
        now_ms: i64,
    ) -> Result<RegistrationPlan, String> {
        let host_id = self.host_by_name.get(&req.host).copied();
        for rnic in &req.rnics {
            if let Some(owner) = self
                .rnic_by_ip
                .get(&rnic.ip)
                .and_then(|id| self.rnics.get(id))
                && Some(owner.host_id) != host_id
            {
                let other = self
                    .hosts
                    .get(&owner.host_id)
                    .map_or("?", |h| h.name.as_str());
                return Err(format!(
                    "ip {} of {} is already registered by host {other:?}",
                    rnic.ip, rnic.ifname
                ));
            }
        }
        let previous = host_id.and_then(|id| self.hosts.get(&id));
        // A retry with the same epoch is the same agent start, not a new registration.
        let registrations = match previous {
            Some(h) if h.epoch == req.epoch => h.registrations,
            Some(h) => h.registrations + 1,
            None => 1,
        };
        let host = HostRecord {
            id: host_id.unwrap_or(0),
            name: req.host.clone(),
            epoch: req.epoch,
            registrations,
            registered_at_ms: now_ms,
        };
        let existing: HashMap<&str, u32> = host_id
            .map(|id| {
                self.rnics_of(id)
                    .map(|r| (r.ifname.as_str(), r.id))
                    .collect()
            })
            .unwrap_or_default();
        let rnics: Vec<(Option<u32>, RnicRecord)> = req
            .rnics
            .iter()
            .map(|r| {
                let id = existing.get(r.ifname.as_str()).copied();
                let record = RnicRecord {
                    id: id.unwrap_or(0),
                    host_id: host.id,
                    ifname: r.ifname.clone(),
                    ip: r.ip,
                    gid: r.gid.clone(),
                    qpn: r.qpn,
                    port: r.port,
                    tor: topology.resolve(&req.host, &r.ifname, r.tor.as_deref(), r.gateway),
                    tor_hint: r.tor.clone(),
                    rail: topology.rail(&req.host, &r.ifname, r.rail),
                    rail_hint: r.rail,
                    gateway: r.gateway,
                    epoch: req.epoch,
                    registered_at_ms: now_ms,
                };
                (id, record)
            })
            .collect();
        self.check_tor_room(host_id, &rnics, max_rnics_per_tor)?;
        let kept: std::collections::HashSet<&str> =
            req.rnics.iter().map(|r| r.ifname.as_str()).collect();
        let removed = existing
            .iter()
            .filter(|(ifname, _)| !kept.contains(*ifname))
            .map(|(_, id)| *id)
            .collect();
        Ok(RegistrationPlan {
            host_id,
            host,
            rnics,
            removed,
        })
    }

    /// Refuses a registration that would put more than `max` RNICs under one ToR (the
    /// host's own current RNICs there make room: they are replaced).
    fn check_tor_room(
        &self,
        host_id: Option<u32>,
        rnics: &[(Option<u32>, RnicRecord)],
        max: usize,
    ) -> Result<(), String> {
        let mut adding: HashMap<&str, usize> = HashMap::new();
        for (_, r) in rnics {
            *adding.entry(r.tor.as_str()).or_default() += 1;
        }
        for (tor, n) in adding {
            let own = host_id.map_or(0, |h| self.rnics_of(h).filter(|r| r.tor == tor).count());
            let others = self.per_tor.get(tor).copied().unwrap_or(0) - own;
            if others + n > max {
                return Err(format!(
                    "ToR {tor:?} holds {others} RNICs of other hosts; {n} more would exceed max_rnics_per_tor = {max}"
                ));
            }
        }
        Ok(())
    }

    /// Applies a plan the database has committed, with the ids it assigned.
    pub(crate) fn apply_registration(
        &mut self,
        plan: RegistrationPlan,
        host_id: u32,
        rnic_ids: &[u32],
    ) {
        for id in &plan.removed {
            self.remove_rnic(*id);
        }
        let host = HostRecord {
            id: host_id,
            ..plan.host
        };
        self.host_by_name.insert(host.name.clone(), host_id);
        self.hosts.insert(host_id, host);
        for ((_, rnic), &id) in plan.rnics.into_iter().zip(rnic_ids) {
            // Drop the old record first: its IP may have changed.
            self.remove_rnic(id);
            self.insert_rnic(RnicRecord {
                id,
                host_id,
                ..rnic
            });
        }
        self.generation += 1;
    }

    /// Forgets a host and its RNICs (after the database did). Returns whether it existed.
    pub(crate) fn remove_host(&mut self, host_id: u32) -> bool {
        let Some(host) = self.hosts.remove(&host_id) else {
            return false;
        };
        self.host_by_name.remove(&host.name);
        let ids: Vec<u32> = self.rnics_of(host_id).map(|r| r.id).collect();
        for id in ids {
            self.remove_rnic(id);
        }
        self.generation += 1;
        true
    }

    /// The RNICs of host `name` whose ToR or rail differs under `topology`.
    pub(crate) fn plan_placement(&self, name: &str, topology: &Topology) -> Vec<Placement> {
        let Some(&host_id) = self.host_by_name.get(name) else {
            return Vec::new();
        };
        self.rnics_of(host_id)
            .filter_map(|r| {
                let p = Placement::of(r, name, topology);
                (!p.same_as(r)).then_some(p)
            })
            .collect()
    }

    /// Applies new places the database has committed.
    pub(crate) fn apply_placement(&mut self, moved: Vec<Placement>) {
        for p in moved {
            if let Some(r) = self.rnics.get_mut(&p.id) {
                r.tor = p.tor;
                r.rail = p.rail;
            }
        }
        self.generation += 1;
    }

    /// The host id of a host name.
    pub(crate) fn host_id(&self, name: &str) -> Option<u32> {
        self.host_by_name.get(name).copied()
    }
}
