//! What the uploader does with each answer of the analyzer, against a real HTTP server:
//! every refusal that passes (401/403 during a token rotation, 408, 429, 5xx) keeps the
//! results and retries, a 413 splits the batch, and only a malformed-body answer drops one
//! (counted). Seeded: the answer script is random; the seed is printed.

#[allow(dead_code)]
mod common;

use common::upload::{numbered, to};
use common::{Request, Response, serve};
use rand::{Rng, SeedableRng};
use rocemesh_agent::Counters;
use rocemesh_agent::ResultBuffer;
use rocemesh_agent::{UploadOutcome, Uploader};
use rocemesh_proto::ProbeResult;
use rocemesh_proto::api::{ErrorBody, UploadAck};
use rocemesh_proto::batch::decode_batch;
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the stand-in analyzer took: (batch_seq, record seqs) of every 200 answer.
type Taken = Arc<Mutex<Vec<(u64, Vec<u32>)>>>;

fn accept(req: &Request, taken: &Taken) -> Response {
    let b = decode_batch(&req.body).expect("the agent sends well-formed batches");
    let mut t = taken.lock().unwrap();
    // A retry of a batch already taken is a duplicate (the analyzer's de-duplication).
    if !t.iter().any(|(s, _)| *s == b.header.batch_seq) {
        t.push((b.header.batch_seq, b.records().map(|r| r.seq).collect()));
    }
    Response::json(
        200,
        UploadAck {
            accepted: b.len() as u64,
            dropped: 0,
            duplicate: false,
            instance: 1,
        },
    )
}

fn refuse(status: u16) -> Response {
    Response::json(
        status,
        ErrorBody {
            error: format!("{status} for the test"),
        },
    )
}

#[test]
fn refusals_that_pass_keep_every_result_and_413_splits() {
    let seed: u64 = std::env::var("UPLOAD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("seed {seed} (replay with UPLOAD_SEED={seed})");
    let rng = Arc::new(Mutex::new(rand::rngs::StdRng::seed_from_u64(seed)));
    let taken: Taken = Arc::default();
    // Bodies above 6,000 bytes (~120 results) are too large; other answers are drawn
    // from every status that must not lose results, with 200 one time in three.
    let url = {
        let taken = taken.clone();
        serve(move |req| {
            if req.body.len() > 6_000 {
                return refuse(413);
            }
            let pick = rng.lock().unwrap().random_range(0..9);
            match pick {
                0 => refuse(401),
                1 => refuse(403),
                2 => refuse(408),
                3 => refuse(429),
                4 => refuse(503),
                5 => Response::empty(502),
                _ => accept(req, &taken),
            }
        })
    };
    let counters = Arc::new(Counters::default());
    let buffer = Arc::new(ResultBuffer::new(100_000, counters.clone()));
    let mut uploader = Uploader::new(buffer.clone(), counters.clone(), 1, Duration::from_secs(5));
    let mut next = 0u32;
    let mut rounds = 0;
    let mut outcomes = HashSet::new();
    while rounds < 400 && (next < 3_000 || !buffer.is_empty()) {
        if next < 3_000 {
            let mut batch: Vec<ProbeResult> = (next..next + 300).map(numbered).collect();
            next += 300;
            buffer.push_all(&mut batch);
        }
        outcomes.insert(format!("{:?}", uploader.upload_all(&to(&url))));
        rounds += 1;
    }
    assert!(
        buffer.is_empty(),
        "seed {seed}: {} results still buffered",
        buffer.len()
    );
    let taken = taken.lock().unwrap();
    let mut seen: Vec<u32> = taken.iter().flat_map(|(_, s)| s.iter().copied()).collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..3_000).collect::<Vec<_>>(),
        "seed {seed}: every result exactly once"
    );
    assert!(
        taken.iter().all(|(_, s)| s.len() <= 125),
        "413 made the batches smaller"
    );
    assert_eq!(counters.records_rejected.load(Relaxed), 0, "seed {seed}");
    assert_eq!(counters.batches_rejected.load(Relaxed), 0, "seed {seed}");
    assert_eq!(counters.records_dropped.load(Relaxed), 0, "seed {seed}");
    assert!(
        counters.upload_failures.load(Relaxed) > 0,
        "seed {seed}: the refusals were met"
    );
    assert!(outcomes.contains("Retry"), "{outcomes:?}");
}

#[test]
fn only_a_malformed_body_answer_drops_a_batch_and_it_is_counted() {
    let url = serve(|_| refuse(400));
    let counters = Arc::new(Counters::default());
    let buffer = Arc::new(ResultBuffer::new(1_000, counters.clone()));
    let mut batch: Vec<ProbeResult> = (0..50).map(numbered).collect();
    buffer.push_all(&mut batch);
    let mut uploader = Uploader::new(buffer.clone(), counters.clone(), 1, Duration::from_secs(5));
    assert_eq!(uploader.upload_all(&to(&url)), UploadOutcome::Rejected);
    assert!(buffer.is_empty());
    assert_eq!(counters.batches_rejected.load(Relaxed), 1);
    assert_eq!(counters.records_rejected.load(Relaxed), 50);
}

#[test]
fn backoff_grows_is_capped_and_jittered() {
    use rocemesh_agent::backoff;
    let p = Duration::from_secs(5);
    assert_eq!(backoff(p, 0), p);
    let all: Vec<Duration> = (0..200).map(|_| backoff(p, 2)).collect();
    assert!(
        all.iter().all(|d| *d >= p && *d < p * 3),
        "2 periods +- half"
    );
    assert!(all.iter().collect::<HashSet<_>>().len() > 100, "jittered");
    for f in [10, 40, u32::MAX] {
        let d = backoff(p, f);
        assert!(
            d >= Duration::from_secs(10) && d < Duration::from_secs(30),
            "{d:?}"
        );
    }
}
