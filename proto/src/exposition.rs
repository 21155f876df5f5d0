//! The Prometheus exposition every rocemesh `/metrics` serves: the choice between
//! OpenMetrics 1.0 and the classic text format 0.0.4 by the scraper's `Accept` header,
//! and the families every process exports about itself (`rocemesh_build_info`, CPU time,
//! resident memory, open file descriptors, start time, read from `/proc` at each scrape).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt::Write as _;

/// Content type of an OpenMetrics 1.0 exposition.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of a classic (Prometheus 0.0.4) text exposition.
pub const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The two text formats a scraper may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 (the default).
    OpenMetrics,
    /// Prometheus text format 0.0.4 (`text/plain`), for older scrapers and `promtool`.
    Classic,
}

impl Format {
    /// The format `accept` asks for: classic text when it rates `text/plain` above
    /// `application/openmetrics-text` (by q value; ties and wildcards go to OpenMetrics),
    /// OpenMetrics otherwise, including without a header.
    pub fn negotiate(accept: Option<&str>) -> Self {
        let (mut openmetrics, mut classic) = (-1.0f32, -1.0f32);
        for item in accept.unwrap_or_default().split(',') {
            let mut parts = item.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .map_or(1.0, |(_, v)| v.trim().parse::<f32>().unwrap_or(0.0));
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(q),
                "text/plain" => classic = classic.max(q),
                _ => {}
            }
        }
        if classic > 0.0 && classic > openmetrics {
            Self::Classic
        } else {
            Self::OpenMetrics
        }
    }

    /// The `Content-Type` of an exposition in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => OPENMETRICS,
            Self::Classic => CLASSIC,
        }
    }
}

/// Encodes every registry, in order, as one exposition in `format`.
pub fn encode(registries: &[&Registry], format: Format) -> Result<String, std::fmt::Error> {
    let mut body = String::new();
    for r in registries {
        text::encode_registry(&mut body, r)?;
    }
    match format {
        Format::OpenMetrics => {
            text::encode_eof(&mut body)?;
            Ok(body)
        }
        Format::Classic => classic(&body),
    }
}

/// Rewrites OpenMetrics text (without `# EOF`) as classic text: counter families are
/// named with their `_total` suffix and info families become gauges named `_info`, as
/// their samples are; `# UNIT` lines, which the classic format does not have, go.
fn classic(openmetrics: &str) -> Result<String, std::fmt::Error> {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').map_or("", |(_, h)| h));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_string(), "untyped"),
                "gaugehistogram" | "stateset" => (name.to_string(), "gauge"),
                other => (name.to_string(), other),
            };
            if let Some(h) = help.take() {
                writeln!(out, "# HELP {name} {h}")?;
            }
            writeln!(out, "# TYPE {name} {kind}")?;
        } else if !line.starts_with("# UNIT ") {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

/// `rocemesh_build_info` and the standard `process_*` families of this process.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What `/proc` says about this process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident set size, in bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors.
    pub max_fds: Option<u64>,
    /// Start time, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

impl ProcessStats {
    /// Reads `/proc/self` (Linux only; an error elsewhere or when `/proc` is not mounted).
    pub fn read() -> std::io::Result<Self> {
        let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
        let stat = std::fs::read_to_string("/proc/self/stat")?;
        // Fields after the command name, which may itself hold spaces and parentheses.
        let fields: Vec<&str> = stat
            .rsplit_once(") ")
            .ok_or_else(|| invalid("/proc/self/stat without a command name"))?
            .1
            .split_whitespace()
            .collect();
        // Field n of proc(5) is fields[n - 3].
        let field = |n: usize| -> std::io::Result<u64> {
            fields
                .get(n - 3)
                .and_then(|f| f.parse().ok())
                .ok_or_else(|| invalid("short /proc/self/stat"))
        };
        // SAFETY: sysconf only reads a system constant.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
        let page = u64::try_from(page).unwrap_or(4096);
        let boot = std::fs::read_to_string("/proc/stat")?
            .lines()
            .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<u64>().ok())
            .ok_or_else(|| invalid("/proc/stat without btime"))?;
        let open_fds = std::fs::read_dir("/proc/self/fd")?.count() as u64;
        let max_fds = std::fs::read_to_string("/proc/self/limits")?
            .lines()
            .find_map(|l| {
                l.strip_prefix("Max open files")?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            });
        Ok(Self {
            cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
            resident_bytes: field(24)?.saturating_mul(page),
            virtual_bytes: field(23)?,
            open_fds,
            max_fds,
            start_time_seconds: boot as f64 + field(22)? as f64 / ticks,
        })
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        enc.encode_descriptor(
            "rocemesh_build",
            "The rocemesh version this process runs (always 1).",
            None,
            MetricType::Info,
        )?
        .encode_info(&[("version", env!("CARGO_PKG_VERSION"))])?;
        let p = match ProcessStats::read() {
            Ok(p) => p,
            // Without /proc there is nothing more to say; the scrape still succeeds.
            Err(_) => return Ok(()),
        };
        enc.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent in seconds.",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?
        .encode_counter::<NoLabelSet, _, u64>(&p.cpu_seconds, None)?;
        let gauges = [
            (
                "process_resident_memory",
                "Resident memory size in bytes.",
                Some(Unit::Bytes),
                p.resident_bytes as f64,
            ),
            (
                "process_virtual_memory",
                "Virtual memory size in bytes.",
                Some(Unit::Bytes),
                p.virtual_bytes as f64,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                None,
                p.open_fds as f64,
            ),
            (
                "process_start_time",
                "Start time of the process since unix epoch in seconds.",
                Some(Unit::Seconds),
                p.start_time_seconds,
            ),
        ];
        let max = p.max_fds.map(|m| {
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                None,
                m as f64,
            )
        });
        for (name, help, unit, v) in gauges.into_iter().chain(max) {
            enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?
                .encode_gauge(&v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_pick_the_format() {
        // What Prometheus 2.x sends by default, and with OpenMetrics turned off.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        let classic_only = "text/plain;version=0.0.4;q=1,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(classic_only)), Format::Classic);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Classic);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0.2, text/plain;q=0.9")),
            Format::Classic
        );
        assert_eq!(
            Format::negotiate(Some("text/plain;q=0")),
            Format::OpenMetrics
        );
        for a in [None, Some(""), Some("*/*"), Some("application/json")] {
            assert_eq!(Format::negotiate(a), Format::OpenMetrics, "{a:?}");
        }
    }

    #[test]
    fn classic_text_names_counters_and_infos_as_their_samples() {
        let mut r = Registry::default();
        r.register_collector(Box::new(ProcessCollector));
        let om = encode(&[&r], Format::OpenMetrics).unwrap();
        assert!(om.contains("# TYPE process_cpu_seconds counter\n"), "{om}");
        assert!(om.contains("# UNIT process_cpu_seconds seconds\n"), "{om}");
        assert!(om.ends_with("# EOF\n"));
        let text = encode(&[&r], Format::Classic).unwrap();
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        assert!(
            text.contains("# HELP process_cpu_seconds_total Total user")
                && text.contains("# TYPE process_cpu_seconds_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE rocemesh_build_info gauge\n")
                && text.contains(&format!(
                    "rocemesh_build_info{{version=\"{}\"}} 1\n",
                    env!("CARGO_PKG_VERSION")
                )),
            "{text}"
        );
    }

    #[test]
    fn process_stats_follow_this_process() {
        let before = ProcessStats::read().unwrap();
        let files: Vec<_> = (0..8)
            .map(|_| std::fs::File::open("/proc/self/stat").unwrap())
            .collect();
        let during = ProcessStats::read().unwrap();
        drop(files);
        assert!(
            during.open_fds >= before.open_fds + 8,
            "{before:?} {during:?}"
        );
        assert!(during.resident_bytes > 0 && during.virtual_bytes >= during.resident_bytes);
        assert!(during.max_fds.is_some_and(|m| m >= during.open_fds));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // Started before now, and (a test binary) not more than a day ago.
        assert!(
            (now - 86_400.0..=now + 1.0).contains(&during.start_time_seconds),
            "start {} now {now}",
            during.start_time_seconds
        );
        assert!(during.cpu_seconds >= before.cpu_seconds && before.cpu_seconds >= 0.0);
    }
}
