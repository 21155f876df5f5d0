//! Self-fault: the wall clock of one host steps (issue 8 item 3). A loopback server and
//! three agents, one of them under libfaketime whose `CLOCK_REALTIME` steps +5 s, then
//! -5 s (10 s back), then home, mid-run (`FAKETIME_TIMESTAMP_FILE`, re-read on every call).
//! Its monotonic clock is left alone, as an NTP step leaves it. Network RTTs are
//! differenced on one clock, so no stored RTT is zero, negative or absurd, and the latency
//! and loss detectors (time-compressed windows) raise nothing.

mod support;

use rocemesh_analyzer::IngestStats;
use rocemesh_proto::api::{RnicInfo, SlaRow};
use std::time::Duration;
use support::self_fault::assert_no_false_alarm;
use support::{Proc, get_json, loopback_agent, scratch_dir, start_sqlite_server, wait_for};

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
const STEPPED: &str = "sf-clock-1";
/// Loopback RTTs are tens of µs and a loaded machine's softirq delays a few ms; a clock step
/// leaking into an RTT shows as seconds.
const ABSURD_NS: u64 = 100_000_000;

/// Sets the stepped host's clock offset (libfaketime's relative format, seconds).
fn step(file: &std::path::Path, offset: &str) {
    std::fs::write(file, offset).expect("write the faketime file");
    eprintln!("self_fault_clock: {STEPPED} clock offset {offset}");
    std::thread::sleep(Duration::from_secs(8));
}

#[test]
fn a_stepped_host_clock_makes_no_bogus_rtt_and_no_alarm() {
    if !std::path::Path::new(LIBFAKETIME).exists() {
        println!("skipping self_fault_clock: {LIBFAKETIME} missing (Debian package faketime)");
        return;
    }
    let dir = scratch_dir("selffault-clock");
    let (_server, url) = start_sqlite_server(
        &dir,
        "[controller]\nupload_period = \"1s\"\npinglist_poll = \"1s\"\n\
         [analyzer]\nperiod = \"2s\"\ngrace = \"1500ms\"\n\
         [analyzer.latency]\nshort_window = \"1s\"\nlookback = \"10s\"\nlong_window = \"10s\"\nclose_after = \"2s\"\n",
    );
    let clock = dir.join("faketime");
    std::fs::write(&clock, "+0").expect("write the faketime file");
    let _agents: Vec<Proc> = [(1, "tor-a"), (2, "tor-a"), (3, "tor-b")]
        .iter()
        .map(|&(h, tor)| {
            let mut cmd =
                loopback_agent(&url, &format!("sf-clock-{h}"), &format!("127.96.{h}"), tor);
            if h == 1 {
                cmd.env("LD_PRELOAD", LIBFAKETIME)
                    .env("FAKETIME_TIMESTAMP_FILE", &clock)
                    .env("FAKETIME_NO_CACHE", "1")
                    .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
            }
            Proc(cmd.spawn().expect("spawn agent"))
        })
        .collect();
    wait_for("3 registered hosts", Duration::from_secs(20), || {
        (get_json::<Vec<serde_json::Value>>(&format!("{url}/api/v1/hosts")).len() == 3)
            .then_some(())
    });
    let start_ms = rocemesh_proto::now_unix_ms();
    std::thread::sleep(Duration::from_secs(14)); // a latency baseline (10 s look-back)
    assert_no_false_alarm(&url, "before the clock step");

    for offset in ["+5", "-5", "+0"] {
        step(&clock, offset);
    }
    std::thread::sleep(Duration::from_secs(4)); // last uploads and a diagnosis

    let rnics: Vec<RnicInfo> = get_json(&format!("{url}/api/v1/rnics"));
    let stepped: Vec<u32> = rnics
        .iter()
        .filter(|r| r.host == STEPPED)
        .map(|r| r.id)
        .collect();
    assert_eq!(stepped.len(), 2, "{rnics:#?}");
    let rows: Vec<SlaRow> = get_json(&format!(
        "{url}/api/v1/sla?scope=rnic&from_ms={start_ms}&limit=10000"
    ));
    let mine: Vec<&SlaRow> = rows
        .iter()
        .filter(|r| stepped.iter().any(|id| r.key == id.to_string()) && r.probes > r.timeouts)
        .collect();
    assert!(
        mine.len() >= 10,
        "too few periods of the stepped host: {}",
        mine.len()
    );
    let mut worst = 0;
    let (mut probes, mut timeouts) = (0, 0);
    for r in &mine {
        let q = &r.network_rtt_ns;
        let (lo, hi) = (q.p50.unwrap_or(0), q.p999.or(q.p99).unwrap_or(u64::MAX));
        assert!(lo > 0 && hi < ABSURD_NS, "bogus RTT stored: {r:#?}");
        // Per period a loaded machine may lose a few probes; over all of them, 1 %.
        assert!(
            r.timeout_rate < 0.05,
            "probes lost while the clock stepped: {r:#?}"
        );
        (probes, timeouts) = (probes + r.probes, timeouts + r.timeouts);
        worst = worst.max(hi);
    }
    assert!(
        timeouts * 100 < probes,
        "{timeouts} of {probes} probes of the stepped host lost"
    );
    assert_no_false_alarm(&url, "after the clock steps");
    let stats: IngestStats = get_json(&format!("{url}/api/v1/ingest/stats"));
    // The steps reached the agent: records stamped 5 s ahead or behind the analyzer's
    // clock fall outside its open periods (counted, not aggregated into wrong ones).
    assert!(
        stats.dropped_records.future > 0 && stats.dropped_records.late > 0,
        "the clock never stepped: {:?}",
        stats.dropped_records
    );
    eprintln!(
        "self_fault_clock: {} periods of the stepped host, worst p99.9 network RTT {worst} ns; records dropped by send time: {} late, {} future",
        mine.len(),
        stats.dropped_records.late,
        stats.dropped_records.future
    );
}
