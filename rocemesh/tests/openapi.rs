//! The served OpenAPI document: it parses, every `$ref` resolves, and it lists exactly the
//! API routes the server's router has (a route added without an annotation fails here).

mod support;

use rocemesh::config::ServerConfig;
use rocemesh::server::{Roles, build};
use std::collections::{BTreeSet, HashMap};
use support::start_server;
use tokio_util::sync::CancellationToken;

const METHODS: [&str; 7] = ["get", "head", "delete", "options", "patch", "post", "put"];

/// (METHOD, path) of every route under `/api/` of the router, read from its `Debug` output
/// (axum prints each route id with its path, and each method router with its handlers).
fn router_routes(router: &axum::Router) -> BTreeSet<(String, String)> {
    let dump = format!("{router:?}");
    let mut paths: HashMap<String, String> = HashMap::new();
    let paths_part = dump
        .split("paths: {")
        .nth(1)
        .expect("route paths in the dump");
    for entry in paths_part.split("RouteId(").skip(1) {
        let (id, rest) = entry.split_once("): \"").unwrap_or(("", ""));
        if let Some((path, _)) = rest.split_once('"') {
            paths.insert(id.to_string(), path.to_string());
        }
        if rest.is_empty() {
            break;
        }
    }
    let routes_part = dump
        .split("routes: {")
        .nth(1)
        .expect("routes in the dump")
        .split("node: Node")
        .next()
        .unwrap();
    let mut out = BTreeSet::new();
    for entry in routes_part.split("RouteId(").skip(1) {
        let Some((id, rest)) = entry.split_once("): ") else {
            continue;
        };
        let Some(path) = paths.get(id).filter(|p| p.starts_with("/api/")) else {
            continue;
        };
        for m in METHODS {
            let set = rest
                .split(&format!("{m}: "))
                .nth(1)
                .is_some_and(|v| !v.starts_with("None"));
            // axum serves HEAD with the GET handler; the document lists GET only.
            if set && m != "head" {
                out.insert((m.to_uppercase(), path.clone()));
            }
        }
    }
    out
}

fn document_routes(doc: &serde_json::Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for m in METHODS {
            if item.get(m).is_some() {
                out.insert((m.to_uppercase(), path.clone()));
            }
        }
    }
    out
}

/// Every `$ref` in `v` names a schema of the document.
fn check_refs(v: &serde_json::Value, doc: &serde_json::Value, bad: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            if let Some(r) = map.get("$ref").and_then(|r| r.as_str()) {
                let name = r.trim_start_matches("#/components/schemas/");
                if doc["components"]["schemas"].get(name).is_none() {
                    bad.push(r.to_string());
                }
            }
            map.values().for_each(|x| check_refs(x, doc, bad));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| check_refs(x, doc, bad)),
        _ => {}
    }
}

#[test]
fn served_document_lists_every_api_route_and_validates() {
    let dir = std::env::temp_dir().join(format!("rocemesh-openapi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite://{}", dir.join("db.sqlite").display());

    // The router the server builds, inspected in process.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cfg = ServerConfig {
        database: db.clone(),
        ..ServerConfig::default()
    };
    let cancel = CancellationToken::new();
    let app = rt.block_on(build(&cfg, Roles::Both, &cancel)).unwrap();
    let routes = router_routes(&app.router);
    assert!(
        routes.contains(&("POST".into(), "/api/v1/agents/register".into()))
            && routes.contains(&("GET".into(), "/api/v1/problems".into())),
        "route listing from the router is broken: {routes:?}"
    );
    cancel.cancel();

    // The document the real server serves over HTTP.
    let config = dir.join("server.toml");
    std::fs::write(
        &config,
        format!("listen = \"127.0.0.1:0\"\ndatabase = \"{db}\"\n"),
    )
    .unwrap();
    let (_server, url) = start_server(&config);
    let text = ureq::get(&format!("{url}/api/v1/openapi.json"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    // Round trip through utoipa's model: the document is well-formed OpenAPI 3.1.
    let typed: utoipa::openapi::OpenApi = serde_json::from_str(&text).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), doc);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let mut bad = Vec::new();
    check_refs(&doc, &doc, &mut bad);
    assert!(bad.is_empty(), "dangling $refs: {bad:?}");

    let documented = document_routes(&doc);
    let missing: Vec<_> = routes.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&routes).collect();
    assert!(
        missing.is_empty(),
        "routes without an OpenAPI annotation: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "documented routes the server does not have: {extra:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
