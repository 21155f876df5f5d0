//! `GET /api/v1/paths` over real HTTP: traces uploaded in a batch, taken in by a
//! diagnosis tick, named by the fabric map and the registry, filtered by their ends.

mod common;

use common::*;
use rocemesh_analyzer::{Analyzer, AnalyzerConfig};
use rocemesh_analyzer::{PathDirection, PathsReply};
use rocemesh_proto::batch::{BatchEncoder, BatchHeader, CONTENT_TYPE};
use rocemesh_proto::path::TracedPath;
use std::net::IpAddr;

/// ToR a (RNICs 10.0.0.1, .2) and ToR b (10.0.0.3) joined through spine s0.
const MAP: &str = r#"
[[switch]]
name = "tor-a"
addresses = ["10.1.0.1", "10.9.0.0"]
[[switch]]
name = "s0"
addresses = ["10.9.0.1", "10.9.0.3"]
[[switch]]
name = "tor-b"
addresses = ["10.3.0.1", "10.9.0.2"]
[[link]]
name = "tor-a-s0"
ends = [{ device = "tor-a", ip = "10.9.0.0" }, { device = "s0", ip = "10.9.0.1" }]
[[link]]
name = "tor-b-s0"
ends = [{ device = "tor-b", ip = "10.9.0.2" }, { device = "s0", ip = "10.9.0.3" }]
"#;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn trace(src: &str, dst: &str, hops: &[&str], reached: bool, at_ms: u64) -> TracedPath {
    TracedPath {
        src: ip(src),
        dst: ip(dst),
        src_port: 50_000,
        dst_port: 4791,
        traced_at_unix_ns: at_ms * 1_000_000,
        reached,
        ack_direction: false,
        hops: hops.iter().map(|h| (*h != "*").then(|| ip(h))).collect(),
    }
}

async fn paths(base: &str, query: &str) -> PathsReply {
    get(base, &format!("/paths{query}")).await
}

#[tokio::test(flavor = "multi_thread")]
async fn traced_paths_are_named_filtered_and_bounded() {
    let (_, db) = rocemesh_store::test_databases().await.remove(0);
    seed(&db, &[(1, 1, "tor-a"), (2, 1, "tor-a"), (3, 2, "tor-b")]).await;
    let dir = std::env::temp_dir().join(format!("rocemesh-paths-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let map = dir.join("fabric.toml");
    std::fs::write(&map, MAP).unwrap();
    let a = Analyzer::new(
        db.clone(),
        AnalyzerConfig {
            fabric_map: Some(map),
            ..AnalyzerConfig::default()
        },
    )
    .await
    .unwrap();
    let base = serve(a.clone()).await;
    let now = rocemesh_proto::now_unix_ms() as u64;

    // 1 -> 3 went through s0, then broke off after tor-a; 2 -> 1 stays in tor-a;
    // 3 -> 1 is the ACK direction of a probe from 1.
    let full = trace(
        "10.0.0.1",
        "10.0.0.3",
        &["10.1.0.1", "10.9.0.1", "10.9.0.2", "10.0.0.3"],
        true,
        now - 3_000,
    );
    let broken = trace(
        "10.0.0.1",
        "10.0.0.3",
        &["10.1.0.1", "*"],
        false,
        now - 1_000,
    );
    let local = trace(
        "10.0.0.2",
        "10.0.0.1",
        &["10.1.0.1", "10.0.0.1"],
        true,
        now - 2_000,
    );
    let ack = TracedPath {
        ack_direction: true,
        ..trace(
            "10.0.0.3",
            "10.0.0.1",
            &["10.3.0.1", "10.7.7.7"],
            false,
            now - 500,
        )
    };
    let first = BatchEncoder::new(
        BatchHeader {
            host_id: 1,
            epoch: 1,
            batch_seq: 1,
            dropped: 0,
        },
        0,
    )
    .finish_with_paths(&[full, local, ack]);
    let second = BatchEncoder::new(
        BatchHeader {
            host_id: 1,
            epoch: 1,
            batch_seq: 2,
            dropped: 0,
        },
        0,
    )
    .finish_with_paths(&[broken]);
    for body in [first, second] {
        let (s, b) = call(format!("{base}/results"), Some(CONTENT_TYPE), Some(body)).await;
        assert_eq!(s, 200, "{b}");
    }
    assert!(
        paths(&base, "").await.paths.is_empty(),
        "not taken in before a tick"
    );
    a.diagnose(now as i64).await.unwrap();

    let all = paths(&base, "").await.paths;
    let summary: Vec<(&str, bool, PathDirection)> = all
        .iter()
        .map(|p| (p.hop_names[0].as_str(), p.reached, p.direction))
        .collect();
    // Newest first; the broken trace is followed by the complete one it replaced.
    assert_eq!(
        summary,
        [
            ("tor-b", false, PathDirection::Ack),
            ("tor-a", false, PathDirection::Probe),
            ("tor-a", true, PathDirection::Probe),
            ("tor-a", true, PathDirection::Probe),
        ]
    );
    assert_eq!(all[1].hop_names, ["tor-a", "*"]);
    assert_eq!(all[1].hops, [Some(ip("10.1.0.1")), None]);
    assert_eq!(all[1].traced_at_ms as u64, now - 1_000);
    // Switches by the map, the destination RNIC by the registry, strangers by address.
    assert_eq!(all[2].hop_names, ["tor-a", "s0", "tor-b", "host-2/eth3"]);
    assert_eq!(all[0].hop_names, ["tor-b", "10.7.7.7"]);
    assert_eq!(all[3].hop_names, ["tor-a", "host-1/eth1"]);

    // The JSON is the contract's, field for field.
    let (_, raw) = call(format!("{base}/paths?limit=1"), None, None).await;
    let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let p = &v["paths"][0];
    assert_eq!(p["direction"], "ack");
    assert_eq!(p["src"], "10.0.0.3");
    assert_eq!(p["hops"][1], "10.7.7.7");
    assert_eq!(
        v["paths"].as_array().unwrap().len(),
        1,
        "limit counts 5-tuples"
    );

    // Ends by RNIC id, by host/ifname, by ToR.
    for q in ["?src_rnic=1", "?src_rnic=host-1/eth1&dst_tor=tor-b"] {
        let got = paths(&base, q).await.paths;
        assert_eq!(got.len(), 2, "{q}");
        assert!(got.iter().all(|p| p.src == ip("10.0.0.1")), "{q}");
    }
    let got = paths(&base, "?src_tor=tor-b&dst_tor=tor-a").await.paths;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].direction, PathDirection::Ack);
    let got = paths(&base, "?src_tor=tor-a&dst_rnic=1").await.paths;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].src, ip("10.0.0.2"));
    assert!(paths(&base, "?src_tor=tor-z").await.paths.is_empty());

    // Bad requests are refused with a reason.
    let cases = [
        ("?src_rnic=host-9/eth9", 404, "no RNIC"),
        ("?src_rnic=1&src_tor=tor-a", 400, "not both"),
        ("?limit=0", 400, "limit must be"),
        ("?limit=1001", 400, "limit must be"),
        ("?color=red", 400, "unknown field"),
    ];
    for (q, status, text) in cases {
        let (s, b) = call(format!("{base}/paths{q}"), None, None).await;
        assert_eq!(s, status, "{q}: {b}");
        assert!(error_text(&b).contains(text), "{q}: {b}");
    }
}
