//! Plain HTTP under connection exhaustion, against a real `rocemesh server` started with a
//! soft descriptor limit of 1,024: 1,100 idle sockets from five hosts, a host over its
//! per-source cap, a header dripped a byte at a time and a body that never comes. The
//! server must keep answering `/healthz` and the API at once, refuse the excess with a
//! 503, and close every hanging connection at its deadline.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::{Proc, bin, closed_by_peer, connect_from, scratch_dir, spawn_listening, wait_for};

const HEADER_READ: Duration = Duration::from_secs(8);
const IDLE: Duration = Duration::from_secs(10);
const PER_IP: usize = 300;

/// Writes `bytes` one at a time every 0.5 s until the server closes; returns when it did
/// (relative to `since`), or `None` if it never did within a minute.
fn drip(mut s: TcpStream, bytes: &'static [u8], since: Instant) -> Option<Duration> {
    for b in bytes.iter().cycle().take(120) {
        if s.write_all(&[*b]).is_err() || closed_by_peer(&s) {
            return Some(since.elapsed());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    None
}

#[test]
fn idle_and_slow_connections_never_stall_health_or_the_api() {
    let dir = scratch_dir("http-limits");
    let config = dir.join("server.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"sqlite://{}\"\n[http]\nheader_read_timeout = \"{}s\"\nidle_timeout = \"{}s\"\nmax_connections_per_ip = {PER_IP}\n",
            dir.join("rocemesh.db").display(),
            HEADER_READ.as_secs(),
            IDLE.as_secs(),
        ),
    )
    .unwrap();
    let log = dir.join("server.log");
    let mut cmd = bin();
    cmd.env("RUST_LOG", "info")
        .args(["--log-json", "server", "--config"])
        .arg(&config)
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()));
    // SAFETY: setrlimit only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            lim.rlim_cur = 1024;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (_server, url): (Proc, String) = spawn_listening(cmd);
    let addr: SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    // This test holds ~1,500 sockets itself.
    let fds = rocemesh_httpd::raise_fd_limit().unwrap();
    assert!(
        fds.after >= 4096,
        "the test needs 4,096 descriptors: {fds:?}"
    );
    let started = Instant::now();

    let idle: Vec<TcpStream> = (0..1_100)
        .map(|i| connect_from(format!("127.67.0.{}", 1 + i % 5).parse().unwrap(), addr))
        .collect();
    let crowd: Vec<TcpStream> = (0..PER_IP + 10)
        .map(|_| connect_from("127.67.1.1".parse().unwrap(), addr))
        .collect();
    let slowloris = std::thread::spawn(move || {
        let s = connect_from("127.67.2.1".parse().unwrap(), addr);
        drip(s, b"GET /healthz HTTP/1.1\r\nX-Pad: aaaaaaaa", started)
    });
    let stuck_body = std::thread::spawn(move || {
        let mut s = connect_from("127.67.2.2".parse().unwrap(), addr);
        s.write_all(b"POST /api/v1/agents/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        (
            started.elapsed(),
            String::from_utf8_lossy(&out).into_owned(),
        )
    });

    // With all of that held, health and an API call answer at once.
    let client: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut worst = Duration::ZERO;
    for _ in 0..3 {
        let t = Instant::now();
        let health = client.get(&format!("{url}/healthz")).call().unwrap();
        assert_eq!(health.status(), 200);
        let hosts = client.get(&format!("{url}/api/v1/hosts")).call().unwrap();
        assert_eq!(hosts.status(), 200);
        worst = worst.max(t.elapsed());
    }
    let held_during = started.elapsed();
    let early = idle.iter().filter(|s| closed_by_peer(s)).count();
    eprintln!(
        "1,100 idle + {} crowded sockets: /healthz + API answered in {worst:?} at worst ({held_during:?} into the attack)",
        PER_IP + 10
    );
    // A blocked server would answer only once the held connections time out (seconds
    // more); a loaded machine's fresh connection and call take well under 3 s.
    assert!(worst < Duration::from_secs(3), "{worst:?}");
    assert!(
        held_during < HEADER_READ,
        "calls came too late: {held_during:?}"
    );
    assert_eq!(early, 0, "idle sockets closed before their deadline");

    // The server lifted its descriptor limit at start and says so.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines().any(|l| l.contains("file descriptor limit")
            && l.contains("\"before\":1024")
            && l.contains(&format!("\"after\":{}", fds.hard))),
        "{text}"
    );

    // The crowded host got its cap; the rest were told why and closed.
    let mut refused = 0;
    for s in &crowd {
        let mut answer = String::new();
        s.set_nonblocking(true).unwrap();
        let _ = (&*s).read_to_string(&mut answer);
        if answer.starts_with("HTTP/1.1 503") {
            refused += 1;
        }
    }
    assert_eq!(refused, 10, "connections over the per-source cap");

    // Every idle socket is closed at the header-read deadline, not before.
    wait_for("idle sockets closed", Duration::from_secs(40), || {
        idle.iter().all(closed_by_peer).then_some(())
    });
    let cut = started.elapsed();
    assert!(cut >= HEADER_READ - Duration::from_secs(1), "{cut:?}");
    // A header dripped a byte every 0.5 s does not extend the deadline.
    let dripped = slowloris.join().unwrap().expect("slowloris never cut off");
    assert!(
        dripped >= HEADER_READ - Duration::from_secs(1) && dripped < Duration::from_secs(40),
        "{dripped:?}"
    );
    // A body that never comes is cut after the idle deadline.
    let (stuck, answer) = stuck_body.join().unwrap();
    assert!(
        stuck >= IDLE - Duration::from_secs(1) && stuck < Duration::from_secs(40),
        "{stuck:?} {answer}"
    );
    eprintln!("cut off: idle by {cut:?}, slowloris at {dripped:?}, stuck body at {stuck:?}");
    std::fs::remove_dir_all(&dir).ok();
}
