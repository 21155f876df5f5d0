//! Where an RNIC's cumulative byte counters are read, and how two readings become the
//! bytes of one interval (wraps and resets included).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// Per-thread interface statistics: follows the reading thread's network namespace
/// (`/sys/class/net` follows the mount's instead).
pub(crate) const NET_DEV: &str = "/proc/thread-self/net/dev";
/// Root of the RDMA devices in sysfs.
pub(crate) const INFINIBAND_SYSFS: &str = "/sys/class/infiniband";
/// RDMA data counters count 4-byte words.
const RDMA_WORD: u64 = 4;
/// A 64-bit counter going backwards from this close to its top wrapped; from lower it was reset.
const WRAP_ZONE_64: u64 = 1 << 48;

/// How a counter behaves when it goes backwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CounterKind {
    /// RDMA port data counters: 64-bit (extended) or 32-bit on older devices, where going
    /// backwards is a wrap modulo 2^32.
    RdmaWords,
    /// Interface statistics (64-bit): going backwards is an interface reset.
    NetDevBytes,
}

/// Bytes (in counter units) between two readings of one counter, never negative:
/// a 32-bit RDMA counter that went backwards wrapped; a 64-bit counter that went
/// backwards from near its top wrapped; anything else that went backwards was reset
/// (the counter restarted from 0, so `cur` is what was counted since).
pub(crate) fn counter_delta(prev: u64, cur: u64, kind: CounterKind) -> u64 {
    if cur >= prev {
        return cur - prev;
    }
    if kind == CounterKind::RdmaWords && prev <= u64::from(u32::MAX) && cur <= u64::from(u32::MAX) {
        return (1u64 << 32) - prev + cur;
    }
    if prev > u64::MAX - WRAP_ZONE_64 {
        return cur.wrapping_sub(prev);
    }
    cur
}

/// One cumulative reading of an RNIC, in counter units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    /// Transmitted units.
    pub tx: u64,
    /// Received units.
    pub rx: u64,
}

/// Where one RNIC's byte counters are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CounterSource {
    /// RDMA port counters of a verbs RNIC: `<dir>/port_xmit_data` and `<dir>/port_rcv_data`.
    RdmaPort {
        /// The port's `counters` directory.
        dir: PathBuf,
    },
    /// The interface holding a UDP RNIC's IP, in [`NET_DEV`].
    NetDev {
        /// Interface name.
        ifname: String,
    },
}

impl CounterSource {
    /// The RDMA port counters of `device` port `port` under `root` (normally [`INFINIBAND_SYSFS`]).
    pub(crate) fn rdma_port(root: &Path, device: &str, port: u8) -> Self {
        Self::RdmaPort {
            dir: root
                .join(device)
                .join("ports")
                .join(port.to_string())
                .join("counters"),
        }
    }

    /// How this source's counters wrap.
    pub(crate) fn kind(&self) -> CounterKind {
        match self {
            Self::RdmaPort { .. } => CounterKind::RdmaWords,
            Self::NetDev { .. } => CounterKind::NetDevBytes,
        }
    }

    /// Bytes per counter unit.
    pub(crate) fn unit_bytes(&self) -> u64 {
        match self {
            Self::RdmaPort { .. } => RDMA_WORD,
            Self::NetDev { .. } => 1,
        }
    }

    /// Reads the counters now; `net_dev` is the text of [`NET_DEV`] read once for every
    /// source of this tick (`None` when it could not be read).
    pub(crate) fn read(&self, net_dev: Option<&str>) -> Result<Reading> {
        match self {
            Self::RdmaPort { dir } => Ok(Reading {
                tx: read_counter(&dir.join("port_xmit_data"))?,
                rx: read_counter(&dir.join("port_rcv_data"))?,
            }),
            Self::NetDev { ifname } => {
                let text = net_dev.with_context(|| format!("{NET_DEV} is unreadable"))?;
                parse_net_dev(text, ifname)?
                    .with_context(|| format!("interface {ifname} is not in {NET_DEV}"))
            }
        }
    }
}

/// Reads one decimal sysfs counter.
fn read_counter(path: &Path) -> Result<u64> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.trim()
        .parse()
        .with_context(|| format!("{}: not a counter: {:?}", path.display(), text.trim()))
}

/// Finds `ifname` in the text of `/proc/net/dev` and returns its byte counters
/// (receive bytes is the first field after the colon, transmit bytes the ninth).
/// `Ok(None)`: the interface is not listed; `Err`: its line is malformed.
pub(crate) fn parse_net_dev(text: &str, ifname: &str) -> Result<Option<Reading>> {
    // Two header lines, then `  name: rx_bytes rx_packets ... tx_bytes ...` (old kernels
    // glue the first number to the colon).
    for line in text.lines().skip(2) {
        let Some((name, fields)) = line.split_once(':') else {
            continue;
        };
        if name.trim() != ifname {
            continue;
        }
        let f: Vec<&str> = fields.split_whitespace().collect();
        if f.len() < 16 {
            bail!(
                "{NET_DEV}: line of {ifname} has {} fields, expected 16",
                f.len()
            );
        }
        let num = |i: usize| {
            f[i].parse::<u64>()
                .with_context(|| format!("{NET_DEV}: {ifname}: bad counter {:?}", f[i]))
        };
        return Ok(Some(Reading {
            rx: num(0)?,
            tx: num(8)?,
        }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET_DEV_TEXT: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1234567      89    0    0    0     0          0         0  1234567      89    0    0    0     0       0          0
  eth0:987654321 1000    0    0    0     0          0        12 123456789   900    0    0    0     0       0          0
 ens1f0np0: 18446744073709551615 5 0 0 0 0 0 0 42 5 0 0 0 0 0 0
";

    #[test]
    fn net_dev_parser_reads_rx_and_tx_bytes() {
        assert_eq!(
            parse_net_dev(NET_DEV_TEXT, "lo").unwrap(),
            Some(Reading {
                tx: 1_234_567,
                rx: 1_234_567
            })
        );
        // Number glued to the colon (older kernels) and the full 64-bit range.
        assert_eq!(
            parse_net_dev(NET_DEV_TEXT, "eth0").unwrap(),
            Some(Reading {
                tx: 123_456_789,
                rx: 987_654_321
            })
        );
        assert_eq!(
            parse_net_dev(NET_DEV_TEXT, "ens1f0np0").unwrap(),
            Some(Reading {
                tx: 42,
                rx: u64::MAX
            })
        );
        // A name that only prefixes another one does not match.
        assert_eq!(parse_net_dev(NET_DEV_TEXT, "eth").unwrap(), None);
        assert_eq!(parse_net_dev("", "lo").unwrap(), None);
    }

    #[test]
    fn net_dev_parser_rejects_malformed_lines() {
        let head = "h1\nh2\n";
        for (line, needle) in [
            ("lo: 1 2 3\n", "has 3 fields"),
            ("lo: x 0 0 0 0 0 0 0 5 0 0 0 0 0 0 0\n", "bad counter \"x\""),
            ("lo: -1 0 0 0 0 0 0 0 5 0 0 0 0 0 0 0\n", "bad counter"),
            (
                "lo: 1 0 0 0 0 0 0 0 18446744073709551616 0 0 0 0 0 0 0\n",
                "bad counter",
            ),
        ] {
            let err = parse_net_dev(&format!("{head}{line}"), "lo").unwrap_err();
            assert!(format!("{err:#}").contains(needle), "{line}: {err:#}");
        }
        // Garbage lines of other interfaces, and lines without a colon, are skipped.
        let text =
            format!("{head}junk without colon\neth9: zz\nlo: 1 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0\n");
        assert_eq!(
            parse_net_dev(&text, "lo").unwrap(),
            Some(Reading { tx: 2, rx: 1 })
        );
    }

    #[test]
    fn the_real_net_dev_has_loopback() {
        let text = std::fs::read_to_string(NET_DEV).unwrap();
        let lo = parse_net_dev(&text, "lo").unwrap().unwrap();
        // Loopback counts every packet once as sent and once as received.
        assert!(lo.tx > 0 && lo.rx > 0, "{lo:?}");
        let r = CounterSource::NetDev {
            ifname: "lo".into(),
        }
        .read(Some(&text))
        .unwrap();
        assert_eq!(r, lo);
        let missing = CounterSource::NetDev {
            ifname: "nonexistent0".into(),
        };
        assert!(format!("{:#}", missing.read(Some(&text)).unwrap_err()).contains("not in"));
        assert!(missing.read(None).is_err());
    }

    #[test]
    fn deltas_handle_wraps_and_resets() {
        use CounterKind::*;
        assert_eq!(counter_delta(100, 350, NetDevBytes), 250);
        assert_eq!(counter_delta(100, 100, RdmaWords), 0);
        // A 32-bit RDMA counter wraps modulo 2^32.
        assert_eq!(counter_delta(u64::from(u32::MAX) - 9, 5, RdmaWords), 15);
        // A 64-bit counter near its top wraps modulo 2^64.
        assert_eq!(counter_delta(u64::MAX - 9, 5, RdmaWords), 15);
        assert_eq!(counter_delta(u64::MAX - 9, 5, NetDevBytes), 15);
        // Going backwards anywhere else is a reset: what was counted since, never negative.
        assert_eq!(counter_delta(5_000_000_000, 1_000, RdmaWords), 1_000);
        assert_eq!(counter_delta(1_000_000, 300, NetDevBytes), 300);
        assert_eq!(counter_delta(u64::from(u32::MAX) - 9, 5, NetDevBytes), 5);
    }

    #[test]
    fn rdma_port_counters_from_a_sysfs_tree() {
        let root = std::env::temp_dir().join(format!("rocemesh-ib-{}", std::process::id()));
        let src = CounterSource::rdma_port(&root, "mlx5_3", 1);
        let CounterSource::RdmaPort { dir } = &src else {
            unreachable!()
        };
        assert_eq!(dir, &root.join("mlx5_3/ports/1/counters"));
        assert!(src.read(None).is_err(), "missing files are an error");
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("port_xmit_data"), "4294967290\n").unwrap();
        std::fs::write(dir.join("port_rcv_data"), "12\n").unwrap();
        assert_eq!(
            src.read(None).unwrap(),
            Reading {
                tx: 4_294_967_290,
                rx: 12
            }
        );
        assert_eq!((src.kind(), src.unit_bytes()), (CounterKind::RdmaWords, 4));
        std::fs::write(dir.join("port_rcv_data"), "N/A (no PMA)\n").unwrap();
        assert!(format!("{:#}", src.read(None).unwrap_err()).contains("not a counter"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
