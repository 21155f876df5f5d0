//! Rust versions of the `static inline` helpers of `<infiniband/verbs.h>` (they are
//! not exported by libibverbs, so a run-time loaded binding must do what they do).

use super::consts::VERBS_ABI_IS_EXTENDED;
use super::library::Libibverbs;
use super::types::*;
use libc::c_int;
use std::mem::{offset_of, size_of};

/// `verbs_get_ctx_op`: the extended context if it is one and the provider's
/// `verbs_context` is large enough to hold the op at `op_offset` (non-null checked by caller).
///
/// # Safety
/// `ctx` must be a live context from `ibv_open_device`.
unsafe fn verbs_ctx_with(ctx: *mut ibv_context, op_offset: usize) -> Option<*mut verbs_context> {
    // SAFETY: caller guarantees a live context.
    if unsafe { (*ctx).abi_compat } as usize != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    // SAFETY: an extended context is the last member of a verbs_context (container_of).
    let vctx = unsafe { ctx.byte_sub(offset_of!(verbs_context, context)) }.cast::<verbs_context>();
    // SAFETY: `sz` sits right before the context, always present in an extended context.
    let sz = unsafe { (*vctx).sz };
    (sz >= size_of::<verbs_context>() - op_offset).then_some(vctx)
}

/// `ibv_create_cq_ex`; null with errno `EOPNOTSUPP` when the provider lacks it.
///
/// # Safety
/// `ctx` live; `attr` valid for the call.
pub(crate) unsafe fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: per the function contract.
    let op = unsafe {
        verbs_ctx_with(ctx, offset_of!(verbs_context, create_cq_ex)).and_then(|v| (*v).create_cq_ex)
    };
    match op {
        // SAFETY: provider op called with its documented arguments.
        Some(create) => unsafe { create(ctx, attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    }
}

/// `ibv_query_device_ex` (no input mask); falls back to `ibv_query_device` as the header does.
///
/// # Safety
/// `ctx` live.
pub(crate) unsafe fn query_device_ex(
    lib: &Libibverbs,
    ctx: *mut ibv_context,
    attr: &mut ibv_device_attr_ex,
) -> c_int {
    // SAFETY: per the function contract.
    let op = unsafe {
        verbs_ctx_with(ctx, offset_of!(verbs_context, query_device_ex))
            .and_then(|v| (*v).query_device_ex)
    };
    if let Some(query) = op {
        // SAFETY: provider op; the size tells it how much of `attr` we have.
        let ret = unsafe { query(ctx, std::ptr::null(), attr, size_of::<ibv_device_attr_ex>()) };
        if ret != libc::EOPNOTSUPP && ret != libc::ENOSYS {
            return ret;
        }
    }
    // SAFETY: all-zero is a valid value of this plain-data struct.
    *attr = unsafe { std::mem::zeroed() };
    // SAFETY: exported verb with a valid out pointer.
    unsafe { (lib.ibv_query_device)(ctx, &mut attr.orig_attr) }
}

/// `ibv_query_port` (the `___ibv_query_port` inline): the extended op with our struct
/// size, else the exported compat function on a zeroed struct.
///
/// # Safety
/// `ctx` live.
pub(crate) unsafe fn query_port(
    lib: &Libibverbs,
    ctx: *mut ibv_context,
    port: u8,
    attr: &mut ibv_port_attr,
) -> c_int {
    // SAFETY: per the function contract.
    let op = unsafe {
        verbs_ctx_with(ctx, offset_of!(verbs_context, query_port)).and_then(|v| (*v).query_port)
    };
    match op {
        // SAFETY: provider op with our struct size.
        Some(query) => unsafe { query(ctx, port, attr, size_of::<ibv_port_attr>()) },
        None => {
            *attr = ibv_port_attr::default();
            // SAFETY: the compat struct is a prefix of ibv_port_attr.
            unsafe { (lib.ibv_query_port)(ctx, port, attr) }
        }
    }
}

/// `ibv_post_send`.
///
/// # Safety
/// `qp` live; `wr` a valid chain whose buffers and AH outlive the send.
pub(crate) unsafe fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: a live QP has a live context whose ops the provider filled in.
    match unsafe { (*(*qp).context).ops.post_send } {
        // SAFETY: per the function contract.
        Some(f) => unsafe { f(qp, wr, bad) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_recv`.
///
/// # Safety
/// `qp` live; `wr` a valid chain whose buffers stay registered until completion.
pub(crate) unsafe fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: as for post_send.
    match unsafe { (*(*qp).context).ops.post_recv } {
        // SAFETY: per the function contract.
        Some(f) => unsafe { f(qp, wr, bad) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_req_notify_cq` (all completions, not only solicited ones).
///
/// # Safety
/// `cq` live.
pub(crate) unsafe fn req_notify_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: a live CQ has a live context.
    match unsafe { (*(*cq).context).ops.req_notify_cq } {
        // SAFETY: per the function contract.
        Some(f) => unsafe { f(cq, 0) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_poll_cq`.
///
/// # Safety
/// `cq` live; `wc` has room for `wc.len()` entries.
pub(crate) unsafe fn poll_cq(cq: *mut ibv_cq, wc: &mut [ibv_wc]) -> c_int {
    let n = c_int::try_from(wc.len()).unwrap_or(c_int::MAX);
    // SAFETY: a live CQ has a live context.
    match unsafe { (*(*cq).context).ops.poll_cq } {
        // SAFETY: per the function contract.
        Some(f) => unsafe { f(cq, n, wc.as_mut_ptr()) },
        None => -libc::EOPNOTSUPP,
    }
}

fn set_errno(code: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = code };
}
