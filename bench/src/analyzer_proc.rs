//! The analyzer as its own process, without the simulator: `rocemesh controller` and
//! `rocemesh analyzer` processes over one SQLite database, fed over HTTP in wall-clock
//! time by the simulated agents of this process (rocemesh-sim's HTTP driver). What the
//! analyzer process holds for a fabric is its resident memory beyond the same process
//! before any agent registered (the in-run baseline).

use crate::procfs;
use crate::report::Row;
use crate::server_proc::{Scratch, ServerProc};
use anyhow::{Context, Result};
use rocemesh_sim::http::HttpDriver;
use rocemesh_sim::{Shape, Sim, SimConfig};
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

const SECTION: &str = "analyzer";
/// Target of issue 19: analyzer memory per 10k RNICs.
const MB_PER_10K_TARGET: f64 = 200.0;
/// How often memory is sampled while the agents run.
const STEP: Duration = Duration::from_secs(1);

/// What one analyzer process held and used over a run.
struct Measured {
    /// RSS of the process before any agent registered, MB.
    empty: f64,
    /// RSS growth at the end, MB per 10k RNICs.
    end: f64,
    /// Peak RSS growth, MB per 10k RNICs.
    peak: f64,
    /// CPU, % of one core.
    cpu: f64,
    stats: String,
}

/// Memory of the analyzer process over `seconds` of agents on `shape`; with `base` (the
/// `rocemesh` binary of the commit compared against), the same run is made with it first
/// and its figures are each row's baseline.
pub(crate) fn rows(
    rocemesh: &Path,
    base: Option<&Path>,
    shape: Shape,
    seconds: u64,
) -> Result<Vec<Row>> {
    let base = base
        .map(|b| measure(b, shape.clone(), seconds))
        .transpose()?;
    let m = measure(rocemesh, shape.clone(), seconds)?;
    let rnics = Sim::new(SimConfig::new(shape, 1))?.fabric().rnics.len();
    let scale = format!(
        "{}k RNICs, {seconds} s over HTTP, no simulator in the process",
        rnics / 1000
    );
    let versus = |what: &str, f: fn(&Measured) -> f64| {
        base.as_ref()
            .map(|b| format!("base build: {} {what}; ", crate::report::fmt_value(f(b))))
            .unwrap_or_default()
    };
    Ok(vec![
        Row::new(
            SECTION,
            format!("analyzer process memory per 10k RNICs (RSS growth at the end; {scale})"),
            m.end,
            "MB",
        )
        .at_most(MB_PER_10K_TARGET)
        .baseline(format!(
            "{}empty analyzer process: {:.1} MB",
            versus("MB", |b| b.end),
            m.empty
        )),
        Row::new(
            SECTION,
            format!("analyzer process peak memory per 10k RNICs (VmHWM growth; {scale})"),
            m.peak,
            "MB",
        )
        .at_most(MB_PER_10K_TARGET)
        .baseline(versus("MB", |b| b.peak)),
        Row::new(
            SECTION,
            format!("analyzer process CPU, % of one core ({scale})"),
            m.cpu,
            "%",
        )
        .baseline(format!("{}{}", versus("%", |b| b.cpu), m.stats)),
    ])
}

/// Runs `rocemesh`'s analyzer and controller processes under `seconds` of agents on `shape`.
fn measure(rocemesh: &Path, shape: Shape, seconds: u64) -> Result<Measured> {
    let scratch = Scratch::new("analyzer-proc")?;
    let sim = Sim::new(SimConfig::new(shape, 1))?;
    let rnics = sim.fabric().rnics.len() as f64;
    let paths = sim.fabric().shape().parallel_paths();
    let map = scratch.path().join("fabric_map.toml");
    std::fs::write(&map, sim.fabric_map_toml()?).context("writing the fabric map")?;
    let lo = IpAddr::from([127, 0, 0, 1]);
    let analyzer = ServerProc::start_role(
        rocemesh,
        scratch.path(),
        "analyzer",
        &format!("[analyzer]\nfabric_map = \"{}\"\n", map.display()),
        lo,
    )?;
    let controller = ServerProc::start_role(
        rocemesh,
        scratch.path(),
        "controller",
        &format!(
            "[controller]\nanalyzer_url = \"{}\"\nparallel_paths = {}\n",
            analyzer.url(),
            paths
        ),
        lo,
    )?;
    let pid = analyzer.pid();
    let empty = procfs::rss_mb(pid)?;
    let cpu0 = procfs::cpu(pid)?;
    let mut driver = HttpDriver::new(sim, controller.url(), None)?;
    driver.register_all()?;
    let mut peak = empty;
    for _ in 0..seconds {
        driver.run_for(STEP)?;
        peak = peak.max(procfs::rss_mb(pid)?);
    }
    let cpu = procfs::cpu_percent(&cpu0, &procfs::cpu(pid)?);
    let end = procfs::rss_mb(pid)?;
    let hwm = procfs::status_mb(pid, "VmHWM:")?;
    let stats = driver.stats();
    anyhow::ensure!(
        stats.uploads > 0,
        "no upload reached the analyzer: {stats:?}, last error {:?}",
        driver.last_error()
    );
    controller.stop();
    analyzer.stop();
    let per_10k = |mb: f64| (mb - empty) * 10_000.0 / rnics;
    Ok(Measured {
        empty,
        end: per_10k(end),
        peak: per_10k(hwm.max(peak)),
        cpu,
        stats: format!("{} uploads, {} request errors", stats.uploads, stats.errors),
    })
}
