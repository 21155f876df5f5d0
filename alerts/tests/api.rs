//! The receivers and outbox API over real HTTP on a real database: good bodies are
//! stored, bad ones are refused with a JSON error and change nothing, secrets never leak.

use rocemesh_alerts::{Alerts, AlertsConfig, ReceiverConfig, router};
use rocemesh_store::test_databases;
use serde_json::{Value, json};

/// Serves the alerts router on 127.0.0.1; returns its base URL.
async fn serve(alerts: std::sync::Arc<Alerts>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router(alerts)).await });
    format!("http://{addr}/api/v1/alerts")
}

/// (status, body) of a request; runs the blocking client off the runtime.
async fn call(method: &'static str, url: String, body: Option<Vec<u8>>) -> (u16, Value) {
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut resp = match (method, body) {
            ("POST", Some(b)) => agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(&b[..]),
            ("DELETE", _) => agent.delete(&url).call(),
            _ => agent.get(&url).call(),
        }
        .expect("HTTP request");
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn receivers_api_validates_and_hides_secrets() {
    for (backend, db) in test_databases().await {
        let cfg = AlertsConfig {
            receivers: vec![ReceiverConfig {
                name: "from-config".into(),
                url: "http://127.0.0.1:9/hook".into(),
                secret: Some("config-secret".into()),
                secret_file: None,
                priorities: vec![],
                components: vec![],
            }],
            ..AlertsConfig::default()
        };
        let base = serve(Alerts::new(db, cfg).unwrap()).await;
        let list = || call("GET", format!("{base}/receivers"), None);
        let create = |body: &Value| {
            let body = serde_json::to_vec(body).unwrap();
            call("POST", format!("{base}/receivers"), Some(body))
        };
        let before = list().await;
        assert_eq!(before.0, 200);
        assert_eq!(before.1.as_array().unwrap().len(), 1);
        assert_eq!(before.1[0]["source"], "config");

        let good = json!({"name": "pager", "url": "http://127.0.0.1:9999/x", "secret": "api-secret",
                          "priorities": ["P0"], "components": ["link", "switch"]});
        let bad_bodies: Vec<Vec<u8>> = vec![
            b"{not json".to_vec(),
            serde_json::to_vec(&json!({"name": "x", "url": "ftp://h/"})).unwrap(),
            serde_json::to_vec(&json!({"name": "x", "url": "https://"})).unwrap(),
            serde_json::to_vec(&json!({"name": "x y", "url": "http://h/"})).unwrap(),
            serde_json::to_vec(&json!({"name": "x", "url": "http://u:p@h/"})).unwrap(),
            serde_json::to_vec(&json!({"name": "x", "url": "http://h/", "priorities": ["P7"]}))
                .unwrap(),
            serde_json::to_vec(&json!({"name": "x", "url": "http://h/", "components": ["cable"]}))
                .unwrap(),
            serde_json::to_vec(&json!({"name": "x", "url": "http://h/", "extra": 1})).unwrap(),
            serde_json::to_vec(&json!({"name": "x", "url": "http://h/", "secret": ""})).unwrap(),
            serde_json::to_vec(&json!({"url": "http://h/"})).unwrap(),
            serde_json::to_vec(
                &json!({"name": "x", "url": format!("http://h/{}", "a".repeat(70_000))}),
            )
            .unwrap(),
        ];
        for b in bad_bodies {
            let shown = String::from_utf8_lossy(&b[..b.len().min(80)]).to_string();
            let (status, body) = call("POST", format!("{base}/receivers"), Some(b)).await;
            assert!(
                (400..500).contains(&status),
                "{backend}: {shown} -> {status}"
            );
            assert!(
                body["error"].is_string() || status == 413,
                "{backend}: {shown} -> {body}"
            );
        }
        assert_eq!(
            list().await,
            before,
            "{backend}: refused bodies changed nothing"
        );

        let (status, body) = create(&good).await;
        assert_eq!(status, 201, "{backend}: {body}");
        assert_eq!(body["signed"], true);
        let (status, _) = create(&good).await;
        assert_eq!(status, 409, "{backend}: duplicate name");
        let clash = json!({"name": "from-config", "url": "http://h/"});
        let (status, _) = create(&clash).await;
        assert_eq!(status, 409, "{backend}: config name");

        let (_, all) = list().await;
        let text = all.to_string();
        assert!(
            !text.contains("api-secret") && !text.contains("config-secret"),
            "{backend}: secret leaked"
        );
        let pager = all
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pager")
            .unwrap();
        assert_eq!(pager["priorities"], json!(["P0"]));
        assert_eq!(pager["components"], json!(["link", "switch"]));
        assert_eq!(pager["source"], "api");

        assert_eq!(
            call("DELETE", format!("{base}/receivers/from-config"), None)
                .await
                .0,
            409
        );
        assert_eq!(
            call("DELETE", format!("{base}/receivers/nobody"), None)
                .await
                .0,
            404
        );
        assert_eq!(
            call("DELETE", format!("{base}/receivers/pager"), None)
                .await
                .0,
            204
        );
        assert_eq!(
            list().await,
            before,
            "{backend}: back to the config receiver"
        );

        let (status, rows) =
            call("GET", format!("{base}/outbox?state=pending&limit=5"), None).await;
        assert_eq!((status, rows), (200, json!([])));
        assert_eq!(
            call("GET", format!("{base}/outbox?state=bogus"), None)
                .await
                .0,
            400
        );
        assert_eq!(
            call("GET", format!("{base}/outbox?limit=0"), None).await.0,
            400
        );
        assert_eq!(
            call("GET", format!("{base}/outbox?limit=x"), None).await.0,
            400
        );
    }
}

#[test]
fn openapi_lists_the_alert_routes() {
    let doc = serde_json::to_value(rocemesh_alerts::openapi()).unwrap();
    for path in [
        "/api/v1/alerts/receivers",
        "/api/v1/alerts/receivers/{name}",
        "/api/v1/alerts/outbox",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing");
    }
    assert!(doc["components"]["schemas"].get("ReceiverSpec").is_some());
}
