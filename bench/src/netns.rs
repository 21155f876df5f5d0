//! Two network namespaces on a bridge, so two agent processes talk over a link instead of
//! loopback: the bench's stand-in for two hosts under one switch.
//!
//! Every veth end has GRO on (which gives veth a NAPI instance) and threaded NAPI, so a
//! packet's receive path runs in the kernel's `napi/<dev>` thread as a real NIC's runs
//! in its interrupt context: neither the sending nor the receiving agent is charged for
//! the other's network stack. The pair holds `/tmp/rocemesh-netns.lock` (what every
//! namespace-building tool of the project takes) while it exists; names are fixed, a
//! leftover of a killed run is removed first.

use anyhow::{Context, Result, bail};
use std::net::Ipv4Addr;
use std::process::Command;

/// Bridge in the root namespace; it holds [`BRIDGE_IP`].
const BRIDGE: &str = "rmbench0";
/// The bridge's address (the server listens there), in a /16 of its own.
pub(crate) const BRIDGE_IP: Ipv4Addr = Ipv4Addr::new(10, 251, 0, 254);
const PREFIX_LEN: u8 = 16;

/// One namespace of the pair: its name and the addresses on its `eth0`.
#[derive(Debug)]
pub(crate) struct Side {
    /// Namespace name (`ip netns exec <name> ...`).
    pub name: &'static str,
    /// Addresses of its RNICs.
    pub ips: Vec<Ipv4Addr>,
}

/// The lock every namespace-building tool of the project takes.
const LOCK: &str = "/tmp/rocemesh-netns.lock";

/// The bridge and the two namespaces; removed on drop.
#[derive(Debug)]
pub(crate) struct Pair {
    /// Where the prober agent runs.
    pub prober: Side,
    /// Where the responder agent runs.
    pub responder: Side,
    /// Holds [`LOCK`] (released when the file closes, after the namespaces are gone).
    _lock: std::fs::File,
}

/// Waits for the exclusive lock on [`LOCK`].
fn lock() -> Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK)
        .with_context(|| format!("opening {LOCK}"))?;
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error()).context(format!("locking {LOCK}"));
    }
    Ok(f)
}

fn ip(args: &[&str]) -> Result<()> {
    run("ip", args)
}

fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Runs `argv` in namespace `ns` (the root namespace when `None`).
fn run_in(ns: Option<&str>, argv: &[&str]) -> Result<()> {
    match ns {
        Some(ns) => run("ip", &[&["netns", "exec", ns][..], argv].concat()),
        None => run(argv[0], &argv[1..]),
    }
}

/// GRO (veth NAPI) and threaded NAPI on `dev` (in namespace `ns`, root when `None`).
fn napi_thread(ns: Option<&str>, dev: &str) -> Result<()> {
    run_in(ns, &["ethtool", "-K", dev, "gro", "on"])
        .context("enabling GRO (veth NAPI) needs ethtool")?;
    let cmd = format!("echo 1 > /sys/class/net/{dev}/threaded");
    run_in(ns, &["sh", "-c", &cmd]).context("switching the veth NAPI to a kernel thread")
}

impl Pair {
    /// Builds the pair with `rnics` addresses per side (10.251.1.x prober, 10.251.2.x
    /// responder); needs root.
    pub(crate) fn up(rnics: u8) -> Result<Self> {
        let lock = lock()?;
        Self::remove();
        let pair = Self {
            _lock: lock,
            prober: Side {
                name: "rmbench-p",
                ips: (1..=rnics).map(|i| Ipv4Addr::new(10, 251, 1, i)).collect(),
            },
            responder: Side {
                name: "rmbench-r",
                ips: (1..=rnics).map(|i| Ipv4Addr::new(10, 251, 2, i)).collect(),
            },
        };
        ip(&["link", "add", BRIDGE, "type", "bridge"])
            .context("creating the bench bridge (root needed)")?;
        ip(&[
            "addr",
            "add",
            &format!("{BRIDGE_IP}/{PREFIX_LEN}"),
            "dev",
            BRIDGE,
        ])?;
        ip(&["link", "set", BRIDGE, "up"])?;
        for side in [&pair.prober, &pair.responder] {
            let ns = side.name;
            let root_end = format!("{ns}0");
            ip(&["netns", "add", ns])?;
            ip(&[
                "link", "add", &root_end, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ])?;
            ip(&["link", "set", &root_end, "master", BRIDGE, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", "eth0", "up"])?;
            for a in &side.ips {
                ip(&[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{a}/{PREFIX_LEN}"),
                    "dev",
                    "eth0",
                ])?;
            }
            napi_thread(None, &root_end)?;
            napi_thread(Some(ns), "eth0")?;
        }
        Ok(pair)
    }

    /// Removes what [`Self::up`] builds (errors of parts already gone are ignored).
    fn remove() {
        for ns in ["rmbench-p", "rmbench-r"] {
            let _ = ip(&["link", "del", &format!("{ns}0")]);
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", BRIDGE]);
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        Self::remove();
    }
}
