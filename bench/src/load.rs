//! Section "load" (issue 8): 1,000 simulated agents against one real `rocemesh server`
//! process on loopback, at an agent's real rates: each registers, polls its pinglist
//! every `pinglist_poll_ms` (ETag, 304 when current) and uploads a real result batch
//! (`proto::batch` encoder) every `upload_period_ms`, holding as many records as its
//! pinglists' probe rates produce in that time. Reports latency percentiles per request
//! kind, the error count, and the server's RSS over time (sampled from `/proc`).
//!
//! Latency is measured from the moment a request is due, so waiting for one of the
//! client's bounded connection slots counts against the server, never for it.

use crate::fleet;
use crate::http::Client;
use crate::latency::Latencies;
use crate::report::Row;
use crate::server_proc::{Scratch, ServerProc};
use crate::{Opts, procfs, runtime};
use anyhow::Result;
use bytes::Bytes;
use hyper::{Method, StatusCode};
use rand::Rng;
use rocemesh_proto::api::{API_PREFIX, Pinglist, RegisterResponse};
use rocemesh_proto::batch::{BatchEncoder, BatchHeader, CONTENT_TYPE, ProbeResult, ProbeStatus};
use rocemesh_proto::packet::TimestampSource;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

const SECTION: &str = "load";
/// Simulated agents.
const AGENTS: u32 = 1_000;
/// Requests in flight at once over all agents (the client's connection bound).
const IN_FLIGHT: usize = 128;
/// p99 upload latency target: an upload period is 5 s, and an agent's next upload
/// must not queue behind its last one; 1 s leaves 4 s of slack.
const UPLOAD_P99_TARGET_MS: f64 = 1_000.0;
/// RSS sampling interval.
const RSS_EVERY: Duration = Duration::from_secs(1);
/// Uploads due this long after the start count as steady state too (the registration
/// storm of 1,000 agents at once, and their first full pinglists, are over by then).
const STORM: Duration = Duration::from_secs(20);

/// Latencies of one agent, per request kind.
#[derive(Default)]
struct AgentLatencies {
    register: Latencies,
    poll: Latencies,
    upload: Latencies,
    /// Uploads due after [`STORM`].
    upload_steady: Latencies,
    records: u64,
}

/// Runs the section.
pub(crate) fn run(opts: &Opts) -> Result<Vec<Row>> {
    let duration = Duration::from_secs(if opts.quick { 30 } else { 180 });
    let scratch = Scratch::new(SECTION)?;
    let server = ServerProc::start(&opts.rocemesh, scratch.path(), "")?;
    let pid = server.pid();
    let rt = runtime()?;
    let client = Client::new(server.url());
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let started = Instant::now();
    let cpu_start = procfs::cpu(pid)?;
    let sampler = std::thread::spawn(move || sample_rss(pid, duration));
    let per_agent = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..AGENTS {
            set.spawn(agent(
                client.clone(),
                slots.clone(),
                i,
                (started + STORM, started + duration),
            ));
        }
        set.join_all().await
    });
    let cpu_end = procfs::cpu(pid)?;
    let rss = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("RSS sampler panicked"))??;
    server.stop();
    let took = started.elapsed().as_secs_f64();
    let mut all = AgentLatencies::default();
    for a in per_agent {
        all.register.merge(a.register);
        all.poll.merge(a.poll);
        all.upload.merge(a.upload);
        all.upload_steady.merge(a.upload_steady);
        all.records += a.records;
    }
    let scale = format!("{AGENTS} agents, {} s", duration.as_secs());
    let mut rows = Vec::new();
    let errors = all.register.errors + all.poll.errors + all.upload.errors;
    rows.push(
        Row::new(
            SECTION,
            format!("request errors ({scale})"),
            errors as f64,
            "",
        )
        .at_most(0.0),
    );
    let steady = format!(
        "upload, due {} s after the start or later,",
        STORM.as_secs()
    );
    for (kind, lat) in [
        ("register", &mut all.register),
        ("pinglist poll", &mut all.poll),
        ("upload", &mut all.upload),
        (steady.as_str(), &mut all.upload_steady),
    ] {
        let n = lat.count();
        let (p50, p99, max) = (
            lat.quantile_ms(0.5),
            lat.quantile_ms(0.99),
            lat.quantile_ms(1.0),
        );
        let row = Row::new(
            SECTION,
            format!("{kind} p99 latency ({n} requests; p50 {p50:.1} ms, max {max:.1} ms)"),
            p99,
            "ms",
        );
        rows.push(if kind == "upload" {
            row.at_most(UPLOAD_P99_TARGET_MS)
        } else {
            row
        });
    }
    rows.push(Row::new(
        SECTION,
        format!("probe results uploaded/s ({scale})"),
        all.records as f64 / took,
        "results/s",
    ));
    rows.push(Row::new(
        SECTION,
        "server CPU, % of one core (whole run)",
        procfs::cpu_percent(&cpu_start, &cpu_end),
        "%",
    ));
    let at = |frac: f64| {
        rss.get(((rss.len() as f64 * frac) as usize).min(rss.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    let peak = rss.iter().copied().fold(0.0, f64::max);
    rows.push(
        Row::new(SECTION, "server RSS at end of run", at(1.0), "MB").baseline(format!(
            "at 10 %: {:.1} MB, at 50 %: {:.1} MB, peak {peak:.1} MB",
            at(0.1),
            at(0.5)
        )),
    );
    Ok(rows)
}

/// The server's RSS (MB) every [`RSS_EVERY`] for `duration`.
fn sample_rss(pid: u32, duration: Duration) -> Result<Vec<f64>> {
    let end = Instant::now() + duration;
    let mut out = Vec::new();
    while Instant::now() < end {
        out.push(procfs::rss_mb(pid)?);
        std::thread::sleep(RSS_EVERY);
    }
    Ok(out)
}

/// One agent until `until`: register, then poll and upload at the intervals the
/// controller handed out, starting at a random phase like agents started at random times.
/// Uploads due after `steady_from` are also counted apart.
async fn agent(
    client: Client,
    slots: Arc<Semaphore>,
    i: u32,
    (steady_from, until): (Instant, Instant),
) -> AgentLatencies {
    let mut lat = AgentLatencies::default();
    let req = fleet::register_request(i, 1);
    let due = Instant::now();
    let Some(reg) = timed(
        &slots,
        &mut lat.register,
        due,
        StatusCode::OK,
        client.post_json(&format!("{API_PREFIX}/agents/register"), &req),
    )
    .await
    .and_then(|body| serde_json::from_slice::<RegisterResponse>(&body).ok()) else {
        lat.register.errors += 1;
        return lat;
    };
    let poll_every = Duration::from_millis(reg.pinglist_poll_ms);
    let upload_every = Duration::from_millis(reg.upload_period_ms);
    let path = format!("{API_PREFIX}/pinglists/{}", reg.host_id);
    let results_path = format!("{API_PREFIX}/results");
    let mut pinglist: Option<Pinglist> = None;
    let mut etag: Option<String> = None;
    let mut next_poll = Instant::now();
    let mut next_upload = Instant::now() + upload_every.mul_f64(rand::rng().random::<f64>());
    let mut last_upload = Instant::now();
    let mut results = Results::new(reg.host_id, reg.epoch);
    while next_poll.min(next_upload) < until {
        if next_poll <= next_upload {
            tokio::time::sleep_until(next_poll.into()).await;
            let due = next_poll;
            next_poll += poll_every;
            let want = if etag.is_some() {
                StatusCode::NOT_MODIFIED
            } else {
                StatusCode::OK
            };
            let answer = async {
                let _slot = slots.acquire().await;
                client.get(&path, etag.as_deref()).await
            };
            match answer.await {
                Ok(a) if a.status == StatusCode::OK || a.status == want => {
                    lat.poll.record(due.elapsed());
                    if a.status == StatusCode::OK {
                        match serde_json::from_slice::<Pinglist>(&a.body) {
                            Ok(list) => (pinglist, etag) = (Some(list), a.etag),
                            Err(_) => lat.poll.errors += 1,
                        }
                    }
                }
                _ => lat.poll.errors += 1,
            }
        } else {
            tokio::time::sleep_until(next_upload.into()).await;
            let due = next_upload;
            next_upload += upload_every;
            let since = last_upload.elapsed();
            last_upload = Instant::now();
            let body = results.batch(pinglist.as_ref(), since);
            lat.records += results.last_count;
            let sent = client.send(Method::POST, &results_path, Some(CONTENT_TYPE), None, body);
            match timed(&slots, &mut lat.upload, due, StatusCode::OK, sent).await {
                None => lat.upload.errors += 1,
                Some(_) if due >= steady_from => lat.upload_steady.record(due.elapsed()),
                Some(_) => {}
            }
        }
    }
    lat
}

/// Awaits `answer` holding one connection slot; records the time since `due` when the
/// status is `want` and returns the body, or `None` (the caller counts the error).
async fn timed(
    slots: &Semaphore,
    lat: &mut Latencies,
    due: Instant,
    want: StatusCode,
    answer: impl std::future::Future<Output = Result<crate::http::Answer>>,
) -> Option<Bytes> {
    let _slot = slots.acquire().await.ok()?;
    let a = answer.await.ok().filter(|a| a.status == want)?;
    lat.record(due.elapsed());
    Some(a.body)
}

/// The probe results one agent produces: per list, `pps` x elapsed time of records
/// cycling through its targets (fractions carried over), as one `proto::batch` body.
struct Results {
    host_id: u32,
    epoch: u32,
    batch_seq: u64,
    seq: u32,
    /// Fractional records owed per (RNIC, list) slot, carried to the next batch.
    carry: Vec<f64>,
    last_count: u64,
}

impl Results {
    fn new(host_id: u32, epoch: u32) -> Self {
        Self {
            host_id,
            epoch,
            batch_seq: 0,
            seq: 0,
            carry: Vec::new(),
            last_count: 0,
        }
    }

    /// The next batch, covering `elapsed` of probing under `pinglist` (a heartbeat
    /// without records while the agent has none).
    fn batch(&mut self, pinglist: Option<&Pinglist>, elapsed: Duration) -> Bytes {
        self.batch_seq += 1;
        let header = BatchHeader {
            host_id: self.host_id,
            epoch: self.epoch,
            batch_seq: self.batch_seq,
            dropped: 0,
        };
        let lists: Vec<_> = pinglist
            .into_iter()
            .flat_map(|p| &p.rnics)
            .flat_map(|r| r.lists.iter().map(move |l| (r.rnic_id, l)))
            .collect();
        self.carry.resize(lists.len(), 0.0);
        let mut rng = rand::rng();
        let now_ns = rocemesh_proto::now_unix_ms().max(0) as u64 * 1_000_000;
        let span_ns = elapsed.as_nanos() as u64;
        let mut enc = BatchEncoder::new(header, 0);
        for (slot, (prober, list)) in lists.into_iter().enumerate() {
            let owed = self.carry[slot] + list.pps * elapsed.as_secs_f64();
            let n = owed.floor() as usize;
            self.carry[slot] = owed - n as f64;
            for k in 0..n {
                let Some(t) = list
                    .entries
                    .get((self.seq as usize + k) % list.entries.len().max(1))
                else {
                    break;
                };
                let network_rtt_ns = rng.random_range(6_000..14_000);
                let (prober_delay_ns, responder_delay_ns) = (
                    rng.random_range(2_000..5_000),
                    rng.random_range(1_000..3_000),
                );
                enc.push(&ProbeResult {
                    prober_rnic: prober,
                    target_rnic: t.rnic_id,
                    seq: self.seq.wrapping_add(k as u32),
                    target_qpn: t.qpn,
                    send_unix_ns: now_ns - span_ns + span_ns * k as u64 / n as u64,
                    network_rtt_ns,
                    prober_delay_ns,
                    responder_delay_ns,
                    app_rtt_ns: network_rtt_ns + prober_delay_ns + responder_delay_ns,
                    src_port: t.src_port,
                    dst_port: t.port,
                    class: list.class,
                    status: ProbeStatus::Ok,
                    ts_source: TimestampSource::Software,
                });
            }
            self.seq = self.seq.wrapping_add(n as u32);
        }
        self.last_count = enc.len() as u64;
        Bytes::from(enc.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocemesh_proto::api::{PingTarget, ProbeList, RnicPinglist};
    use rocemesh_proto::batch::decode_batch;
    use rocemesh_proto::packet::ProbeClass;

    #[test]
    fn batches_carry_the_lists_rates() {
        let target = |id| PingTarget {
            rnic_id: id,
            ip: "10.0.0.2".parse().unwrap(),
            port: 4791,
            qpn: 7,
            src_port: 50000,
        };
        let list = Pinglist {
            host_id: 3,
            version: String::new(),
            timeout_ms: 500,
            probe_auth: None,
            rnics: vec![RnicPinglist {
                rnic_id: 1,
                lists: vec![
                    ProbeList {
                        class: ProbeClass::TorMesh,
                        pps: 10.0,
                        entries: vec![target(2), target(4)],
                    },
                    ProbeList {
                        class: ProbeClass::InterTor,
                        pps: 0.3,
                        entries: vec![target(9)],
                    },
                ],
            }],
        };
        let mut r = Results::new(3, 5);
        assert!(
            decode_batch(&r.batch(None, Duration::from_secs(5)))
                .unwrap()
                .is_empty(),
            "heartbeat"
        );
        let mut per_class = [0usize; 4];
        for _ in 0..4 {
            let body = r.batch(Some(&list), Duration::from_secs(5));
            let batch = decode_batch(&body).unwrap();
            assert_eq!(batch.header.host_id, 3);
            for rec in batch.records() {
                assert_eq!(rec.prober_rnic, 1);
                per_class[rec.class as usize] += 1;
                assert!(rec.network_rtt_ns < rec.app_rtt_ns);
            }
        }
        assert_eq!(
            per_class[ProbeClass::TorMesh as usize],
            200,
            "10 pps x 20 s"
        );
        assert_eq!(
            per_class[ProbeClass::InterTor as usize],
            6,
            "0.3 pps x 20 s, fractions carried"
        );
        assert_eq!(r.batch_seq, 5);
    }
}
