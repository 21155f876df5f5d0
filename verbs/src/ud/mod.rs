//! One UD QP per RNIC: the verbs transport the agent wraps behind its `Transport` trait.
//!
//! Nothing here can run on a machine without an RDMA device; the pieces it is made of
//! (GID selection, GRH parsing, flow labels, the tick clock, the QP state machine, the
//! AH cache, `wr_id` bookkeeping and the FFI layouts) are tested on their own.

mod buffers;
mod cq;
pub mod event;
mod work_id;

use crate::ah_cache::{AhCache, AhKey};
use crate::device::Device;
use crate::error::VerbsError;
use crate::ffi::consts::*;
use crate::ffi::inline;
use crate::ffi::library::Libibverbs;
use crate::ffi::types::*;
use crate::flow_label::sport_to_flow_label;
use crate::gid::Gid;
use crate::gid_table::{GidEntry, GidSelector, SysfsGids};
use crate::grh::{GRH_LEN, Grh};
use crate::qp_state::{QpState, UdQpStateMachine};
use crate::timestamp::StampClock;
use buffers::SlotBuffers;
use cq::{CompletionQueue, RawCompletion};
use event::{UdEvent, UdReceive};
use rocemesh_proto::packet::PROBE_LEN;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use work_id::{SendSlots, WorkId};

/// The Q_Key every rocemesh UD QP uses unless configured otherwise (must match cluster-wide).
pub const DEFAULT_QKEY: u32 = 0x1155_2024;

/// How to open the UD transport.
#[derive(Debug, Clone)]
pub struct UdConfig {
    /// Which device/port/GID to use (by device name, by the RNIC's IP, or both; optional index override).
    pub gid: GidSelector,
    /// Q_Key of every probe QP.
    pub qkey: u32,
    /// P_Key index (0 = default partition).
    pub pkey_index: u16,
    /// Receive ring size.
    pub recv_depth: u32,
    /// Sends in flight at most.
    pub send_depth: u32,
    /// GRH traffic class of sends (DSCP << 2 | ECN): put probes on the RoCE queue.
    pub traffic_class: u8,
    /// GRH hop limit of sends.
    pub hop_limit: u8,
    /// Address handles kept.
    pub ah_cache_capacity: usize,
    /// Ask for NIC wall-clock completion stamps before free-running ticks.
    pub prefer_wallclock: bool,
    /// The RDMA sysfs class directory (tests point it elsewhere).
    pub sysfs_root: PathBuf,
}

impl UdConfig {
    /// Defaults for the RNIC with address `ip`.
    pub fn for_ip(ip: IpAddr) -> Self {
        Self {
            gid: GidSelector {
                ip: Some(ip),
                ..GidSelector::default()
            },
            qkey: DEFAULT_QKEY,
            pkey_index: 0,
            recv_depth: 512,
            send_depth: 256,
            traffic_class: 0,
            hop_limit: 64,
            ah_cache_capacity: 4096,
            prefer_wallclock: true,
            sysfs_root: PathBuf::from(crate::gid_table::SYSFS_INFINIBAND),
        }
    }

    fn validate(&self) -> Result<(), VerbsError> {
        let bad = |what: &str| Err(VerbsError::Config(what.to_string()));
        if !(1..=65_536).contains(&self.recv_depth) {
            return bad("recv_depth must be 1..=65536");
        }
        if !(1..=65_536).contains(&self.send_depth) {
            return bad("send_depth must be 1..=65536");
        }
        if self.hop_limit == 0 {
            return bad("hop_limit must be at least 1");
        }
        Ok(())
    }
}

/// Where a UD send goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDestination {
    /// Peer GID.
    pub gid: Gid,
    /// Peer QPN.
    pub qpn: u32,
    /// RoCEv2 UDP source port to send from (0xC000..=0xFFFF), realised through the flow label.
    pub udp_sport: u16,
}

impl UdDestination {
    /// A destination from the peer's IP (its RoCEv2 GID).
    pub fn new(ip: IpAddr, qpn: u32, udp_sport: u16) -> Self {
        Self {
            gid: Gid::from_ip(ip),
            qpn,
            udp_sport,
        }
    }
}

/// An address handle, destroyed when the last user (cache or in-flight send) drops it.
struct AddressHandle {
    lib: Arc<Libibverbs>,
    ah: *mut ibv_ah,
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // SAFETY: no send uses the AH any more (in-flight sends hold a clone).
        unsafe { (self.lib.ibv_destroy_ah)(self.ah) };
    }
}

// SAFETY: the AH is only used through the owning transport (`&mut self`).
unsafe impl Send for AddressHandle {}
// SAFETY: the handle is never used concurrently (shared only to delay destruction).
unsafe impl Sync for AddressHandle {}

/// The verbs UD transport of one RNIC.
pub struct UdTransport {
    local: GidEntry,
    sgid_index: u8,
    config: UdConfig,
    qp: *mut ibv_qp,
    qp_num: u32,
    machine: UdQpStateMachine,
    generation: u32,
    recv_posted: Vec<bool>,
    sends: SendSlots<Arc<AddressHandle>>,
    ahs: AhCache<AddressHandle>,
    events: VecDeque<UdEvent>,
    armed: bool,
    needs_reset: bool,
    buffers: SlotBuffers,
    cq: CompletionQueue,
    pd: *mut ibv_pd,
    device: Device,
}

// SAFETY: every verbs object is owned by this value and used only through `&mut self`;
// libibverbs objects may be used from any thread.
unsafe impl Send for UdTransport {}

impl UdTransport {
    /// Opens the device, creates PD, buffers, CQ + channel and a UD QP in RTS with a
    /// full receive ring. Errors name what is missing (library, devices, GID, ...).
    pub fn open(config: UdConfig) -> Result<Self, VerbsError> {
        config.validate()?;
        let lib = Arc::new(Libibverbs::load()?);
        crate::device::device_names(&lib)?;
        let local = SysfsGids::new(&config.sysfs_root).select(&config.gid)?;
        let sgid_index = u8::try_from(local.index).map_err(|_| {
            VerbsError::Config(format!(
                "GID index {} does not fit an AH's 8-bit sgid_index",
                local.index
            ))
        })?;
        let device = Device::open(Arc::clone(&lib), &local.device)?;
        let port = device.port(local.port)?;
        if port.link_layer != IBV_LINK_LAYER_ETHERNET {
            return Err(VerbsError::Config(format!(
                "{} port {} is not Ethernet (RoCE); link layer {}",
                device.name, local.port, port.link_layer
            )));
        }
        let real = device.gid(local.port, local.index)?;
        if real != local.gid {
            return Err(VerbsError::Config(format!(
                "GID table changed: sysfs says {} at index {}, the device says {real}",
                local.gid, local.index
            )));
        }
        let recv_depth = config.recv_depth.min(device.caps.max_qp_wr.max(1));
        let send_depth = config.send_depth.min(device.caps.max_qp_wr.max(1));
        // SAFETY: live context.
        let pd = unsafe { (lib.ibv_alloc_pd)(device.ctx) };
        if pd.is_null() {
            return Err(VerbsError::last_os("ibv_alloc_pd"));
        }
        let cleanup_pd = |e: VerbsError| {
            // SAFETY: nothing else uses the PD yet.
            unsafe { (lib.ibv_dealloc_pd)(pd) };
            e
        };
        let mut buffers = SlotBuffers::register(
            &lib,
            pd,
            recv_depth as usize,
            GRH_LEN + port.active_mtu,
            send_depth as usize,
            PROBE_LEN,
        )
        .map_err(cleanup_pd)?;
        let cq = match CompletionQueue::create(
            Arc::clone(&lib),
            device.ctx,
            recv_depth + send_depth,
            &device.caps,
            config.prefer_wallclock,
        ) {
            Ok(cq) => cq,
            Err(e) => {
                buffers.deregister(&lib);
                return Err(cleanup_pd(e));
            }
        };
        let mut this = Self {
            local,
            sgid_index,
            qp: std::ptr::null_mut(),
            qp_num: 0,
            machine: UdQpStateMachine::new(),
            generation: 0,
            recv_posted: vec![false; recv_depth as usize],
            sends: SendSlots::new(send_depth as usize),
            ahs: AhCache::new(config.ah_cache_capacity),
            events: VecDeque::new(),
            armed: false,
            needs_reset: false,
            buffers,
            cq,
            pd,
            device,
            config,
        };
        this.create_qp(recv_depth, send_depth)?;
        this.bring_up()?;
        Ok(this)
    }

    fn create_qp(&mut self, recv_depth: u32, send_depth: u32) -> Result<(), VerbsError> {
        let cq = self.cq.as_cq();
        let mut attr = ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: std::ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: send_depth,
                max_recv_wr: recv_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: IBV_QPT_UD,
            sq_sig_all: 0,
        };
        // SAFETY: live PD and CQ.
        let qp = unsafe { (self.device.lib.ibv_create_qp)(self.pd, &mut attr) };
        if qp.is_null() {
            return Err(VerbsError::last_os("ibv_create_qp"));
        }
        self.qp = qp;
        // SAFETY: live QP.
        self.qp_num = unsafe { (*qp).qp_num };
        Ok(())
    }

    /// RESET/ERR -> INIT -> RTR -> RTS, then fills the receive ring and arms the CQ.
    fn bring_up(&mut self) -> Result<(), VerbsError> {
        let (lib, qp) = (Arc::clone(&self.device.lib), self.qp);
        let (port, pkey_index, qkey) = (self.local.port, self.config.pkey_index, self.config.qkey);
        self.machine.bring_up(|to, mask| {
            let mut attr = ibv_qp_attr {
                qp_state: to.as_ibv(),
                pkey_index,
                port_num: port,
                qkey,
                sq_psn: 0,
                ..Default::default()
            };
            // SAFETY: live QP; the mask names exactly the fields a UD QP needs for `to`.
            match unsafe { (lib.ibv_modify_qp)(qp, &mut attr, mask as libc::c_int) } {
                0 => Ok(()),
                code => Err(VerbsError::from_code("ibv_modify_qp", code)),
            }
        })?;
        self.generation = self.generation.wrapping_add(1) & 0x7FFF_FFFF;
        self.recv_posted.iter_mut().for_each(|p| *p = false);
        for slot in 0..self.recv_posted.len() {
            self.post_recv(slot)?;
        }
        self.needs_reset = false;
        self.armed = false;
        Ok(())
    }

    fn post_recv(&mut self, slot: usize) -> Result<(), VerbsError> {
        let mut sge = self.buffers.recv_sge(slot);
        let mut wr = ibv_recv_wr {
            wr_id: WorkId::Recv {
                generation: self.generation,
                slot: slot as u32,
            }
            .encode(),
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: live QP; the slot is registered and not posted.
        match unsafe { inline::post_recv(self.qp, &mut wr, &mut bad) } {
            0 => {
                self.recv_posted[slot] = true;
                Ok(())
            }
            code => Err(VerbsError::from_code("ibv_post_recv", code)),
        }
    }

    /// The local IP (from the selected GID).
    pub fn local_ip(&self) -> IpAddr {
        self.local.gid.to_ip()
    }

    /// The selected GID table entry (device, port, index, GID).
    pub fn local_gid(&self) -> &GidEntry {
        &self.local
    }

    /// This QP's number: what peers put in `target_qpn` and send to.
    pub fn qpn(&self) -> u32 {
        self.qp_num
    }

    /// The clock completion stamps are on (hardware or the software fallback).
    pub fn stamp_clock(&self) -> StampClock {
        self.cq.clock()
    }

    /// Sends one packet; returns the token its [`UdEvent::TxDone`] will carry.
    pub fn send(&mut self, payload: &[u8], to: UdDestination) -> Result<u64, VerbsError> {
        if payload.len() > PROBE_LEN {
            return Err(VerbsError::PayloadTooLong(payload.len()));
        }
        let flow_label = sport_to_flow_label(to.udp_sport)
            .ok_or(VerbsError::SourcePortOutOfRange(to.udp_sport))?;
        let (token, slot) = self
            .sends
            .reserve()
            .ok_or(VerbsError::SendQueueFull(self.sends.in_flight()))?;
        let ah = self.address_handle(AhKey {
            dgid: to.gid,
            flow_label,
        })?;
        let mut sge = self.buffers.fill_send(slot, payload);
        // SAFETY: all-zero is valid for this plain-data struct (null pointers, unused unions).
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = WorkId::Send(token).encode();
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr = ibv_send_wr_wr {
            ud: ibv_send_wr_ud {
                ah: ah.ah,
                remote_qpn: to.qpn,
                remote_qkey: self.config.qkey,
            },
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: live QP; buffer slot and AH stay alive until the completion (kept in `sends`).
        match unsafe { inline::post_send(self.qp, &mut wr, &mut bad) } {
            0 => {
                self.sends.commit(token, slot, ah);
                Ok(token)
            }
            code => Err(VerbsError::from_code("ibv_post_send", code)),
        }
    }

    fn address_handle(&mut self, key: AhKey) -> Result<Arc<AddressHandle>, VerbsError> {
        let (lib, pd) = (Arc::clone(&self.device.lib), self.pd);
        let mut attr = ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid { raw: key.dgid.0 },
                flow_label: key.flow_label,
                sgid_index: self.sgid_index,
                hop_limit: self.config.hop_limit,
                traffic_class: self.config.traffic_class,
            },
            is_global: 1,
            port_num: self.local.port,
            ..Default::default()
        };
        self.ahs.get_or_create(key, || {
            // SAFETY: live PD; attributes describe a RoCEv2 GRH route.
            let ah = unsafe { (lib.ibv_create_ah)(pd, &mut attr) };
            if ah.is_null() {
                return Err(VerbsError::last_os("ibv_create_ah"));
            }
            Ok(AddressHandle {
                lib: Arc::clone(&lib),
                ah,
            })
        })
    }

    /// Drops cached address handles towards `ip` (the peer re-registered or moved).
    pub fn invalidate_peer(&mut self, ip: IpAddr) -> usize {
        self.ahs.invalidate_gid(Gid::from_ip(ip))
    }

    /// Drops every cached address handle (local GID table or port change).
    pub fn flush_address_handles(&mut self) {
        self.ahs.clear();
    }

    /// Blocks until an event may be available or `timeout` passed (completion channel, no busy polling).
    pub fn wait(&mut self, timeout: Duration) -> Result<(), VerbsError> {
        if !self.events.is_empty() || self.drain()? > 0 {
            return Ok(());
        }
        if !self.armed {
            self.cq.arm()?;
            self.armed = true;
            // A completion that landed before the arm raises no event: look once more.
            if self.drain()? > 0 {
                return Ok(());
            }
        }
        self.cq.wait(timeout)?;
        self.armed = false;
        Ok(())
    }

    /// The next event without blocking; `None` once drained.
    pub fn next_event(&mut self) -> Result<Option<UdEvent>, VerbsError> {
        if self.events.is_empty() {
            self.drain()?;
        }
        Ok(self.events.pop_front())
    }

    /// Moves completions into the bounded event queue; resets the QP after a flush.
    fn drain(&mut self) -> Result<usize, VerbsError> {
        let room =
            (self.recv_posted.len() + self.sends.capacity()).saturating_sub(self.events.len());
        let mut polled = Vec::new();
        self.cq.poll(room, |c| polled.push(c))?;
        let n = polled.len();
        for c in polled {
            self.complete(c)?;
        }
        if self.needs_reset {
            self.reset_qp()?;
        }
        Ok(n)
    }

    fn complete(&mut self, c: RawCompletion) -> Result<(), VerbsError> {
        if c.status == IBV_WC_WR_FLUSH_ERR {
            self.needs_reset = true;
        }
        match WorkId::decode(c.wr_id) {
            WorkId::Send(token) => {
                if !self.sends.complete(token) {
                    return Ok(());
                }
                self.events.push_back(match c.stamp {
                    Some(stamp) if c.status == IBV_WC_SUCCESS => UdEvent::TxDone { token, stamp },
                    _ => UdEvent::TxFailed {
                        token,
                        status: self.device.lib.status_str(c.status),
                    },
                });
            }
            WorkId::Recv { generation, slot } => {
                let slot = slot as usize;
                if generation != self.generation
                    || !self.recv_posted.get(slot).copied().unwrap_or(false)
                {
                    return Ok(());
                }
                self.recv_posted[slot] = false;
                if let (IBV_WC_SUCCESS, Some(stamp)) = (c.status, c.stamp)
                    && let Some(rx) = self.received(slot, &c, stamp)
                {
                    self.events.push_back(UdEvent::Rx(rx));
                }
                if !self.needs_reset {
                    self.post_recv(slot)?;
                }
            }
        }
        Ok(())
    }

    /// Parses receive slot `slot`: GRH, then the payload after it. Malformed → dropped.
    fn received(
        &self,
        slot: usize,
        c: &RawCompletion,
        stamp: crate::timestamp::CompletionStamp,
    ) -> Option<UdReceive> {
        if c.wc_flags & IBV_WC_GRH == 0 {
            return None;
        }
        let bytes = self.buffers.recv_bytes(slot, c.byte_len as usize);
        let grh = Grh::parse(bytes).ok()?;
        Some(UdReceive::new(&bytes[GRH_LEN..], grh, c.src_qp, stamp))
    }

    /// After the QP fell into the error state: back to RTS (same QPN), sends forgotten,
    /// receive ring re-posted under a new generation.
    fn reset_qp(&mut self) -> Result<(), VerbsError> {
        if self.machine.state() != QpState::Error {
            let (lib, qp) = (Arc::clone(&self.device.lib), self.qp);
            self.machine.transition(QpState::Error, |mask| {
                let mut attr = ibv_qp_attr {
                    qp_state: QpState::Error.as_ibv(),
                    ..Default::default()
                };
                // SAFETY: live QP.
                match unsafe { (lib.ibv_modify_qp)(qp, &mut attr, mask as libc::c_int) } {
                    0 => Ok(()),
                    code => Err(VerbsError::from_code("ibv_modify_qp", code)),
                }
            })?;
        }
        self.sends.clear();
        self.bring_up()
    }
}

impl Drop for UdTransport {
    fn drop(&mut self) {
        let lib = Arc::clone(&self.device.lib);
        if !self.qp.is_null() {
            // SAFETY: our QP; nothing posts to it after this.
            unsafe { (lib.ibv_destroy_qp)(self.qp) };
        }
        self.sends.clear();
        self.ahs.clear();
        self.buffers.deregister(&lib);
        // SAFETY: the PD has no QP, AH or MR left. The CQ and channel (context objects)
        // are dropped after this body, in field order, before `device` closes the context.
        unsafe { (lib.ibv_dealloc_pd)(self.pd) };
    }
}
