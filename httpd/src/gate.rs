//! Admission: the listener-wide connection slots and the per-source counts.

use crate::limits::Limits;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Every connection slot of the listener is taken.
    Full,
    /// Its source address holds `max_connections_per_ip` connections.
    SourceConnections,
    /// Its source address has `max_handshakes_per_ip` TLS handshakes in progress.
    SourceHandshakes,
}

impl Refusal {
    /// Short reason for logs.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::Full => "connection limit reached",
            Self::SourceConnections => "too many connections from this address",
            Self::SourceHandshakes => "too many TLS handshakes from this address",
        }
    }
}

#[derive(Debug, Default)]
struct Source {
    connections: usize,
    handshakes: usize,
}

/// The counts every connection of one listener is admitted against.
#[derive(Debug)]
pub(crate) struct Gate {
    pub limits: Limits,
    slots: Arc<Semaphore>,
    max: usize,
    /// At most one entry per open connection (removed with its last connection).
    sources: Mutex<HashMap<IpAddr, Source>>,
}

impl Gate {
    /// A gate of `max` connection slots (the effective cap) under `limits`.
    pub(crate) fn new(limits: Limits, max: usize) -> Self {
        Self {
            limits,
            slots: Arc::new(Semaphore::new(max)),
            max,
            sources: Mutex::new(HashMap::new()),
        }
    }

    /// Admits a connection from `ip` (`tls`: it starts with a handshake) or says why not.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr, tls: bool) -> Result<Admitted, Refusal> {
        let ip = ip.to_canonical();
        let slot = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refusal::Full)?;
        let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        let source = sources.entry(ip).or_default();
        if source.connections >= self.limits.max_connections_per_ip {
            return Err(Refusal::SourceConnections);
        }
        if tls && source.handshakes >= self.limits.max_handshakes_per_ip {
            return Err(Refusal::SourceHandshakes);
        }
        source.connections += 1;
        source.handshakes += usize::from(tls);
        Ok(Admitted {
            gate: self.clone(),
            ip,
            handshaking: tls,
            _slot: slot,
        })
    }

    /// Resolves once every admitted connection is gone (after the listener stopped).
    pub(crate) async fn closed(&self) {
        let all = u32::try_from(self.max).unwrap_or(u32::MAX);
        let _ = self.slots.acquire_many(all).await;
    }

    fn release(&self, ip: IpAddr, connection: bool, handshake: bool) {
        let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = sources.get_mut(&ip) {
            s.connections -= usize::from(connection);
            s.handshakes -= usize::from(handshake);
            if s.connections == 0 {
                sources.remove(&ip);
            }
        }
    }

    /// Source addresses with an open connection (bounded by the connection cap).
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.sources.lock().unwrap().len()
    }
}

/// One admitted connection: its slot and its source's counts, given back on drop.
#[derive(Debug)]
pub(crate) struct Admitted {
    gate: Arc<Gate>,
    ip: IpAddr,
    handshaking: bool,
    _slot: OwnedSemaphorePermit,
}

impl Admitted {
    /// The listener's limits.
    pub(crate) fn limits(&self) -> &Limits {
        &self.gate.limits
    }

    /// The TLS handshake ended (either way): the source may start another.
    pub(crate) fn handshake_over(&mut self) {
        if std::mem::take(&mut self.handshaking) {
            self.gate.release(self.ip, false, true);
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.gate.release(self.ip, true, self.handshaking);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(max: usize, per_ip: usize, handshakes: usize) -> Arc<Gate> {
        let limits = Limits {
            max_connections: max,
            max_connections_per_ip: per_ip,
            max_handshakes_per_ip: handshakes,
            ..Limits::default()
        };
        Arc::new(Gate::new(limits, max))
    }

    #[test]
    fn caps_hold_and_slots_come_back() {
        let g = gate(5, 3, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let mut held = vec![g.admit(a, true).unwrap(), g.admit(a, true).unwrap()];
        assert_eq!(g.admit(a, true).unwrap_err(), Refusal::SourceHandshakes);
        // A finished handshake frees its handshake count, not its connection.
        held[0].handshake_over();
        held.push(g.admit(a, true).unwrap());
        assert_eq!(g.admit(a, false).unwrap_err(), Refusal::SourceConnections);
        // Another source is not affected until the listener is full.
        held.push(g.admit(b, false).unwrap());
        held.push(g.admit(b, false).unwrap());
        assert_eq!(g.admit(b, false).unwrap_err(), Refusal::Full);
        // The same address written as IPv4-mapped IPv6 counts as itself.
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        drop(held.pop());
        assert_eq!(
            g.admit(mapped, false).unwrap_err(),
            Refusal::SourceConnections
        );
        drop(held);
        assert_eq!(g.tracked(), 0);
        let again: Vec<_> = (0..3).map(|_| g.admit(a, true)).collect();
        assert!(again[..2].iter().all(Result::is_ok));
        assert_eq!(again[2].as_ref().unwrap_err(), &Refusal::SourceHandshakes);
    }
}
