//! Section "controller": pinglist generation at 1k / 10k / 50k RNICs, registration and
//! pinglist-poll throughput, all through a real `rocemesh server` over HTTP on 127.0.0.1.
//!
//! Generation is timed as the first pinglist poll after a registration: every
//! registration moves the registry generation on, so that poll rebuilds every host's
//! lists (`controller::pinglist::build_all` and versioning) before answering; the answer
//! itself is one host's list, well under a millisecond of the figure. The registry it
//! needs is built by the registrations (timed as registration throughput) and, separately,
//! by a server restart that loads it from the database.

use crate::bounded;
use crate::fleet::{self, RNICS_PER_HOST};
use crate::http::Client;
use crate::report::Row;
use crate::server_proc::{Scratch, ServerProc};
use crate::{Opts, runtime};
use anyhow::{Context, Result, ensure};
use hyper::StatusCode;
use rocemesh_proto::api::{API_PREFIX, RegisterResponse};
use std::time::{Duration, Instant};

const SECTION: &str = "controller";
/// Generation target at 50k RNICs (issue 7).
const GENERATION_TARGET_S: f64 = 2.0;
/// Registrations / polls in flight at once.
const IN_FLIGHT: usize = 16;
/// Generation samples per scale (median reported).
const SAMPLES: u32 = 3;

/// Runs the section.
pub(crate) fn run(opts: &Opts) -> Result<Vec<Row>> {
    let scales: &[u32] = if opts.quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 50_000]
    };
    let poll_window = Duration::from_secs(if opts.quick { 2 } else { 5 });
    let scratch = Scratch::new(SECTION)?;
    let rt = runtime()?;
    let mut server = ServerProc::start(&opts.rocemesh, scratch.path(), "")?;
    let mut rows = Vec::new();
    let mut registered = 0u32;
    let mut host0 = None;
    for &rnics in scales {
        let hosts = fleet::hosts_for(rnics);
        let client = Client::new(server.url());
        let started = Instant::now();
        let answers = rt.block_on(register_range(&client, registered..hosts, 1))?;
        let took = started.elapsed().as_secs_f64();
        let added = hosts - registered;
        host0 = host0.or(answers.first().map(|a| a.host_id));
        registered = hosts;
        let host0 = host0.context("no host registered")?;
        rows.push(Row::new(SECTION, format!("registrations/s over HTTP, hosts {} .. {hosts} ({IN_FLIGHT} in flight, 8 RNICs each)", hosts - added), f64::from(added) / took, "hosts/s"));
        let gen_s = rt.block_on(generation_median(&client, host0))?;
        rows.push(
            Row::new(
                SECTION,
                format!("pinglist generation, {rnics} RNICs (all hosts; median of {SAMPLES})"),
                gen_s,
                "s",
            )
            .at_most(GENERATION_TARGET_S)
            .baseline(format!(
                "same poll, lists cached: {:.2} ms",
                rt.block_on(poll_once(&client, host0))? * 1e3
            )),
        );
    }
    let client = Client::new(server.url());
    let ids: Vec<u32> = rt.block_on(host_ids(&client))?;
    let rnics = registered * RNICS_PER_HOST;
    for conditional in [true, false] {
        let (rate, p99_ms) =
            rt.block_on(poll_throughput(&client, &ids, conditional, poll_window))?;
        let what = if conditional {
            "304, ETag current"
        } else {
            "200, full list"
        };
        rows.push(
            Row::new(
                SECTION,
                format!("pinglist polls/s, {rnics} RNICs, {what} ({IN_FLIGHT} in flight)"),
                rate,
                "polls/s",
            )
            .baseline(format!("p99 {p99_ms:.1} ms")),
        );
    }
    server.stop();
    server = ServerProc::start(&opts.rocemesh, scratch.path(), "")?;
    rows.push(Row::new(
        SECTION,
        format!("server start with {rnics} RNICs in SQLite (registry + topology load)"),
        server.started_in.as_secs_f64(),
        "s",
    ));
    let client = Client::new(server.url());
    let first = rt.block_on(poll_once(&client, ids[0]))?;
    rows.push(
        Row::new(
            SECTION,
            format!("pinglist generation after restart, {rnics} RNICs (first poll)"),
            first,
            "s",
        )
        .at_most(GENERATION_TARGET_S),
    );
    server.stop();
    Ok(rows)
}

/// Registers hosts `range` of the synthetic fleet at `epoch`, [`IN_FLIGHT`] at a time.
async fn register_range(
    client: &Client,
    range: std::ops::Range<u32>,
    epoch: u32,
) -> Result<Vec<RegisterResponse>> {
    let first = range.start;
    let answers = bounded::run(range.len(), IN_FLIGHT, |i| {
        let client = client.clone();
        let req = fleet::register_request(first + i as u32, epoch);
        async move {
            client
                .post_json(&format!("{API_PREFIX}/agents/register"), &req)
                .await?
                .json::<RegisterResponse>()
        }
    })
    .await;
    answers.into_iter().collect()
}

/// Median over [`SAMPLES`] of: re-register host 0 (a new epoch moves the registry
/// generation on), then time its first poll, which rebuilds every list.
async fn generation_median(client: &Client, host0: u32) -> Result<f64> {
    let mut samples = Vec::new();
    for epoch in 2..2 + SAMPLES {
        let answers = register_range(client, 0..1, epoch).await?;
        ensure!(
            answers.first().map(|a| a.host_id) == Some(host0),
            "host 0 changed its id on re-registration"
        );
        samples.push(poll_once(client, host0).await?);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

/// Seconds one full pinglist poll of `host` takes; checks it holds lists.
async fn poll_once(client: &Client, host: u32) -> Result<f64> {
    let answer = client
        .get(&format!("{API_PREFIX}/pinglists/{host}"), None)
        .await?;
    let list: rocemesh_proto::api::Pinglist = answer.json()?;
    ensure!(
        list.rnics.iter().all(|r| !r.lists.is_empty()),
        "host {host}: an RNIC without probe lists"
    );
    Ok(answer.elapsed.as_secs_f64())
}

/// Ids of every registered host.
async fn host_ids(client: &Client) -> Result<Vec<u32>> {
    let hosts: Vec<rocemesh_proto::api::HostInfo> = client
        .get(&format!("{API_PREFIX}/hosts"), None)
        .await?
        .json()?;
    Ok(hosts.into_iter().map(|h| h.id).collect())
}

/// Polls/s and p99 (ms) of [`IN_FLIGHT`] pollers cycling through `ids` for `window`;
/// `conditional` polls send the current ETag and must get 304.
async fn poll_throughput(
    client: &Client,
    ids: &[u32],
    conditional: bool,
    window: Duration,
) -> Result<(f64, f64)> {
    let mut etags = Vec::with_capacity(ids.len());
    if conditional {
        for id in ids {
            let answer = client
                .get(&format!("{API_PREFIX}/pinglists/{id}"), None)
                .await?;
            etags.push(answer.etag.context("pinglist without ETag")?);
        }
    }
    let etags = std::sync::Arc::new(etags);
    let ids = std::sync::Arc::new(ids.to_vec());
    let started = Instant::now();
    let per_poller = bounded::run(IN_FLIGHT, IN_FLIGHT, |p| {
        let (client, ids, etags) = (client.clone(), ids.clone(), etags.clone());
        async move {
            let mut lat = crate::latency::Latencies::default();
            let mut i = p;
            while started.elapsed() < window {
                let k = i % ids.len();
                let answer = client
                    .get(
                        &format!("{API_PREFIX}/pinglists/{}", ids[k]),
                        etags.get(k).map(String::as_str),
                    )
                    .await?;
                let want = if conditional {
                    StatusCode::NOT_MODIFIED
                } else {
                    StatusCode::OK
                };
                ensure!(
                    answer.status == want,
                    "poll of host {}: {} instead of {want}",
                    ids[k],
                    answer.status
                );
                lat.record(answer.elapsed);
                i += IN_FLIGHT;
            }
            anyhow::Ok(lat)
        }
    })
    .await;
    let took = started.elapsed().as_secs_f64();
    let mut all = crate::latency::Latencies::default();
    for lat in per_poller {
        all.merge(lat?);
    }
    Ok((all.count() as f64 / took, all.quantile_ms(0.99)))
}
