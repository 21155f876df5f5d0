//! Which hooks the service tracer uses (`--service-trace auto|kernel|user|off`).

use std::fmt;
use std::str::FromStr;

/// Requested hook route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Route {
    /// Kernel route when ib_core BTF and kprobes are usable, else the user route.
    #[default]
    Auto,
    /// kprobes on ib_core: sees every process, including statically linked verbs users.
    Kernel,
    /// uprobes on each libibverbs copy found on the host and in containers.
    User,
    /// No tracing.
    Off,
}

/// Parse error for [`Route`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown service-trace route {0:?} (expected auto, kernel, user or off)")]
pub struct ParseRouteError(String);

impl FromStr for Route {
    type Err = ParseRouteError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Route::Auto),
            "kernel" => Ok(Route::Kernel),
            "user" => Ok(Route::User),
            "off" => Ok(Route::Off),
            _ => Err(ParseRouteError(s.to_owned())),
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Route::Auto => "auto",
            Route::Kernel => "kernel",
            Route::User => "user",
            Route::Off => "off",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_round_trips() {
        for r in [Route::Auto, Route::Kernel, Route::User, Route::Off] {
            assert_eq!(r.to_string().parse::<Route>(), Ok(r));
        }
        assert_eq!(" USER ".parse::<Route>(), Ok(Route::User));
        assert!("kprobe".parse::<Route>().is_err());
    }
}
