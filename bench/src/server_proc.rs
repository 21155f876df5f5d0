//! A real `rocemesh server` process on 127.0.0.1 for the benches: its own scratch
//! directory (SQLite database, config, log), its URL, and its pid for `/proc` sampling.

use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a server may take to start listening (a big registry is loaded first).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh directory named after the bench and this process.
    pub fn new(name: &str) -> Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("rocemesh-bench-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self(dir))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `rocemesh server`; stopped (SIGTERM, then SIGKILL) on drop.
#[derive(Debug)]
pub struct ServerProc {
    child: Child,
    url: String,
    /// Start of the process to "listening".
    pub started_in: Duration,
}

impl ServerProc {
    /// Starts `rocemesh server` on 127.0.0.1 (a free port) with the database in `dir` and
    /// `sections` (TOML `[controller]` / `[analyzer]` tables) as its config; waits until it
    /// listens. The log goes to `dir/server.log`.
    pub fn start(rocemesh: &Path, dir: &Path, sections: &str) -> Result<Self> {
        let db = dir.join("bench.db");
        let config = dir.join("server.toml");
        let text = format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"sqlite://{}\"\n{sections}",
            db.display()
        );
        std::fs::write(&config, text).context("writing server config")?;
        let log = std::fs::File::create(dir.join("server.log")).context("creating server log")?;
        let started = Instant::now();
        let mut child = Command::new(rocemesh)
            .args(["server", "--config"])
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
                "server did not listen within {START_TIMEOUT:?}; see {}",
                dir.join("server.log").display()
            ),
        }
        server.started_in = started.elapsed();
        Ok(server)
    }

    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Process id (for `/proc` sampling).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, up to 10 s for a clean shutdown, then SIGKILL.
    pub fn stop(mut self) {
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
