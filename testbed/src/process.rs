//! Background processes started for faults (NFQUEUE helper, flappers, traffic generators):
//! spawned in their own process group, recorded with their start time so a later `clear` or
//! `down` kills exactly them even if the pid was reused.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// Line a helper prints on stdout once it is ready (e.g. bound to its queue).
pub const READY_LINE: &str = "ready";

/// How long to wait for a helper's ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(5);

/// A process (and its process group) identified robustly against pid reuse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackedProcess {
    /// Process id (also its process-group id).
    pub pid: u32,
    /// Start time in clock ticks since boot (field 22 of /proc/PID/stat).
    pub start_time: u64,
}

fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl TrackedProcess {
    /// Spawns `cmd` as a new process-group leader with stdin closed and stderr to `log`.
    /// With `wait_ready`, stdout is a pipe and the call returns once the process prints
    /// [`READY_LINE`] (failing, and killing it, if it exits or times out first).
    pub fn spawn(mut cmd: Command, log: &Path, wait_ready: bool) -> Result<TrackedProcess> {
        let log_file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stderr(log_file)
            .stdout(if wait_ready {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {cmd:?}"))?;
        let pid = child.id();
        let tracked = TrackedProcess {
            pid,
            start_time: start_time(pid).unwrap_or(0),
        };
        if let Some(stdout) = child.stdout.take() {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let mut line = String::new();
                let ok = BufReader::new(stdout).read_line(&mut line).is_ok()
                    && line.trim() == READY_LINE;
                let _ = tx.send(ok);
            });
            if rx.recv_timeout(READY_TIMEOUT) != Ok(true) {
                tracked.kill();
                let why = std::fs::read_to_string(log).unwrap_or_default();
                bail!("{cmd:?} did not become ready: {}", why.trim());
            }
        }
        // The Child handle is dropped without waiting: the process outlives this call (and
        // possibly this process); kill() reaps it when it is our child.
        drop(child);
        Ok(tracked)
    }

    /// True while the process that was started is still running (not reused, not a zombie).
    pub fn is_alive(&self) -> bool {
        let alive = start_time(self.pid) == Some(self.start_time);
        let zombie = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|s| {
                s.rfind(')')
                    .map(|i| s[i + 1..].trim_start().starts_with('Z'))
            })
            .unwrap_or(false);
        alive && !zombie
    }

    /// Terminates the process group (SIGTERM, then SIGKILL) and reaps the leader if it is our
    /// child. A process that is already gone is fine.
    pub fn kill(&self) {
        let Ok(pid) = i32::try_from(self.pid) else {
            return;
        };
        for signal in [libc::SIGTERM, libc::SIGKILL] {
            if !self.is_alive() {
                break;
            }
            // SAFETY: signalling a process group we created (verified by start time above).
            unsafe { libc::kill(-pid, signal) };
            for _ in 0..50 {
                // SAFETY: non-blocking reap; ECHILD when it is not our child is harmless.
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
                if !self.is_alive() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        // SAFETY: as above; reaps a zombie child if any.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawn_ready_and_kill() {
        let log = std::env::temp_dir().join(format!("rmtb-proc-{}.log", std::process::id()));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo ready; sleep 30"]);
        let p = TrackedProcess::spawn(cmd, &log, true).unwrap();
        assert!(p.is_alive());
        p.kill();
        assert!(!p.is_alive());

        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo oops >&2; exit 1"]);
        let err = TrackedProcess::spawn(cmd, &log, true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("oops"), "{err}");
        let _ = std::fs::remove_file(log);
    }
}
