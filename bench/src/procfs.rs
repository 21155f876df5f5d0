//! CPU time and memory of a process, read from `/proc/<pid>/{stat,status}`.

use anyhow::{Context, Result};
use std::time::Instant;

/// CPU time a process has used so far, and when that was read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuSample {
    ticks: u64,
    at: Instant,
}

/// Reads the process's user + system time.
pub(crate) fn cpu(pid: u32) -> Result<CpuSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .context("/proc stat without ')'")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> Result<u64> {
        f.get(i)
            .context("short /proc stat")?
            .parse()
            .context("/proc stat field")
    };
    // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
    Ok(CpuSample {
        ticks: field(11)? + field(12)?,
        at: Instant::now(),
    })
}

/// CPU used between two samples, in % of one core.
pub(crate) fn cpu_percent(a: &CpuSample, b: &CpuSample) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    b.ticks.saturating_sub(a.ticks) as f64 / hz / (b.at - a.at).as_secs_f64().max(1e-9) * 100.0
}

/// A `kB` line of `/proc/<pid>/status` (e.g. `VmRSS:`, `VmHWM:`) in MB.
pub(crate) fn status_mb(pid: u32, key: &str) -> Result<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kb: u64 = s
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {key} in /proc/{pid}/status"))?;
    Ok(kb as f64 / 1024.0)
}

/// Resident memory now, MB.
pub(crate) fn rss_mb(pid: u32) -> Result<f64> {
    status_mb(pid, "VmRSS:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_uses_cpu_and_memory() {
        let pid = std::process::id();
        let a = cpu(pid).unwrap();
        let spin = Instant::now();
        let mut x = 0u64;
        while spin.elapsed().as_millis() < 200 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let b = cpu(pid).unwrap();
        let pct = cpu_percent(&a, &b);
        assert!(
            pct > 30.0 && pct < 250.0,
            "spinning 200 ms used {pct} % of a core"
        );
        let rss = rss_mb(pid).unwrap();
        assert!(
            rss > 0.5 && rss <= status_mb(pid, "VmHWM:").unwrap(),
            "rss {rss}"
        );
        assert!(status_mb(pid, "NoSuchKey:").is_err());
    }
}
