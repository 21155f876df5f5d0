//! One registered memory region split into fixed receive and send slots.

use crate::error::VerbsError;
use crate::ffi::consts::IBV_ACCESS_LOCAL_WRITE;
use crate::ffi::library::Libibverbs;
use crate::ffi::types::{ibv_mr, ibv_pd, ibv_sge};

/// Receive slots (GRH + MTU each) followed by send slots, registered as one MR.
pub(crate) struct SlotBuffers {
    memory: Box<[u8]>,
    mr: *mut ibv_mr,
    recv_slot: usize,
    recv_slots: usize,
    send_slot: usize,
}

impl SlotBuffers {
    /// Allocates and registers `recv_slots × recv_slot` + `send_slots × send_slot` bytes.
    pub(crate) fn register(
        lib: &Libibverbs,
        pd: *mut ibv_pd,
        recv_slots: usize,
        recv_slot: usize,
        send_slots: usize,
        send_slot: usize,
    ) -> Result<Self, VerbsError> {
        let len = recv_slots * recv_slot + send_slots * send_slot;
        let mut memory = vec![0u8; len].into_boxed_slice();
        // SAFETY: the boxed slice never moves and outlives the MR (deregistered in `deregister`).
        let mr = unsafe {
            (lib.ibv_reg_mr)(pd, memory.as_mut_ptr().cast(), len, IBV_ACCESS_LOCAL_WRITE)
        };
        if mr.is_null() {
            return Err(VerbsError::last_os("ibv_reg_mr"));
        }
        Ok(Self {
            memory,
            mr,
            recv_slot,
            recv_slots,
            send_slot,
        })
    }

    fn sge(&self, offset: usize, length: usize) -> ibv_sge {
        // SAFETY: `mr` is live until `deregister`.
        let lkey = unsafe { (*self.mr).lkey };
        ibv_sge {
            addr: self.memory.as_ptr() as u64 + offset as u64,
            length: u32::try_from(length).unwrap_or(u32::MAX),
            lkey,
        }
    }

    /// The scatter entry for receive slot `i`.
    pub(crate) fn recv_sge(&self, i: usize) -> ibv_sge {
        self.sge(i * self.recv_slot, self.recv_slot)
    }

    /// The bytes a receive into slot `i` wrote (`byte_len` includes the GRH).
    pub(crate) fn recv_bytes(&self, i: usize, byte_len: usize) -> &[u8] {
        let start = i * self.recv_slot;
        &self.memory[start..start + byte_len.min(self.recv_slot)]
    }

    /// Copies `payload` into send slot `i` and returns its gather entry.
    pub(crate) fn fill_send(&mut self, i: usize, payload: &[u8]) -> ibv_sge {
        let start = self.recv_slots * self.recv_slot + i * self.send_slot;
        let n = payload.len().min(self.send_slot);
        self.memory[start..start + n].copy_from_slice(&payload[..n]);
        self.sge(start, n)
    }

    /// Deregisters the MR (before the PD is freed).
    pub(crate) fn deregister(&mut self, lib: &Libibverbs) {
        if !self.mr.is_null() {
            // SAFETY: the MR is ours and no work request uses it any more (QP destroyed).
            unsafe { (lib.ibv_dereg_mr)(self.mr) };
            self.mr = std::ptr::null_mut();
        }
    }
}
