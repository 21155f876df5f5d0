//! The process's file-descriptor limit: raised at start, and the connection cap kept
//! below it so the database and files always find a descriptor.

/// Descriptors kept for everything but connections (database pool, files, logs).
const RESERVED_FDS: u64 = 256;
/// The connection cap never drops below this, whatever the descriptor limit.
const MIN_CONNECTIONS: u64 = 16;

/// The soft descriptor limit before and after [`raise_fd_limit`], and the hard one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// Soft limit found at start.
    pub before: u64,
    /// Soft limit in force now.
    pub after: u64,
    /// Hard limit (the ceiling an unprivileged process may raise to).
    pub hard: u64,
}

fn get() -> std::io::Result<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(lim)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (where the kernel allows it) and
/// logs the outcome: a server holding thousands of agent connections needs more than
/// the usual 1,024.
pub fn raise_fd_limit() -> std::io::Result<FdLimit> {
    let mut lim = get()?;
    let before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit reads one valid rlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            let e = std::io::Error::last_os_error();
            tracing::warn!(soft = before, hard = lim.rlim_max, error = %e, "cannot raise the file descriptor limit");
            return Err(e);
        }
    }
    let now = get()?;
    let limit = FdLimit {
        before,
        after: now.rlim_cur,
        hard: now.rlim_max,
    };
    tracing::info!(
        before = limit.before,
        after = limit.after,
        hard = limit.hard,
        "file descriptor limit"
    );
    Ok(limit)
}

/// `wanted` connections, lowered to fit the current descriptor limit (logged when lowered).
pub(crate) fn connection_cap(wanted: usize) -> usize {
    let soft = get().map_or(u64::MAX, |l| l.rlim_cur);
    let fits = soft.saturating_sub(RESERVED_FDS).max(MIN_CONNECTIONS);
    let cap = (wanted as u64).min(fits) as usize;
    if cap < wanted {
        tracing::warn!(
            wanted,
            cap,
            fd_limit = soft,
            "connection cap lowered to fit the file descriptor limit"
        );
    }
    cap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_stays_below_the_soft_limit() {
        let soft = get().unwrap().rlim_cur;
        let cap = connection_cap(usize::MAX) as u64;
        assert!(cap < soft || soft <= RESERVED_FDS, "{cap} vs {soft}");
        assert_eq!(connection_cap(3), 3);
        let raised = raise_fd_limit().unwrap();
        assert_eq!(raised.after, raised.hard);
        assert!(raised.after >= raised.before);
    }
}
