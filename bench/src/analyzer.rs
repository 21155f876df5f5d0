//! Section "analyzer": the real analyzer (default settings) fed by the fabric simulator
//! in process, in virtual time (rocemesh-sim). Ingest + full diagnosis throughput on one
//! core, memory per 10k RNICs, time per analysis period and per diagnosis tick at 10k and
//! 50k RNICs, and accuracy with 1, 2 and 3 concurrent faults at 10k RNICs against the
//! exported ground truth, with R-Pingmesh Algorithm 1 scored on the same data as the
//! baseline.

use crate::Opts;
use crate::report::Row;
use anyhow::Result;
use rocemesh_analyzer::AnalyzerConfig;
use rocemesh_controller::ControllerConfig;
use rocemesh_sim::scenario::{Report, Scenario, run_in_process};
use rocemesh_sim::score::Score;
use rocemesh_sim::{FaultSpec, Shape, SimConfig};

const SECTION: &str = "analyzer";
/// The SLA period the "time per analysis period" figures are per.
const PERIOD_S: f64 = 20.0;
/// Issue 19: analyzer time of one period at the big (51k-RNIC) scale.
const BIG_PERIOD_TARGET_S: f64 = 5.0;

/// A leaf-spine fabric of `tors` ToRs × 8 hosts × 8 RNICs over 16 spines.
fn fabric(tors: u32) -> Shape {
    Shape::LeafSpine {
        tors,
        spines: 16,
        hosts_per_tor: 8,
        rnics_per_host: 8,
    }
}

/// Faults of the accuracy runs: a link down, an RNIC down, 30 % loss on another link.
fn faults(n: usize) -> Vec<FaultSpec> {
    [
        FaultSpec::LinkDown {
            link: "t5-s2".into(),
            at: None,
        },
        FaultSpec::RnicDown {
            rnic: "h100/r3".into(),
        },
        FaultSpec::LinkLoss {
            link: "t17-s9".into(),
            percent: 30.0,
            toward: None,
        },
    ]
    .into_iter()
    .take(n)
    .collect()
}

fn simulate(shape: Shape, faults: Vec<FaultSpec>, warmup_s: u32, seconds: u32) -> Result<Report> {
    let s = Scenario {
        config: SimConfig::new(shape, 1),
        faults,
        warmup_s,
        seconds,
    };
    crate::runtime()?.block_on(run_in_process(
        &s,
        ControllerConfig::default(),
        AnalyzerConfig::default(),
    ))
}

fn rss_mb() -> Result<f64> {
    crate::procfs::rss_mb(std::process::id())
}

/// Peak resident memory of the process so far, MB.
fn peak_mb() -> Result<f64> {
    crate::procfs::status_mb(std::process::id(), "VmHWM:")
}

fn analyzer_secs(r: &Report) -> f64 {
    (r.timing.ingest + r.timing.finalize + r.timing.diagnose).as_secs_f64()
}

/// Where a run's analyzer time went, on stderr.
fn describe(r: &Report) {
    eprintln!(
        "  {} RNICs: {} results in {:.1} s of analyzer time ({:?})",
        r.rnics,
        r.timing.records,
        analyzer_secs(r),
        r.timing
    );
}

/// Mean wall-clock time of one diagnosis tick (the analyzer ticks every second).
fn tick_row(r: &Report) -> Row {
    let ms = r.timing.diagnose.as_secs_f64() * 1e3 / r.timing.ticks.max(1) as f64;
    Row::new(
        SECTION,
        format!("diagnosis tick, {}k RNICs (mean)", r.rnics / 1000),
        ms,
        "ms",
    )
    .at_most(1_000.0)
}

/// Measures the section.
pub(crate) fn run(opts: &Opts) -> Result<Vec<Row>> {
    // 10k RNICs = 160 ToRs; --quick: 2k RNICs (32 ToRs) and shorter runs.
    let (tors, big_tors, warmup, seconds) = if opts.quick {
        (32, 64, 10, 25)
    } else {
        (160, 800, 20, 50)
    };
    let (tors, big_tors) = opts.analyzer_tors.map_or((tors, big_tors), |t| (t, 5 * t));
    let mut rows = Vec::new();
    let before = rss_mb()?;
    let base = simulate(fabric(tors), Vec::new(), warmup, seconds)?;
    let (rss, peak) = (rss_mb()? - before, peak_mb()? - before);
    let n = base.rnics as f64;
    describe(&base);
    rows.push(
        Row::new(
            SECTION,
            format!(
                "ingest + full diagnosis, {}k RNICs, one core",
                base.rnics / 1000
            ),
            base.timing.records as f64 / analyzer_secs(&base),
            "results/s",
        )
        .at_least(2_500_000.0),
    );
    rows.push(Row::new(
        SECTION,
        format!(
            "memory per 10k RNICs (process RSS growth, simulator included, {}k run)",
            base.rnics / 1000
        ),
        rss * 10_000.0 / n,
        "MB",
    ));
    rows.push(Row::new(
        SECTION,
        format!("peak memory per 10k RNICs (peak RSS growth during the run, simulator included, {}k run)", base.rnics / 1000),
        peak * 10_000.0 / n,
        "MB",
    ));
    rows.push(
        Row::new(
            SECTION,
            format!(
                "time per analysis period (20 s), {}k RNICs",
                base.rnics / 1000
            ),
            analyzer_secs(&base) * PERIOD_S / f64::from(seconds),
            "s",
        )
        .at_most(PERIOD_S),
    );
    rows.push(
        Row::new(
            SECTION,
            format!(
                "false problems, fault-free {}k RNICs, {seconds} s",
                base.rnics / 1000
            ),
            base.score.found.len() as f64,
            "problems",
        )
        .at_most(0.0),
    );
    rows.push(tick_row(&base));
    rows.extend(crate::analyzer_proc::rows(
        &opts.rocemesh,
        opts.base_rocemesh.as_deref(),
        fabric(tors),
        if opts.quick { 30 } else { 60 },
    )?);
    let big = simulate(fabric(big_tors), Vec::new(), warmup, warmup + 5)?;
    describe(&big);
    rows.push(tick_row(&big));
    rows.push(
        Row::new(
            SECTION,
            format!(
                "time per analysis period (20 s), {}k RNICs",
                big.rnics / 1000
            ),
            analyzer_secs(&big) * PERIOD_S / f64::from(warmup + 5),
            "s",
        )
        .at_most(BIG_PERIOD_TARGET_S),
    );
    rows.push(
        Row::new(
            SECTION,
            format!("fabric build, {}k RNICs", big.rnics / 1000),
            big.build_ms / 1e3,
            "s",
        )
        .at_most(2.0),
    );
    for k in 1..=3 {
        let r = simulate(fabric(tors), faults(k), warmup, seconds)?;
        eprintln!(
            "  {k} fault(s): analyzer {} | alg1 {}",
            r.score.summary(),
            r.baseline.summary()
        );
        let name = |what: &str| format!("{what}, {k} fault(s), {}k RNICs", r.rnics / 1000);
        let alg1 = |v: Option<f64>| {
            format!(
                "Alg. 1: {}",
                v.map_or("-".to_string(), |x| format!("{x:.2}"))
            )
        };
        rows.push(
            Row::new(
                SECTION,
                name("precision"),
                r.score.precision.unwrap_or(0.0),
                "",
            )
            .baseline(alg1(r.baseline.precision)),
        );
        rows.push(
            Row::new(SECTION, name("recall"), r.score.recall.unwrap_or(0.0), "")
                .baseline(alg1(r.baseline.recall)),
        );
        let top1 = |s: &Score| s.top1.map(|t| if t { 1.0 } else { 0.0 });
        rows.push(
            Row::new(
                SECTION,
                name("top-1 localization"),
                top1(&r.score).unwrap_or(0.0),
                "",
            )
            .baseline(alg1(top1(&r.baseline))),
        );
        rows.push(
            Row::new(
                SECTION,
                name("time to localize (all faults)"),
                r.score.time_to_localize_s.unwrap_or(f64::NAN),
                "s",
            )
            .baseline(alg1(r.baseline.time_to_localize_s)),
        );
    }
    Ok(rows)
}
