//! Helpers for the binary's end-to-end tests: real `rocemesh` processes, real HTTP.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed when dropped.
pub struct Proc(pub Child);

impl Proc {
    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// SIGTERM and wait for a clean exit; returns the exit status success.
    pub fn terminate(&mut self) -> bool {
        // SAFETY: sending a signal to our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.0.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The binary under test.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rocemesh"));
    c.env("RUST_LOG", "warn");
    c
}

/// Starts `rocemesh server --config <cfg>` (which must listen on port 0) and returns
/// it with its base URL, read from the "listening on" line.
pub fn start_server(config: &std::path::Path) -> (Proc, String) {
    let mut child = bin()
        .args(["server", "--config"])
        .arg(config)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref().map_while(Result::ok) {
            if let Some(url) = line.split("listening on ").nth(1) {
                let _ = tx.send(url.trim().to_string());
                break;
            }
        }
        for _ in lines {} // keep draining
    });
    let url = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("server did not report its address");
    (Proc(child), url)
}

/// GET a JSON document.
pub fn get_json<T: serde::de::DeserializeOwned>(url: &str) -> T {
    let mut resp = ureq::get(url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    resp.body_mut()
        .read_json()
        .unwrap_or_else(|e| panic!("GET {url}: bad JSON: {e}"))
}

/// Polls `f` until it returns Some or the timeout passes.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
