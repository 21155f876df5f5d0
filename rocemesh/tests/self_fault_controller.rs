//! Self-fault: the controller, then the analyzer, goes down (issue 8 item 3), on loopback
//! with the two halves as separate processes sharing one SQLite database, and three real
//! agents.
//!
//! Controller killed for 10 s: the agents keep probing at the pinglist rate with their
//! cached lists, uploads go on, nothing is raised. Analyzer killed for 12 s: every agent's
//! result buffer stays within its capacity (drop-oldest, counted), uploads resume when it
//! is back, the buffer drains, and nothing is raised against the network.

mod support;

use rocemesh_analyzer::IngestStats;
use rocemesh_proto::api::HostInfo;
use std::path::Path;
use std::time::{Duration, Instant};
use support::self_fault::{agent_metrics, assert_no_false_alarm, metric};
use support::{Proc, bin, get_json, loopback_agent, scratch_dir, spawn_listening, wait_for};

/// Result buffer capacity of the agents: small, so a 12 s analyzer outage overflows it.
const CAPACITY: u64 = 300;
const OUTAGE: Duration = Duration::from_secs(10);
const HOSTS: [(u8, &str); 3] = [(1, "tor-a"), (2, "tor-a"), (3, "tor-b")];

/// `rocemesh <role> --config <config>` (optionally on a fixed `listen` address).
fn start(role: &str, config: &Path, listen: Option<&str>) -> (Proc, String) {
    let mut cmd = bin();
    cmd.args([role, "--config"]).arg(config);
    if let Some(addr) = listen {
        cmd.args(["--listen", addr]);
    }
    spawn_listening(cmd)
}

fn metrics_addr(host: u8) -> String {
    format!("127.95.{host}.10:9465")
}

/// (probes sent, results buffered, results dropped, batches accepted) of every agent.
fn agent_counters() -> Vec<[f64; 4]> {
    HOSTS
        .iter()
        .map(|&(h, _)| {
            let m = agent_metrics(&metrics_addr(h));
            let get = |s: &str| metric(&m, s).unwrap_or_else(|| panic!("no {s} in {m}"));
            [
                get("rocemesh_agent_probes_sent_total"),
                get("rocemesh_agent_result_buffer_results"),
                get("rocemesh_agent_buffer_dropped_results_total"),
                get("rocemesh_agent_uploads_total{result=\"ok\"}"),
            ]
        })
        .collect()
}

fn host_of(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

#[test]
fn agents_ride_out_a_controller_and_an_analyzer_outage() {
    let dir = scratch_dir("selffault-ctl");
    let db = format!("sqlite://{}", dir.join("rocemesh.db").display());
    let a_cfg = dir.join("analyzer.toml");
    std::fs::write(
        &a_cfg,
        format!("listen = \"127.0.0.1:0\"\ndatabase = \"{db}\"\n[analyzer]\nperiod = \"2s\"\ngrace = \"1500ms\"\n"),
    )
    .expect("write analyzer.toml");
    let (mut analyzer, aurl) = start("analyzer", &a_cfg, None);
    let c_cfg = dir.join("controller.toml");
    std::fs::write(
        &c_cfg,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"{db}\"\n[controller]\nupload_period = \"1s\"\npinglist_poll = \"1s\"\nanalyzer_url = \"{aurl}\"\n"
        ),
    )
    .expect("write controller.toml");
    let (mut controller, curl) = start("controller", &c_cfg, None);
    let _agents: Vec<Proc> = HOSTS
        .iter()
        .map(|&(h, tor)| {
            let mut cmd =
                loopback_agent(&curl, &format!("sf-host-{h}"), &format!("127.95.{h}"), tor);
            cmd.args([
                "--metrics-listen",
                &metrics_addr(h),
                "--buffer-capacity",
                &CAPACITY.to_string(),
            ]);
            Proc(cmd.spawn().expect("spawn agent"))
        })
        .collect();
    let hosts: Vec<HostInfo> = wait_for("3 registered hosts", Duration::from_secs(20), || {
        let h: Vec<HostInfo> = get_json(&format!("{curl}/api/v1/hosts"));
        (h.len() == HOSTS.len()).then_some(h)
    });
    std::thread::sleep(Duration::from_secs(4)); // pinglists, first probes and uploads
    let base = agent_counters();
    std::thread::sleep(Duration::from_secs(3));
    let rate: Vec<f64> = agent_counters()
        .iter()
        .zip(&base)
        .map(|(now, then)| (now[0] - then[0]) / 3.0)
        .collect();
    assert!(
        rate.iter().all(|&r| r > 0.0),
        "agents not probing: {rate:?}"
    );

    // --- the controller dies --------------------------------------------------------
    controller.kill();
    let before = agent_counters();
    let batches_before = get_json::<IngestStats>(&format!("{aurl}/api/v1/ingest/stats")).batches;
    std::thread::sleep(OUTAGE);
    let after = agent_counters();
    for (i, (a, b)) in after.iter().zip(&before).enumerate() {
        let got = (a[0] - b[0]) / OUTAGE.as_secs_f64();
        assert!(
            got >= 0.8 * rate[i],
            "agent {i} probed at {got:.1}/s without its controller, {:.1}/s before",
            rate[i]
        );
        assert!(
            a[3] > b[3],
            "agent {i} stopped uploading without its controller"
        );
    }
    let batches = get_json::<IngestStats>(&format!("{aurl}/api/v1/ingest/stats")).batches;
    assert!(
        batches > batches_before,
        "the analyzer got no batch during the controller outage"
    );
    let back = Instant::now();
    let (_controller, curl2) = start("controller", &c_cfg, Some(&host_of(&curl)));
    assert_eq!(curl2, curl);
    let again: Vec<HostInfo> = get_json(&format!("{curl}/api/v1/hosts"));
    assert_eq!(
        again.iter().map(|h| (h.id, h.epoch)).collect::<Vec<_>>(),
        hosts.iter().map(|h| (h.id, h.epoch)).collect::<Vec<_>>(),
        "the restarted controller still knows every agent"
    );
    eprintln!(
        "self_fault_controller: controller down {OUTAGE:?}: probing went on at {:?} of the baseline rate; controller serving again {:?} after restart",
        after
            .iter()
            .zip(&before)
            .zip(&rate)
            .map(|((a, b), r)| format!("{:.0} %", 100.0 * (a[0] - b[0]) / OUTAGE.as_secs_f64() / r))
            .collect::<Vec<_>>(),
        back.elapsed()
    );
    assert_no_false_alarm(&aurl, "after the controller outage");

    // --- the analyzer dies: uploads fail, the buffers fill up to their bound ---------
    analyzer.kill();
    let down = Instant::now();
    let mut peak = 0.0f64;
    while down.elapsed() < OUTAGE + Duration::from_secs(2) {
        for c in agent_counters() {
            assert!(c[1] <= CAPACITY as f64, "buffer above its capacity: {c:?}");
            peak = peak.max(c[1]);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let full = agent_counters();
    let dropped: f64 = full.iter().map(|c| c[2]).sum();
    assert_eq!(
        peak, CAPACITY as f64,
        "a {OUTAGE:?} outage fills the buffer"
    );
    assert!(
        dropped > 0.0,
        "overflow is dropped oldest first, and counted"
    );
    let restarted = Instant::now();
    let (_analyzer, aurl2) = start("analyzer", &a_cfg, Some(&host_of(&aurl)));
    assert_eq!(aurl2, aurl);
    let drained = wait_for(
        "uploads to resume and the buffers to drain",
        Duration::from_secs(15),
        || {
            let now = agent_counters();
            now.iter()
                .zip(&full)
                .all(|(n, f)| n[3] > f[3] && n[1] < CAPACITY as f64 / 2.0)
                .then(|| restarted.elapsed())
        },
    );
    std::thread::sleep(Duration::from_secs(6)); // a diagnosis over the resumed uploads
    let stats: IngestStats = get_json(&format!("{aurl}/api/v1/ingest/stats"));
    assert_no_false_alarm(&aurl, "after the analyzer outage");
    eprintln!(
        "self_fault_controller: analyzer down {:?}: buffers peaked at {peak} (capacity {CAPACITY}), {dropped} results dropped oldest-first; uploads resumed and drained {drained:?} after restart; analyzer counted {} late records",
        OUTAGE + Duration::from_secs(2),
        stats.dropped_records.late
    );
}
