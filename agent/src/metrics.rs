//! `--metrics-listen ADDR`: the agent's self-metrics at `GET /metrics` (OpenMetrics, or the
//! classic text format when the scraper's `Accept` asks for it, plus the build and process
//! families every rocemesh process exports). The agent runs no async runtime elsewhere, so the listener gets a
//! single-threaded tokio runtime on its own thread and serves through `rocemesh_httpd`:
//! connections are served concurrently under [`Limits::metrics`] (caps, header-read and
//! idle deadlines), so a slow or silent client delays no scrape.
//!
//! Every value is a host-wide counter from [`Counters`]; the only per-RNIC series is
//! `rocemesh_agent_rnic_info` (bounded by the RNICs of this host).

use crate::stats::{AgentStats, Counters};
use crate::upload::buffer::ResultBuffer;
use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use rocemesh_httpd::Limits;
use rocemesh_proto::exposition::{self, Format, ProcessCollector};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::sync::oneshot;

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
    stop: oneshot::Sender<()>,
    thread: JoinHandle<std::io::Result<()>>,
}

impl MetricsServer {
    /// Binds `addr` (a clear error if taken) and serves `/metrics` on a new thread.
    pub fn spawn(addr: SocketAddr, sources: Sources) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the metrics runtime")?;
        let listener = {
            let _in_runtime = runtime.enter();
            rocemesh_httpd::bind(addr)
                .with_context(|| format!("binding metrics listener {addr}"))?
        };
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let router = router(sources);
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                runtime.block_on(rocemesh_httpd::serve(
                    listener,
                    None,
                    router,
                    Limits::metrics(),
                    async move {
                        let _ = stopped.await;
                    },
                ))
            })?;
        tracing::info!(%addr, "agent metrics at /metrics");
        Ok(Self { addr, stop, thread })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets scrapes in flight finish and joins the thread.
    pub fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("metrics thread panicked"))?
            .context("metrics listener")
    }
}

fn router(sources: Sources) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .fallback(|| async { (StatusCode::NOT_FOUND, "only /metrics is served here\n") })
        .with_state(Arc::new(sources))
}

async fn scrape(
    State(sources): State<Arc<Sources>>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    match exposition(&sources, format) {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// The whole exposition of the agent's metrics in `format`.
pub fn exposition(sources: &Sources, format: Format) -> Result<String, std::fmt::Error> {
    let snapshot = Snapshot {
        stats: sources.counters.snapshot(sources.buffer.len()),
        buffer_capacity: sources.buffer_capacity,
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ProcessCollector));
    registry.register_collector(Box::new(snapshot));
    exposition::encode(&[&registry], format)
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
            "Well-formed packets refused by probe authentication or the per-source answer limit, by reason (no_key, untagged, unknown_key, bad_tag, stale, rate_limited).",
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
