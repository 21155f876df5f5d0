//! Completion timestamps: NIC clock ticks to nanoseconds, across counter wrap-around.
//!
//! An extended CQ created with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` reports raw ticks
//! of the NIC's free-running clock: `hca_core_clock` kHz, only the bits of
//! `completion_timestamp_mask` valid, so the counter wraps. [`TickClock`] unwraps the
//! counter into a continuous tick count (differences across a wrap stay right) and
//! converts to ns. `..._WALLCLOCK` completions are already ns of real time, and a CQ
//! without timestamps falls back to a software `CLOCK_REALTIME` stamp at poll time,
//! flagged as such.

use rocemesh_proto::TimestampSource;
use thiserror::Error;

/// Which clock a [`CompletionStamp`] was taken on. One CQ uses one clock for all its
/// completions, so stamps of one transport are always comparable with each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampClock {
    /// The NIC's free-running counter converted with `hca_core_clock`.
    NicFreeRunning,
    /// The NIC's real-time clock (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`).
    NicWallclock,
    /// No NIC timestamps: `CLOCK_REALTIME` read when the completion was polled.
    SoftwarePoll,
}

impl StampClock {
    /// How the probe protocol labels stamps of this clock.
    pub fn source(self) -> TimestampSource {
        match self {
            Self::NicFreeRunning | Self::NicWallclock => TimestampSource::Hardware,
            Self::SoftwarePoll => TimestampSource::Software,
        }
    }
}

/// One completion's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletionStamp {
    /// Nanoseconds on `clock`.
    pub ns: u64,
    /// The clock `ns` is on.
    pub clock: StampClock,
}

/// Why NIC tick timestamps cannot be used (the transport then falls back to software).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TickClockError {
    /// `completion_timestamp_mask` is zero: the device has no completion timestamps.
    #[error("device reports no completion timestamps (completion_timestamp_mask = 0)")]
    NoTimestamps,
    /// `hca_core_clock` is zero: ticks cannot be converted to time.
    #[error("device reports hca_core_clock = 0 kHz: completion ticks cannot be converted to ns")]
    NoCoreClock,
}

/// Converts raw completion ticks to ns, unwrapping the masked counter.
#[derive(Debug, Clone)]
pub struct TickClock {
    mask: u64,
    khz: u64,
    /// Last raw value seen and its unwrapped tick count.
    last: Option<(u64, u128)>,
}

impl TickClock {
    /// A converter for a device's `completion_timestamp_mask` and `hca_core_clock` (kHz).
    pub fn new(
        completion_timestamp_mask: u64,
        hca_core_clock_khz: u64,
    ) -> Result<Self, TickClockError> {
        if completion_timestamp_mask == 0 {
            return Err(TickClockError::NoTimestamps);
        }
        if hca_core_clock_khz == 0 {
            return Err(TickClockError::NoCoreClock);
        }
        Ok(Self {
            mask: completion_timestamp_mask,
            khz: hca_core_clock_khz,
            last: None,
        })
    }

    /// Ticks → ns at this clock's rate (`ticks * 10^6 / kHz`, no overflow).
    pub fn ticks_to_ns(&self, ticks: u128) -> u128 {
        ticks * 1_000_000 / u128::from(self.khz)
    }

    /// Wrap-correct signed tick difference `later - earlier` of two raw values,
    /// assuming they are less than half a counter period apart.
    pub fn tick_delta(&self, earlier: u64, later: u64) -> i128 {
        let forward = later.wrapping_sub(earlier) & self.mask;
        let period = u128::from(self.mask) + 1;
        if u128::from(forward) <= u128::from(self.mask) / 2 {
            i128::from(forward)
        } else {
            i128::from(forward) - period as i128
        }
    }

    /// Continuous ns for a raw completion timestamp. Successive calls must be less
    /// than half a counter period apart (true for any real mask: ≥ 2^32 ticks).
    /// Stamps a little older than the previous one (completions are not globally
    /// ordered between send and receive queues) come out correspondingly earlier.
    pub fn to_ns(&mut self, raw: u64) -> u64 {
        let raw = raw & self.mask;
        let unwrapped = match self.last {
            None => u128::from(raw),
            Some((last_raw, last_ticks)) => {
                let delta = self.tick_delta(last_raw, raw);
                let ticks = last_ticks as i128 + delta;
                // Before the very first stamp (only possible right after start): clamp.
                u128::try_from(ticks).unwrap_or(0)
            }
        };
        match self.last {
            Some((_, last_ticks)) if unwrapped < last_ticks => {}
            _ => self.last = Some((raw, unwrapped)),
        }
        u64::try_from(self.ticks_to_ns(unwrapped)).unwrap_or(u64::MAX)
    }
}

/// `CLOCK_REALTIME` now, in ns: the software fallback stamp.
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MASK48: u64 = (1 << 48) - 1;

    #[test]
    fn missing_capabilities_are_errors() {
        assert_eq!(
            TickClock::new(0, 156_250).unwrap_err(),
            TickClockError::NoTimestamps
        );
        assert_eq!(
            TickClock::new(MASK48, 0).unwrap_err(),
            TickClockError::NoCoreClock
        );
    }

    #[test]
    fn ticks_convert_at_the_core_clock_rate() {
        // ConnectX-4: 156.25 MHz = 6.4 ns per tick.
        let mut c = TickClock::new(MASK48, 156_250).unwrap();
        assert_eq!(c.to_ns(1_000), 6_400);
        assert_eq!(c.to_ns(1_000 + 156_250_000), 6_400 + 1_000_000_000);
        // 1 GHz: 1 ns per tick.
        let mut g = TickClock::new(u64::MAX, 1_000_000).unwrap();
        assert_eq!(g.to_ns(123_456_789), 123_456_789);
    }

    #[test]
    fn differences_across_a_wrap_are_right() {
        let mut c = TickClock::new(MASK48, 1_000_000).unwrap();
        let before = c.to_ns(MASK48 - 9);
        let after = c.to_ns(5);
        assert_eq!(after - before, 15);
        assert_eq!(c.tick_delta(MASK48 - 9, 5), 15);
        assert_eq!(c.tick_delta(5, MASK48 - 9), -15);
        // a second wrap keeps counting up
        c.to_ns(MASK48 / 2);
        c.to_ns(MASK48 - 100);
        let third = c.to_ns(0);
        assert_eq!(third - after, MASK48 + 1 - 5);
    }

    #[test]
    fn a_slightly_older_completion_is_earlier_and_does_not_move_the_reference() {
        let mut c = TickClock::new(MASK48, 1_000_000).unwrap();
        c.to_ns(1_000);
        assert_eq!(c.to_ns(990), 990);
        assert_eq!(c.to_ns(1_010), 1_010);
        // older than the very first stamp: clamped at zero, never a wrap forward
        let mut first = TickClock::new(MASK48, 1_000_000).unwrap();
        first.to_ns(3);
        assert_eq!(first.to_ns(MASK48), 0);
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let mut c = TickClock::new(u64::MAX, 1).unwrap();
        assert_eq!(c.to_ns(u64::MAX), u64::MAX);
        assert_eq!(
            c.ticks_to_ns(u128::from(u64::MAX)),
            u128::from(u64::MAX) * 1_000_000
        );
        // bits outside the mask are ignored
        let mut m = TickClock::new(0xFFFF, 1_000_000).unwrap();
        assert_eq!(m.to_ns(0xABCD_0010), 0x10);
    }

    #[test]
    fn clocks_map_to_protocol_sources() {
        assert_eq!(
            StampClock::NicFreeRunning.source(),
            TimestampSource::Hardware
        );
        assert_eq!(StampClock::NicWallclock.source(), TimestampSource::Hardware);
        assert_eq!(StampClock::SoftwarePoll.source(), TimestampSource::Software);
    }
}
