//! The completion queue and its completion channel: one CQ for sends and receives,
//! timestamped by the NIC when it can, woken through the channel's fd (no busy polling).

use crate::device::DeviceCaps;
use crate::error::VerbsError;
use crate::ffi::consts::*;
use crate::ffi::inline;
use crate::ffi::library::Libibverbs;
use crate::ffi::types::*;
use crate::timestamp::{CompletionStamp, StampClock, TickClock, realtime_ns};
use std::sync::Arc;
use std::time::Duration;

/// How completions get their time.
enum StampMode {
    /// Raw ticks of the free-running clock, converted.
    Ticks(TickClock),
    /// NIC real-time ns.
    Wallclock,
    /// `CLOCK_REALTIME` at poll time.
    Software,
}

enum Cq {
    Extended(*mut ibv_cq_ex),
    Legacy(*mut ibv_cq),
}

/// One polled completion, provider-independent.
pub(crate) struct RawCompletion {
    pub(crate) wr_id: u64,
    pub(crate) status: u32,
    pub(crate) byte_len: u32,
    pub(crate) src_qp: u32,
    pub(crate) wc_flags: u32,
    /// `None` only for failed completions (the NIC stamps successful ones).
    pub(crate) stamp: Option<CompletionStamp>,
}

/// A CQ bound to a completion channel.
pub(crate) struct CompletionQueue {
    lib: Arc<Libibverbs>,
    channel: *mut ibv_comp_channel,
    cq: Cq,
    mode: StampMode,
}

const BASE_WC_FLAGS: u64 = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_SRC_QP;
const LEGACY_BATCH: usize = 16;

impl CompletionQueue {
    /// Creates the channel (non-blocking fd) and the best CQ the device offers:
    /// wall-clock stamps (if `prefer_wallclock`), then free-running tick stamps, then an
    /// extended CQ without stamps, then a legacy CQ; the last two stamp in software.
    pub(crate) fn create(
        lib: Arc<Libibverbs>,
        ctx: *mut ibv_context,
        cqe: u32,
        caps: &DeviceCaps,
        prefer_wallclock: bool,
    ) -> Result<Self, VerbsError> {
        // SAFETY: live context.
        let channel = unsafe { (lib.ibv_create_comp_channel)(ctx) };
        if channel.is_null() {
            return Err(VerbsError::last_os("ibv_create_comp_channel"));
        }
        let mut this = Self {
            lib,
            channel,
            cq: Cq::Legacy(std::ptr::null_mut()),
            mode: StampMode::Software,
        };
        // SAFETY: the channel's fd is ours.
        let fd = unsafe { (*channel).fd };
        // SAFETY: plain fcntl on our fd.
        if unsafe {
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
            )
        } < 0
        {
            return Err(VerbsError::last_os(
                "fcntl(O_NONBLOCK) on the completion channel",
            ));
        }
        let ticks = TickClock::new(caps.completion_timestamp_mask, caps.hca_core_clock_khz).ok();
        let mut attempts: Vec<(u64, StampMode)> = Vec::new();
        if prefer_wallclock && caps.completion_timestamp_mask != 0 {
            attempts.push((
                IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
                StampMode::Wallclock,
            ));
        }
        if let Some(clock) = ticks {
            attempts.push((IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, StampMode::Ticks(clock)));
        }
        attempts.push((0, StampMode::Software));
        for (flags, mode) in attempts {
            let mut attr = ibv_cq_init_attr_ex {
                cqe,
                cq_context: std::ptr::null_mut(),
                channel,
                comp_vector: 0,
                wc_flags: BASE_WC_FLAGS | flags,
                comp_mask: 0,
                flags: 0,
                parent_domain: std::ptr::null_mut(),
            };
            // SAFETY: live context, valid attributes.
            let cq = unsafe { inline::create_cq_ex(ctx, &mut attr) };
            if cq.is_null() {
                continue;
            }
            this.cq = Cq::Extended(cq);
            if this.readers_present(&mode) {
                this.mode = mode;
                return Ok(this);
            }
            this.destroy_cq();
        }
        let cqe = libc::c_int::try_from(cqe)
            .map_err(|_| VerbsError::Config(format!("CQ size {cqe} too large")))?;
        // SAFETY: live context and channel.
        let cq = unsafe { (this.lib.ibv_create_cq)(ctx, cqe, std::ptr::null_mut(), channel, 0) };
        if cq.is_null() {
            return Err(VerbsError::last_os("ibv_create_cq"));
        }
        this.cq = Cq::Legacy(cq);
        Ok(this)
    }

    fn readers_present(&self, mode: &StampMode) -> bool {
        let Cq::Extended(cq) = self.cq else {
            return true;
        };
        // SAFETY: a CQ just created by the provider.
        let c = unsafe { &*cq };
        let base = c.start_poll.is_some()
            && c.next_poll.is_some()
            && c.end_poll.is_some()
            && c.read_byte_len.is_some()
            && c.read_src_qp.is_some()
            && c.read_wc_flags.is_some();
        base && match mode {
            StampMode::Ticks(_) => c.read_completion_ts.is_some(),
            StampMode::Wallclock => c.read_completion_wallclock_ns.is_some(),
            StampMode::Software => true,
        }
    }

    /// The clock completions are stamped with.
    pub(crate) fn clock(&self) -> StampClock {
        match self.mode {
            StampMode::Ticks(_) => StampClock::NicFreeRunning,
            StampMode::Wallclock => StampClock::NicWallclock,
            StampMode::Software => StampClock::SoftwarePoll,
        }
    }

    /// The plain `ibv_cq` view (for QP creation and notifications).
    pub(crate) fn as_cq(&self) -> *mut ibv_cq {
        match self.cq {
            Cq::Extended(cq) => cq.cast(),
            Cq::Legacy(cq) => cq,
        }
    }

    /// Requests an event on the channel for the next completion.
    pub(crate) fn arm(&self) -> Result<(), VerbsError> {
        // SAFETY: live CQ.
        match unsafe { inline::req_notify_cq(self.as_cq()) } {
            0 => Ok(()),
            code => Err(VerbsError::from_code("ibv_req_notify_cq", code)),
        }
    }

    /// Sleeps until the channel signals (or `timeout`), then consumes and acks the event.
    pub(crate) fn wait(&self, timeout: Duration) -> Result<(), VerbsError> {
        // SAFETY: live channel.
        let fd = unsafe { (*self.channel).fd };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ready < 0 {
            let err = std::io::Error::last_os_error();
            return if err.kind() == std::io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(VerbsError::Verb {
                    call: "poll(completion channel)",
                    source: err,
                })
            };
        }
        if ready == 0 {
            return Ok(());
        }
        let mut cq: *mut ibv_cq = std::ptr::null_mut();
        let mut ctx: *mut libc::c_void = std::ptr::null_mut();
        // SAFETY: non-blocking channel; fails with EAGAIN when nothing is queued.
        if unsafe { (self.lib.ibv_get_cq_event)(self.channel, &mut cq, &mut ctx) } == 0 {
            // SAFETY: acknowledges the one event just taken from our CQ.
            unsafe { (self.lib.ibv_ack_cq_events)(cq, 1) };
        }
        Ok(())
    }

    /// Polls up to `max` completions, handing each to `each`; returns how many.
    pub(crate) fn poll(
        &mut self,
        max: usize,
        mut each: impl FnMut(RawCompletion),
    ) -> Result<usize, VerbsError> {
        match self.cq {
            Cq::Extended(cq) => self.poll_extended(cq, max, &mut each),
            Cq::Legacy(cq) => poll_legacy(cq, max, &mut each),
        }
    }

    fn poll_extended(
        &mut self,
        cq: *mut ibv_cq_ex,
        max: usize,
        each: &mut impl FnMut(RawCompletion),
    ) -> Result<usize, VerbsError> {
        if max == 0 {
            return Ok(0);
        }
        // SAFETY: readers were checked present at creation.
        let c = unsafe { &*cq };
        let (Some(start), Some(next), Some(end)) = (c.start_poll, c.next_poll, c.end_poll) else {
            return Ok(0);
        };
        let mut attr = ibv_poll_cq_attr::default();
        // SAFETY: live CQ; start/next/end bracket the reads as the API requires.
        let mut ret = unsafe { start(cq, &mut attr) };
        if ret == libc::ENOENT {
            return Ok(0);
        }
        if ret != 0 {
            return Err(VerbsError::from_code("ibv_start_poll", ret));
        }
        let mut n = 0;
        loop {
            // SAFETY: inside a successful start_poll/next_poll.
            each(unsafe { self.read_current(cq) });
            n += 1;
            if n == max {
                break;
            }
            // SAFETY: as above.
            ret = unsafe { next(cq) };
            if ret != 0 {
                break;
            }
        }
        // SAFETY: closes the poll opened above.
        unsafe { end(cq) };
        if ret != 0 && ret != libc::ENOENT {
            return Err(VerbsError::from_code("ibv_next_poll", ret));
        }
        Ok(n)
    }

    /// # Safety
    /// Only between a successful `start_poll`/`next_poll` and `end_poll`.
    unsafe fn read_current(&mut self, cq: *mut ibv_cq_ex) -> RawCompletion {
        // SAFETY: per the contract; the Option readers were checked at creation.
        unsafe {
            let c = &*cq;
            let read =
                |f: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>| f.map_or(0, |f| f(cq));
            let status = c.status;
            let ok = status == IBV_WC_SUCCESS;
            let stamp = match &mut self.mode {
                StampMode::Ticks(clock) if ok => c.read_completion_ts.map(|f| CompletionStamp {
                    ns: clock.to_ns(f(cq)),
                    clock: StampClock::NicFreeRunning,
                }),
                StampMode::Wallclock if ok => {
                    c.read_completion_wallclock_ns.map(|f| CompletionStamp {
                        ns: f(cq),
                        clock: StampClock::NicWallclock,
                    })
                }
                StampMode::Software => Some(CompletionStamp {
                    ns: realtime_ns(),
                    clock: StampClock::SoftwarePoll,
                }),
                _ => None,
            };
            RawCompletion {
                wr_id: c.wr_id,
                status,
                byte_len: if ok { read(c.read_byte_len) } else { 0 },
                src_qp: if ok { read(c.read_src_qp) } else { 0 },
                wc_flags: if ok { read(c.read_wc_flags) } else { 0 },
                stamp,
            }
        }
    }

    fn destroy_cq(&mut self) {
        let cq = self.as_cq();
        if !cq.is_null() {
            // SAFETY: no QP uses the CQ any more; every event was acked in `wait`.
            unsafe { (self.lib.ibv_destroy_cq)(cq) };
        }
        self.cq = Cq::Legacy(std::ptr::null_mut());
    }
}

fn poll_legacy(
    cq: *mut ibv_cq,
    max: usize,
    each: &mut impl FnMut(RawCompletion),
) -> Result<usize, VerbsError> {
    // SAFETY: all-zero is a valid plain-data value.
    let mut wcs: [ibv_wc; LEGACY_BATCH] = unsafe { std::mem::zeroed() };
    let want = max.min(LEGACY_BATCH);
    // SAFETY: live CQ, room for `want` entries.
    let got = unsafe { inline::poll_cq(cq, &mut wcs[..want]) };
    let got = usize::try_from(got).map_err(|_| VerbsError::from_code("ibv_poll_cq", -got))?;
    let now = realtime_ns();
    for wc in &wcs[..got] {
        each(RawCompletion {
            wr_id: wc.wr_id,
            status: wc.status,
            byte_len: wc.byte_len,
            src_qp: wc.src_qp,
            wc_flags: wc.wc_flags,
            stamp: Some(CompletionStamp {
                ns: now,
                clock: StampClock::SoftwarePoll,
            }),
        });
    }
    Ok(got)
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        self.destroy_cq();
        // SAFETY: the CQ using the channel is gone.
        unsafe { (self.lib.ibv_destroy_comp_channel)(self.channel) };
    }
}
