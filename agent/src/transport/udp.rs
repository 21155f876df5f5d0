//! The UDP transport: one main socket per RNIC at (ip, port) receiving PROBEs and ACKs,
//! plus a bounded LRU of send sockets bound to (ip, src_port) for ECMP entropy.

use super::recv_batch::{BATCH, RecvBatch};
use super::timestamping::{self, ControlBuf};
use super::{Endpoint, RxDatagram, Transport, TransportEvent, TxToken};
use crate::stats::Counters;
use crate::sys::{self, Epoll};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default bound of the per-source-port send socket cache.
pub(crate) const DEFAULT_SEND_SOCKETS: usize = 512;
/// epoll key of the main socket (send sockets use their port, < 2^16).
const MAIN_KEY: u64 = 1 << 32;
/// epoll events fetched per wait.
const MAX_READY: usize = 64;
/// How often a TX stamp that was not there right after the send is looked for again.
const STAMP_POLL: Duration = Duration::from_millis(1);
/// How long a late TX stamp is looked for (beyond it the probe uses application times).
const STAMP_WAIT: Duration = Duration::from_millis(20);

/// Settings of a [`UdpTransport`].
#[derive(Debug, Clone)]
pub struct UdpOptions {
    /// Local IP (must be assigned to this host).
    pub ip: IpAddr,
    /// Main port: where PROBEs and ACKs arrive.
    pub port: u16,
    /// DSCP for every packet sent.
    pub dscp: Option<u8>,
    /// Interface to switch to hardware timestamping, if wanted.
    pub hardware_timestamps_on: Option<String>,
    /// Most send sockets kept open.
    pub max_send_sockets: usize,
}

/// One open socket and its `OPT_ID` send counter.
struct Sock {
    socket: Socket,
    /// Unique per socket opened, so stamps of an evicted socket never match a new one.
    generation: u32,
    /// Sends so far = the OPT_ID the kernel gives the next send.
    sent: u32,
    last_used: u64,
}

/// UDP transport with `SO_TIMESTAMPING` on every socket. Only the main socket is in
/// epoll: a send socket's TX stamp is read right after the send (software stamps are
/// queued before `sendto` returns), so no wake-up is spent on it; stamps that come later
/// (NIC hardware) are polled for briefly on the following wake-ups.
pub struct UdpTransport {
    opts: UdpOptions,
    epoll: Epoll,
    main: Sock,
    send: HashMap<u16, Sock>,
    /// Events already read, delivered before anything else.
    pending: VecDeque<TransportEvent>,
    /// Send sockets with a stamp still due, and until when it is waited for.
    unstamped: Vec<(u16, Instant)>,
    generations: u32,
    tick: u64,
    ready: [libc::epoll_event; MAX_READY],
    nready: usize,
    cursor: usize,
    rx: RecvBatch,
    control: ControlBuf,
    counters: Arc<Counters>,
}

impl UdpTransport {
    /// Binds the main socket; fails clearly when the IP is not on this host or the port is taken.
    pub fn open(opts: UdpOptions, counters: Arc<Counters>) -> io::Result<Self> {
        let epoll = Epoll::new()?;
        let socket = new_socket(&opts, opts.port, false).map_err(|e| {
            let why = if e.kind() == io::ErrorKind::AddrNotAvailable {
                "is not assigned to this host".to_string()
            } else {
                format!("cannot be bound: {e}")
            };
            io::Error::new(e.kind(), format!("{}:{} {why}", opts.ip, opts.port))
        })?;
        if let Some(ifname) = &opts.hardware_timestamps_on {
            match timestamping::enable_hardware(socket.as_raw_fd(), ifname) {
                Ok(()) => tracing::info!(ifname, "hardware timestamping enabled"),
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    tracing::info!(
                        ifname,
                        "NIC has no hardware timestamping; using software stamps"
                    )
                }
                Err(e) => {
                    tracing::warn!(ifname, error = %e, "SIOCSHWTSTAMP failed; using software stamps")
                }
            }
        }
        epoll.add(socket.as_raw_fd(), MAIN_KEY)?;
        Ok(Self {
            opts,
            epoll,
            main: Sock {
                socket,
                generation: 0,
                sent: 0,
                last_used: 0,
            },
            send: HashMap::new(),
            generations: 0,
            pending: VecDeque::new(),
            unstamped: Vec::new(),
            tick: 0,
            ready: [libc::epoll_event { events: 0, u64: 0 }; MAX_READY],
            nready: 0,
            cursor: 0,
            rx: RecvBatch::default(),
            control: ControlBuf::default(),
            counters,
        })
    }

    /// The main port actually bound (useful when configured as 0 in tests).
    pub fn port(&self) -> u16 {
        self.main
            .socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map_or(self.opts.port, |a| a.port())
    }

    /// The send socket for `src_port`, opening (and evicting the least recently used) as needed.
    fn send_socket(&mut self, src_port: u16) -> &mut Sock {
        self.tick += 1;
        let tick = self.tick;
        if src_port == 0 || src_port == self.opts.port {
            return &mut self.main;
        }
        if !self.send.contains_key(&src_port) {
            if self.send.len() >= self.opts.max_send_sockets.max(1) {
                self.evict_lru();
            }
            match new_socket(&self.opts, src_port, true) {
                Ok(socket) => {
                    self.generations = self.generations.wrapping_add(1).max(1);
                    self.send.insert(
                        src_port,
                        Sock {
                            socket,
                            generation: self.generations,
                            sent: 0,
                            last_used: tick,
                        },
                    );
                }
                Err(_) => {
                    self.counters
                        .send_socket_fallbacks
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return &mut self.main;
                }
            }
        }
        let sock = self.send.get_mut(&src_port).unwrap_or(&mut self.main);
        sock.last_used = tick;
        sock
    }

    fn evict_lru(&mut self) {
        if let Some(port) = self
            .send
            .iter()
            .min_by_key(|(_, s)| s.last_used)
            .map(|(p, _)| *p)
        {
            self.close_send_socket(port);
        }
    }

    fn close_send_socket(&mut self, port: u16) {
        self.send.remove(&port);
        self.unstamped.retain(|(p, _)| *p != port);
    }

    /// Reads TX stamps from the error queue of send socket `port` into `pending`: one
    /// message when `once` (right after a send, exactly one stamp is due), else all.
    /// Returns how many stamps were read.
    fn read_stamps(&mut self, port: u16, once: bool) -> usize {
        let Some(sock) = self.send.get(&port) else {
            return 0;
        };
        let (fd, generation) = (sock.socket.as_raw_fd(), sock.generation);
        let mut n = 0;
        while let Ok(r) = timestamping::recv(fd, &mut [], true, &mut self.control) {
            if let (Some(id), Some(stamp)) = (r.control.tx_id, r.control.stamp) {
                self.pending
                    .push_back(TransportEvent::TxStamp(token(generation, id), stamp));
                n += 1;
            }
            if once {
                break;
            }
        }
        n
    }

    /// Looks again for the stamps that were not there right after their send.
    fn poll_unstamped(&mut self, now: Instant) {
        let mut list = std::mem::take(&mut self.unstamped);
        list.retain(|&(port, until)| self.read_stamps(port, false) == 0 && until > now);
        // Sends made meanwhile (none: we are in wait) would have been appended; keep both.
        list.append(&mut self.unstamped);
        self.unstamped = list;
    }

    /// Reads from the main socket, guided by its epoll `events` (EPOLLERR: TX stamps of
    /// sends that fell back to it, one at a time; EPOLLIN: a batch of datagrams, the first
    /// returned and the rest queued). Bits of sources found empty are cleared so nothing
    /// is read twice in vain.
    fn read_one(&mut self, events: &mut u32) -> Option<TransportEvent> {
        let (fd, generation) = (self.main.socket.as_raw_fd(), self.main.generation);
        while *events & libc::EPOLLERR as u32 != 0 {
            match timestamping::recv(fd, &mut [], true, &mut self.control) {
                Ok(r) => {
                    if let (Some(id), Some(stamp)) = (r.control.tx_id, r.control.stamp) {
                        return Some(TransportEvent::TxStamp(token(generation, id), stamp));
                    }
                    // Other error-queue messages (none expected) are read and ignored.
                }
                Err(_) => *events &= !(libc::EPOLLERR as u32),
            }
        }
        if *events & libc::EPOLLIN as u32 != 0 {
            match self.rx.recv(fd) {
                Ok(n) => {
                    // A short batch emptied the queue: no read is spent to find out.
                    if n < BATCH {
                        *events &= !(libc::EPOLLIN as u32);
                    }
                    for i in 0..n {
                        let (data, r) = self.rx.get(i);
                        let peer = r.peer.unwrap_or(SocketAddr::new(self.opts.ip, 0));
                        let d = RxDatagram::new(
                            data,
                            r.len,
                            peer.ip(),
                            Some(peer.port()),
                            r.control.stamp,
                        );
                        self.pending.push_back(TransportEvent::Rx(d));
                    }
                    return self.pending.pop_front();
                }
                Err(_) => *events &= !(libc::EPOLLIN as u32),
            }
        }
        None
    }
}

/// The token of send number `id` on the socket of generation `generation`.
fn token(generation: u32, id: u32) -> TxToken {
    TxToken(((generation as u64) << 32) | id as u64)
}

fn new_socket(opts: &UdpOptions, port: u16, shared: bool) -> io::Result<Socket> {
    let domain = if opts.ip.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::DGRAM.cloexec(), Some(Protocol::UDP))?;
    if shared {
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    timestamping::enable(socket.as_raw_fd())?;
    if let Some(dscp) = opts.dscp {
        let tos = (dscp as u32) << 2;
        if opts.ip.is_ipv4() {
            socket.set_tos_v4(tos)?;
        } else {
            socket.set_tclass_v6(tos)?;
        }
    }
    socket.bind(&SockAddr::from(SocketAddr::new(opts.ip, port)))?;
    Ok(socket)
}

impl Transport for UdpTransport {
    fn local_ip(&self) -> IpAddr {
        self.opts.ip
    }

    fn send(&mut self, payload: &[u8], to: Endpoint, src_port: u16) -> io::Result<TxToken> {
        let dest = SockAddr::from(SocketAddr::new(to.ip, to.port));
        let sock = self.send_socket(src_port);
        match sock.socket.send_to(payload, &dest) {
            Ok(_) => {
                let t = token(sock.generation, sock.sent);
                sock.sent = sock.sent.wrapping_add(1);
                // The main socket's stamps wake its epoll; a send socket's are read now.
                if sock.generation != 0 && self.read_stamps(src_port, true) == 0 {
                    self.unstamped.push((src_port, Instant::now() + STAMP_WAIT));
                }
                Ok(t)
            }
            Err(e) => {
                // The kernel may or may not have consumed an OPT_ID for the failed send; a
                // fresh socket restarts the count so later stamps cannot be misattributed.
                if sock.generation != 0 {
                    self.close_send_socket(src_port);
                }
                Err(e)
            }
        }
    }

    fn send_unstamped(&mut self, payload: &[u8], to: Endpoint, src_port: u16) -> io::Result<()> {
        let dest = SockAddr::from(SocketAddr::new(to.ip, to.port));
        let fd = self.send_socket(src_port).socket.as_raw_fd();
        sys::send_without_stamp(fd, payload, &dest)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        self.cursor = 0;
        self.nready = 0;
        if !self.pending.is_empty() {
            return Ok(());
        }
        let timeout = if self.unstamped.is_empty() {
            timeout
        } else {
            timeout.min(STAMP_POLL)
        };
        self.nready = match self.epoll.wait(&mut self.ready, timeout) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        };
        if !self.unstamped.is_empty() {
            self.poll_unstamped(Instant::now());
        }
        Ok(())
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.main.socket.as_raw_fd())
    }

    /// The main socket's readiness comes from the caller's epoll: no syscall to learn it.
    fn ready(&mut self, events: u32) -> io::Result<()> {
        self.ready[0] = libc::epoll_event {
            events,
            u64: MAIN_KEY,
        };
        self.cursor = 0;
        self.nready = 1;
        if !self.unstamped.is_empty() {
            self.poll_unstamped(Instant::now());
        }
        Ok(())
    }

    fn poll_within(&self) -> Option<Duration> {
        (!self.unstamped.is_empty()).then_some(STAMP_POLL)
    }

    fn next_event(&mut self) -> Option<TransportEvent> {
        if let Some(ev) = self.pending.pop_front() {
            return Some(ev);
        }
        while self.cursor < self.nready {
            let mut events = self.ready[self.cursor].events;
            let ev = self.read_one(&mut events);
            self.ready[self.cursor].events = events;
            if ev.is_some() {
                return ev;
            }
            self.cursor += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::TimestampSource;
    use rocemesh_proto::packet::PACKET_LEN;
    use std::time::Instant;

    fn open(ip: &str, max_send_sockets: usize) -> UdpTransport {
        let opts = UdpOptions {
            ip: ip.parse().unwrap(),
            port: 0,
            dscp: Some(46),
            hardware_timestamps_on: None,
            max_send_sockets,
        };
        UdpTransport::open(opts, Arc::new(Counters::default())).unwrap()
    }

    fn events_until(t: &mut UdpTransport, want: usize) -> Vec<TransportEvent> {
        let start = Instant::now();
        let mut out = Vec::new();
        while out.len() < want && start.elapsed() < Duration::from_secs(2) {
            t.wait(Duration::from_millis(50)).unwrap();
            while let Some(e) = t.next_event() {
                out.push(e);
            }
        }
        out
    }

    #[test]
    fn software_stamps_on_loopback_from_the_chosen_source_port() {
        let mut a = open("127.0.9.1", 4);
        let mut b = open("127.0.9.2", 4);
        let to_b = Endpoint {
            ip: "127.0.9.2".parse().unwrap(),
            port: b.port(),
            qpn: 0,
        };
        // The kernel turns RX timestamping on through deferred work: send until one
        // arrives stamped (unstamped sends leave the sender's state as it was).
        let start = Instant::now();
        loop {
            a.send_unstamped(&[1u8; PACKET_LEN], to_b, 40_001).unwrap();
            let stamped = events_until(&mut b, 1).iter().any(|e| {
                matches!(e, TransportEvent::Rx(d) if d.stamp.map(|s| s.source) == Some(TimestampSource::Software))
            });
            if stamped {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "no RX stamp");
        }
        let payload = [7u8; PACKET_LEN];
        let t0 = a.send(&payload, to_b, 40_001).unwrap();
        // An unstamped send in between neither yields a stamp nor shifts the OPT_IDs.
        a.send_unstamped(&payload, to_b, 40_001).unwrap();
        let t1 = a.send(&payload, to_b, 40_001).unwrap();
        assert_eq!(t1.0, t0.0 + 1);
        // Software stamps were read with the sends: no wake-up needed for them.
        assert_eq!(a.pending.len(), 2);
        assert!(a.unstamped.is_empty());
        let tx = events_until(&mut a, 2);
        let tokens: Vec<_> = tx
            .iter()
            .filter_map(|e| match e {
                TransportEvent::TxStamp(t, s) => {
                    assert_eq!(s.source, TimestampSource::Software);
                    Some(*t)
                }
                TransportEvent::Rx(_) => None,
            })
            .collect();
        assert_eq!(tokens, vec![t0, t1]);
        let rx = events_until(&mut b, 3);
        assert_eq!(rx.len(), 3);
        for e in rx {
            let TransportEvent::Rx(d) = e else {
                panic!("unexpected {e:?}")
            };
            assert_eq!(
                (d.peer_port, d.len, d.payload()),
                (Some(40_001), PACKET_LEN, &payload[..])
            );
            assert_eq!(d.stamp.map(|s| s.source), Some(TimestampSource::Software));
        }
    }

    #[test]
    fn send_sockets_are_bounded_and_unbindable_ports_fall_back() {
        let mut a = open("127.0.9.3", 2);
        let to = Endpoint {
            ip: "127.0.9.4".parse().unwrap(),
            port: 9,
            qpn: 0,
        };
        for port in [40_010, 40_011, 40_012, 40_010] {
            a.send(&[0; PACKET_LEN], to, port).unwrap();
        }
        assert_eq!(a.send.len(), 2);
        assert!(a.send.contains_key(&40_010) && a.send.contains_key(&40_012));
        // A port another socket holds exclusively cannot be bound: the main socket sends instead.
        let blocker = std::net::UdpSocket::bind("127.0.9.3:40020").unwrap();
        a.send(&[0; PACKET_LEN], to, 40_020).unwrap();
        drop(blocker);
        assert_eq!(
            a.counters
                .send_socket_fallbacks
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }

    #[test]
    fn foreign_ip_is_a_clear_error() {
        let opts = UdpOptions {
            ip: "192.0.2.77".parse().unwrap(),
            port: 4792,
            dscp: None,
            hardware_timestamps_on: None,
            max_send_sockets: 1,
        };
        let err = UdpTransport::open(opts, Arc::new(Counters::default()))
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("is not assigned to this host"),
            "{err}"
        );
    }
}
