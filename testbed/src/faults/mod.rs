//! Fault injection with real mechanisms. Each [`Fault`] is applied by [`Fabric::apply`], which
//! records the exact undo steps in the state file and returns a [`FaultHandle`];
//! [`Fabric::clear`] removes exactly that fault (also from another process).

mod cpu;
mod links;
mod nfqueue;
mod nft;
mod shaping;

use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::fabric::Fabric;
use crate::netns;
use crate::process::TrackedProcess;
use crate::state::{ActiveFault, StateLock, Undo, log_path};
use crate::topology::{Endpoint, Link};
use rocemesh_proto::api::{Component, ComponentKind};
use rocemesh_proto::flow::FiveTuple;

/// Which way across a link a fault acts. Links are named lower tier first ("h3r0-t0",
/// "t0-s1"): `Up` is host→ToR / ToR→spine, `Down` the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Both directions.
    Both,
    /// From the link's first-named (lower) end to its second.
    Up,
    /// From the second-named (upper) end to the first.
    Down,
}

impl Direction {
    fn up(self) -> bool {
        matches!(self, Direction::Both | Direction::Up)
    }
    fn down(self) -> bool {
        matches!(self, Direction::Both | Direction::Down)
    }
}

/// Background traffic sent through a congested link (paced UDP, 1000-byte datagrams).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Background {
    /// Sending RNIC ("h0r0").
    pub from: String,
    /// Receiving RNIC ("h2r0").
    pub to: String,
    /// Rate in Mbit/s.
    pub mbps: u32,
}

/// A fault to inject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Random loss of `percent` % of IPv4 packets (nftables netdev ingress on the receiving end).
    Loss {
        /// Link name, e.g. "t0-s1" or "h3r0-t0".
        link: String,
        /// Which way(s) across the link.
        direction: Direction,
        /// Share affected: % of packets (Loss, Corrupt) or of one core (CpuStarve).
        percent: u8,
    },
    /// Silent drop of one UDP 5-tuple at router `at` ("t0", "s1"; default: the source's ToR).
    FlowDrop {
        /// The UDP flow to drop.
        flow: FiveTuple,
        /// Router dropping it ("t0", "s1"); `None` = the source RNIC's ToR.
        at: Option<String>,
    },
    /// Extra latency of `ms` ms (iptables NFQUEUE at the link's upper end + user-space delayer).
    Delay {
        /// Link name, e.g. "t0-s1" or "h3r0-t0".
        link: String,
        /// Which way(s) across the link.
        direction: Direction,
        /// Added one-way latency in milliseconds.
        ms: u32,
    },
    /// Flip one UDP payload byte of `percent` % of packets, leaving the checksum wrong.
    Corrupt {
        /// Link name, e.g. "t0-s1" or "h3r0-t0".
        link: String,
        /// Which way(s) across the link.
        direction: Direction,
        /// Share affected: % of packets (Loss, Corrupt) or of one core (CpuStarve).
        percent: u8,
    },
    /// Congestion / PFC-like pause: tbf at `rate_kbit` on the sending end, optionally filled by
    /// background traffic.
    Congestion {
        /// Link name, e.g. "t0-s1" or "h3r0-t0".
        link: String,
        /// Which way(s) across the link.
        direction: Direction,
        /// Shaped rate in kbit/s.
        rate_kbit: u32,
        /// Traffic that fills the shaped link, if any.
        background: Option<Background>,
    },
    /// The link's upper end goes administratively down; the lower end loses carrier and keeps
    /// forwarding into it (blackholing its ECMP share, `ignore_routes_with_linkdown=0`).
    LinkDown {
        /// Link name, e.g. "t0-s1" or "h3r0-t0".
        link: String,
    },
    /// The link's lower end goes administratively down (a ToR port shut): the lower end
    /// drops its routes over the link and reroutes its own traffic; the upper end loses
    /// carrier and keeps forwarding into it (blackholing the traffic towards the lower end).
    LowerEndDown {
        /// Link name, e.g. "t0-s1".
        link: String,
    },
    /// [`Fault::LinkDown`] toggled every `period_ms / 2`.
    LinkFlap {
        /// Link name, e.g. "t0-s1" or "h3r0-t0".
        link: String,
        /// Full down+up cycle in milliseconds (at least 20).
        period_ms: u32,
    },
    /// The RNIC ("h3r0") goes down on the host.
    RnicDown {
        /// RNIC name, e.g. "h3r0".
        rnic: String,
    },
    /// [`Fault::RnicDown`] toggled every `period_ms / 2`.
    RnicFlap {
        /// RNIC name, e.g. "h3r0".
        rnic: String,
        /// Full down+up cycle in milliseconds (at least 20).
        period_ms: u32,
    },
    /// Every interface of a spine ("s1") goes down.
    SpineDown {
        /// Spine name, e.g. "s1".
        spine: String,
    },
    /// Limit process `pid` to `percent` % of one CPU (cgroup v1 cpu.cfs_quota_us).
    CpuStarve {
        /// Process to starve (e.g. an agent).
        pid: u32,
        /// Share of packets affected, 0..=100 (CPU: share of one core, 1..=100).
        percent: u8,
    },
}

/// What [`Fabric::apply`] returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultHandle {
    /// Pass to [`Fabric::clear`].
    pub id: u16,
    /// The component at fault, in the testbed's names (a link like "t0-s1" or "h3r0-t0", a
    /// switch like "t0", an RNIC like "h3r0", a host like "h3"); `None` when it is none of
    /// the fabric's (a CPU-starved process outside every host).
    pub truth: Option<Component>,
}

/// What an installer needs: the fabric, the fault id, and the undo list it appends to.
pub(crate) struct Install<'a> {
    pub fabric: &'a Fabric,
    pub id: u16,
    pub undo: Vec<Undo>,
}

impl Install<'_> {
    /// Runs `argv` now and records `undo_argv` to revert it.
    pub(crate) fn command(&mut self, argv: &[&str], undo_argv: &[&str]) -> Result<()> {
        let (program, args) = argv.split_first().context("empty command")?;
        netns::run(program, args)?;
        self.undo.push(Undo::Command(
            undo_argv.iter().map(|s| s.to_string()).collect(),
        ));
        Ok(())
    }

    /// Starts a background process for this fault (stderr logged to the state dir).
    pub(crate) fn spawn(&mut self, cmd: Command, what: &str, wait_ready: bool) -> Result<()> {
        let log = log_path(&self.fabric.spec().prefix, &format!("f{}-{what}", self.id));
        let p = TrackedProcess::spawn(cmd, &log, wait_ready)?;
        self.undo.push(Undo::Kill(p));
        Ok(())
    }

    /// A per-fault object name, e.g. an nftables table "rmtb_f3".
    pub(crate) fn object_name(&self) -> String {
        format!("rmtb_f{}", self.id)
    }

    pub(crate) fn link(&self, name: &str) -> Result<&Link> {
        self.fabric
            .topology()
            .link(name)
            .with_context(|| format!("unknown link {name:?}"))
    }
}

fn truth(kind: ComponentKind, name: &str) -> Component {
    Component::new(kind, name)
}

/// Ends receiving traffic in `direction` across `link`.
pub(crate) fn receivers(link: &Link, direction: Direction) -> Vec<&Endpoint> {
    let mut v = Vec::new();
    if direction.up() {
        v.push(&link.b);
    }
    if direction.down() {
        v.push(&link.a);
    }
    v
}

/// Runs undo steps in reverse; with `best_effort` all are attempted and errors ignored,
/// otherwise the first error is returned after attempting the rest.
pub(crate) fn undo_all(steps: &[Undo], best_effort: bool) -> Option<anyhow::Error> {
    let mut first = None;
    for step in steps.iter().rev() {
        let res = match step {
            Undo::Command(argv) => match argv.split_first() {
                Some((p, args)) => {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    netns::run(p, &args).map(drop)
                }
                None => Ok(()),
            },
            Undo::Kill(p) => {
                p.kill();
                Ok(())
            }
            Undo::Cgroup {
                dir,
                pid,
                original_procs,
            } => cpu::release(dir, *pid, original_procs),
        };
        if let Err(e) = res {
            tracing::warn!("undo step {step:?} failed: {e:#}");
            if !best_effort && first.is_none() {
                first = Some(e);
            }
        }
    }
    first
}

impl Fault {
    /// Validates names and returns the component at fault.
    fn ground_truth(&self, fabric: &Fabric) -> Result<Option<Component>> {
        let t = fabric.topology();
        let link = |name: &str| {
            t.link(name)
                .map(|_| Some(truth(ComponentKind::Link, name)))
                .with_context(|| format!("unknown link {name:?}"))
        };
        let rnic = |name: &str| {
            t.rnic(name)
                .map(|_| Some(truth(ComponentKind::Rnic, name)))
                .with_context(|| format!("unknown RNIC {name:?}"))
        };
        match self {
            Fault::Loss {
                link: l, percent, ..
            }
            | Fault::Corrupt {
                link: l, percent, ..
            } => {
                if *percent > 100 {
                    bail!("percent {percent} > 100");
                }
                link(l)
            }
            Fault::Delay { link: l, .. }
            | Fault::Congestion { link: l, .. }
            | Fault::LinkDown { link: l }
            | Fault::LowerEndDown { link: l } => link(l),
            Fault::LinkFlap { link: l, period_ms } => {
                if *period_ms < 20 {
                    bail!("flap period {period_ms} ms is below 20 ms");
                }
                link(l)
            }
            Fault::RnicDown { rnic: r } => rnic(r),
            Fault::RnicFlap { rnic: r, period_ms } => {
                if *period_ms < 20 {
                    bail!("flap period {period_ms} ms is below 20 ms");
                }
                rnic(r)
            }
            Fault::FlowDrop { flow, at } => {
                let at = nft::flow_drop_router(fabric, flow, at.as_deref())?;
                Ok(Some(truth(ComponentKind::Switch, &at.name)))
            }
            Fault::SpineDown { spine } => match t.spines.iter().find(|s| &s.name == spine) {
                Some(_) => Ok(Some(truth(ComponentKind::Switch, spine))),
                None => bail!("unknown spine {spine:?}"),
            },
            Fault::CpuStarve { pid, percent } => {
                if *percent == 0 || *percent > 100 {
                    bail!("cpu percent must be 1..=100, got {percent}");
                }
                Ok(cpu::owner(fabric, *pid)?)
            }
        }
    }

    fn install(&self, ctx: &mut Install) -> Result<()> {
        match self {
            Fault::Loss {
                link,
                direction,
                percent,
            } => nft::loss(ctx, link, *direction, *percent),
            Fault::FlowDrop { flow, at } => nft::flow_drop(ctx, flow, at.as_deref()),
            Fault::Delay {
                link,
                direction,
                ms,
            } => nfqueue::install(ctx, link, *direction, *ms, 0),
            Fault::Corrupt {
                link,
                direction,
                percent,
            } => nfqueue::install(ctx, link, *direction, 0, *percent),
            Fault::Congestion {
                link,
                direction,
                rate_kbit,
                background,
            } => shaping::congestion(ctx, link, *direction, *rate_kbit, background.as_ref()),
            Fault::LinkDown { link } => links::link_down(ctx, link, None),
            Fault::LowerEndDown { link } => links::lower_end_down(ctx, link),
            Fault::LinkFlap { link, period_ms } => links::link_down(ctx, link, Some(*period_ms)),
            Fault::RnicDown { rnic } => links::rnic_down(ctx, rnic, None),
            Fault::RnicFlap { rnic, period_ms } => links::rnic_down(ctx, rnic, Some(*period_ms)),
            Fault::SpineDown { spine } => links::spine_down(ctx, spine),
            Fault::CpuStarve { pid, percent } => cpu::starve(ctx, *pid, *percent),
        }
    }
}

impl Fabric {
    /// Injects `fault`; on failure nothing stays applied.
    pub fn apply(&self, fault: &Fault) -> Result<FaultHandle> {
        let truth = fault.ground_truth(self)?;
        let lock = StateLock::acquire(&self.spec().prefix)?;
        let mut state = lock.load_existing()?;
        let id = state.next_id;
        state.next_id = state.next_id.checked_add(1).unwrap_or(1);
        let mut ctx = Install {
            fabric: self,
            id,
            undo: Vec::new(),
        };
        if let Err(e) = fault.install(&mut ctx) {
            undo_all(&ctx.undo, true);
            return Err(e.context(format!("applying {fault:?}")));
        }
        state.faults.push(ActiveFault {
            id,
            fault: fault.clone(),
            truth: truth.clone(),
            undo: ctx.undo,
        });
        if let Err(e) = lock.save(&state) {
            if let Some(f) = state.faults.pop() {
                undo_all(&f.undo, true);
            }
            return Err(e);
        }
        tracing::info!(id, ?fault, "fault applied");
        Ok(FaultHandle { id, truth })
    }

    /// Removes fault `id` exactly (all its undo steps are attempted even if one fails).
    pub fn clear(&self, id: u16) -> Result<()> {
        let lock = StateLock::acquire(&self.spec().prefix)?;
        let mut state = lock.load_existing()?;
        let pos = state
            .faults
            .iter()
            .position(|f| f.id == id)
            .with_context(|| format!("no active fault {id}"))?;
        let fault = state.faults.remove(pos);
        let err = undo_all(&fault.undo, false);
        lock.save(&state)?;
        match err {
            Some(e) => Err(e.context(format!("clearing fault {id}"))),
            None => Ok(()),
        }
    }

    /// Removes every active fault.
    pub fn clear_all(&self) -> Result<()> {
        for f in self.active_faults()? {
            self.clear(f.id)?;
        }
        Ok(())
    }

    /// Faults in effect, with their ground truth.
    pub fn active_faults(&self) -> Result<Vec<ActiveFault>> {
        Ok(StateLock::acquire(&self.spec().prefix)?
            .load_existing()?
            .faults)
    }
}
