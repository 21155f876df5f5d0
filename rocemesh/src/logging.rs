//! Log set-up shared by every subcommand: `RUST_LOG` filter, human or JSON lines on stderr.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls are no-ops (tests, demos).
/// `default_level` applies when `RUST_LOG` is not set. Human lines are coloured only when
/// stderr is a terminal: a file, a pipe or a container log gets plain text.
pub fn init(json: bool, default_level: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init()
    };
}
