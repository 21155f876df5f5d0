//! The controller over real HTTP on 127.0.0.1, against SQLite and PostgreSQL.

mod common;

use common::*;
use rocemesh_controller::{ControllerConfig, ControllerState};
use rocemesh_proto::api::{HostInfo, Pinglist, RegisterResponse, RnicInfo, TopologyInfo};
use rocemesh_store::test_databases;

/// Default settings, with a rotation period long enough that no test crosses a rotation.
fn cfg() -> ControllerConfig {
    ControllerConfig {
        rotation_period_ms: 1 << 50,
        ..Default::default()
    }
}

#[tokio::test]
async fn registration_round_trip_and_reregistration() {
    for (backend, db) in test_databases().await {
        let srv = serve(db.clone(), cfg()).await;
        let a1 = register(
            srv.addr,
            &registration(
                "host-a",
                7,
                &[
                    ("eth0", "10.0.0.1", Some("t1")),
                    ("eth1", "10.0.0.2", Some("t1")),
                ],
            ),
        )
        .await;
        assert_eq!(
            a1.status,
            200,
            "{backend}: {:?}",
            String::from_utf8_lossy(&a1.body)
        );
        let a1: RegisterResponse = a1.json();
        assert_eq!(
            (
                a1.epoch,
                a1.rnics.len(),
                a1.upload_period_ms,
                a1.pinglist_poll_ms
            ),
            (7, 2, 5_000, 30_000)
        );
        assert!(a1.rnics.iter().all(|r| r.host == "host-a"
            && r.tor == "t1"
            && r.epoch == 7
            && r.host_id == a1.host_id));
        let b: RegisterResponse = register(
            srv.addr,
            &registration("host-b", 1, &[("eth0", "10.0.1.1", None)]),
        )
        .await
        .json();
        assert_ne!(b.host_id, a1.host_id);
        assert_eq!(b.rnics[0].tor, "unknown", "{backend}: no hint, no gateway");

        // Agent restart: new epoch and QPNs, same ids; registrations counts starts.
        let a2: RegisterResponse = register(
            srv.addr,
            &registration(
                "host-a",
                8,
                &[
                    ("eth0", "10.0.0.1", Some("t1")),
                    ("eth1", "10.0.0.2", Some("t1")),
                ],
            ),
        )
        .await
        .json();
        assert_eq!(a2.host_id, a1.host_id);
        assert_eq!(
            a2.rnics.iter().map(|r| r.id).collect::<Vec<_>>(),
            a1.rnics.iter().map(|r| r.id).collect::<Vec<_>>()
        );
        assert_eq!(a2.epoch, 8);
        assert_ne!(a2.rnics[0].qpn, a1.rnics[0].qpn);
        let host: HostInfo = get(srv.addr, &format!("/api/v1/hosts/{}", a1.host_id))
            .await
            .json();
        assert_eq!(
            (host.epoch, host.registrations, host.host.as_str()),
            (8, 2, "host-a")
        );
        // A retried registration (same epoch) is not a new agent start.
        register(
            srv.addr,
            &registration(
                "host-a",
                8,
                &[
                    ("eth0", "10.0.0.1", Some("t1")),
                    ("eth1", "10.0.0.2", Some("t1")),
                ],
            ),
        )
        .await;
        let host: HostInfo = get(srv.addr, &format!("/api/v1/hosts/{}", a1.host_id))
            .await
            .json();
        assert_eq!(host.registrations, 2);

        // An RNIC the agent no longer reports disappears; a new one gets a new id.
        let eth1 = a1.rnics[1].id;
        let a3: RegisterResponse = register(
            srv.addr,
            &registration(
                "host-a",
                9,
                &[
                    ("eth0", "10.0.0.1", Some("t1")),
                    ("eth2", "10.0.0.3", Some("t1")),
                ],
            ),
        )
        .await
        .json();
        assert_eq!(a3.rnics[0].id, a1.rnics[0].id);
        assert!(a3.rnics[1].id != eth1 && a3.rnics[1].id != b.rnics[0].id);
        assert_eq!(
            get(srv.addr, &format!("/api/v1/rnics/{eth1}")).await.status,
            404
        );
        let all: Vec<RnicInfo> = get(srv.addr, "/api/v1/rnics").await.json();
        assert_eq!(all.len(), 3);
        let by_ip: RnicInfo = get(srv.addr, "/api/v1/rnics/by-ip/10.0.0.3").await.json();
        assert_eq!(by_ip.id, a3.rnics[1].id);
        let db_rows: Vec<(i64, String, i64)> =
            sqlx::query_as("SELECT id, tor, epoch FROM rnics ORDER BY id")
                .fetch_all(db.pool())
                .await
                .unwrap();
        assert_eq!(
            db_rows.len(),
            3,
            "{backend}: the database holds what the API shows"
        );
        assert!(
            db_rows
                .iter()
                .any(|(id, tor, epoch)| *id == i64::from(a3.rnics[1].id)
                    && tor == "t1"
                    && *epoch == 9)
        );
    }
}

#[tokio::test]
async fn restarted_controller_serves_the_same_data() {
    for (backend, db) in test_databases().await {
        let srv = serve(db.clone(), cfg()).await;
        let mut hosts = Vec::new();
        for (i, tor) in ["t1", "t1", "t2", "t2"].iter().enumerate() {
            let ip = format!("10.1.{i}.1");
            let r: RegisterResponse = register(
                srv.addr,
                &registration(&format!("h{i}"), 1, &[("eth0", &ip, Some(tor))]),
            )
            .await
            .json();
            hosts.push(r.host_id);
        }
        let before = get(srv.addr, &format!("/api/v1/pinglists/{}", hosts[0])).await;
        let rnics_before = get(srv.addr, "/api/v1/rnics").await.body;
        drop(srv);

        let srv = serve(db.clone(), cfg()).await;
        assert_eq!(
            get(srv.addr, "/api/v1/rnics").await.body,
            rnics_before,
            "{backend}"
        );
        let after = get(srv.addr, &format!("/api/v1/pinglists/{}", hosts[0])).await;
        assert_eq!(after.header("etag"), before.header("etag"), "{backend}");
        assert_eq!(after.body, before.body);
        let list: Pinglist = after.json();
        assert!(!list.rnics[0].lists.is_empty());
        // New registrations after a restart continue the id sequence.
        let r: RegisterResponse = register(
            srv.addr,
            &registration("h9", 1, &[("eth0", "10.1.9.1", None)]),
        )
        .await
        .json();
        assert!(hosts.iter().all(|&h| h < r.host_id));
    }
}

#[tokio::test]
async fn pinglist_etag_304_epoch_and_unknown_host() {
    for (backend, db) in test_databases().await {
        let srv = serve(db, cfg()).await;
        let a: RegisterResponse = register(
            srv.addr,
            &registration("a", 5, &[("eth0", "10.2.0.1", Some("t1"))]),
        )
        .await
        .json();
        register(
            srv.addr,
            &registration("b", 1, &[("eth0", "10.2.0.2", Some("t1"))]),
        )
        .await;
        let path = format!("/api/v1/pinglists/{}", a.host_id);
        let first = get(srv.addr, &path).await;
        assert_eq!(first.status, 200, "{backend}");
        let etag = first.header("etag").expect("ETag header").to_string();
        let list: Pinglist = first.json();
        assert_eq!(etag, format!("\"{}\"", list.version));
        assert_eq!(list.timeout_ms, 500);
        assert_eq!(list.rnics[0].lists[0].entries.len(), 1, "ToR-mesh holds b");

        let again = request(srv.addr, "GET", &path, &[("If-None-Match", &etag)], b"").await;
        assert_eq!(again.status, 304);
        assert!(again.body.is_empty());
        assert_eq!(again.header("etag"), Some(etag.as_str()));

        // Another RNIC under the same ToR changes a's list: a full answer with a new ETag.
        register(
            srv.addr,
            &registration("c", 1, &[("eth0", "10.2.0.3", Some("t1"))]),
        )
        .await;
        let changed = request(srv.addr, "GET", &path, &[("If-None-Match", &etag)], b"").await;
        assert_eq!(changed.status, 200);
        assert_ne!(changed.header("etag"), Some(etag.as_str()));
        assert_eq!(
            changed.json::<Pinglist>().rnics[0].lists[0].entries.len(),
            2
        );

        assert_eq!(get(srv.addr, &format!("{path}?epoch=5")).await.status, 200);
        let stale = get(srv.addr, &format!("{path}?epoch=4")).await;
        assert_eq!(stale.status, 409);
        assert!(stale.error().contains("register again"));
        assert_eq!(get(srv.addr, &format!("{path}?epoch=x")).await.status, 400);
        assert_eq!(get(srv.addr, &format!("{path}?epoc=5")).await.status, 400);

        let unknown = get(srv.addr, "/api/v1/pinglists/999999").await;
        assert_eq!(unknown.status, 404);
        assert!(unknown.error().contains("999999"));
        let negative = get(srv.addr, "/api/v1/pinglists/-1").await;
        assert_eq!(negative.status, 400);
        assert!(!negative.error().is_empty());
    }
}

#[tokio::test]
async fn bad_requests_get_4xx_error_bodies_and_change_nothing() {
    for (backend, db) in test_databases().await {
        let srv = serve(db.clone(), cfg()).await;
        register(
            srv.addr,
            &registration("owner", 1, &[("eth0", "10.3.0.1", None)]),
        )
        .await;
        let counts = row_counts(&db).await;
        let valid = registration("h", 1, &[("eth0", "10.3.0.2", None)]).to_string();
        let long = "x".repeat(300);
        let huge = format!("{{\"host\":\"{}\"}}", "x".repeat(2 << 20));
        let cases: Vec<(String, u16, &str)> = vec![
            (valid[..valid.len() / 2].to_string(), 400, ""),
            (
                valid.replace("\"epoch\":1", "\"epoch\":\"one\""),
                422,
                "epoch",
            ),
            (valid.replace("\"epoch\":1", "\"epoch\":-1"), 422, "epoch"),
            (
                valid.replace("\"epoch\":1", "\"epoch\":1,\"extra\":true"),
                422,
                "extra",
            ),
            (
                valid.replace("\"port\":4791", "\"port\":4791,\"speed\":400"),
                422,
                "speed",
            ),
            (huge, 413, ""),
            (
                registration("", 1, &[("eth0", "10.3.0.2", None)]).to_string(),
                400,
                "host name is empty",
            ),
            (
                registration(&long, 1, &[("eth0", "10.3.0.2", None)]).to_string(),
                400,
                "longer",
            ),
            (
                registration("h\u{7}", 1, &[("eth0", "10.3.0.2", None)]).to_string(),
                400,
                "control",
            ),
            (registration("h", 1, &[]).to_string(), 400, "RNICs"),
            (
                registration(
                    "h",
                    1,
                    &[("eth0", "10.3.0.2", None), ("eth0", "10.3.0.3", None)],
                )
                .to_string(),
                400,
                "duplicate ifname",
            ),
            (
                registration("h", 1, &[("eth0", "0.0.0.0", None)]).to_string(),
                400,
                "unicast",
            ),
            (
                registration("h", 1, &[("eth0", "10.3.0.1", None)]).to_string(),
                400,
                "already registered by host \"owner\"",
            ),
            (valid.replace("\"port\":4791", "\"port\":0"), 400, "port 0"),
            (
                valid.replace("\"qpn\":1001", "\"qpn\":16777216"),
                400,
                "24 bits",
            ),
            ("[]".to_string(), 422, ""),
            ("".to_string(), 400, ""),
        ];
        for (body, status, why) in cases {
            let r = post_json(srv.addr, "/api/v1/agents/register", body.as_bytes()).await;
            let shown = &body[..body.len().min(80)];
            assert_eq!(r.status, status, "{backend}: {shown}");
            let err = r.error();
            assert!(err.contains(why), "{backend}: {shown}: {err}");
            assert_eq!(
                row_counts(&db).await,
                counts,
                "{backend}: {shown} changed the database"
            );
        }
        let no_type = request(
            srv.addr,
            "POST",
            "/api/v1/agents/register",
            &[],
            valid.as_bytes(),
        )
        .await;
        assert_eq!(no_type.status, 415);
        assert!(!no_type.error().is_empty());
        assert_eq!(get(srv.addr, "/api/v1/nowhere").await.status, 404);
        let wrong_method = get(srv.addr, "/api/v1/agents/register").await;
        assert_eq!(wrong_method.status, 405);
        assert!(!wrong_method.error().is_empty());
        assert_eq!(row_counts(&db).await, counts);
    }
}

#[tokio::test]
async fn inventory_decommission_and_topology() {
    for (backend, db) in test_databases().await {
        let srv = serve(db.clone(), cfg()).await;
        let a: RegisterResponse = register(
            srv.addr,
            &registration(
                "a",
                1,
                &[
                    ("eth0", "10.4.0.1", Some("t1")),
                    ("eth1", "10.4.0.2", Some("t2")),
                ],
            ),
        )
        .await
        .json();
        let b: RegisterResponse = register(
            srv.addr,
            &registration("b", 1, &[("eth0", "10.4.0.3", Some("t2"))]),
        )
        .await
        .json();
        let topo: TopologyInfo = get(srv.addr, "/api/v1/topology").await.json();
        assert_eq!(
            (topo.parallel_paths, topo.tuples_per_tor),
            (4, 21),
            "{backend}"
        );
        assert_eq!(
            topo.tors
                .iter()
                .map(|t| (t.name.as_str(), t.rnics.len()))
                .collect::<Vec<_>>(),
            vec![("t1", 1), ("t2", 2)]
        );
        // Two ToRs: a's t1 RNIC carries all 21 inter-ToR tuples of t1.
        let list: Pinglist = get(srv.addr, &format!("/api/v1/pinglists/{}", a.host_id))
            .await
            .json();
        let inter: usize = list
            .rnics
            .iter()
            .flat_map(|r| &r.lists)
            .filter(|l| l.class == rocemesh_proto::ProbeClass::InterTor)
            .map(|l| l.entries.len())
            .sum();
        assert!(inter >= 21, "{backend}: {inter}");

        assert_eq!(
            get(srv.addr, "/api/v1/rnics/by-ip/10.9.9.9").await.status,
            404
        );
        assert_eq!(
            get(srv.addr, "/api/v1/rnics/by-ip/not-an-ip").await.status,
            400
        );
        assert_eq!(get(srv.addr, "/api/v1/rnics/abc").await.status, 400);
        assert_eq!(
            get(srv.addr, "/api/v1/hosts")
                .await
                .json::<Vec<HostInfo>>()
                .len(),
            2
        );

        let del = request(
            srv.addr,
            "DELETE",
            &format!("/api/v1/hosts/{}", b.host_id),
            &[],
            b"",
        )
        .await;
        assert_eq!(del.status, 204);
        assert_eq!(
            request(
                srv.addr,
                "DELETE",
                &format!("/api/v1/hosts/{}", b.host_id),
                &[],
                b""
            )
            .await
            .status,
            404
        );
        assert_eq!(
            get(srv.addr, &format!("/api/v1/rnics/{}", b.rnics[0].id))
                .await
                .status,
            404
        );
        assert_eq!(
            get(srv.addr, &format!("/api/v1/pinglists/{}", b.host_id))
                .await
                .status,
            404
        );
        assert_eq!(row_counts(&db).await.0, 1);
        assert_eq!(
            row_counts(&db).await.1,
            2,
            "{backend}: b's RNIC rows are gone"
        );
        // Its IP is free again for another host.
        assert_eq!(
            register(
                srv.addr,
                &registration("c", 1, &[("eth0", "10.4.0.3", None)])
            )
            .await
            .status,
            200
        );
    }
}

#[tokio::test]
async fn topology_file_places_rnics_and_bad_settings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("topo.toml");
    std::fs::write(
        &topo,
        "parallel_paths = 8\n[[tor]]\nname = \"rack-1\"\nhosts = [\"a\"]\nrnics = [\"b/eth1\"]\n",
    )
    .unwrap();
    for (backend, db) in test_databases().await {
        let srv = serve(
            db.clone(),
            ControllerConfig {
                topology_file: Some(topo.clone()),
                ..cfg()
            },
        )
        .await;
        let a: RegisterResponse = register(
            srv.addr,
            &registration("a", 1, &[("eth0", "10.5.0.1", Some("hint"))]),
        )
        .await
        .json();
        assert_eq!(
            a.rnics[0].tor, "rack-1",
            "{backend}: the file beats the hint"
        );
        let body = serde_json::json!({"host": "b", "epoch": 1, "rnics": [
            {"ifname": "eth0", "ip": "10.5.0.2", "qpn": 1, "port": 4791, "gateway": "10.5.0.254"},
            {"ifname": "eth1", "ip": "10.5.0.3", "qpn": 2, "port": 4791}]});
        let b: RegisterResponse = register(srv.addr, &body).await.json();
        assert_eq!(b.rnics[0].tor, "gw-10.5.0.254");
        assert_eq!(b.rnics[1].tor, "rack-1");
        let t: TopologyInfo = get(srv.addr, "/api/v1/topology").await.json();
        assert_eq!(
            (t.parallel_paths, t.tuples_per_tor),
            (
                8,
                rocemesh_controller::pinglist::coverage::tuples_per_tor(8, 0.99)
            )
        );
        // The config's N overrides the file's.
        let over = ControllerState::new(
            db.clone(),
            ControllerConfig {
                topology_file: Some(topo.clone()),
                parallel_paths: Some(2),
                ..cfg()
            },
        )
        .await;
        assert!(over.is_ok());

        std::fs::write(dir.path().join("bad.toml"), "[[tor]]\nname = 3\n").unwrap();
        for (bad, why) in [
            (
                ControllerConfig {
                    topology_file: Some(dir.path().join("bad.toml")),
                    ..cfg()
                },
                "bad.toml",
            ),
            (
                ControllerConfig {
                    topology_file: Some(dir.path().join("missing.toml")),
                    ..cfg()
                },
                "missing.toml",
            ),
            (
                ControllerConfig {
                    tormesh_pps: -1.0,
                    ..cfg()
                },
                "tormesh_pps",
            ),
            (
                ControllerConfig {
                    coverage_probability: 0.0,
                    ..cfg()
                },
                "coverage_probability",
            ),
            (
                ControllerConfig {
                    src_port_min: 2,
                    src_port_max: 1,
                    ..cfg()
                },
                "port range",
            ),
        ] {
            let err = ControllerState::new(db.clone(), bad)
                .await
                .err()
                .expect("refused");
            assert!(format!("{err:#}").contains(why), "{err:#}");
        }
    }
}
