//! A real `rocemesh server` process on 127.0.0.1 for the benches: its own scratch
//! directory (SQLite database, config, log), its URL, and its pid for `/proc` sampling.

use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a server may take to start listening (a big registry is loaded first).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    /// A fresh directory named after the bench and this process.
    pub(crate) fn new(name: &str) -> Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("rocemesh-bench-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self(dir))
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `rocemesh server` (or one of its roles); stopped (SIGTERM, then SIGKILL) on drop.
#[derive(Debug)]
pub(crate) struct ServerProc {
    child: Child,
    url: String,
    /// Start of the process to "listening".
    pub started_in: Duration,
}

impl ServerProc {
    /// Starts `rocemesh server` on 127.0.0.1 (a free port) with the database in `dir` and
    /// `sections` (TOML `[controller]` / `[analyzer]` tables) as its config; waits until it
    /// listens. The log goes to `dir/server.log`.
    pub(crate) fn start(rocemesh: &Path, dir: &Path, sections: &str) -> Result<Self> {
        Self::start_on(rocemesh, dir, sections, IpAddr::from([127, 0, 0, 1]))
    }

    /// [`Self::start`] listening on `ip` (a free port).
    pub(crate) fn start_on(
        rocemesh: &Path,
        dir: &Path,
        sections: &str,
        ip: IpAddr,
    ) -> Result<Self> {
        Self::start_role(rocemesh, dir, "server", sections, ip)
    }

    /// Starts `rocemesh <role>` (`server`, `controller` or `analyzer`) on `ip`; processes
    /// of one `dir` share its database. Config and log are named after the role.
    pub(crate) fn start_role(
        rocemesh: &Path,
        dir: &Path,
        role: &str,
        sections: &str,
        ip: IpAddr,
    ) -> Result<Self> {
        let db = dir.join("bench.db");
        let config = dir.join(format!("{role}.toml"));
        let text = format!(
            "listen = \"{}\"\ndatabase = \"sqlite://{}\"\n{sections}",
            SocketAddr::new(ip, 0),
            db.display()
        );
        std::fs::write(&config, text).context("writing server config")?;
        let log_path = dir.join(format!("{role}.log"));
        let log = std::fs::File::create(&log_path).context("creating server log")?;
        let started = Instant::now();
        let mut child = Command::new(rocemesh)
            .args([role, "--config"])
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {}", rocemesh.display()))?;
        let stdout = child.stdout.take().context("server stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.split(" listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let mut server = Self {
            child,
            url: String::new(),
            started_in: Duration::ZERO,
        };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(url) => server.url = url,
            Err(_) => bail!(
                "{role} did not listen within {START_TIMEOUT:?}; see {}",
                log_path.display()
            ),
        }
        server.started_in = started.elapsed();
        Ok(server)
    }

    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Process id (for `/proc` sampling).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, up to 10 s for a clean shutdown, then SIGKILL.
    pub(crate) fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        // SAFETY: signalling our own child by pid has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        self.terminate();
    }
}
