//! `wr_id` bookkeeping: which completion belongs to which receive slot or send.
//!
//! Receives carry `RECV | generation << 32 | slot`; the generation changes whenever the
//! QP is reset, so a stale completion of the previous incarnation is recognised.
//! Sends carry their token (below 2^63); a token owns send slot `token % slots` until
//! its completion, so at most `slots` sends are in flight.

const RECV: u64 = 1 << 63;

/// A decoded `wr_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkId {
    /// Receive slot `slot`, posted in QP generation `generation`.
    Recv { generation: u32, slot: u32 },
    /// The send with this token.
    Send(u64),
}

impl WorkId {
    pub(crate) fn encode(self) -> u64 {
        match self {
            Self::Recv { generation, slot } => {
                RECV | (u64::from(generation & 0x7FFF_FFFF) << 32) | u64::from(slot)
            }
            Self::Send(token) => token & !RECV,
        }
    }

    pub(crate) fn decode(wr_id: u64) -> Self {
        if wr_id & RECV != 0 {
            Self::Recv {
                generation: ((wr_id >> 32) & 0x7FFF_FFFF) as u32,
                slot: wr_id as u32,
            }
        } else {
            Self::Send(wr_id)
        }
    }
}

/// Send slots in flight, each holding what must live until the completion (the AH).
pub(crate) struct SendSlots<T> {
    slots: Vec<Option<(u64, T)>>,
    next_token: u64,
}

impl<T> SendSlots<T> {
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            slots: (0..slots.max(1)).map(|_| None).collect(),
            next_token: 0,
        }
    }

    /// The next token and its slot, if that slot is free.
    pub(crate) fn reserve(&self) -> Option<(u64, usize)> {
        let slot = (self.next_token % self.slots.len() as u64) as usize;
        self.slots[slot]
            .is_none()
            .then_some((self.next_token, slot))
    }

    /// Marks the reserved send as posted.
    pub(crate) fn commit(&mut self, token: u64, slot: usize, keep: T) {
        self.slots[slot] = Some((token, keep));
        self.next_token = (token + 1) & !RECV;
    }

    /// Frees the slot of a completed send; `false` for an unknown or stale token.
    pub(crate) fn complete(&mut self, token: u64) -> bool {
        let slot = (token % self.slots.len() as u64) as usize;
        match &self.slots[slot] {
            Some((t, _)) if *t == token => {
                self.slots[slot] = None;
                true
            }
            _ => false,
        }
    }

    /// Most sends in flight at once.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Sends in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Forgets every send (after a QP reset flushed them).
    pub(crate) fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_ids_round_trip_and_never_collide() {
        for id in [
            WorkId::Recv {
                generation: 0,
                slot: 0,
            },
            WorkId::Recv {
                generation: 0x7FFF_FFFF,
                slot: u32::MAX,
            },
            WorkId::Send(0),
            WorkId::Send((1 << 63) - 1),
        ] {
            assert_eq!(WorkId::decode(id.encode()), id);
        }
        assert_ne!(
            WorkId::Recv {
                generation: 1,
                slot: 3
            }
            .encode(),
            WorkId::Recv {
                generation: 2,
                slot: 3
            }
            .encode()
        );
    }

    #[test]
    fn a_full_ring_refuses_until_the_oldest_completes() {
        let mut s = SendSlots::new(2);
        let (t0, s0) = s.reserve().unwrap();
        s.commit(t0, s0, "ah0");
        let (t1, s1) = s.reserve().unwrap();
        s.commit(t1, s1, "ah1");
        assert_eq!((s.reserve(), s.in_flight(), s.capacity()), (None, 2, 2));
        assert!(
            !s.complete(t1 + 2),
            "a token that was never sent frees nothing"
        );
        assert!(s.complete(t0));
        assert!(!s.complete(t0), "a completion is consumed once");
        assert_eq!(s.reserve(), Some((2, 0)));
        s.clear();
        assert_eq!(s.in_flight(), 0);
    }
}
