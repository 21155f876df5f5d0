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

/// Names of the handler functions behind `#[utoipa::path]` annotations in `dir` (the
/// default operationIds utoipa would give).
fn handler_names(dir: &std::path::Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        if path.is_dir() {
            handler_names(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for annotated in text.split("#[utoipa::path(").skip(1) {
                let after = annotated.split_once("async fn ").map(|(_, r)| r);
                if let Some(name) = after.and_then(|r| r.split('(').next()) {
                    out.insert(name.trim().to_string());
                }
            }
        }
    }
}

/// Every operation has a unique, descriptive operationId (camelCase, not the handler
/// function's name), and every protected one documents the 401 and 403 answers.
#[test]
fn operation_ids_are_unique_and_descriptive_and_auth_answers_documented() {
    let doc = serde_json::to_value(rocemesh::openapi::document(Roles::Both)).unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut handlers = BTreeSet::new();
    for krate in ["controller", "analyzer", "alerts", "impact", "rocemesh"] {
        handler_names(&root.join(krate).join("src"), &mut handlers);
    }
    assert!(
        handlers.len() >= 30 && handlers.contains("get_verdict"),
        "handler scan broken: {handlers:?}"
    );
    let mut ids = BTreeSet::new();
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            let Some(op) = item.get(m) else { continue };
            operations += 1;
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{m} {path}: no operationId"));
            assert!(ids.insert(id.to_string()), "operationId {id} used twice");
            assert!(
                !handlers.contains(id),
                "{m} {path}: operationId {id} is a bare handler name"
            );
            assert!(
                id.len() >= 6
                    && id.starts_with(|c: char| c.is_ascii_lowercase())
                    && id.chars().all(|c| c.is_ascii_alphanumeric())
                    && id.chars().any(|c| c.is_ascii_uppercase()),
                "{m} {path}: operationId {id} is not a descriptive camelCase verb+noun"
            );
            let responses = &op["responses"];
            if path.as_str() == rocemesh::openapi::OPENAPI_PATH {
                assert!(responses.get("401").is_none(), "the document is open");
                continue;
            }
            for code in ["401", "403"] {
                let r = &responses[code];
                assert!(
                    r["description"].as_str().is_some_and(|d| !d.is_empty())
                        && r["content"]["application/json"]["schema"]["$ref"]
                            == "#/components/schemas/ErrorBody",
                    "{m} {path}: {code} not documented: {r}"
                );
            }
        }
    }
    assert_eq!(operations, ids.len());
    // The 403 names the roles the auth layer lets through.
    let forbidden = |m: &str, p: &str| {
        doc["paths"][p][m]["responses"]["403"]["description"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(forbidden("get", "/api/v1/problems").ends_with("roles that may: read, admin."));
    assert!(
        forbidden("post", "/api/v1/tasks/{id}/ready").ends_with("roles that may: agent, admin.")
    );
    assert!(
        forbidden("get", "/api/v1/pinglists/{host_id}").ends_with("roles that may: agent, admin.")
    );
    let mut bad = Vec::new();
    check_refs(&doc, &doc, &mut bad);
    assert!(bad.is_empty(), "dangling $refs: {bad:?}");
}
