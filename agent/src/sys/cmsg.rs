//! Ancillary data (cmsg) buffers and the walk over the headers the kernel wrote in them.

use std::mem::size_of;

/// Room for the cmsgs one `recvmsg` can carry here (timestamping + extended error).
const CONTROL_LEN: usize = 256;

/// A cmsg buffer aligned for `cmsghdr`.
#[repr(C, align(8))]
pub(crate) struct ControlBuf(pub [u8; CONTROL_LEN]);

impl Default for ControlBuf {
    fn default() -> Self {
        Self([0; CONTROL_LEN])
    }
}

/// Plain-old-data kernel structs: every bit pattern is a valid value, so they may be read
/// from raw cmsg bytes.
///
/// # Safety
/// Implement only for `Copy` types without padding invariants, references or enums.
pub(crate) unsafe trait Pod: Copy {}

// SAFETY: integers, and C structs and arrays made only of integers without padding.
unsafe impl Pod for u32 {}
unsafe impl Pod for [libc::timespec; 3] {}
unsafe impl Pod for libc::sock_extended_err {}
unsafe impl Pod for libc::sockaddr_in {}
unsafe impl Pod for libc::sockaddr_in6 {}
unsafe impl Pod for libc::sockaddr_storage {}
unsafe impl Pod for libc::cmsghdr {}

/// Reads a plain-old-data `T` from the start of `data`, if it is long enough.
pub(crate) fn read_pod<T: Pod>(data: &[u8]) -> Option<T> {
    // SAFETY: the length is checked; `Pod` types are valid for any bits; read_unaligned
    // needs no alignment.
    (data.len() >= size_of::<T>())
        .then(|| unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) })
}

/// The cmsgs of a received message as (level, type, data) with the data clipped to the
/// bytes the buffer really holds: a lying `cmsg_len` can never make a read overrun.
pub(crate) struct Cmsgs<'a> {
    buf: &'a [u8],
    at: usize,
}

/// Iterates over the first `controllen` bytes of `control`.
pub(crate) fn cmsgs(control: &ControlBuf, controllen: usize) -> Cmsgs<'_> {
    Cmsgs {
        buf: &control.0[..controllen.min(CONTROL_LEN)],
        at: 0,
    }
}

impl<'a> Iterator for Cmsgs<'a> {
    type Item = (libc::c_int, libc::c_int, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        // SAFETY: CMSG_LEN is pure arithmetic.
        let hdr_len = unsafe { libc::CMSG_LEN(0) } as usize;
        let rest = self.buf.get(self.at..)?;
        let hdr: libc::cmsghdr = read_pod(rest)?;
        let len = hdr.cmsg_len;
        if len < hdr_len {
            return None;
        }
        let data = &rest[hdr_len.min(rest.len())..len.min(rest.len())];
        // Next header: the length rounded up to the cmsg alignment, `size_t` on Linux (CMSG_NXTHDR).
        let step = len.next_multiple_of(size_of::<usize>());
        self.at = self.at.saturating_add(step);
        Some((hdr.cmsg_level, hdr.cmsg_type, data))
    }
}

/// The bytes of a plain-old-data value.
pub(crate) fn pod_bytes<T: Pod>(value: &T) -> &[u8] {
    // SAFETY: a Pod value is `size_of::<T>()` initialized bytes borrowed for the slice's life.
    unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
}

/// Appends one cmsg at `*used` the way the kernel lays it out (tests); `data` must fit.
#[cfg(test)]
pub(crate) fn put_cmsg(buf: &mut ControlBuf, used: &mut usize, level: i32, ty: i32, data: &[u8]) {
    // SAFETY: CMSG_* are pure arithmetic.
    let (hdr_len, len, space) = unsafe {
        (
            libc::CMSG_LEN(0) as usize,
            libc::CMSG_LEN(data.len() as u32) as usize,
            libc::CMSG_SPACE(data.len() as u32) as usize,
        )
    };
    assert!(*used + space <= CONTROL_LEN, "cmsg does not fit the buffer");
    let hdr = libc::cmsghdr {
        cmsg_len: len as _,
        cmsg_level: level,
        cmsg_type: ty,
    };
    buf.0[*used..*used + size_of::<libc::cmsghdr>()].copy_from_slice(pod_bytes(&hdr));
    buf.0[*used + hdr_len..*used + len].copy_from_slice(data);
    *used += space;
}
