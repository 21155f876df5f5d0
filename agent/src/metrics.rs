//! `--metrics-listen ADDR`: the agent's self-metrics at `GET /metrics` in the OpenMetrics
//! text format, from a tiny blocking HTTP listener on its own thread (the agent runs no
//! async runtime). One connection at a time with short timeouts: a scraper every few
//! seconds is all it serves, and a stuck client cannot hold it longer than the timeout.
//!
//! Every value is a host-wide counter from [`Counters`]; the only per-RNIC series is
//! `rocemesh_agent_rnic_info` (bounded by the RNICs of this host).

use crate::stats::{AgentStats, Counters};
use crate::stop::StopSignal;
use crate::upload::buffer::ResultBuffer;
use anyhow::{Context, Result};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Content type of the exposition (what prometheus-client's text encoder writes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Longest request head read; a scrape request is a few hundred bytes.
const MAX_REQUEST: usize = 8 * 1024;
/// Most bytes read after refusing an oversized request head.
const MAX_DRAIN: u64 = 64 * 1024;
/// Read and write budget of one connection.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the accept loop looks at the stop signal.
const STOP_POLL_MS: i32 = 100;

/// What the listener reads at every scrape.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The agent's live counters.
    pub counters: Arc<Counters>,
    /// The result buffer (its fill level).
    pub buffer: Arc<ResultBuffer>,
    /// Its capacity in results.
    pub buffer_capacity: usize,
}

/// The running listener; [`MetricsServer::stop`] ends it.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<StopSignal>,
    thread: JoinHandle<()>,
}

impl MetricsServer {
    /// Binds `addr` (a clear error if taken) and serves `/metrics` on a new thread.
    pub fn spawn(addr: SocketAddr, sources: Sources) -> Result<Self> {
        let listener =
            TcpListener::bind(addr).with_context(|| format!("binding metrics listener {addr}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(StopSignal::default());
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(&listener, &sources, &st))?;
        tracing::info!(%addr, "agent metrics at /metrics");
        Ok(Self { addr, stop, thread })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and joins the thread (within [`STOP_POLL_MS`] plus one request).
    pub fn stop(self) -> Result<()> {
        self.stop.stop();
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("metrics thread panicked"))
    }
}

fn serve(listener: &TcpListener, sources: &Sources, stop: &StopSignal) {
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    while !stop.is_stopped() {
        // SAFETY: one valid pollfd for a listener this function borrows.
        let ready = unsafe { libc::poll(&mut pfd, 1, STOP_POLL_MS) };
        if ready <= 0 {
            continue;
        }
        match listener.accept() {
            Ok((stream, peer)) => {
                if let Err(e) = answer(stream, sources) {
                    tracing::debug!(%peer, "metrics request failed: {e:#}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => {
                tracing::warn!("metrics listener accept failed: {e}");
                stop.sleep(Duration::from_millis(STOP_POLL_MS as u64));
            }
        }
    }
}

/// Reads one request head and answers it; the connection is closed afterwards.
fn answer(mut stream: TcpStream, sources: &Sources) -> Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() >= MAX_REQUEST {
            respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "request head too large\n",
            )?;
            // Read what the client still sends, so closing does not reset the answer away.
            stream.shutdown(std::net::Shutdown::Write)?;
            std::io::copy(&mut (&stream).take(MAX_DRAIN), &mut std::io::sink())?;
            return Ok(());
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            anyhow::bail!("connection closed before the request head ended");
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    match (method, path) {
        (b"GET", b"/metrics") => match exposition(sources) {
            Ok(body) => respond(&mut stream, "200 OK", CONTENT_TYPE, &body),
            Err(e) => respond(
                &mut stream,
                "500 Internal Server Error",
                "text/plain",
                &format!("{e}\n"),
            ),
        },
        (b"GET", _) => respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            "only /metrics is served here\n",
        ),
        _ => respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            "only GET /metrics\n",
        ),
    }
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) -> Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()?;
    Ok(())
}

/// The whole exposition of the agent's metrics.
pub fn exposition(sources: &Sources) -> Result<String, std::fmt::Error> {
    let snapshot = Snapshot {
        stats: sources.counters.snapshot(sources.buffer.len()),
        buffer_capacity: sources.buffer_capacity,
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(snapshot));
    let mut body = String::new();
    text::encode(&mut body, &registry)?;
    Ok(body)
}

#[derive(Debug)]
struct Snapshot {
    stats: AgentStats,
    buffer_capacity: usize,
}

fn counter(mut m: MetricEncoder, v: u64) -> std::fmt::Result {
    m.encode_counter::<NoLabelSet, _, u64>(&v, None)
}

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let s = &self.stats;
        let counters = [
            (
                "rocemesh_agent_probes_sent",
                "PROBE packets sent.",
                s.probes_sent,
            ),
            (
                "rocemesh_agent_acks_received",
                "ACK1 and ACK2 packets received that matched an outstanding probe.",
                s.acks_received,
            ),
            (
                "rocemesh_agent_unmatched_acks",
                "ACKs received that matched no outstanding probe.",
                s.unmatched_ack,
            ),
            (
                "rocemesh_agent_responder_acks_sent",
                "ACK1 and ACK2 packets the responder sent (its answers).",
                s.acks_sent,
            ),
            (
                "rocemesh_agent_stale_qpn_drops",
                "PROBEs dropped because they named a QPN or RNIC that is not ours.",
                s.stale_qpn,
            ),
            (
                "rocemesh_agent_send_errors",
                "Sends the kernel refused.",
                s.send_errors,
            ),
            (
                "rocemesh_agent_outstanding_overflow",
                "Probes not sent because too many were outstanding.",
                s.outstanding_overflow,
            ),
            (
                "rocemesh_agent_buffer_dropped_results",
                "Results dropped because the upload buffer was full (oldest first).",
                s.records_dropped,
            ),
            (
                "rocemesh_agent_rejected_results",
                "Results in batches the analyzer refused as malformed (dropped; every other refusal is retried).",
                s.records_rejected,
            ),
            (
                "rocemesh_agent_traces_started",
                "Path traces (traceroutes) begun.",
                s.traces_started,
            ),
            (
                "rocemesh_agent_trace_packets_sent",
                "TRACE packets sent (one per TTL).",
                s.trace_packets_sent,
            ),
            (
                "rocemesh_agent_paths_uploaded",
                "Traced paths the analyzer accepted.",
                s.paths_uploaded,
            ),
            (
                "rocemesh_agent_trace_drops",
                "Trace requests lost to full queues or tables.",
                s.trace_drops,
            ),
            (
                "rocemesh_agent_service_events",
                "eBPF service-tracing events received (RTR, destroy, process exit).",
                s.service_events,
            ),
            (
                "rocemesh_agent_service_probes",
                "PROBEs sent for traced service connections.",
                s.service_probes,
            ),
            (
                "rocemesh_agent_pinglist_updates",
                "Pinglist changes applied.",
                s.pinglist_updates,
            ),
            (
                "rocemesh_agent_registrations",
                "Successful registrations with the controller.",
                s.registrations,
            ),
        ];
        for (name, help, v) in counters {
            counter(
                enc.encode_descriptor(name, help, None, MetricType::Counter)?,
                v,
            )?;
        }
        let mut m = enc.encode_descriptor(
            "rocemesh_agent_probe_results",
            "Finished probes by status: ok, timeout (no ACK), ack2_lost (ACK1 only; also a timeout).",
            None,
            MetricType::Counter,
        )?;
        for (status, n) in &s.results_by_status {
            counter(m.encode_family(&[("status", *status)])?, *n)?;
        }
        let mut m = enc.encode_descriptor(
            "rocemesh_agent_malformed_packets",
            "Received datagrams dropped as malformed, by reason.",
            None,
            MetricType::Counter,
        )?;
        for (reason, n) in &s.drops_by_reason {
            counter(m.encode_family(&[("reason", *reason)])?, *n)?;
        }
        let mut m = enc.encode_descriptor(
            "rocemesh_agent_probes_rejected",
            "Well-formed packets refused by probe authentication or the per-source answer limit, by reason (no_key, untagged, unknown_key, bad_tag, rate_limited).",
            None,
            MetricType::Counter,
        )?;
        for (reason, n) in &s.rejected_by_reason {
            counter(m.encode_family(&[("reason", *reason)])?, *n)?;
        }
        let uploads = [
            ("ok", s.batches_uploaded),
            ("failed", s.upload_failures),
            ("rejected", s.batches_rejected),
        ];
        let mut m = enc.encode_descriptor(
            "rocemesh_agent_uploads",
            "Result batch uploads: ok (accepted), failed (transport error, 5xx, 401, 403, 408, 413, 429: kept and retried), rejected (malformed-body answer: dropped).",
            None,
            MetricType::Counter,
        )?;
        for (result, n) in uploads {
            counter(m.encode_family(&[("result", result)])?, n)?;
        }
        let gauges = [
            (
                "rocemesh_agent_result_buffer_results",
                "Results waiting for upload.",
                s.buffer_len as u64,
            ),
            (
                "rocemesh_agent_result_buffer_capacity",
                "Capacity of the result buffer.",
                self.buffer_capacity as u64,
            ),
            (
                "rocemesh_agent_service_flows",
                "Live traced service flows of this host's RNICs.",
                s.service_flows,
            ),
        ];
        for (name, help, v) in gauges {
            enc.encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&v)?;
        }
        if !s.service_route.is_empty() {
            enc.encode_descriptor(
                "rocemesh_agent_service_tracing",
                "Route the eBPF service tracer runs on (kernel, user, none, off, failed).",
                None,
                MetricType::Info,
            )?
            .encode_info(&[("route", s.service_route)])?;
        }
        let mut m = enc.encode_descriptor(
            "rocemesh_agent_rnic",
            "This host's RNICs and the probe transport each uses (udp or verbs).",
            None,
            MetricType::Info,
        )?;
        for (rnic, transport) in &s.transports {
            m.encode_info(&[("rnic", rnic.as_str()), ("transport", *transport)])?;
        }
        Ok(())
    }
}
