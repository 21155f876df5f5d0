//! Building, opening, querying and tearing down a fabric.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::job::JOB_PORT;
use crate::netns;
use crate::spec::FabricSpec;
use crate::state::{State, StateLock};
use crate::topology::{Host, Link, NodeKind, Rnic, Topology, tor_prefix};
use rocemesh_proto::flow::FiveTuple;

/// How fault helpers (NFQUEUE delay/corruption, background traffic) are started: `program`
/// followed by `args`, then the helper's own arguments (see [`crate::helper::run`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperCommand {
    /// Executable.
    pub program: PathBuf,
    /// Leading arguments (e.g. a hidden subcommand of the `rocemesh` binary).
    pub args: Vec<String>,
}

/// Name of this crate's helper binary.
pub const HELPER_BIN: &str = "rocemesh-testbed-helper";

impl HelperCommand {
    /// `$ROCEMESH_TESTBED_HELPER`, else `rocemesh-testbed-helper` next to the running
    /// executable or one directory up (cargo puts test binaries in `target/*/deps`).
    pub fn locate() -> Result<HelperCommand> {
        if let Some(p) = std::env::var_os("ROCEMESH_TESTBED_HELPER") {
            return Ok(HelperCommand {
                program: p.into(),
                args: vec![],
            });
        }
        let exe = std::env::current_exe().context("current_exe")?;
        let found = exe
            .ancestors()
            .skip(1)
            .take(2)
            .map(|dir| dir.join(HELPER_BIN))
            .find(|p| p.is_file());
        match found {
            Some(program) => Ok(HelperCommand {
                program,
                args: vec![],
            }),
            None => bail!(
                "{HELPER_BIN} not found near {}; set ROCEMESH_TESTBED_HELPER",
                exe.display()
            ),
        }
    }
}

/// A running fabric: its topology plus how to start fault helpers.
#[derive(Debug, Clone)]
pub struct Fabric {
    topology: Topology,
    helper: Option<HelperCommand>,
}

#[derive(Deserialize)]
struct RouteGet {
    dev: String,
}

/// sysctls of router namespaces. `ignore_routes_with_linkdown` stays 0 on purpose: a downed
/// link keeps its ECMP nexthop and blackholes its share of flows, as a real fabric does until
/// routing converges — the condition rocemesh must localize. Routers answer every
/// traceroute, as switch CPUs do well beyond probing rates; the one budget that is not per
/// namespace is lifted by `route_errors`.
const ROUTER_SYSCTLS: &[&str] = &[
    "net.ipv4.ip_forward=1",
    "net.ipv4.fib_multipath_hash_policy=1",
    "net.ipv4.icmp_ratelimit=0",
    // The global ICMP budget (default 1000/s, burst 50) would still cut traceroutes short.
    "net.ipv4.icmp_msgs_per_sec=100000",
    "net.ipv4.icmp_msgs_burst=10000",
    "net.ipv4.icmp_errors_use_inbound_ifaddr=1",
    "net.ipv4.conf.all.rp_filter=0",
    "net.ipv4.conf.default.rp_filter=0",
    "net.ipv4.conf.all.ignore_routes_with_linkdown=0",
    "net.ipv4.conf.default.ignore_routes_with_linkdown=0",
];

/// sysctls of host namespaces: source-routed multi-RNIC hosts must not drop by reverse path.
/// Traffic between a host's own RNICs arrives from the fabric with a local source address,
/// which the kernel drops as martian without `accept_local`.
const HOST_SYSCTLS: &[&str] = &[
    "net.ipv4.conf.all.rp_filter=0",
    "net.ipv4.conf.default.rp_filter=0",
    "net.ipv4.conf.all.accept_local=1",
    "net.ipv4.conf.default.accept_local=1",
];

fn is_fabric_netns(prefix: &str, name: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|r| r.strip_prefix('-'))
        .and_then(|r| r.strip_prefix(['h', 't', 's']))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

impl Fabric {
    /// Builds the fabric (removing leftovers of the same prefix first) and records its state.
    pub fn up(spec: &FabricSpec) -> Result<Fabric> {
        spec.validate()?;
        Fabric::down(&spec.prefix)?;
        let topology = Topology::new(spec);
        let lock = StateLock::acquire(&spec.prefix)?;
        lock.save(&State {
            spec: spec.clone(),
            next_id: 1,
            faults: vec![],
            jobs: vec![],
        })?;
        let fabric = Fabric {
            topology,
            helper: None,
        };
        if let Err(e) = fabric.build().and_then(|()| crate::route_errors::lift()) {
            drop(lock);
            let _ = Fabric::down(&spec.prefix);
            return Err(e.context(format!("building fabric {}", spec.prefix)));
        }
        Ok(fabric)
    }

    fn build(&self) -> Result<()> {
        let t = &self.topology;
        let adds: Vec<String> = t.namespaces().map(|ns| format!("netns add {ns}")).collect();
        netns::ip_batch(None, &adds)?;
        for h in &t.hosts {
            netns::exec(&h.netns, &[&["sysctl", "-q", "-w"], HOST_SYSCTLS].concat())?;
        }
        for r in t.tors.iter().chain(&t.spines) {
            netns::exec(
                &r.netns,
                &[&["sysctl", "-q", "-w"], ROUTER_SYSCTLS].concat(),
            )?;
        }
        // Veths are created inside their namespaces: nothing ever appears in the root one.
        for ns in t.namespaces() {
            let lines: Vec<String> = t
                .links
                .iter()
                .filter(|l| l.a.netns == ns)
                .map(|l| {
                    format!(
                        "link add {} address {} type veth peer name {} address {} netns {}",
                        l.a.ifname,
                        mac_of(l.a.ip),
                        l.b.ifname,
                        mac_of(l.b.ip),
                        l.b.netns
                    )
                })
                .collect();
            netns::ip_batch(Some(ns), &lines)?;
        }
        for ns in t.namespaces() {
            let mut lines = vec!["link set lo up".to_string()];
            for l in &t.links {
                for e in [&l.a, &l.b].into_iter().filter(|e| e.netns == ns) {
                    lines.push(format!("addr add {}/31 dev {}", e.ip, e.ifname));
                    lines.push(format!("link set {} up", e.ifname));
                }
            }
            netns::ip_batch(Some(ns), &lines)?;
        }
        for h in &t.hosts {
            netns::ip_batch(Some(&h.netns), &host_rules(h))?;
        }
        if t.spec.management {
            crate::management::build(t)?;
        }
        for ns in t.namespaces() {
            netns::ip_batch(Some(ns), &self.restore_lines(ns))?;
        }
        Ok(())
    }

    /// Static neighbours and non-connected routes of namespace `ns` as idempotent `ip` batch
    /// lines (`neigh replace`, `route replace`): used to build the fabric and to restore what
    /// the kernel flushed when an interface went administratively down.
    ///
    /// Neighbours are permanent (MACs derive from addresses) so a link that comes back carries
    /// traffic at once, without ARP retries stretching a short flap into seconds of loss.
    pub(crate) fn restore_lines(&self, ns: &str) -> Vec<String> {
        let t = &self.topology;
        let mut lines: Vec<String> = t
            .links
            .iter()
            .flat_map(|l| [(&l.a, &l.b), (&l.b, &l.a)])
            .filter(|(me, _)| me.netns == ns)
            .map(|(me, peer)| {
                format!(
                    "neigh replace {} lladdr {} dev {} nud permanent",
                    peer.ip,
                    mac_of(peer.ip),
                    me.ifname
                )
            })
            .collect();
        lines.extend(self.route_lines(ns));
        lines
    }

    fn route_lines(&self, ns: &str) -> Vec<String> {
        let t = &self.topology;
        if let Some(h) = t.hosts.iter().find(|h| h.netns == ns) {
            return host_routes(h);
        }
        if let Some(ti) = t.tors.iter().position(|r| r.netns == ns) {
            let tor = &t.tors[ti];
            let nexthops: Vec<String> = t
                .links_of(&tor.name)
                .filter(|l| l.a.node == tor.name)
                .map(|l| format!("nexthop via {} dev {}", l.b.ip, l.a.ifname))
                .collect();
            return (0..t.tors.len())
                .filter(|&other| other != ti)
                .map(|other| {
                    format!(
                        "route replace {}/24 {}",
                        tor_prefix(other as u8),
                        nexthops.join(" ")
                    )
                })
                .collect();
        }
        let Some(spine) = t.spines.iter().find(|r| r.netns == ns) else {
            return vec![];
        };
        t.tors
            .iter()
            .enumerate()
            .filter_map(|(ti, tor)| {
                let l = t.link(&format!("{}-{}", tor.name, spine.name))?;
                Some(format!(
                    "route replace {}/24 via {} dev {}",
                    tor_prefix(ti as u8),
                    l.a.ip,
                    l.b.ifname
                ))
            })
            .collect()
    }

    /// Opens a fabric that is up (e.g. from another process) using its state file.
    pub fn open(prefix: &str) -> Result<Fabric> {
        let state = StateLock::acquire(prefix)?.load_existing()?;
        Ok(Fabric {
            topology: Topology::new(&state.spec),
            helper: None,
        })
    }

    /// Removes everything of fabric `prefix`, even after a crash: active faults are cleared
    /// (helper processes killed, cgroups released), job helpers are killed, every process inside its namespaces is
    /// killed, its namespaces are deleted and its state file removed. Idempotent.
    pub fn down(prefix: &str) -> Result<()> {
        let lock = StateLock::acquire(prefix)?;
        if let Ok(Some(state)) = lock.load() {
            for fault in state.faults.iter().rev() {
                crate::faults::undo_all(&fault.undo, true);
            }
            for job in &state.jobs {
                job.kill();
            }
        }
        let namespaces: Vec<String> = netns::list()?
            .into_iter()
            .filter(|n| is_fabric_netns(prefix, n))
            .collect();
        for ns in &namespaces {
            for pid in netns::pids(ns).unwrap_or_default() {
                // SAFETY: killing a process that lives in one of this fabric's namespaces.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let dels: Vec<String> = namespaces
            .iter()
            .map(|ns| format!("netns del {ns}"))
            .collect();
        crate::management::remove(prefix);
        netns::ip_batch(None, &dels)?;
        lock.remove()?;
        crate::route_errors::restore_if_last()
    }

    /// Address servers listen on in the root namespace so agents in host namespaces reach
    /// them over the management network.
    pub fn management_ip(&self) -> std::net::Ipv4Addr {
        crate::management::root_ip(&self.topology.spec.prefix)
    }

    /// Uses `helper` to start fault helpers instead of [`HelperCommand::locate`].
    pub fn with_helper(mut self, helper: HelperCommand) -> Fabric {
        self.helper = Some(helper);
        self
    }

    pub(crate) fn helper(&self) -> Result<HelperCommand> {
        match &self.helper {
            Some(h) => Ok(h.clone()),
            None => HelperCommand::locate(),
        }
    }

    /// The fabric's spec.
    pub fn spec(&self) -> &FabricSpec {
        &self.topology.spec
    }

    /// Its full topology (nodes, links, addresses).
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Hosts with their namespace and RNICs.
    pub fn hosts(&self) -> &[Host] {
        &self.topology.hosts
    }

    /// Every RNIC of every host.
    pub fn rnics(&self) -> impl Iterator<Item = &Rnic> {
        self.topology.hosts.iter().flat_map(|h| &h.rnics)
    }

    /// All links ("h3r0-t0", "t0-s1").
    pub fn links(&self) -> &[Link] {
        &self.topology.links
    }

    /// Runs `argv` inside namespace `ns` and returns its stdout.
    pub fn exec(&self, ns: &str, argv: &[&str]) -> Result<String> {
        netns::exec(ns, argv)
    }

    /// The spine (short name, e.g. "s1") the kernel of the source RNIC's ToR forwards `flow`
    /// to; `None` when the destination is on the same ToR (no spine involved).
    pub fn spine_for(&self, flow: &FiveTuple) -> Result<Option<String>> {
        let t = &self.topology;
        let (_, src) = t
            .rnic_by_ip(flow.src)
            .with_context(|| format!("{} is not an RNIC", flow.src))?;
        let tor = &t.tors[usize::from(src.tor)];
        let (sport, dport) = (flow.sport.to_string(), flow.dport.to_string());
        let out = netns::run(
            "ip",
            &[
                "-j",
                "-n",
                &tor.netns,
                "route",
                "get",
                &flow.dst.to_string(),
                "from",
                &flow.src.to_string(),
                "iif",
                &src.name,
                "ipproto",
                "udp",
                "sport",
                &sport,
                "dport",
                &dport,
            ],
        )?;
        let routes: Vec<RouteGet> =
            serde_json::from_str(&out).with_context(|| format!("parsing `ip route get`: {out}"))?;
        let dev = routes
            .first()
            .map(|r| r.dev.clone())
            .with_context(|| format!("no route in {out}"))?;
        let is_spine = t
            .spines
            .iter()
            .any(|s| s.name == dev && s.kind == NodeKind::Spine);
        Ok(is_spine.then_some(dev))
    }
}

/// Locally administered MAC of the interface holding `ip` (02:00 + the IPv4 address).
fn mac_of(ip: Ipv4Addr) -> String {
    let [a, b, c, d] = ip.octets();
    format!("02:00:{a:02x}:{b:02x}:{c:02x}:{d:02x}")
}

/// Preferences of a host's rules, before the local table's (moved down from 0): traffic to
/// a local address on the job's port first stays local, then traffic between the host's
/// own RNICs goes out through the fabric. Rules sharing a preference apply in the order
/// they were added; a lookup that finds no route falls through to the next rule.
const JOB_RULE_PREF: u32 = 100;
const OWN_RNIC_RULE_PREF: u32 = 200;
const LOCAL_RULE_PREF: u32 = 500;

/// Policy rules of a host. Traffic from an RNIC's address uses its own table. Traffic from
/// one of its RNICs to another leaves through the first and comes back through the second,
/// as between two real RNICs, instead of the kernel delivering it locally: a probe between
/// them crosses the fabric and fails with it. Training-job traffic between them stays
/// local, as NCCL keeps a host's own ranks on NVLink.
fn host_rules(h: &Host) -> Vec<String> {
    let mut lines = vec![
        format!("rule add pref {LOCAL_RULE_PREF} lookup local"),
        "rule del pref 0 lookup local".to_string(),
    ];
    for proto in ["tcp", "udp"] {
        for end in ["sport", "dport"] {
            lines.push(format!(
                "rule add pref {JOB_RULE_PREF} iif lo ipproto {proto} {end} {JOB_PORT} lookup local"
            ));
        }
    }
    for from in &h.rnics {
        for to in h.rnics.iter().filter(|to| to.ip != from.ip) {
            lines.push(format!(
                "rule add pref {OWN_RNIC_RULE_PREF} from {} to {} iif lo lookup {}",
                from.ip, to.ip, from.table
            ));
        }
    }
    lines.extend(h.rnics.iter().map(|r| {
        format!(
            "rule add from {} table {} pref {}",
            r.ip,
            r.table,
            1000 + r.table
        )
    }));
    lines
}

fn host_routes(h: &Host) -> Vec<String> {
    let mut lines = Vec::new();
    for r in &h.rnics {
        lines.push(format!(
            "route replace default via {} dev {} table {}",
            r.gateway, r.ifname, r.table
        ));
    }
    if let Some(first) = h.rnics.first() {
        lines.push(format!(
            "route replace default via {} dev {} src {}",
            first.gateway, first.ifname, first.ip
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognizes_only_own_namespaces() {
        assert!(is_fabric_netns("rmtb", "rmtb-h0"));
        assert!(is_fabric_netns("rmtb", "rmtb-s12"));
        assert!(!is_fabric_netns("rmtb", "rmtb2-h0"));
        assert!(!is_fabric_netns("rmtb", "rmtb-x0"));
        assert!(!is_fabric_netns("rmtb", "rmtb-h"));
        assert!(!is_fabric_netns("rmtb", "rmtb-h0a"));
    }

    #[test]
    fn multi_rnic_host_routes_by_source() {
        let spec = FabricSpec {
            rnics_per_host: 2,
            ..FabricSpec::default()
        };
        let t = Topology::new(&spec);
        let rules = host_rules(&t.hosts[0]);
        assert!(rules.contains(&"rule add from 198.18.0.3 table 101 pref 1101".to_string()));
        // Between its own RNICs a host sends through the fabric, the job's port aside, and
        // those rules come before the local table's.
        let at = |line: &str| rules.iter().position(|l| l == line);
        assert!(at("rule add pref 200 from 198.18.0.3 to 198.18.0.1 iif lo lookup 101").is_some());
        assert!(at("rule add pref 100 iif lo ipproto udp dport 18515 lookup local").is_some());
        // The local table moves: added at its new place before its old rule goes.
        assert!(
            at("rule add pref 500 lookup local").unwrap()
                < at("rule del pref 0 lookup local").unwrap()
        );
        let lines = host_routes(&t.hosts[0]);
        assert!(
            lines.contains(&"route replace default via 198.18.0.2 dev r1 table 101".to_string())
        );
    }
}
