//! A token rotation loses no result: the server switches to a new agent token while the
//! agent still holds the old one; its uploads are answered 401 and kept, the token file
//! is rewritten (as a rotated Kubernetes secret is), the agent reads it again on the next
//! 401 and delivers everything it buffered meanwhile. One test per binary: the token is
//! process-wide.

#[allow(dead_code)]
mod common;

use common::upload::{numbered, to};
use common::{Response, serve};
use rocemesh_agent::Counters;
use rocemesh_agent::ResultBuffer;
use rocemesh_agent::{UploadOutcome, Uploader};
use rocemesh_proto::ProbeResult;
use rocemesh_proto::api::{ErrorBody, UploadAck};
use rocemesh_proto::batch::decode_batch;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const OLD: &str = "agent-token-old-0123456789";
const NEW: &str = "agent-token-new-9876543210";

#[test]
fn a_token_rotation_loses_no_result() {
    let dir = std::env::temp_dir().join(format!("rocemesh-rotation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, format!("{OLD}\n")).unwrap();
    rocemesh_agent::set_token_file(&file, OLD).unwrap();
    let accepted_token = Arc::new(Mutex::new(OLD.to_string()));
    let taken: Arc<Mutex<Vec<u32>>> = Arc::default();
    let url = {
        let (accepted_token, taken) = (accepted_token.clone(), taken.clone());
        serve(move |req| {
            let want = format!("Bearer {}", accepted_token.lock().unwrap());
            if req.header("Authorization") != Some(want.as_str()) {
                return Response::json(
                    401,
                    ErrorBody {
                        error: "unknown token".into(),
                    },
                );
            }
            let b = decode_batch(&req.body).unwrap();
            taken.lock().unwrap().extend(b.records().map(|r| r.seq));
            Response::json(
                200,
                UploadAck {
                    accepted: b.len() as u64,
                    dropped: 0,
                    duplicate: false,
                    instance: 1,
                },
            )
        })
    };
    let counters = Arc::new(Counters::default());
    let buffer = Arc::new(ResultBuffer::new(100_000, counters.clone()));
    let mut up = Uploader::new(buffer.clone(), counters.clone(), 1, Duration::from_secs(5));
    let mut next = 0u32;
    let mut produce = |n: u32| {
        let mut batch: Vec<ProbeResult> = (next..next + n).map(numbered).collect();
        next += n;
        buffer.push_all(&mut batch);
    };
    produce(100);
    assert_eq!(up.upload_all(&to(&url)), UploadOutcome::Accepted);
    // The server now takes only the new token; the agent's file still holds the old one.
    *accepted_token.lock().unwrap() = NEW.to_string();
    for _ in 0..3 {
        produce(100);
        assert_eq!(
            up.upload_all(&to(&url)),
            UploadOutcome::Retry,
            "401 keeps the results"
        );
    }
    assert_eq!(buffer.len(), 300, "nothing dropped while refused");
    // The secret is rotated on disk: the next 401 has the agent read it again.
    std::fs::write(&file, format!("{NEW}\n")).unwrap();
    produce(100);
    let mut attempts = 0;
    while !buffer.is_empty() {
        attempts += 1;
        assert!(attempts <= 3, "still refused after the file changed");
        up.upload_all(&to(&url));
    }
    let mut seen = taken.lock().unwrap().clone();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..500).collect::<Vec<_>>(),
        "every result delivered exactly once"
    );
    assert_eq!(counters.records_rejected.load(Relaxed), 0);
    assert_eq!(counters.records_dropped.load(Relaxed), 0);
    std::fs::remove_dir_all(&dir).ok();
}
