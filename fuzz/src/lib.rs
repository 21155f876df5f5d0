//! Fuzz target bodies for every parser rocemesh feeds untrusted bytes.
//!
//! Each `fuzz_targets/<name>.rs` is a three-line libFuzzer entry calling the function of the
//! same name here, so `cargo fuzz run <name>` (coverage-guided) and the corpus replay test
//! (`tests/corpus.rs`, plain `cargo test`) run the very same body. A body returns normally
//! for every input; a panic, an abort or a broken invariant (round trip, bound) is a finding.
//!
//! - [`wire`]: probe packets, result batches, traced paths, eBPF ring-buffer events;
//! - [`config`]: the server and agent TOML configs, parsed and validated as at start-up;
//! - [`api`]: REST JSON bodies, deserialized and validated, and the server's real routes;
//! - [`ingest`]: the analyzer's batch ingest (decode + aggregation);
//! - [`fixture`]: the in-process server the stateful targets share.
//!
//! Feature `server` (default) adds the targets that need the whole server crate.

pub mod api;
pub mod config;
#[cfg(feature = "server")]
pub mod fixture;
#[cfg(feature = "server")]
pub mod ingest;
pub mod wire;

/// "Now" for the targets whose code compares with the clock: fixed, so a finding replays.
pub const NOW_MS: i64 = 1_800_000_000_000;

/// A target body: takes any bytes, panics only on a finding.
pub type TargetFn = fn(&[u8]);

/// Every target by name (the name of its `fuzz_targets/` file and `corpus/` directory).
pub const TARGETS: &[(&str, TargetFn)] = &[
    ("packet", wire::packet),
    ("batch", wire::batch),
    ("paths", wire::paths),
    ("ebpf_events", wire::ebpf_events),
    ("agent_config", config::agent_config),
    ("api_json", api::api_json),
    #[cfg(feature = "server")]
    ("server_config", config::server_config),
    #[cfg(feature = "server")]
    ("server_api", api::server_api),
    #[cfg(feature = "server")]
    ("analyzer_ingest", ingest::analyzer_ingest),
];
