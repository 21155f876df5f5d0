//! The service network of each task (R-Pingmesh §4.3.4): its endpoints' RNICs and hosts,
//! their ToRs, and the switches and links its flows cross — as traced between two of its
//! endpoints, or, while no such trace is known, every shortest path between its ToRs in the
//! fabric map (ECMP may use any of them).

use anyhow::Context;
use rocemesh_analyzer::Crossing;
use rocemesh_analyzer::FabricMap;
use rocemesh_proto::api::ComponentKind;
use rocemesh_proto::path::TracedPath;
use rocemesh_store::Db;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::net::IpAddr;

/// One endpoint of a task, resolved against the RNIC registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name.
    pub host: String,
    /// RNIC name on the host.
    pub rnic: String,
    /// Registry id, once the RNIC registered.
    pub rnic_id: Option<u32>,
    /// Its address, once registered.
    pub ip: Option<IpAddr>,
    /// Its ToR, once registered.
    pub tor: Option<String>,
}

impl Endpoint {
    /// `host/rnic`, the name problems give an RNIC.
    pub fn name(&self) -> String {
        format!("{}/{}", self.host, self.rnic)
    }
}

/// Endpoints of every task, by task id.
pub type TaskEndpoints = BTreeMap<u32, Vec<Endpoint>>;

/// Reads every task's endpoints with their registered RNIC (if any).
pub async fn load_endpoints(db: &Db) -> anyhow::Result<TaskEndpoints> {
    let inventory = db.inventory();
    let rows = inventory.endpoints().await?;
    let mut tasks = TaskEndpoints::new();
    for row in rows {
        let task = u32::try_from(row.task_id).context("task id out of range")?;
        tasks.entry(task).or_default().push(Endpoint {
            host: row.host,
            rnic: row.rnic,
            rnic_id: row.rnic_id.and_then(|i| u32::try_from(i).ok()),
            ip: row.ip.and_then(|s| s.parse().ok()),
            tor: row.tor,
        });
    }
    // Tasks without endpoints still exist (and affect nothing).
    for id in inventory.task_ids().await? {
        if let Ok(id) = u32::try_from(id) {
            tasks.entry(id).or_default();
        }
    }
    Ok(tasks)
}

/// Where a task's traffic flows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceNetwork {
    /// `host/rnic` of every endpoint.
    pub rnics: BTreeSet<String>,
    /// Hosts of the endpoints.
    pub hosts: BTreeSet<String>,
    /// Switches (ToRs of the endpoints, plus those on its paths).
    pub switches: BTreeSet<String>,
    /// Switch-to-switch links on its paths.
    pub links: BTreeSet<String>,
    /// True when `switches`/`links` come from traces (else from the fabric map).
    pub traced: bool,
}

impl ServiceNetwork {
    /// True when a problem on this component lies in the service network.
    pub fn contains(&self, kind: ComponentKind, name: &str) -> bool {
        match kind {
            ComponentKind::Rnic => self.rnics.contains(name),
            ComponentKind::Host | ComponentKind::Agent => self.hosts.contains(name),
            ComponentKind::Switch => self.switches.contains(name),
            ComponentKind::Link => self.links.contains(name),
            // A flow names no component of its own; its suspects are listed in evidence.
            ComponentKind::Flow => false,
        }
    }
}

/// Switches and links a trace names, the way diagnosis names them.
fn trace_components(map: &FabricMap, t: &TracedPath, net: &mut ServiceNetwork) {
    let c = Crossing::of(map, t);
    net.switches.extend(c.switches);
    net.links.extend(c.links);
}

/// Hop distances from `start` over the map's links.
fn distances(map: &FabricMap, start: &str) -> HashMap<String, u32> {
    let mut dist = HashMap::from([(start.to_string(), 0)]);
    let mut queue = VecDeque::from([start.to_string()]);
    while let Some(d) = queue.pop_front() {
        let next = dist[&d] + 1;
        for l in map.links_of(&d) {
            for n in &l.devices {
                if !dist.contains_key(&**n) {
                    dist.insert(n.to_string(), next);
                    queue.push_back(n.to_string());
                }
            }
        }
    }
    dist
}

/// Switches and links on every shortest path between two of `tors` in the map.
fn map_components(map: &FabricMap, tors: &BTreeSet<String>, net: &mut ServiceNetwork) {
    let dist: Vec<(&String, HashMap<String, u32>)> = tors
        .iter()
        .filter(|t| map.knows_device(t))
        .map(|t| (t, distances(map, t)))
        .collect();
    for (i, (a, da)) in dist.iter().enumerate() {
        for (b, db) in &dist[i + 1..] {
            let Some(&total) = da.get(*b) else { continue };
            let on_path = |x: &str, y: &str| matches!((da.get(x), db.get(y)), (Some(p), Some(q)) if p + 1 + q == total);
            let mut frontier = vec![a.to_string()];
            let mut seen = HashSet::new();
            while let Some(d) = frontier.pop() {
                for l in map.links_of(&d) {
                    let [x, y] = &l.devices;
                    let next = if **x == *d { y } else { x };
                    if on_path(&d, next) {
                        net.links.insert(l.name.to_string());
                        net.switches.insert(next.to_string());
                        if seen.insert(next.to_string()) {
                            frontier.push(next.to_string());
                        }
                    }
                }
            }
        }
    }
}

/// The service network of each task, from its endpoints, the traces among them and the map.
pub fn service_networks(
    tasks: &TaskEndpoints,
    traces: &[TracedPath],
    map: &FabricMap,
) -> BTreeMap<u32, ServiceNetwork> {
    let mut tasks_of_ip: HashMap<IpAddr, Vec<u32>> = HashMap::new();
    for (id, eps) in tasks {
        for ip in eps.iter().filter_map(|e| e.ip) {
            tasks_of_ip.entry(ip).or_default().push(*id);
        }
    }
    let mut nets: BTreeMap<u32, ServiceNetwork> = BTreeMap::new();
    for (id, eps) in tasks {
        let net = nets.entry(*id).or_default();
        for e in eps {
            net.rnics.insert(e.name());
            net.hosts.insert(e.host.clone());
            net.switches.extend(e.tor.clone());
        }
    }
    for t in traces {
        let (Some(src), Some(dst)) = (tasks_of_ip.get(&t.src), tasks_of_ip.get(&t.dst)) else {
            continue;
        };
        for id in src.iter().filter(|id| dst.contains(id)) {
            if let Some(net) = nets.get_mut(id) {
                trace_components(map, t, net);
                net.traced = true;
            }
        }
    }
    for net in nets.values_mut().filter(|n| !n.traced) {
        let tors = net.switches.clone();
        map_components(map, &tors, net);
    }
    nets
}

/// Every endpoint address of every task (what the trace scan keeps).
pub fn task_ips(tasks: &TaskEndpoints) -> HashSet<IpAddr> {
    tasks.values().flatten().filter_map(|e| e.ip).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ToRs t0..t2 under spines s0, s1; link `tX-sY` (the testbed's naming).
    fn clos() -> FabricMap {
        let mut text = String::new();
        let mut next = 1u8;
        let mut addr = || {
            next += 1;
            format!("198.19.0.{next}")
        };
        let mut links = String::new();
        let mut addrs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in 0..3 {
            for s in 0..2 {
                let (a, b) = (addr(), addr());
                links.push_str(&format!(
                    "[[link]]\nname = \"t{t}-s{s}\"\nends = [{{ device = \"t{t}\", ip = \"{a}\" }}, {{ device = \"s{s}\", ip = \"{b}\" }}]\n"
                ));
                addrs.entry(format!("t{t}")).or_default().push(a);
                addrs.entry(format!("s{s}")).or_default().push(b);
            }
        }
        for (name, a) in &addrs {
            let list: Vec<String> = a.iter().map(|x| format!("\"{x}\"")).collect();
            text.push_str(&format!(
                "[[switch]]\nname = \"{name}\"\naddresses = [{}]\n",
                list.join(", ")
            ));
        }
        FabricMap::parse(&(text + &links)).unwrap()
    }

    fn ep(host: &str, ip: &str, tor: &str) -> Endpoint {
        Endpoint {
            host: host.into(),
            rnic: "eth1".into(),
            rnic_id: Some(1),
            ip: Some(ip.parse().unwrap()),
            tor: Some(tor.into()),
        }
    }

    #[test]
    fn untraced_task_spans_the_uplinks_between_its_tors_only() {
        let map = clos();
        let tasks = TaskEndpoints::from([
            (
                1,
                vec![ep("h0", "10.0.0.1", "t0"), ep("h1", "10.0.1.1", "t1")],
            ),
            (
                2,
                vec![ep("h2", "10.0.2.1", "t2"), ep("h3", "10.0.2.2", "t2")],
            ),
        ]);
        let nets = service_networks(&tasks, &[], &map);
        let a = &nets[&1];
        assert!(!a.traced);
        let links: Vec<&str> = a.links.iter().map(String::as_str).collect();
        assert_eq!(links, ["t0-s0", "t0-s1", "t1-s0", "t1-s1"]);
        assert!(
            a.contains(ComponentKind::Switch, "s1") && !a.contains(ComponentKind::Switch, "t2")
        );
        assert!(
            a.contains(ComponentKind::Rnic, "h0/eth1") && a.contains(ComponentKind::Host, "h1")
        );
        // One ToR: no uplink is in its service network.
        let b = &nets[&2];
        assert!(b.links.is_empty() && b.switches == BTreeSet::from(["t2".to_string()]));
    }

    #[test]
    fn traced_task_spans_only_the_traced_path() {
        let map = clos();
        let tasks = TaskEndpoints::from([(
            1,
            vec![ep("h0", "10.0.0.1", "t0"), ep("h1", "10.0.1.1", "t1")],
        )]);
        // t0 (198.19.0.2) -> s1 via t0-s1 (.5 on s1) -> t1 via s1-t1 (.8 on t1... see clos()).
        let hop = |s: &str| Some(s.parse().unwrap());
        let trace = TracedPath {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.1.1".parse().unwrap(),
            src_port: 1,
            dst_port: 4791,
            traced_at_unix_ns: 0,
            reached: true,
            ack_direction: false,
            hops: vec![
                hop("198.19.0.2"),
                hop("198.19.0.5"),
                hop("198.19.0.8"),
                hop("10.0.1.1"),
            ],
        };
        let nets = service_networks(&tasks, &[trace], &map);
        let a = &nets[&1];
        assert!(a.traced);
        let links: Vec<&str> = a.links.iter().map(String::as_str).collect();
        assert_eq!(links, ["t0-s1", "t1-s1"]);
        assert!(
            !a.contains(ComponentKind::Switch, "s0") && a.contains(ComponentKind::Switch, "s1")
        );
    }
}
