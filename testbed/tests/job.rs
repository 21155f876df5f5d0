//! Emulated training-job traffic on a real namespace fabric (root only): interface counters of
//! the host namespaces show the job's shape (periodic bursts, DP groups moving together, stages
//! shifted), and stop_job / down stop it; a ring job is closed loop.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Fixture, root_or_skip};
use rocemesh_testbed::{Collective, Fabric, FabricSpec, JobHandle, JobSpec, JobTruth, netns};

const SAMPLE_MS: u64 = 50;

fn spec() -> JobSpec {
    JobSpec::tp2_pp2_dp4("llm-a")
}

/// rx + tx bytes of every RNIC, read from /proc/PID/net/dev of a helper in each host namespace.
fn counters(job: &JobHandle) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for h in job.helpers() {
        let text = std::fs::read_to_string(format!("/proc/{}/net/dev", h.process.pid))
            .expect("net/dev of a helper");
        for line in text.lines().skip(2) {
            let Some((ifname, fields)) = line.split_once(':') else {
                continue;
            };
            let v: Vec<u64> = fields
                .split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect();
            let ifname = ifname.trim();
            if ifname.starts_with('r') && v.len() >= 16 {
                out.insert(format!("{}{ifname}", h.host), v[0] + v[8]);
            }
        }
    }
    out
}

/// Per-RNIC bytes per `SAMPLE_MS` interval over `samples` intervals.
fn sample(job: &JobHandle, samples: usize) -> BTreeMap<String, Vec<f64>> {
    let start = Instant::now();
    let mut prev = counters(job);
    let mut series: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for k in 1..=samples {
        let due = start + Duration::from_millis(SAMPLE_MS * k as u64);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let now = counters(job);
        for (name, v) in &now {
            let d = v.saturating_sub(prev.get(name).copied().unwrap_or(*v));
            series.entry(name.clone()).or_default().push(d as f64);
        }
        prev = now;
    }
    series
}

/// `Err` with the message of an assert that would fail.
macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        let holds: bool = $cond;
        if !holds {
            return Err(format!($($msg)+));
        }
    };
}

/// The job's shape in one sampling window: every RNIC carries about its share, bursts
/// repeat with the iteration period, DP groups move together, stage 1 lags stage 0.
fn training_shape(
    truth: &JobTruth,
    series: &BTreeMap<String, Vec<f64>>,
    period: usize,
) -> Result<(), String> {
    // Every RNIC of the job carries about what it should: 2 x 225 kB per iteration.
    for name in truth.rnics.keys() {
        let total: f64 = series[name].iter().sum();
        check!(
            total > 0.5 * 10.0 * 450_000.0,
            "{name} carried only {total} bytes"
        );
    }

    // Bursts repeat with the iteration period: the autocorrelation peaks at one period.
    for name in truth.rnics.keys() {
        let s = &series[name];
        let best = (period / 4..=period * 3 / 2)
            .max_by(|a, b| autocorrelation(s, *a).total_cmp(&autocorrelation(s, *b)))
            .unwrap();
        check!(
            best.abs_diff(period) <= 1,
            "{name}: autocorrelation peaks at lag {best}"
        );
        let peak = autocorrelation(s, period);
        println!("{name}: autocorrelation peak at lag {best} ({peak:.2})");
        check!(peak > 0.5, "{name}: weak periodicity");
    }

    // Members of one DP group move together more than with anybody else.
    let group_of: BTreeMap<&str, usize> = truth
        .dp_groups
        .iter()
        .enumerate()
        .flat_map(|(g, members)| members.iter().map(move |m| (m.as_str(), g)))
        .collect();
    for (a, ga) in &group_of {
        let corr = |same: bool| {
            mean(
                group_of
                    .iter()
                    .filter(|(b, gb)| b != &a && (*gb == ga) == same)
                    .map(|(b, _)| pearson(&series[*a], &series[*b])),
            )
        };
        let (within, across) = (corr(true), corr(false));
        println!("{a}: DP-group correlation within {within:.2}, across {across:.2}");
        check!(
            within > across + 0.2,
            "{a}: within {within:.2} across {across:.2}"
        );
    }

    // Stage 0's all-reduce bursts come pp_offset_ms before stage 1's.
    let phase_of_stage = |stage: u32| {
        let phases: Vec<f64> = truth
            .rnics
            .iter()
            .filter(|(_, r)| r.stage == stage)
            .map(|(n, _)| burst_phase_ms(&series[n], 1000.0))
            .collect();
        mean(phases)
    };
    let lag = (phase_of_stage(1) - phase_of_stage(0)).rem_euclid(1000.0);
    println!("stage 1 bursts {lag:.0} ms after stage 0 (pp_offset_ms 120)");
    check!(
        (60.0..200.0).contains(&lag),
        "stage 1 lags stage 0 by {lag:.0} ms"
    );

    Ok(())
}

fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len()) as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        cov += (x - ma) * (y - mb);
        va += (x - ma).powi(2);
        vb += (y - mb).powi(2);
    }
    cov / (va * vb).sqrt().max(f64::MIN_POSITIVE)
}

fn autocorrelation(s: &[f64], lag: usize) -> f64 {
    pearson(&s[..s.len() - lag], &s[lag..])
}

/// Delay (ms, within one period) of a series' fundamental: when in the period its bursts sit.
fn burst_phase_ms(s: &[f64], period_ms: f64) -> f64 {
    let (mut re, mut im) = (0.0, 0.0);
    for (k, v) in s.iter().enumerate() {
        let w = 2.0 * std::f64::consts::PI * (k as f64 * SAMPLE_MS as f64) / period_ms;
        re += v * w.cos();
        im += v * w.sin();
    }
    (im.atan2(re) / (2.0 * std::f64::consts::PI) * period_ms).rem_euclid(period_ms)
}

fn mean(v: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, n) = v.into_iter().fold((0.0, 0), |(s, n), x| (s + x, n + 1));
    sum / f64::from(n.max(1))
}

#[test]
fn job_traffic_has_the_training_shape_and_stops() {
    if !root_or_skip() {
        return;
    }
    let f = Fixture::up(FabricSpec {
        prefix: "tbjob".into(),
        tors: 4,
        spines: 2,
        hosts_per_tor: 4,
        rnics_per_host: 4,
        rail_optimized: true,
        management: false,
    });
    // A job that does not fit starts nothing.
    let err = f.0.start_job(&JobSpec { dp: 5, ..spec() }).unwrap_err();
    assert!(err.to_string().contains("hosts"), "{err:#}");
    assert!(f.0.jobs().unwrap().is_empty());

    let job = f.0.start_job(&spec()).expect("start job");
    let truth = job.truth().clone();
    assert_eq!(truth.rnics.len(), 16);
    assert_eq!(job.helpers().len(), 4);
    // Another process sees the same job and truth; names and hosts are exclusive.
    let listed = Fabric::open("tbjob").unwrap().jobs().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].truth(), &truth);
    assert!(
        f.0.start_job(&spec())
            .unwrap_err()
            .to_string()
            .contains("already running")
    );
    let other = JobSpec {
        name: "llm-b".into(),
        dp: 1,
        ..spec()
    };
    assert!(
        f.0.start_job(&other)
            .unwrap_err()
            .to_string()
            .contains("holds")
    );

    std::thread::sleep(Duration::from_millis(300));
    let period = (spec().iteration_ms as u64 / SAMPLE_MS) as usize;
    // The statistics hold of any window, but a loaded machine can stall the sampler (or the
    // helpers) long enough to blur one: up to three windows, the last one decides.
    for attempt in 1..=3 {
        let series = sample(&job, 200);
        match training_shape(&truth, &series, period) {
            Ok(()) => break,
            Err(e) if attempt < 3 => println!("sampling window {attempt}: {e}; sampling again"),
            Err(e) => panic!("{e}"),
        }
    }

    // Only ring jobs record their iterations.
    let paced = f.0.job_iterations("llm-a").unwrap_err().to_string();
    assert!(paced.contains("is paced"), "{paced}");

    // stop_job stops the traffic and its helpers.
    f.0.stop_job("llm-a").unwrap();
    assert!(job.helpers().iter().all(|h| !h.process.is_alive()));
    assert!(f.0.jobs().unwrap().is_empty());
    assert!(
        f.0.stop_job("llm-a")
            .unwrap_err()
            .to_string()
            .contains("no running job")
    );
    let quiet = sample_from_namespaces(&f, 1000);
    for (name, bytes) in quiet {
        assert!(
            bytes < 5_000,
            "{name} still carried {bytes} bytes after stop_job"
        );
    }

    // down kills the helpers of a job still running.
    let again = f.0.start_job(&spec()).expect("restart job");
    Fabric::down("tbjob").unwrap();
    assert!(again.helpers().iter().all(|h| !h.process.is_alive()));
}

/// Bytes each RNIC of the fabric carries over `ms` (read in the namespaces with `cat`, as
/// no helper is left to read them through).
fn sample_from_namespaces(f: &Fixture, ms: u64) -> BTreeMap<String, u64> {
    let read = || {
        let mut out = BTreeMap::new();
        for h in f.0.hosts() {
            for r in &h.rnics {
                let c = |what| f.if_counter(&h.netns, &r.ifname, what);
                out.insert(r.name.clone(), c("rx_bytes") + c("tx_bytes"));
            }
        }
        out
    };
    let before = read();
    std::thread::sleep(Duration::from_millis(ms));
    let after = read();
    after
        .into_iter()
        .map(|(n, v)| (n.clone(), v - before[&n]))
        .collect()
}

#[test]
fn jobs_share_a_non_rail_fabric_and_stop_independently() {
    if !root_or_skip() {
        return;
    }
    // 2 ToRs x 2 hosts x 2 RNICs, all RNICs of a host on its ToR.
    let f = Fixture::up(FabricSpec {
        prefix: "tbjob2".into(),
        rnics_per_host: 2,
        ..FabricSpec::default()
    });
    let base = JobSpec {
        iteration_ms: 500,
        pp_offset_ms: 50,
        activation_bytes: 40_000,
        allreduce_bytes: 40_000,
        jitter_ms: 20,
        ..spec()
    };
    // Pipeline only, across hosts 0 and 1; data parallel only, across hosts 2 and 3.
    let pipeline = JobSpec {
        name: "pipe".into(),
        tp: 2,
        pp: 2,
        dp: 1,
        ..base.clone()
    };
    let data = JobSpec {
        name: "data".into(),
        tp: 2,
        pp: 1,
        dp: 2,
        first_host: 2,
        ..base
    };
    let a = f.0.start_job(&pipeline).expect("pipeline job");
    let b = f.0.start_job(&data).expect("data job");
    assert_eq!(a.truth().pp_pairs.len(), 2);
    assert!(a.truth().dp_pairs.is_empty());
    assert_eq!(
        b.truth().dp_pairs,
        vec![
            ["h2r0".to_string(), "h3r0".to_string()],
            ["h2r1".to_string(), "h3r1".to_string()]
        ]
    );

    // Each RNIC carries 2 x 40 kB per 500 ms iteration (one transfer out, one in).
    let busy = sample_from_namespaces(&f, 2000);
    for (name, bytes) in &busy {
        println!("{name}: {bytes} bytes in 2 s");
        assert!(*bytes > 130_000, "{name} carried only {bytes} bytes");
    }
    f.0.stop_job("pipe").unwrap();
    let after = sample_from_namespaces(&f, 1000);
    for (name, bytes) in after {
        if a.truth().rnics.contains_key(&name) {
            assert!(
                bytes < 5_000,
                "{name} still carried {bytes} bytes after its job stopped"
            );
        } else {
            assert!(
                bytes > 60_000,
                "{name} of the other job went quiet ({bytes} bytes)"
            );
        }
    }
    assert_eq!(f.0.jobs().unwrap().len(), 1);
}

#[test]
fn a_ring_job_is_closed_loop_so_a_stopped_rank_stalls_every_peer() {
    if !root_or_skip() {
        return;
    }
    let f = Fixture::up(FabricSpec {
        prefix: "tbring".into(),
        tors: 2,
        spines: 2,
        hosts_per_tor: 2,
        rnics_per_host: 1,
        rail_optimized: false,
        management: false,
    });
    let spec = JobSpec {
        tp: 1,
        pp: 1,
        dp: 4,
        allreduce_bytes: 4 * 64 * 1024,
        burst_mbps: 8,
        collective: Collective::Ring {
            compute_ms: 200,
            busy_ms: 20,
        },
        ..JobSpec::tp2_pp2_dp4("ring")
    };
    let job = f.0.start_job(&spec).expect("ring job");
    let total = |s: &BTreeMap<String, Vec<f64>>, name: &str| s[name].iter().sum::<f64>();
    // Every rank moves data (ranks connect to their successors within the first second).
    let deadline = Instant::now() + Duration::from_secs(20);
    let running = loop {
        let s = sample(&job, 40);
        if s.len() == 4 && s.keys().all(|n| total(&s, n) > 100_000.0) {
            break s;
        }
        assert!(Instant::now() < deadline, "the ring never ran: {s:?}");
    };
    println!(
        "running: {:?} bytes per 2 s",
        running
            .keys()
            .map(|n| total(&running, n))
            .collect::<Vec<_>>()
    );
    // Loss recovery is RoCE-like in the ranks' namespaces.
    let ns_sack = netns::in_netns(&f.0.hosts()[0].netns, || {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_sack")
    })
    .expect("setns");
    assert_eq!(ns_sack.expect("tcp_sack").trim(), "0");

    // One rank stopped: after the in-flight steps drain, nobody moves data. A loaded
    // machine drains late, so sample windows until one is quiet (a ring that is not closed
    // loop never is).
    let stopped = job.helpers()[1].process.pid;
    let stopped_at = rocemesh_proto::now_unix_ms();
    // SAFETY: kill has no memory preconditions; the pid is this job's helper.
    unsafe { libc::kill(stopped as libc::pid_t, libc::SIGSTOP) };
    let moving = |s: &BTreeMap<String, Vec<f64>>| {
        s.iter()
            .map(|(name, s)| (name.clone(), s.iter().sum::<f64>()))
            .filter(|(name, bytes)| *bytes >= 0.02 * total(&running, name))
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let drained_at = loop {
        let from = rocemesh_proto::now_unix_ms();
        let stalled = sample(&job, 30);
        let still = moving(&stalled);
        if still.is_empty() {
            break from.max(stopped_at + 1_500);
        }
        assert!(
            Instant::now() < deadline,
            "still moving data with a rank stopped (bytes per 1.5 s): {still:?}"
        );
    };
    let continued_at = rocemesh_proto::now_unix_ms();
    // SAFETY: as above.
    unsafe { libc::kill(stopped as libc::pid_t, libc::SIGCONT) };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = sample(&job, 40);
        if s.keys().all(|n| total(&s, n) > 50_000.0) {
            break;
        }
        assert!(Instant::now() < deadline, "the ring did not resume: {s:?}");
    }
    // The ranks' own record: every rank iterates, iteration k of every rank starts
    // together (the ring is lock-step; checked on the iterations done before the stop,
    // as the stop may catch a rank computing), and none completes while a rank is
    // stopped once the in-flight iteration has drained (an iteration lasts about 0.6 s).
    let its = f.0.job_iterations("ring").expect("iterations");
    for r in 0..4 {
        assert!(
            its.iter().filter(|i| i.rank == r).count() >= 3,
            "rank {r}: {its:?}"
        );
    }
    let mut before: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for i in its.iter().filter(|i| i.end_unix_ms < stopped_at) {
        before.entry(i.iteration).or_default().push(i.start_unix_ms);
    }
    let whole: Vec<_> = before.iter().filter(|(_, s)| s.len() == 4).collect();
    assert!(whole.len() >= 2, "iterations before the stop: {before:?}");
    for (k, s) in whole {
        let spread = s.iter().max().unwrap() - s.iter().min().unwrap();
        assert!(spread < 800, "iteration {k} starts {s:?} apart");
        // Whatever the machine's speed: every rank starts iteration k before any ends it.
        let first_end = its
            .iter()
            .filter(|i| i.iteration == *k)
            .map(|i| i.end_unix_ms)
            .min()
            .unwrap();
        assert!(
            s.iter().all(|start| *start <= first_end),
            "iteration {k} starts {s:?}, yet one rank ended it at {first_end}"
        );
    }
    let during: Vec<_> = its
        .iter()
        .filter(|i| i.end_unix_ms > drained_at && i.end_unix_ms < continued_at)
        .collect();
    assert!(
        during.is_empty(),
        "iterations ended while a rank was stopped: {during:?}"
    );
    f.0.stop_job("ring").expect("stop");
}
