//! Turns periodic readings of every RNIC's cumulative counters into rows of per-interval
//! byte deltas, on a fixed grid of intervals (a late reading starts a new run rather than
//! smearing several intervals into one).

use super::counters::{CounterSource, NET_DEV, Reading, counter_delta};
use super::series::Row;
use crate::stats::Counters;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// Reads the counters of a fixed set of RNICs, one reading per interval.
#[derive(Debug)]
pub(crate) struct Sampler {
    sources: Vec<CounterSource>,
    prev: Vec<Option<Reading>>,
    interval: Duration,
    /// Origin of the interval grid, monotonic and wall-clock.
    origin: Instant,
    origin_ms: i64,
    /// Grid point of the last reading.
    last: Option<u64>,
    /// Whether the last reading had errors (they are logged once per episode).
    failing: bool,
}

impl Sampler {
    /// A sampler of `sources` (one column each) whose grid starts at the next multiple of
    /// `interval` on the Unix clock, so every agent's intervals cover the same wall-clock
    /// spans and the controller's series line up across hosts (a grid shifted by a fraction
    /// of an interval moves a burst into the next sample and looks like a pipeline shift).
    pub(crate) fn new(sources: Vec<CounterSource>, interval: Duration) -> Self {
        let interval = interval.max(Duration::from_millis(1));
        let (origin, origin_ms) = grid_origin(
            Instant::now(),
            rocemesh_proto::now_unix_ms(),
            interval.as_millis().max(1) as i64,
        );
        Self {
            prev: vec![None; sources.len()],
            sources,
            interval,
            origin,
            origin_ms,
            last: None,
            failing: false,
        }
    }

    /// Number of columns of every row.
    pub(crate) fn width(&self) -> usize {
        self.sources.len()
    }

    /// When the next reading is due.
    pub(crate) fn next_due(&self) -> Instant {
        let next = u128::from(self.last.map_or(0, |k| k + 1));
        let ns = (next * self.interval.as_nanos()).min(u128::from(u64::MAX));
        self.origin + Duration::from_nanos(ns as u64)
    }

    /// Reads every counter at `now` (normally [`Self::next_due`]). Returns the row of the
    /// interval this reading closes, or `None` for the first reading and after a gap
    /// (the reading is then only the new baseline). An RNIC whose counters cannot be
    /// read counts 0 bytes until two readings in a row succeed again.
    pub(crate) fn read(&mut self, now: Instant, counters: &Counters) -> Option<Row> {
        let step = self.interval.as_nanos();
        let k = ((now.saturating_duration_since(self.origin).as_nanos() + step / 2) / step) as u64;
        let net_dev = self
            .sources
            .iter()
            .any(|s| matches!(s, CounterSource::NetDev { .. }))
            .then(|| std::fs::read_to_string(NET_DEV).ok())
            .flatten();
        let mut errors = Vec::new();
        let readings: Vec<Option<Reading>> = self
            .sources
            .iter()
            .map(|s| {
                s.read(net_dev.as_deref())
                    .map_err(|e| errors.push(format!("{e:#}")))
                    .ok()
            })
            .collect();
        if !errors.is_empty() {
            counters
                .sample_read_errors
                .fetch_add(errors.len() as u64, Relaxed);
            if !self.failing {
                tracing::warn!(errors = ?errors, "cannot read RNIC byte counters; counting 0 bytes");
            }
        }
        self.failing = !errors.is_empty();
        let consecutive = self.last.is_some_and(|last| last + 1 == k);
        let row = consecutive.then(|| Row {
            index: k - 1,
            start_ms: self.origin_ms + (k - 1) as i64 * self.interval.as_millis() as i64,
            bytes: self
                .sources
                .iter()
                .zip(&self.prev)
                .zip(&readings)
                .map(|((src, prev), cur)| match (prev, cur) {
                    (Some(p), Some(c)) => {
                        let unit = src.unit_bytes();
                        (
                            counter_delta(p.tx, c.tx, src.kind()).saturating_mul(unit),
                            counter_delta(p.rx, c.rx, src.kind()).saturating_mul(unit),
                        )
                    }
                    _ => (0, 0),
                })
                .collect(),
        });
        self.prev = readings;
        self.last = Some(k);
        row
    }
}

/// The first grid point at or after `now_ms` (Unix ms) that is a multiple of `step_ms`,
/// as a monotonic instant and in Unix ms.
fn grid_origin(now: Instant, now_ms: i64, step_ms: i64) -> (Instant, i64) {
    let origin_ms =
        now_ms.div_euclid(step_ms) * step_ms + step_ms * i64::from(now_ms.rem_euclid(step_ms) != 0);
    let wait = Duration::from_millis((origin_ms - now_ms).max(0) as u64);
    (now + wait, origin_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn write(dir: &Path, tx: u64, rx: u64) {
        std::fs::write(dir.join("port_xmit_data"), format!("{tx}\n")).unwrap();
        std::fs::write(dir.join("port_rcv_data"), format!("{rx}\n")).unwrap();
    }

    #[test]
    fn grids_of_samplers_started_apart_line_up_on_the_unix_clock() {
        let now = Instant::now();
        assert_eq!(grid_origin(now, 10_000, 250), (now, 10_000));
        assert_eq!(
            grid_origin(now, 10_001, 250),
            (now + Duration::from_millis(249), 10_250)
        );
        assert_eq!(
            grid_origin(now, 10_249, 250),
            (now + Duration::from_millis(1), 10_250)
        );
        // Two real samplers started a fraction of an interval apart share grid points.
        let a = Sampler::new(Vec::new(), Duration::from_millis(250));
        std::thread::sleep(Duration::from_millis(90));
        let b = Sampler::new(Vec::new(), Duration::from_millis(250));
        for s in [&a, &b] {
            assert_eq!(s.origin_ms % 250, 0, "{}", s.origin_ms);
            assert!(s.origin >= now && s.origin <= Instant::now() + Duration::from_millis(250));
        }
        assert_eq!((b.origin_ms - a.origin_ms) % 250, 0);
    }

    #[test]
    fn rows_are_deltas_in_bytes_on_a_fixed_grid() {
        let root = std::env::temp_dir().join(format!("rocemesh-sampler-{}", std::process::id()));
        let a = CounterSource::rdma_port(&root, "mlx5_0", 1);
        let b = CounterSource::rdma_port(&root, "mlx5_1", 1);
        let (da, db) = (
            root.join("mlx5_0/ports/1/counters"),
            root.join("mlx5_1/ports/1/counters"),
        );
        let (da, db) = (&da, &db);
        std::fs::create_dir_all(da).unwrap();
        std::fs::create_dir_all(db).unwrap();
        let counters = Counters::default();
        let ms = Duration::from_millis;
        let mut s = Sampler::new(vec![a, b], ms(100));
        let t0 = s.origin;
        assert_eq!(s.next_due(), t0);
        write(da, 100, 7);
        write(db, u64::from(u32::MAX) - 1, 0);
        assert_eq!(
            s.read(t0, &counters),
            None,
            "the first reading is the baseline"
        );
        assert_eq!(s.next_due(), t0 + ms(100));
        write(da, 350, 7);
        write(db, 3, 1); // 32-bit wrap: 5 words
        let row = s.read(t0 + ms(103), &counters).unwrap();
        assert_eq!(
            (row.index, row.bytes.clone()),
            (0, vec![(1_000, 0), (20, 4)])
        );
        assert_eq!(row.start_ms, s.origin_ms);
        // A reading that cannot be made counts 0 and breaks the baseline of that RNIC only.
        std::fs::remove_file(db.join("port_rcv_data")).unwrap();
        write(da, 351, 8);
        let row = s.read(t0 + ms(198), &counters).unwrap();
        assert_eq!((row.index, row.bytes.clone()), (1, vec![(4, 4), (0, 0)]));
        assert_eq!(row.start_ms, s.origin_ms + 100);
        assert_eq!(counters.sample_read_errors.load(Relaxed), 1);
        write(db, 10, 10);
        let row = s.read(t0 + ms(300), &counters).unwrap();
        assert_eq!(
            row.bytes,
            vec![(0, 0), (0, 0)],
            "no baseline yet for the second RNIC"
        );
        write(db, 11, 12);
        assert_eq!(s.read(t0 + ms(400), &counters).unwrap().bytes[1], (4, 8));
        // A late reading (a stalled thread) starts a new run instead of smearing intervals.
        assert_eq!(s.read(t0 + ms(700), &counters), None);
        write(da, 361, 8);
        let row = s.read(t0 + ms(800), &counters).unwrap();
        assert_eq!((row.index, row.bytes[0]), (7, (40, 0)));
        let _ = std::fs::remove_dir_all(&root);
    }
}
