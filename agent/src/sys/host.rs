//! Host facts and thread settings: name, interface addresses, privileges, timer slack.

use anyhow::{Result, bail};
use std::ffi::CStr;
use std::net::IpAddr;

/// The machine's host name (`gethostname`), or `"localhost"` if it cannot be read.
pub(crate) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Every (interface, address) pair of the host, from `getifaddrs`.
pub(crate) fn interface_addresses() -> Result<Vec<(String, IpAddr)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        bail!("getifaddrs: {}", std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned and is not freed yet.
        let ifa = unsafe { &*cur };
        // SAFETY: ifa_addr is null or a sockaddr of the length its family implies.
        if let Some(ip) = unsafe { sockaddr_ip(ifa.ifa_addr) } {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
                .to_string_lossy()
                .into_owned();
            out.push((name, ip));
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed exactly once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// # Safety
/// `sa` must be null or point to a sockaddr of the length its family implies.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null sockaddr from getifaddrs, read according to its family.
    unsafe {
        match (*sa).sa_family as i32 {
            libc::AF_INET => {
                let sin = &*(sa as *const libc::sockaddr_in);
                Some(IpAddr::V4(u32::from_be(sin.sin_addr.s_addr).into()))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa as *const libc::sockaddr_in6);
                Some(IpAddr::V6(sin6.sin6_addr.s6_addr.into()))
            }
            _ => None,
        }
    }
}

/// Lets the kernel defer the calling thread's timer wake-ups by up to `ns` nanoseconds, to
/// coalesce them with other wake-ups (best effort).
pub(crate) fn set_timer_slack(ns: u64) {
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes a plain integer and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong) };
}

/// Whether the process runs as root (tests that need namespaces skip otherwise).
#[cfg(test)]
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
