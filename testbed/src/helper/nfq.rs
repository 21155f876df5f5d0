//! NFQUEUE worker: holds each packet for a fixed delay (FIFO, so release order is arrival
//! order) and flips one UDP payload byte of a random share of packets. The modified packet is
//! re-injected with its UDP checksum left wrong, so the receiving kernel drops it as corrupt.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nfq::{Message, Queue, Verdict};
use rand::Rng;

/// Most packets held at once; beyond it the kernel queue fills and (fail-open) packets pass.
const MAX_HELD: usize = 4096;

/// Longest sleep between polls of the (non-blocking) queue socket.
const POLL: Duration = Duration::from_millis(1);

/// Offset of the UDP payload in an IPv4 packet, if it is a UDP packet with a payload.
fn udp_payload_offset(packet: &[u8]) -> Option<usize> {
    let first = *packet.first()?;
    if first >> 4 != 4 || packet.get(9) != Some(&17) {
        return None;
    }
    let start = usize::from(first & 0x0f) * 4 + 8;
    (packet.len() > start).then_some(start)
}

/// Flips one payload byte of a UDP packet; false (untouched) for anything else.
pub(crate) fn corrupt(packet: &mut [u8], rng: &mut impl Rng) -> bool {
    let Some(start) = udp_payload_offset(packet) else {
        return false;
    };
    let i = rng.random_range(start..packet.len());
    packet[i] ^= 0xff;
    true
}

pub(super) fn run(queue_num: u16, delay: Duration, corrupt_percent: u8) -> Result<()> {
    let mut q = Queue::open().context("opening NFQUEUE netlink socket")?;
    q.bind(queue_num)
        .with_context(|| format!("binding NFQUEUE {queue_num}"))?;
    q.set_queue_max_len(queue_num, MAX_HELD as u32)?;
    q.set_fail_open(queue_num, true)?;
    q.set_nonblocking(true);
    super::announce_ready()?;
    let mut rng = rand::rng();
    let mut held: VecDeque<(Instant, Message)> = VecDeque::with_capacity(MAX_HELD);
    loop {
        loop {
            let mut msg = match q.recv() {
                Ok(m) => m,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("receiving from NFQUEUE"),
            };
            if corrupt_percent > 0
                && rng.random_range(0..100u8) < corrupt_percent
                && udp_payload_offset(msg.get_payload()).is_some()
            {
                corrupt(msg.get_payload_mut(), &mut rng);
            }
            msg.set_verdict(Verdict::Accept);
            if delay.is_zero() || held.len() >= MAX_HELD {
                q.verdict(msg).context("NFQUEUE verdict")?;
            } else {
                held.push_back((Instant::now() + delay, msg));
            }
        }
        let now = Instant::now();
        while held.front().is_some_and(|(due, _)| *due <= now) {
            if let Some((_, msg)) = held.pop_front() {
                q.verdict(msg).context("NFQUEUE verdict")?;
            }
        }
        let wait = held.front().map_or(POLL, |(due, _)| {
            due.saturating_duration_since(now).min(POLL)
        });
        std::thread::sleep(wait);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupts_only_udp_payload() {
        let mut rng = rand::rng();
        // IPv4, IHL 5, protocol 17, 8-byte UDP header, 4-byte payload.
        let mut udp = vec![0u8; 32];
        udp[0] = 0x45;
        udp[9] = 17;
        let orig = udp.clone();
        assert!(corrupt(&mut udp, &mut rng));
        let changed: Vec<usize> = (0..32).filter(|&i| udp[i] != orig[i]).collect();
        assert_eq!(changed.len(), 1);
        assert!(changed[0] >= 28);

        let mut header_only = orig[..28].to_vec();
        assert!(!corrupt(&mut header_only, &mut rng));
        let mut icmp = orig.clone();
        icmp[9] = 1;
        assert!(!corrupt(&mut icmp, &mut rng));
        assert!(!corrupt(&mut [], &mut rng));
    }
}
