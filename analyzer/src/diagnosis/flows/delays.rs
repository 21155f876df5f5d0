//! Processing delays per RNIC over the window (the host-noise filter's evidence): how
//! many delays each RNIC's agent reported and how many were above the noise threshold,
//! per bucket of the window's ring, with running totals. Hosts add up their RNICs' at a
//! tick (the registry then says which host an RNIC is on).

/// Delays of one RNIC: (reported, above the noise threshold).
pub(crate) type Tally = (u32, u32);

/// Per-RNIC delay tallies, dense by RNIC id (ids are bounded by the registry).
#[derive(Debug)]
pub(crate) struct Delays {
    slots_per_rnic: usize,
    /// `slots_per_rnic` buckets per RNIC.
    slots: Vec<Tally>,
    totals: Vec<Tally>,
}

impl Delays {
    /// No delays yet, `slots_per_rnic` buckets per RNIC.
    pub(crate) fn new(slots_per_rnic: usize) -> Self {
        Self {
            slots_per_rnic,
            slots: Vec::new(),
            totals: Vec::new(),
        }
    }

    /// Counts one delay of RNIC `rnic`'s agent in slot `slot`.
    pub(crate) fn add(&mut self, rnic: u32, slot: usize, slow: bool) {
        let r = rnic as usize;
        if self.totals.len() <= r {
            self.totals.resize(r + 1, (0, 0));
            self.slots.resize((r + 1) * self.slots_per_rnic, (0, 0));
        }
        let s = &mut self.slots[r * self.slots_per_rnic + slot];
        let t = &mut self.totals[r];
        s.0 += 1;
        t.0 += 1;
        if slow {
            s.1 += 1;
            t.1 += 1;
        }
    }

    /// Clears the slots `expired` of every RNIC.
    pub(crate) fn expire(&mut self, expired: &[usize]) {
        if expired.is_empty() {
            return;
        }
        for (t, ring) in self
            .totals
            .iter_mut()
            .zip(self.slots.chunks_exact_mut(self.slots_per_rnic))
        {
            for &s in expired {
                let (n, slow) = std::mem::take(&mut ring[s]);
                t.0 -= n;
                t.1 -= slow;
            }
        }
    }

    /// Window totals of every RNIC with delays: (RNIC id, tally).
    pub(crate) fn totals(&self) -> impl Iterator<Item = (u32, Tally)> + '_ {
        self.totals
            .iter()
            .enumerate()
            .filter(|(_, t)| t.0 > 0)
            .map(|(r, t)| (r as u32, *t))
    }
}
