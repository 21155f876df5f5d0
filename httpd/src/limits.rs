//! The limits of one listener, as a config section (`[http]` of the server config).

use serde::Deserialize;
use std::time::Duration;

/// hyper's smallest read buffer, so the smallest head limit.
pub(crate) const MIN_HEADER_BYTES: usize = 8192;

/// Connection caps and deadlines of one listener.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Most open connections; lowered at start to leave descriptors for the database
    /// and files when the process's descriptor limit is smaller.
    pub max_connections: usize,
    /// Most open connections from one source address.
    pub max_connections_per_ip: usize,
    /// Most TLS handshakes in progress from one source address.
    pub max_handshakes_per_ip: usize,
    /// Largest request head (request line and headers) read; a longer one is answered
    /// 431. At least 8,192 (hyper's smallest buffer).
    pub max_header_bytes: usize,
    /// Longest a client may take to finish its TLS handshake.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// Longest a request head may take to arrive, counted from the moment the
    /// connection waits for it (so also the keep-alive idle time between requests).
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// A connection on which no byte moves either way for this long is closed (a body
    /// dripped in, an answer never read).
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
}

impl Default for Limits {
    /// The server's listener: room for every agent of a 10,000-host cluster plus
    /// operators, and deadlines far above what a working client needs.
    fn default() -> Self {
        Self {
            max_connections: 16_384,
            max_connections_per_ip: 256,
            max_handshakes_per_ip: 32,
            max_header_bytes: 64 * 1024,
            handshake_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

impl Limits {
    /// A metrics endpoint scraped every few seconds by a handful of scrapers.
    pub fn metrics() -> Self {
        Self {
            max_connections: 64,
            max_connections_per_ip: 16,
            max_handshakes_per_ip: 16,
            max_header_bytes: MIN_HEADER_BYTES,
            handshake_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(10),
        }
    }

    /// Refuses limits that would refuse every client or never time out.
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            ("max_connections", self.max_connections),
            ("max_connections_per_ip", self.max_connections_per_ip),
            ("max_handshakes_per_ip", self.max_handshakes_per_ip),
        ];
        for (name, v) in counts {
            if v == 0 {
                return Err(format!("[http] {name} must be at least 1"));
            }
        }
        if self.max_header_bytes < MIN_HEADER_BYTES {
            return Err(format!(
                "[http] max_header_bytes must be at least {MIN_HEADER_BYTES}"
            ));
        }
        let times = [
            ("handshake_timeout", self.handshake_timeout),
            ("header_read_timeout", self.header_read_timeout),
            ("idle_timeout", self.idle_timeout),
        ];
        for (name, v) in times {
            if v.is_zero() {
                return Err(format!("[http] {name} must be longer than 0s"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_zero_is_refused() {
        #[derive(Deserialize)]
        struct Wrap {
            http: Limits,
        }
        let w: Wrap = serde_json::from_str(
            r#"{"http": {"header_read_timeout": "2s", "max_connections_per_ip": 3}}"#,
        )
        .unwrap();
        assert_eq!(w.http.header_read_timeout, Duration::from_secs(2));
        assert_eq!(w.http.max_connections_per_ip, 3);
        assert_eq!(w.http.idle_timeout, Limits::default().idle_timeout);
        assert!(w.http.validate().is_ok());
        assert!(serde_json::from_str::<Wrap>(r#"{"http": {"idle_timeout": 5}}"#).is_err());
        assert!(serde_json::from_str::<Wrap>(r#"{"http": {"idle": "5s"}}"#).is_err());
        let zero = Limits {
            max_handshakes_per_ip: 0,
            ..Limits::default()
        };
        assert!(
            zero.validate()
                .unwrap_err()
                .contains("max_handshakes_per_ip")
        );
        let never = Limits {
            idle_timeout: Duration::ZERO,
            ..Limits::default()
        };
        assert!(never.validate().unwrap_err().contains("idle_timeout"));
    }
}
