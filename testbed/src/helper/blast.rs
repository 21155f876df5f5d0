//! Paced background UDP traffic (1000-byte datagrams) from one RNIC address to another, to
//! fill a congested (tbf-limited) link.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

const DATAGRAM: usize = 1000;

pub(super) fn run(src: Ipv4Addr, dst: SocketAddrV4, mbps: u32) -> Result<()> {
    let sock = UdpSocket::bind((src, 0)).with_context(|| format!("binding {src}"))?;
    super::announce_ready()?;
    let buf = [0x5au8; DATAGRAM];
    let per_sec = (f64::from(mbps) * 1e6 / (DATAGRAM as f64 * 8.0)).max(1.0);
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        let due = (start.elapsed().as_secs_f64() * per_sec) as u64;
        while sent < due {
            // Send errors (e.g. a full queue behind a downed link) are part of the scenario.
            let _ = sock.send_to(&buf, dst);
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
