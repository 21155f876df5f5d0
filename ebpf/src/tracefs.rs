//! Mounts tracefs when classic tracepoints need it and nobody mounted it.

use std::io;
use std::path::Path;

/// Where aya looks for tracefs first.
const TRACEFS: &str = "/sys/kernel/tracing";
/// Older location, used when debugfs carries tracefs.
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// Makes sure tracefs is mounted (needed to resolve classic tracepoint ids); mounts it at
/// `/sys/kernel/tracing` when neither usual location has it.
pub(crate) fn ensure_mounted() -> io::Result<()> {
    if [TRACEFS, DEBUGFS_TRACING]
        .iter()
        .any(|p| Path::new(p).join("events").is_dir())
    {
        return Ok(());
    }
    let c = |s: &str| std::ffi::CString::new(s).map_err(io::Error::other);
    let (source, target, fstype) = (c("tracefs")?, c(TRACEFS)?, c("tracefs")?);
    // SAFETY: all pointers are valid NUL-terminated strings; data may be NULL for tracefs.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("mount -t tracefs tracefs {TRACEFS}: {e}"),
        ));
    }
    Ok(())
}
