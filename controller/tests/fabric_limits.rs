//! What one registration may make every agent probe: addresses inside the fabric only,
//! bounded RNICs per ToR, and pinglists linear in a ToR's size however many register.

mod common;

use common::*;
use rocemesh_controller::ControllerConfig;
use rocemesh_proto::api::{Pinglist, RegisterResponse};
use rocemesh_store::test_databases;

fn cfg() -> ControllerConfig {
    ControllerConfig {
        rotation_period_ms: 1 << 50,
        ..Default::default()
    }
}

#[tokio::test]
async fn addresses_outside_the_fabric_are_refused_and_nothing_is_stored() {
    for (backend, db) in test_databases().await {
        // The default fabric: any unicast address but loopback and link-local.
        let srv = serve(db.clone(), cfg()).await;
        let ok = register(
            srv.addr,
            &registration("h0", 1, &[("e0", "10.0.0.1", Some("t0"))]),
        )
        .await;
        assert_eq!(ok.status, 200, "{backend}: {}", ok.error());
        let before = row_counts(&db).await;
        for (ip, why) in [
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("169.254.3.4", "link-local"),
            ("fe80::1", "link-local"),
        ] {
            let r = register(
                srv.addr,
                &registration("h1", 1, &[("e0", "10.0.0.9", None), ("e1", ip, None)]),
            )
            .await;
            assert_eq!(r.status, 400, "{backend} {ip}");
            assert!(
                r.error().contains(why) && r.error().contains("rnics[1]"),
                "{backend}: {}",
                r.error()
            );
        }
        assert_eq!(row_counts(&db).await, before, "{backend}: nothing stored");
        drop(srv);

        // Configured prefixes: only those.
        let srv = serve(
            db.clone(),
            ControllerConfig {
                rnic_prefixes: vec!["10.0.0.0/16".parse().unwrap(), "fd00::/8".parse().unwrap()],
                ..cfg()
            },
        )
        .await;
        for ip in ["10.1.0.1", "192.168.1.1", "127.0.0.1", "2001:db8::1"] {
            let r = register(srv.addr, &registration("h2", 1, &[("e0", ip, None)])).await;
            assert_eq!(r.status, 400, "{backend} {ip}");
            assert!(r.error().contains("10.0.0.0/16"), "{}", r.error());
        }
        assert_eq!(row_counts(&db).await, before, "{backend}: nothing stored");
        for ip in ["10.0.7.1", "fd12::7"] {
            let r = register(
                srv.addr,
                &registration(&format!("ok-{ip}"), 1, &[("e0", ip, None)]),
            )
            .await;
            assert_eq!(r.status, 200, "{backend} {ip}: {}", r.error());
        }
    }
}

#[tokio::test]
async fn a_tor_holds_at_most_max_rnics_per_tor() {
    for (backend, db) in test_databases().await {
        let srv = serve(
            db.clone(),
            ControllerConfig {
                max_rnics_per_tor: 4,
                ..cfg()
            },
        )
        .await;
        let two = |host: &str, a: &str, b: &str| {
            registration(host, 1, &[("e0", a, Some("t0")), ("e1", b, Some("t0"))])
        };
        assert_eq!(
            register(srv.addr, &two("h0", "10.0.0.1", "10.0.0.2"))
                .await
                .status,
            200
        );
        assert_eq!(
            register(srv.addr, &two("h1", "10.0.0.3", "10.0.0.4"))
                .await
                .status,
            200
        );
        let before = row_counts(&db).await;
        let r = register(srv.addr, &two("h2", "10.0.0.5", "10.0.0.6")).await;
        assert_eq!(r.status, 400, "{backend}");
        assert!(r.error().contains("max_rnics_per_tor = 4"), "{}", r.error());
        assert_eq!(row_counts(&db).await, before, "{backend}: nothing stored");
        // Another ToR has room; a full ToR's own hosts may register again (their RNICs
        // are replaced, not added).
        let other = registration("h2", 1, &[("e0", "10.0.1.5", Some("t1"))]);
        assert_eq!(register(srv.addr, &other).await.status, 200);
        let again = register(srv.addr, &two("h0", "10.0.0.1", "10.0.0.2")).await;
        assert_eq!(again.status, 200, "{backend}: {}", again.error());
    }
}

/// Peak resident memory of this process (VmHWM), bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seven_thousand_rnics_on_one_tor_keep_pinglists_and_memory_bounded() {
    // 110 hosts x 64 RNICs = 7,040 RNICs on one ToR: unsampled this took the server to
    // 2 GB and a host's pinglist to 33 MB.
    let dir = tempfile::tempdir().unwrap();
    let db = rocemesh_store::Db::connect(&format!("sqlite://{}/big.db", dir.path().display()))
        .await
        .unwrap();
    let srv = serve(
        db,
        ControllerConfig {
            max_rnics_per_tor: 8192,
            ..cfg()
        },
    )
    .await;
    let before = peak_rss();
    let mut last = None;
    for h in 0..110u32 {
        let rnics: Vec<(String, String)> = (0..64u32)
            .map(|i| {
                (
                    format!("e{i}"),
                    format!("10.{}.{}.{}", h / 200, h % 200, i + 1),
                )
            })
            .collect();
        let refs: Vec<(&str, &str, Option<&str>)> = rnics
            .iter()
            .map(|(n, ip)| (n.as_str(), ip.as_str(), Some("big")))
            .collect();
        let r = register(srv.addr, &registration(&format!("host-{h}"), 1, &refs)).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        last = Some(r.json::<RegisterResponse>());
    }
    let last = last.unwrap();
    let r = get(srv.addr, &format!("/api/v1/pinglists/{}", last.host_id)).await;
    assert_eq!(r.status, 200);
    let list: Pinglist = r.json();
    let targets: usize = list
        .rnics
        .iter()
        .flat_map(|r| &r.lists)
        .map(|l| l.entries.len())
        .sum();
    let grown = peak_rss().saturating_sub(before);
    println!(
        "7,040 RNICs on one ToR: a host's pinglist {} bytes, {targets} targets; peak RSS grew {} MiB",
        r.body.len(),
        grown >> 20
    );
    assert_eq!(
        targets,
        64 * cfg().tormesh_max_targets,
        "64 RNICs x the cap"
    );
    assert!(r.body.len() < 1 << 20, "pinglist {} bytes", r.body.len());
    assert!(grown < 400 << 20, "peak RSS grew {} MiB", grown >> 20);
}
