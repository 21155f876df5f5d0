//! Waiting for SIGTERM/SIGINT in processes that are not async (the agent).

use anyhow::{Context, Result};

/// Blocks SIGINT and SIGTERM in the calling thread (and in every thread it spawns
/// afterwards), so that [`wait`] can take them synchronously. Call before spawning.
pub fn block_termination() -> Result<libc::sigset_t> {
    // SAFETY: plain libc signal-set manipulation on a zeroed, initialised sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc)).context("blocking SIGINT/SIGTERM");
        }
        Ok(set)
    }
}

/// Waits for one of the signals blocked by [`block_termination`]; returns its number.
pub fn wait(set: &libc::sigset_t) -> Result<i32> {
    let mut sig = 0;
    // SAFETY: `set` was initialised by block_termination; sigwait writes one int.
    let rc = unsafe { libc::sigwait(set, &mut sig) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc)).context("sigwait");
    }
    Ok(sig)
}
