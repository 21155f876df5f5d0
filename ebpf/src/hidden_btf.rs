//! Runs the BPF object load where `/sys/kernel/btf` is empty.
//!
//! aya 0.14's `EbpfLoader::new()` parses `/sys/kernel/btf/vmlinux` in its constructor (a
//! 5.5 MB read plus ~9.4 MB of parsed types) even when the caller then sets `btf(None)`, and
//! that start-up spike was two thirds of the agent's peak RSS. The object needs no CO-RE, so
//! the load runs on a short-lived thread with its own mount namespace in which an empty tmpfs
//! covers `/sys/kernel/btf`: aya's `Btf::from_sys_fs()` fails, the loader gets no BTF, and
//! nothing is parsed. The BPF fds the load creates are process-wide; the namespace goes away
//! with the thread. Mount changes are made private first, so nothing reaches the host.

use std::io;
use std::path::Path;

/// Where the kernel exposes BTF and where aya reads vmlinux BTF from.
const SYS_BTF: &str = "/sys/kernel/btf";

/// Runs `f` on a new thread whose mount namespace has an empty `/sys/kernel/btf`, and returns
/// its result. Errs, without running `f`, when that namespace cannot be set up (no
/// CAP_SYS_ADMIN, no mount namespaces); the caller then loads the usual way.
pub(crate) fn run_without_vmlinux_btf<T, F>(f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if !Path::new(SYS_BTF).join("vmlinux").exists() {
        // Nothing to hide: aya finds no vmlinux BTF anyway.
        return Ok(f());
    }
    std::thread::Builder::new()
        .name("bpf-load".into())
        .spawn(move || {
            hide_sys_btf()?;
            Ok(f())
        })?
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Gives the calling thread its own mount namespace, makes every mount in it private (so no
/// mount propagates back to the host), and mounts an empty tmpfs over `/sys/kernel/btf`.
/// Only for a thread that is about to exit: the namespace stays with it.
fn hide_sys_btf() -> io::Result<()> {
    let c = |s: &str| std::ffi::CString::new(s).map_err(io::Error::other);
    let (root, target, tmpfs, opts) = (c("/")?, c(SYS_BTF)?, c("tmpfs")?, c("size=4k,mode=0555")?);
    let step = |what: &str, rc: libc::c_int| {
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    };
    // SAFETY: unshare takes no pointers; CLONE_NEWNS (which implies CLONE_FS) only affects the
    // calling thread, which is a thread of our own that exits right after the load.
    step("unshare(CLONE_NEWNS)", unsafe {
        libc::unshare(libc::CLONE_NEWNS)
    })?;
    // SAFETY: every pointer is a valid NUL-terminated string or NULL, which mount(2) accepts
    // for source, fstype and data when only changing propagation.
    step("make / private", unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })?;
    // SAFETY: as above; data is a valid NUL-terminated tmpfs option string.
    step("mount tmpfs on /sys/kernel/btf", unsafe {
        libc::mount(
            tmpfs.as_ptr(),
            target.as_ptr(),
            tmpfs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            opts.as_ptr().cast(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_or_skip(test: &str) -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            eprintln!("skipped {test}: needs root (CAP_SYS_ADMIN) for mount namespaces");
        }
        root
    }

    #[test]
    fn the_closure_sees_no_vmlinux_and_the_host_keeps_it() {
        if !root_or_skip("hidden_btf") {
            return;
        }
        let vmlinux = Path::new(SYS_BTF).join("vmlinux");
        if !vmlinux.exists() {
            eprintln!(
                "skipped hidden_btf: this kernel has no {}",
                vmlinux.display()
            );
            return;
        }
        let btf_mounts = |pid: &str| -> Vec<String> {
            std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
                .unwrap()
                .lines()
                .filter(|l| l.contains(SYS_BTF))
                .map(str::to_owned)
                .collect()
        };
        let before = (btf_mounts("self"), btf_mounts("1"));
        let seen = run_without_vmlinux_btf(|| {
            let entries: Vec<_> = std::fs::read_dir(SYS_BTF)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            (entries, aya::Btf::from_sys_fs().is_ok())
        })
        .expect("root can hide /sys/kernel/btf");
        assert_eq!(seen, (vec![], false), "the loader thread saw BTF");
        // The tmpfs stayed in the thread's namespace: the host still has vmlinux BTF and no
        // mount table outside the thread changed under /sys/kernel/btf.
        assert!(vmlinux.exists());
        assert_eq!(
            (btf_mounts("self"), btf_mounts("1")),
            before,
            "mount leaked"
        );
    }
}
