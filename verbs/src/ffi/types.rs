//! `#[repr(C)]` mirrors of the `<infiniband/verbs.h>` structures this crate touches.
//!
//! Only fields the crate reads or writes have names; the rest are opaque padding of
//! the same size, so every offset below is the header's. `layout_check` compiles a C
//! program against the real header and compares every size and named offset.

#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t, size_t};

/// Opaque `struct ibv_device`.
#[repr(C)]
pub(crate) struct ibv_device {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_pd`.
#[repr(C)]
pub(crate) struct ibv_pd {
    _opaque: [u8; 0],
}

/// Opaque `struct ibv_ah`.
#[repr(C)]
pub(crate) struct ibv_ah {
    _opaque: [u8; 0],
}

/// `union ibv_gid` (16 bytes, 8-byte aligned because of its `__be64` view).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_context_ops`: the provider's fast-path entry points used by the
/// header's static inlines (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`,
/// `ibv_req_notify_cq`).
#[repr(C)]
pub(crate) struct ibv_context_ops {
    _compat_query_device_to_create_cq: [*const c_void; 11],
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    _compat_cq_event_to_destroy_qp: [*const c_void; 12],
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    _compat_create_ah_to_async_event: [*const c_void; 5],
}

/// `struct ibv_context`.
#[repr(C)]
pub(crate) struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// `verbs_context.query_port` (`___ibv_query_port`).
pub(crate) type QueryPortFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, size_t) -> c_int;
/// `verbs_context.create_cq_ex` (`ibv_create_cq_ex`).
pub(crate) type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
/// `verbs_context.query_device_ex` (`ibv_query_device_ex`).
pub(crate) type QueryDeviceExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *const ibv_query_device_ex_input,
    *mut ibv_device_attr_ex,
    size_t,
) -> c_int;

/// `struct verbs_context`: the extended context that ends with `struct ibv_context`.
/// It "grows up" (new ops are added at the front), so only offsets relative to the
/// embedded `context` are ABI; `sz` tells how much of the front the provider has.
#[repr(C)]
pub(crate) struct verbs_context {
    pub query_port: Option<QueryPortFn>,
    _advise_mr_to_query_rt_values: [*const c_void; 24],
    pub create_cq_ex: Option<CreateCqExFn>,
    _priv: *mut c_void,
    pub query_device_ex: Option<QueryDeviceExFn>,
    _destroy_flow_to_close_xrcd: [*const c_void; 10],
    _abi_placeholder3: u64,
    pub sz: size_t,
    pub context: ibv_context,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub(crate) struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub(crate) struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
#[derive(Default)]
pub(crate) struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

type CqExRead<T> = Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> T>;

/// `struct ibv_cq_ex`: an `ibv_cq` followed by the iterator-style poll functions.
#[repr(C)]
pub(crate) struct ibv_cq_ex {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub comp_mask: u32,
    pub status: u32,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: CqExRead<c_int>,
    pub end_poll: CqExRead<()>,
    pub read_opcode: CqExRead<u32>,
    pub read_vendor_err: CqExRead<u32>,
    pub read_byte_len: CqExRead<u32>,
    _read_imm_data_and_qp_num: [*const c_void; 2],
    pub read_src_qp: CqExRead<u32>,
    pub read_wc_flags: CqExRead<c_uint>,
    _read_slid_sl_dlid_path_bits: [*const c_void; 3],
    pub read_completion_ts: CqExRead<u64>,
    _read_cvlan_flow_tag_tm_info: [*const c_void; 3],
    pub read_completion_wallclock_ns: CqExRead<u64>,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
pub(crate) struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_wc` (legacy `ibv_poll_cq` completions).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_mr`.
#[repr(C)]
pub(crate) struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: size_t,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub(crate) struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub(crate) struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The `ud` member of `ibv_send_wr.wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// `ibv_send_wr.wr`: the union's largest member (`atomic`) is four words.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union ibv_send_wr_wr {
    pub ud: ibv_send_wr_ud,
    _atomic: [u64; 4],
}

/// `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: c_uint,
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    /// `qp_type.xrc.remote_srqn` (XRC only).
    _qp_type: u32,
    /// The `bind_mw` / `tso` union (not used by UD sends).
    _bind_mw_or_tso: [u64; 6],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    /// `max_mr` .. `max_srq_sge`: 22 ints (one is the atomic_cap enum), not used here.
    _max_mr_to_max_srq_sge: [c_int; 22],
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
#[derive(Default)]
pub(crate) struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_device_attr_ex` (capability sub-structs kept opaque, sizes checked).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    /// `struct ibv_odp_caps` (u64 + 3 × u32, padded to 24).
    _odp_caps: [u64; 3],
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `tso_caps` (8), `rss_caps` (32), `max_wq_type_rq` (4), `packet_pacing_caps` (12),
    /// `raw_packet_caps` (4), `tm_caps` (20), `cq_mod_caps` (4) with their padding.
    _tso_to_cq_mod_caps: [u64; 11],
    pub max_dm_size: u64,
    /// `pci_atomic_caps` (3 × u16), `xrc_odp_caps`, `phys_port_cnt_ex`.
    _pci_atomic_to_phys_port_cnt_ex: [u32; 4],
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}
