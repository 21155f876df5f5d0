//! The process heap between ticks.
//!
//! A diagnosis tick and a period's finalization allocate and free hundreds of megabytes
//! at 10k RNICs, on whichever blocking thread or tokio worker ran them. glibc keeps what a
//! thread freed in that thread's arena for its next allocation, so the analyzer's
//! resident memory stayed at the sum of every arena's peak rather than what it holds.

/// Hands the heap's free pages back to the kernel (glibc `malloc_trim`, every arena);
/// elsewhere a no-op. Called once per pass of the analyzer loop that finalized a period
/// or diagnosed, on a blocking thread: trimming walks every arena's free chunks under its
/// lock, which must not stall the async loop.
pub(crate) async fn release_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    let _ = tokio::task::spawn_blocking(|| {
        // SAFETY: malloc_trim takes no pointer; it only walks the allocator's own free
        // lists under their locks and may be called from any thread at any time.
        unsafe {
            libc::malloc_trim(0);
        }
    })
    .await;
}
