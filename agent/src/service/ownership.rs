//! Which traced processes use this agent's RNICs.
//!
//! The rule:
//! - **verbs** (any RNIC on the verbs transport): every traced process. The tracer sees only
//!   this host's kernel, and every RDMA QP on this host sits on one of its RNICs; which RNIC
//!   is decided from the route to the destination (see [`super::targets`]). The traced
//!   event carries no source GID yet, which would make this exact.
//! - **udp** (tests, the namespace testbed, where all hosts share one kernel and one PID
//!   namespace): only processes in the agent's own network namespace, i.e. whose
//!   `/proc/<pid>/ns/net` is the same namespace as the agent thread's
//!   (`/proc/thread-self/ns/net`, so an agent started on a thread that joined a namespace
//!   counts as living there).

use std::io;
use std::os::unix::fs::MetadataExt;

/// A network namespace's identity: (device, inode) of its nsfs file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct NetnsId {
    dev: u64,
    ino: u64,
}

impl NetnsId {
    /// A made-up namespace for tests.
    #[cfg(test)]
    pub(crate) const fn fake(n: u64) -> Self {
        Self { dev: n, ino: n }
    }

    fn of(path: &str) -> io::Result<Self> {
        let m = std::fs::metadata(path)?;
        Ok(Self {
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// The network namespace of the calling thread.
    pub(crate) fn current() -> io::Result<Self> {
        Self::of("/proc/thread-self/ns/net")
    }

    /// The network namespace of process `pid`; `None` when it is gone or unreadable.
    pub(crate) fn of_pid(pid: u32) -> Option<Self> {
        Self::of(&format!("/proc/{pid}/ns/net")).ok()
    }
}

/// Decides whether a traced process's connections are ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// Every process on the host (verbs transport).
    Host,
    /// Only processes in this network namespace (UDP transport).
    SameNetns(NetnsId),
}

impl Ownership {
    /// The rule for this agent: `Host` when any RNIC uses verbs, else the calling thread's
    /// network namespace.
    pub(crate) fn for_agent(any_verbs: bool) -> io::Result<Self> {
        Ok(if any_verbs {
            Self::Host
        } else {
            Self::SameNetns(NetnsId::current()?)
        })
    }

    /// Whether `pid`'s connections are ours; `netns_of` reads a process's namespace
    /// (normally [`NetnsId::of_pid`]).
    pub(crate) fn owns(&self, pid: u32, netns_of: impl Fn(u32) -> Option<NetnsId>) -> bool {
        match self {
            Self::Host => true,
            Self::SameNetns(ours) => netns_of(pid) == Some(*ours),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn own_process_is_ours_and_unknown_pids_are_not() {
        let rule = Ownership::for_agent(false).unwrap();
        assert!(rule.owns(std::process::id(), NetnsId::of_pid));
        assert!(!rule.owns(u32::MAX - 1, NetnsId::of_pid), "no such process");
        assert!(
            Ownership::for_agent(true)
                .unwrap()
                .owns(u32::MAX - 1, NetnsId::of_pid)
        );
        let other = NetnsId::fake(1);
        assert!(!rule.owns(7, |_| Some(other)));
    }

    /// A real process in another network namespace (needs root for `unshare -n`).
    #[test]
    fn process_in_another_netns_is_not_ours() {
        if !crate::sys::is_root() {
            println!("skipping: unshare -n needs root");
            return;
        }
        let mut child = Command::new("unshare")
            .args(["-n", "sleep", "60"])
            .spawn()
            .expect("unshare");
        let pid = child.id();
        // unshare execs sleep in the same pid once the namespace exists.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while NetnsId::of_pid(pid) == NetnsId::current().ok()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let rule = Ownership::for_agent(false).unwrap();
        let owned = rule.owns(pid, NetnsId::of_pid);
        let _ = child.kill();
        let _ = child.wait();
        assert!(!owned);
    }
}
