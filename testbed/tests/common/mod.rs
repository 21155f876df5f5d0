//! Shared helpers of the root-only integration tests: fabric fixture and real UDP traffic
//! sent between RNICs from inside their host namespaces.
#![allow(dead_code)] // each test binary uses a different subset

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use rocemesh_testbed::{Fabric, FabricSpec, HelperCommand, netns};

/// True when running as root; otherwise prints the skip notice.
pub(crate) fn root_or_skip() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        println!("skipping: needs root");
    }
    root
}

/// A fabric that is torn down when the test ends (even on panic).
pub(crate) struct Fixture(pub Fabric);

impl Fixture {
    pub(crate) fn up(spec: FabricSpec) -> Fixture {
        let helper = HelperCommand {
            program: env!("CARGO_BIN_EXE_rocemesh-testbed-helper").into(),
            args: vec![],
        };
        Fixture(Fabric::up(&spec).expect("fabric up").with_helper(helper))
    }

    pub(crate) fn default(prefix: &str) -> Fixture {
        Fixture::up(FabricSpec {
            prefix: prefix.into(),
            ..FabricSpec::default()
        })
    }

    pub(crate) fn ip(&self, rnic: &str) -> Ipv4Addr {
        self.0.topology().rnic(rnic).expect("rnic").1.ip
    }

    pub(crate) fn netns_of(&self, rnic: &str) -> String {
        self.0.topology().rnic(rnic).expect("rnic").0.netns.clone()
    }

    /// A UDP socket bound to `rnic`'s address and `port` inside its host namespace.
    pub(crate) fn socket(&self, rnic: &str, port: u16) -> UdpSocket {
        let ip = self.ip(rnic);
        // A bind right after the previous socket on that port closed failed once in CI
        // with EADDRINUSE (not reproduced since): a few short retries, then the error.
        let mut tries = 0;
        let sock = loop {
            let bound = netns::in_netns(&self.netns_of(rnic), move || UdpSocket::bind((ip, port)))
                .expect("setns");
            match bound {
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 10 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                other => break other.expect("bind"),
            }
        };
        sock.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        sock
    }

    /// Sends `n` numbered datagrams of one flow at `interval` and returns how many arrived.
    pub(crate) fn deliver(
        &self,
        from: &str,
        sport: u16,
        to: &str,
        dport: u16,
        n: u32,
        interval: Duration,
    ) -> u32 {
        let rx = self.socket(to, dport);
        let tx = self.socket(from, sport);
        let dst = SocketAddrV4::new(self.ip(to), dport);
        let mut seen = vec![false; n as usize];
        let mut buf = [0u8; 64];
        let mut mark = |rx: &UdpSocket, seen: &mut Vec<bool>| {
            while let Ok(4) = rx.recv(&mut buf) {
                let i = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                if let Some(s) = seen.get_mut(i) {
                    *s = true;
                }
            }
        };
        rx.set_nonblocking(true).expect("nonblocking");
        for i in 0..n {
            tx.send_to(&i.to_be_bytes(), dst).expect("send");
            mark(&rx, &mut seen);
            if !interval.is_zero() {
                std::thread::sleep(interval);
            }
        }
        rx.set_nonblocking(false).expect("blocking");
        rx.set_read_timeout(Some(Duration::from_millis(400)))
            .expect("timeout");
        mark(&rx, &mut seen);
        seen.iter().filter(|s| **s).count() as u32
    }

    /// Median one-way latency of `n` datagrams (same clock at both ends); `None` if fewer
    /// than half arrived.
    pub(crate) fn latency(&self, from: &str, to: &str, n: u32) -> Option<Duration> {
        let rx = self.socket(to, 7100);
        rx.set_read_timeout(Some(Duration::from_millis(800)))
            .expect("timeout");
        let tx = self.socket(from, 7101);
        let dst = SocketAddrV4::new(self.ip(to), 7100);
        let mut samples = Vec::new();
        let mut buf = [0u8; 64];
        for i in 0..n {
            let start = Instant::now();
            tx.send_to(&i.to_be_bytes(), dst).expect("send");
            while let Ok(len) = rx.recv(&mut buf) {
                if len == 4 && buf[..4] == i.to_be_bytes() {
                    samples.push(start.elapsed());
                    break;
                }
            }
        }
        if samples.len() * 2 < n as usize {
            return None;
        }
        samples.sort();
        Some(samples[samples.len() / 2])
    }

    /// Source ports (from `base`) of flows `from`→`to` that the kernel hashes onto `spine`.
    pub(crate) fn sports_via(
        &self,
        from: &str,
        to: &str,
        dport: u16,
        spine: &str,
        base: u16,
        count: usize,
    ) -> Vec<u16> {
        let (src, dst) = (self.ip(from), self.ip(to));
        (base..base + 200)
            .filter(|&sport| {
                let flow = rocemesh_testbed::FiveTuple {
                    src: src.into(),
                    dst: dst.into(),
                    sport,
                    dport,
                };
                self.0.spine_for(&flow).expect("route get").as_deref() == Some(spine)
            })
            .take(count)
            .collect()
    }

    /// A counter from /sys/class/net/IF/statistics in namespace `ns`.
    pub(crate) fn if_counter(&self, ns: &str, ifname: &str, counter: &str) -> u64 {
        let path = format!("/sys/class/net/{ifname}/statistics/{counter}");
        self.0
            .exec(ns, &["cat", &path])
            .expect("cat")
            .trim()
            .parse()
            .expect("counter")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let prefix = self.0.spec().prefix.clone();
        if let Err(e) = Fabric::down(&prefix) {
            eprintln!("teardown of {prefix} failed: {e:#}");
        }
    }
}

/// Namespaces currently present whose name starts with `{prefix}-`.
pub(crate) fn namespaces_of(prefix: &str) -> Vec<String> {
    netns::list()
        .expect("netns list")
        .into_iter()
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .collect()
}
