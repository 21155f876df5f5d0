//! Helpers for the binary's end-to-end tests: real `rocemesh` processes, real HTTP.
#![allow(dead_code)]

pub(crate) mod self_fault;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed when dropped.
pub(crate) struct Proc(pub Child);

impl Proc {
    /// SIGKILL, as a crash would.
    pub(crate) fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// SIGTERM and wait for a clean exit; returns the exit status success.
    pub(crate) fn terminate(&mut self) -> bool {
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
pub(crate) fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rocemesh"));
    c.env("RUST_LOG", "warn");
    c
}

/// Whether the test runs as root (namespace fabrics need it).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A fresh directory for one test's files, unique per process and call.
pub(crate) fn scratch_dir(what: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rocemesh-{what}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the test directory");
    dir
}

/// Writes `dir/server.toml` (port 0, a SQLite database in `dir`, then the `extra` TOML)
/// and starts a server on it, as [`start_server`].
pub(crate) fn start_sqlite_server(dir: &Path, extra: &str) -> (Proc, String) {
    let config = dir.join("server.toml");
    let db = dir.join("rocemesh.db");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"sqlite://{}\"\n{extra}",
            db.display()
        ),
    )
    .expect("write server.toml");
    start_server(&config)
}

/// `rocemesh agent` for `host` with two loopback RNICs under ToR `tor`: `r1` at `{net}.1`
/// and `r2` at `{net}.2` (`net` like `127.89.3`, one per host and test binary).
pub(crate) fn loopback_agent(controller: &str, host: &str, net: &str, tor: &str) -> Command {
    let mut cmd = bin();
    cmd.args(["agent", "--controller", controller, "--host", host]);
    for r in 1..=2 {
        cmd.args(["--rnic", &format!("r{r}={net}.{r},tor={tor}")]);
    }
    cmd
}

/// Serves `app` on 127.0.0.1 from a runtime of its own on a background thread (for the
/// stand-ins tests put between real processes); returns its base URL.
pub(crate) fn serve_in_background(app: axum::Router) -> String {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    std::thread::spawn(move || rt.block_on(async { axum::serve(listener, app).await }));
    format!("http://{addr}")
}

/// Starts `rocemesh server --config <cfg>` (which must listen on port 0) and returns
/// it with its base URL, read from the "listening on" line.
pub(crate) fn start_server(config: &std::path::Path) -> (Proc, String) {
    let mut cmd = bin();
    cmd.args(["server", "--config"]).arg(config);
    spawn_listening(cmd)
}

/// Spawns `cmd` (a `rocemesh server`, `controller` or `analyzer`, maybe wrapped) and
/// returns it with its base URL, read from the "listening on" line of its stdout.
pub(crate) fn spawn_listening(mut cmd: Command) -> (Proc, String) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn server");
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
pub(crate) fn get_json<T: serde::de::DeserializeOwned>(url: &str) -> T {
    let mut resp = ureq::get(url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    resp.body_mut()
        .read_json()
        .unwrap_or_else(|e| panic!("GET {url}: bad JSON: {e}"))
}

/// Polls `f` until it returns Some or the timeout passes.
pub(crate) fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A namespace lab (the eval's 3-ToR spec under `prefix`) whose server sends alerts,
/// polled every 0.5 s and grouped for `group_wait_ms`, to a fresh recording webhook
/// receiver signing with `secret`; the runtime serves the receiver and must outlive it.
pub(crate) fn lab_with_receiver(
    prefix: &str,
    group_wait_ms: u64,
    secret: Option<&str>,
) -> (
    tokio::runtime::Runtime,
    rocemesh_alerts::testing::TestReceiver,
    rocemesh_lab::lab::Lab,
) {
    use rocemesh_alerts::{AlertsConfig, ReceiverConfig};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let rx = rt
        .block_on(rocemesh_alerts::testing::TestReceiver::start())
        .expect("webhook receiver");
    let url = rx.url.clone();
    let lab = rocemesh_lab::lab::Lab::up_with(
        rocemesh_lab::eval::lab_spec(prefix),
        &rocemesh_lab::lab::LabTiming::default(),
        |cfg| {
            cfg.alerts = AlertsConfig {
                external_url: "http://rocemesh.e2e:8080".into(),
                poll_ms: 500,
                group_wait_ms,
                receivers: vec![ReceiverConfig {
                    name: prefix.into(),
                    url,
                    secret: secret.map(str::to_string),
                    secret_file: None,
                    priorities: vec![],
                    components: vec![],
                }],
                ..AlertsConfig::default()
            };
        },
    )
    .expect("lab up");
    (rt, rx, lab)
}

/// A TCP connection to `to` from source address `from` (any 127/8 address on loopback),
/// so a test can play clients on several hosts.
pub(crate) fn connect_from(
    from: std::net::IpAddr,
    to: std::net::SocketAddr,
) -> std::net::TcpStream {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(to),
        socket2::Type::STREAM,
        None,
    )
    .expect("socket");
    sock.bind(&std::net::SocketAddr::new(from, 0).into())
        .unwrap_or_else(|e| panic!("bind {from}: {e}"));
    sock.connect(&to.into())
        .unwrap_or_else(|e| panic!("connect {from} -> {to}: {e}"));
    sock.into()
}

/// Whether the peer has closed `s` (EOF or reset) rather than staying silent, without
/// waiting; reads and drops whatever arrived first.
pub(crate) fn closed_by_peer(mut s: &std::net::TcpStream) -> bool {
    use std::io::Read;
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1024];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    s.set_nonblocking(false).unwrap();
    closed
}
