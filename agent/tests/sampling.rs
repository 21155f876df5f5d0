//! Throughput sampling end to end (root only): a whole agent in a private network
//! namespace (so `lo` carries nothing but this test), a small real HTTP controller in the
//! same namespace, and a known burst of UDP traffic over `lo` that must show up, byte for
//! byte, in the uploaded series. The controller first fails (503: samples kept) and then
//! refuses (400: samples dropped and counted) before accepting.

mod common;

use common::{Request, Response, serve, wait_for};
use rocemesh_agent::{AgentConfig, AgentStats, RnicConfig, ServiceTracing, TransportKind, start};
use rocemesh_proto::api::*;
use std::net::UdpSocket;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const HOST_ID: u32 = 5;
const RNIC_ID: u32 = 77;
const INTERVAL_MS: u32 = 100;
/// The burst: datagrams × payload bytes; on the wire each also carries 28 header bytes.
const DATAGRAMS: u64 = 100;
const PAYLOAD: usize = 60_000;
/// Everything else `lo` carries meanwhile (HTTP to the stand-in) stays far below this.
const BACKGROUND: u64 = 1 << 20;

#[derive(Default)]
struct Seen {
    /// (HTTP status answered, upload) of every throughput POST.
    uploads: Vec<(u16, ThroughputUpload)>,
}

fn controller(seen: Arc<Mutex<Seen>>) -> impl Fn(&Request) -> Response {
    move |req| match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/api/v1/agents/register") => {
            let r: RegisterRequest = serde_json::from_slice(&req.body).unwrap();
            Response::json(
                200,
                common::register_reply(&r, HOST_ID, RNIC_ID, None, 60_000, 60_000),
            )
        }
        ("POST", "/api/v1/throughput") => {
            if !req
                .header("Content-Type")
                .is_some_and(|t| t.starts_with("application/json"))
            {
                return Response::empty(415);
            }
            let Ok(u) = serde_json::from_slice::<ThroughputUpload>(&req.body) else {
                return Response::json(
                    400,
                    ErrorBody {
                        error: "bad body".into(),
                    },
                );
            };
            let mut s = seen.lock().unwrap();
            let status = match s.uploads.len() {
                0 => 503,
                1 => 400,
                _ => 200,
            };
            s.uploads.push((status, u));
            match status {
                200 => Response::empty(204),
                400 => Response::json(
                    400,
                    ErrorBody {
                        error: "refused for the test".into(),
                    },
                ),
                s => Response::empty(s),
            }
        }
        // No pinglist: the agent sends no probe, so `lo` stays quiet.
        _ => Response::empty(404),
    }
}

/// Runs the agent and the burst inside a fresh network namespace (this thread only).
fn run_in_private_netns(seen: Arc<Mutex<Seen>>) -> (AgentStats, u64) {
    // SAFETY: unshare only changes this thread's network namespace.
    assert_eq!(
        unsafe { libc::unshare(libc::CLONE_NEWNET) },
        0,
        "unshare(CLONE_NEWNET) needs root: {}",
        std::io::Error::last_os_error()
    );
    // The child process inherits this thread's namespace.
    let up = std::process::Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .unwrap();
    assert!(up.success());
    let url = serve(controller(seen.clone()));
    let mut cfg = AgentConfig::new(url, vec![RnicConfig::parse("r0=127.0.0.1").unwrap()]);
    cfg.host = "sampled".into();
    cfg.transport = TransportKind::Udp;
    cfg.service_tracing = ServiceTracing::Off;
    cfg.trace_enabled = false;
    cfg.sample_interval_ms = INTERVAL_MS.into();
    cfg.sample_upload_ms = 300;
    let agent = start(cfg).unwrap();
    wait_for("a failed and a refused upload", || {
        seen.lock().unwrap().uploads.len() >= 2
    });
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let src = UdpSocket::bind("127.0.0.1:0").unwrap();
    let payload = vec![0x5a; PAYLOAD];
    for _ in 0..DATAGRAMS {
        assert_eq!(
            src.send_to(&payload, sink.local_addr().unwrap()).unwrap(),
            PAYLOAD
        );
    }
    // Let the intervals of the burst close and one more upload go out.
    std::thread::sleep(Duration::from_millis(3 * u64::from(INTERVAL_MS)));
    let n = seen.lock().unwrap().uploads.len();
    wait_for("an upload after the burst", || {
        seen.lock().unwrap().uploads.len() > n
    });
    let stats = agent.stats();
    agent.shutdown().unwrap();
    (stats, DATAGRAMS * (PAYLOAD as u64 + 28))
}

#[test]
fn uploaded_series_carry_the_bytes_sent_over_lo() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    let (stats, burst) = std::thread::spawn(move || run_in_private_netns(s))
        .join()
        .unwrap();
    let seen = seen.lock().unwrap();
    let (statuses, uploads): (Vec<u16>, Vec<&ThroughputUpload>) =
        seen.uploads.iter().map(|(s, u)| (*s, u)).unzip();
    assert_eq!(statuses[..2], [503, 400]);
    // The failed samples were kept and sent again (with those taken since), then refused.
    let (failed, refused) = (&uploads[0].series[0], &uploads[1].series[0]);
    assert_eq!(failed.start_ms, refused.start_ms);
    assert_eq!(
        failed.tx_bytes[..],
        refused.tx_bytes[..failed.tx_bytes.len()]
    );
    let mut next_start = None;
    let (mut tx, mut rx) = (0, 0);
    for u in &uploads {
        assert_eq!(
            (u.host_id, u.interval_ms, u.series.len()),
            (HOST_ID, INTERVAL_MS, 1)
        );
        let s = &u.series[0];
        assert_eq!(s.rnic_id, RNIC_ID);
        assert_eq!(s.tx_bytes.len(), s.rx_bytes.len());
        assert!(!s.tx_bytes.is_empty());
        // Loopback counts every packet as sent and received in the same call.
        assert_eq!(s.tx_bytes, s.rx_bytes);
        // Nothing lost and nothing sent twice between consecutive accepted uploads.
        if let Some(start) = next_start
            && s.start_ms != refused.start_ms
        {
            assert_eq!(s.start_ms, start, "series are contiguous");
        }
        next_start = Some(s.start_ms + s.tx_bytes.len() as i64 * i64::from(INTERVAL_MS));
    }
    for u in &uploads[2..] {
        tx += u.series[0].tx_bytes.iter().sum::<u64>();
        rx += u.series[0].rx_bytes.iter().sum::<u64>();
    }
    assert!(
        (burst..burst + BACKGROUND).contains(&tx),
        "tx {tx} for a burst of {burst}"
    );
    assert_eq!(tx, rx);
    // The burst fits in one or two intervals.
    let biggest: Vec<u64> = uploads[2..]
        .iter()
        .flat_map(|u| u.series[0].tx_bytes.iter().copied())
        .filter(|&b| b > BACKGROUND)
        .collect();
    assert!((1..=2).contains(&biggest.len()), "{biggest:?}");
    let refused = refused.tx_bytes.len() as u64;
    assert_eq!(
        (stats.sample_upload_failures, stats.sample_uploads_rejected),
        (1, 1)
    );
    assert_eq!(stats.samples_dropped, refused);
    assert!(stats.sample_uploads >= 1);
    assert!(stats.samples_taken >= refused + 3, "{stats:?}");
    assert_eq!(stats.sample_read_errors, 0);
}
