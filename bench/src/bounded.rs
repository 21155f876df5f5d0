//! Many requests, at most N in flight: the benches' client-side concurrency bound.

use std::future::Future;
use tokio::task::JoinSet;

/// Runs `job(0..count)` with at most `in_flight` running at once; results in index order.
pub(crate) async fn run<T, F, Fut>(count: usize, in_flight: usize, job: F) -> Vec<T>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut out: Vec<Option<T>> = (0..count).map(|_| None).collect();
    let mut set = JoinSet::new();
    let mut next = 0;
    while next < count || !set.is_empty() {
        while next < count && set.len() < in_flight.max(1) {
            let fut = job(next);
            let i = next;
            set.spawn(async move { (i, fut.await) });
            next += 1;
        }
        match set.join_next().await {
            Some(Ok((i, v))) => out[i] = Some(v),
            // A panicking job is a bug of the bench itself: surface it.
            Some(Err(e)) => std::panic::resume_unwind(e.into_panic()),
            None => break,
        }
    }
    out.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keeps_order_and_bound() {
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let out = run(40, 4, |i| {
            let (running, peak) = (running.clone(), peak.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2 + (i % 3) as u64)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                i * 2
            }
        })
        .await;
        assert_eq!(out, (0..40).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(peak.load(Ordering::SeqCst), 4);
    }
}
