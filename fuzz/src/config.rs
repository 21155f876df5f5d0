//! Config files: TOML text parsed into the real config types and validated exactly as the
//! server and the agent do at start-up, so a bad file is a clear error, never a panic.
//!
//! Fields naming a file to read (token / secret files) are cleared before validation: a
//! fuzzer-chosen path such as `/dev/zero` would only test the host's filesystem.

use rocemesh_agent::AgentConfig;

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// The server's `--config` file ([`rocemesh::config::ServerConfig`]) and every section's validation.
#[cfg(feature = "server")]
pub fn server_config(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let Ok(mut cfg) = rocemesh::config::parse_toml::<rocemesh::config::ServerConfig>(text) else {
        return;
    };
    for t in &mut cfg.auth.tokens {
        t.token_file = None;
    }
    for r in &mut cfg.alerts.receivers {
        r.secret_file = None;
    }
    let _ = rocemesh_httpd::Tokens::load(&cfg.auth);
    let _ = cfg.controller.validate();
    let _ = cfg.analyzer.validate();
    let _ = cfg.alerts.validate();
    let _ = cfg.impact.validate();
}

/// The agent's `--config` file ([`AgentConfig`]) and its validation.
pub fn agent_config(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(cfg) = toml::from_str::<AgentConfig>(text) {
        let _ = cfg.validate();
    }
}
