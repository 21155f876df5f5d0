//! The per-fabric state file under [`STATE_DIR`]: the spec, active faults with their undo
//! steps, and processes started for them, so a later process (or `down` after a crash) can
//! clear exactly what was applied.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::faults::Fault;
use crate::job::ActiveJob;
use crate::process::TrackedProcess;
use crate::spec::FabricSpec;
use rocemesh_proto::api::Component;

/// Directory holding `{prefix}.json`, `{prefix}.lock` and helper logs.
pub const STATE_DIR: &str = "/run/rocemesh-testbed";

/// One step that reverts part of an applied fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Undo {
    /// Run a command (argv) to remove what a command added.
    Command(Vec<String>),
    /// Stop a process started for the fault.
    Kill(TrackedProcess),
    /// Move a process back to its cgroup and remove the fault's cgroup directory.
    Cgroup {
        /// The fault's cgroup directory.
        dir: String,
        /// The starved process.
        pid: u32,
        /// `cgroup.procs` of the cgroup it came from.
        original_procs: String,
    },
}

/// A fault currently in effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveFault {
    /// Handle returned by `apply` (also the NFQUEUE number when one is used).
    pub id: u16,
    /// What was asked for.
    pub fault: Fault,
    /// The component at fault (`None`: none of the fabric's), as [`crate::FaultHandle`] has it.
    pub truth: Option<Component>,
    /// Steps that remove it, in the order they were applied (run in reverse).
    pub undo: Vec<Undo>,
}

/// Contents of the state file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// The fabric's spec.
    pub spec: FabricSpec,
    /// Next fault id to hand out.
    pub next_id: u16,
    /// Faults in effect.
    pub faults: Vec<ActiveFault>,
    /// Emulated training jobs running (absent in state files of older versions).
    #[serde(default)]
    pub jobs: Vec<ActiveJob>,
}

/// Path of a fabric's state file.
pub fn state_path(prefix: &str) -> PathBuf {
    PathBuf::from(STATE_DIR).join(format!("{prefix}.json"))
}

/// True while some fabric has a state file (is up, or was left by a crash).
pub(crate) fn any_fabric() -> Result<bool> {
    Ok(fs::read_dir(STATE_DIR)?
        .flatten()
        .any(|e| e.path().extension().is_some_and(|x| x == "json")))
}

/// Path of a helper process log.
pub fn log_path(prefix: &str, what: &str) -> PathBuf {
    PathBuf::from(STATE_DIR).join(format!("{prefix}-{what}.log"))
}

/// Exclusive lock on a fabric's state (flock; released on drop).
pub struct StateLock {
    _file: File,
    prefix: String,
}

impl StateLock {
    /// Waits for the lock of `prefix`'s state.
    pub fn acquire(prefix: &str) -> Result<StateLock> {
        fs::create_dir_all(STATE_DIR).with_context(|| format!("creating {STATE_DIR}"))?;
        let path = PathBuf::from(STATE_DIR).join(format!("{prefix}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error()).context("flock state lock");
        }
        Ok(StateLock {
            _file: file,
            prefix: prefix.to_string(),
        })
    }

    /// Reads the state file, `None` if the fabric is not up.
    pub fn load(&self) -> Result<Option<State>> {
        let path = state_path(&self.prefix);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("corrupt state file {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Reads the state file, failing clearly when the fabric is not up.
    pub fn load_existing(&self) -> Result<State> {
        match self.load()? {
            Some(s) => Ok(s),
            None => bail!(
                "fabric {:?} is not up (no {})",
                self.prefix,
                state_path(&self.prefix).display()
            ),
        }
    }

    /// Atomically replaces the state file.
    pub fn save(&self, state: &State) -> Result<()> {
        let path = state_path(&self.prefix);
        let tmp = path.with_extension("json.tmp");
        fs::write(&tmp, serde_json::to_vec_pretty(state)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))
    }

    /// Removes the state file and helper logs of this prefix.
    pub fn remove(&self) -> Result<()> {
        let logs = format!("{}-", self.prefix);
        for entry in fs::read_dir(STATE_DIR)?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == format!("{}.json", self.prefix)
                || (name.starts_with(&logs) && name.ends_with(".log"))
            {
                fs::remove_file(entry.path()).with_context(|| format!("removing {name}"))?;
            }
        }
        Ok(())
    }
}
