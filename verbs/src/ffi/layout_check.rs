//! Checks every `#[repr(C)]` mirror, constant and the flow-label fold against the real
//! `<infiniband/verbs.h>`: a C program compiled against the installed header prints
//! `sizeof`/`offsetof`/enum values (and the header's own inline functions' results),
//! and each is compared with what the Rust side computes.

use super::consts::*;
use super::types::*;
use crate::flow_label::flow_label_to_udp_sport;
use crate::gid::Gid;
use crate::grh::{GRH_LEN, Grh, IpVersion};
use crate::qp_state::QpState;
use std::collections::HashMap;
use std::mem::{align_of, offset_of, size_of};
use std::process::Command;

/// (C expression, value the Rust side expects it to have).
type Check = (String, i128);

macro_rules! size {
    ($t:ident) => {
        (
            format!("sizeof(struct {})", stringify!($t)),
            size_of::<$t>() as i128,
        )
    };
}
macro_rules! align {
    ($t:ident) => {
        (
            format!("_Alignof(struct {})", stringify!($t)),
            align_of::<$t>() as i128,
        )
    };
}
macro_rules! off {
    ($t:ident, $($f:ident).+) => {
        (format!("offsetof(struct {}, {})", stringify!($t), stringify!($($f).+)), offset_of!($t, $($f).+) as i128)
    };
}
macro_rules! konst {
    ($c:ident, $v:expr) => {
        (stringify!($c).to_string(), $v as i128)
    };
}

fn layout_checks() -> Vec<Check> {
    vec![
        ("sizeof(union ibv_gid)".into(), size_of::<ibv_gid>() as i128),
        (
            "_Alignof(union ibv_gid)".into(),
            align_of::<ibv_gid>() as i128,
        ),
        align!(ibv_send_wr),
        size!(ibv_context_ops),
        off!(ibv_context_ops, poll_cq),
        off!(ibv_context_ops, req_notify_cq),
        off!(ibv_context_ops, post_send),
        off!(ibv_context_ops, post_recv),
        size!(ibv_context),
        off!(ibv_context, ops),
        off!(ibv_context, num_comp_vectors),
        off!(ibv_context, abi_compat),
        size!(verbs_context),
        off!(verbs_context, query_port),
        off!(verbs_context, create_cq_ex),
        off!(verbs_context, query_device_ex),
        off!(verbs_context, sz),
        off!(verbs_context, context),
        size!(ibv_comp_channel),
        off!(ibv_comp_channel, fd),
        size!(ibv_cq),
        off!(ibv_cq, context),
        off!(ibv_cq, comp_events_completed),
        off!(ibv_cq, async_events_completed),
        size!(ibv_poll_cq_attr),
        size!(ibv_cq_ex),
        off!(ibv_cq_ex, comp_mask),
        off!(ibv_cq_ex, status),
        off!(ibv_cq_ex, wr_id),
        off!(ibv_cq_ex, start_poll),
        off!(ibv_cq_ex, next_poll),
        off!(ibv_cq_ex, end_poll),
        off!(ibv_cq_ex, read_opcode),
        off!(ibv_cq_ex, read_vendor_err),
        off!(ibv_cq_ex, read_byte_len),
        off!(ibv_cq_ex, read_src_qp),
        off!(ibv_cq_ex, read_wc_flags),
        off!(ibv_cq_ex, read_completion_ts),
        off!(ibv_cq_ex, read_completion_wallclock_ns),
        size!(ibv_cq_init_attr_ex),
        off!(ibv_cq_init_attr_ex, cq_context),
        off!(ibv_cq_init_attr_ex, channel),
        off!(ibv_cq_init_attr_ex, comp_vector),
        off!(ibv_cq_init_attr_ex, wc_flags),
        off!(ibv_cq_init_attr_ex, comp_mask),
        off!(ibv_cq_init_attr_ex, flags),
        off!(ibv_cq_init_attr_ex, parent_domain),
        size!(ibv_wc),
        off!(ibv_wc, status),
        off!(ibv_wc, opcode),
        off!(ibv_wc, byte_len),
        off!(ibv_wc, imm_data),
        off!(ibv_wc, src_qp),
        off!(ibv_wc, wc_flags),
        off!(ibv_wc, pkey_index),
        off!(ibv_wc, dlid_path_bits),
        size!(ibv_mr),
        off!(ibv_mr, length),
        off!(ibv_mr, lkey),
        off!(ibv_mr, rkey),
        size!(ibv_qp),
        off!(ibv_qp, qp_num),
        off!(ibv_qp, state),
        off!(ibv_qp, events_completed),
        size!(ibv_qp_cap),
        size!(ibv_qp_init_attr),
        off!(ibv_qp_init_attr, cap),
        off!(ibv_qp_init_attr, qp_type),
        off!(ibv_qp_init_attr, sq_sig_all),
        size!(ibv_global_route),
        off!(ibv_global_route, flow_label),
        off!(ibv_global_route, sgid_index),
        off!(ibv_global_route, hop_limit),
        off!(ibv_global_route, traffic_class),
        size!(ibv_ah_attr),
        off!(ibv_ah_attr, dlid),
        off!(ibv_ah_attr, sl),
        off!(ibv_ah_attr, is_global),
        off!(ibv_ah_attr, port_num),
        size!(ibv_qp_attr),
        off!(ibv_qp_attr, qkey),
        off!(ibv_qp_attr, sq_psn),
        off!(ibv_qp_attr, cap),
        off!(ibv_qp_attr, ah_attr),
        off!(ibv_qp_attr, alt_ah_attr),
        off!(ibv_qp_attr, pkey_index),
        off!(ibv_qp_attr, port_num),
        off!(ibv_qp_attr, rate_limit),
        size!(ibv_sge),
        off!(ibv_sge, length),
        off!(ibv_sge, lkey),
        size!(ibv_send_wr),
        off!(ibv_send_wr, next),
        off!(ibv_send_wr, sg_list),
        off!(ibv_send_wr, num_sge),
        off!(ibv_send_wr, opcode),
        off!(ibv_send_wr, send_flags),
        off!(ibv_send_wr, imm_data),
        off!(ibv_send_wr, wr),
        (
            "offsetof(struct ibv_send_wr, wr.ud.remote_qpn)".into(),
            (offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_ud, remote_qpn)) as i128,
        ),
        (
            "offsetof(struct ibv_send_wr, wr.ud.remote_qkey)".into(),
            (offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_ud, remote_qkey)) as i128,
        ),
        (
            "sizeof(((struct ibv_send_wr *)0)->wr)".into(),
            size_of::<ibv_send_wr_wr>() as i128,
        ),
        size!(ibv_recv_wr),
        off!(ibv_recv_wr, num_sge),
        size!(ibv_device_attr),
        off!(ibv_device_attr, max_qp_wr),
        off!(ibv_device_attr, max_cqe),
        off!(ibv_device_attr, max_pkeys),
        off!(ibv_device_attr, phys_port_cnt),
        size!(ibv_query_device_ex_input),
        size!(ibv_device_attr_ex),
        off!(ibv_device_attr_ex, comp_mask),
        off!(ibv_device_attr_ex, completion_timestamp_mask),
        off!(ibv_device_attr_ex, hca_core_clock),
        off!(ibv_device_attr_ex, device_cap_flags_ex),
        off!(ibv_device_attr_ex, max_dm_size),
        size!(ibv_port_attr),
        off!(ibv_port_attr, active_mtu),
        off!(ibv_port_attr, gid_tbl_len),
        off!(ibv_port_attr, pkey_tbl_len),
        off!(ibv_port_attr, link_layer),
        off!(ibv_port_attr, port_cap_flags2),
        ("sizeof(struct ibv_grh)".into(), GRH_LEN as i128),
    ]
}

fn constant_checks() -> Vec<Check> {
    vec![
        konst!(IBV_QP_STATE, IBV_QP_STATE),
        konst!(IBV_QP_PKEY_INDEX, IBV_QP_PKEY_INDEX),
        konst!(IBV_QP_PORT, IBV_QP_PORT),
        konst!(IBV_QP_QKEY, IBV_QP_QKEY),
        konst!(IBV_QP_SQ_PSN, IBV_QP_SQ_PSN),
        konst!(IBV_QPS_RESET, QpState::Reset.as_ibv()),
        konst!(IBV_QPS_INIT, QpState::Init.as_ibv()),
        konst!(IBV_QPS_RTR, QpState::Rtr.as_ibv()),
        konst!(IBV_QPS_RTS, QpState::Rts.as_ibv()),
        konst!(IBV_QPS_ERR, QpState::Error.as_ibv()),
        konst!(IBV_QPT_UD, IBV_QPT_UD),
        konst!(IBV_WR_SEND, IBV_WR_SEND),
        konst!(IBV_SEND_SIGNALED, IBV_SEND_SIGNALED),
        konst!(IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_LOCAL_WRITE),
        konst!(IBV_WC_SUCCESS, IBV_WC_SUCCESS),
        konst!(IBV_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR),
        konst!(IBV_WC_GRH, IBV_WC_GRH),
        konst!(IBV_WC_EX_WITH_BYTE_LEN, IBV_WC_EX_WITH_BYTE_LEN),
        konst!(IBV_WC_EX_WITH_SRC_QP, IBV_WC_EX_WITH_SRC_QP),
        konst!(
            IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
            IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
        ),
        konst!(
            IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
            IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK
        ),
        konst!(IBV_LINK_LAYER_ETHERNET, IBV_LINK_LAYER_ETHERNET),
        konst!(IBV_MTU_256, 1),
        konst!(IBV_MTU_4096, 5),
        (
            "(uintptr_t)__VERBS_ABI_IS_EXTENDED".into(),
            VERBS_ABI_IS_EXTENDED as i128,
        ),
    ]
}

/// Flow labels whose folding the header's own `ibv_flow_label_to_udp_sport` computes.
fn flow_label_samples() -> Vec<u32> {
    let mut samples = vec![
        0,
        1,
        0x3FFF,
        0x4000,
        0x4001,
        0xFC03F,
        0xF_FFFF,
        0x10_0000,
        0xFFFF_FFFF,
    ];
    let mut x: u32 = 0x9E37_79B9;
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        samples.push(x & 0xF_FFFF);
    }
    samples
}

const GRH_PRELUDE: &str = r#"
static unsigned grh_byte(int i) {
    struct ibv_grh g;
    memset(&g, 0, sizeof g);
    g.version_tclass_flow = htobe32((6u << 28) | (0xA5u << 20) | 0xBCDEFu);
    g.paylen = htobe16(64);
    g.next_hdr = 0x1b;
    g.hop_limit = 7;
    g.sgid.raw[0] = 0xfd; g.sgid.raw[15] = 1;
    g.dgid.raw[0] = 0xfd; g.dgid.raw[15] = 2;
    return ((unsigned char *)&g)[i];
}
"#;

/// Compiles and runs a program printing `expr\tvalue` for each C expression.
fn run_c(exprs: &[String]) -> HashMap<String, i128> {
    let dir = tempfile::tempdir().unwrap();
    let mut src = String::from(
        "#include <infiniband/verbs.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n#include <endian.h>\n",
    );
    src.push_str(GRH_PRELUDE);
    src.push_str("int main(void) {\n");
    for e in exprs {
        src.push_str(&format!(
            "    printf(\"%s\\t%lld\\n\", \"{}\", (long long)({e}));\n",
            e.replace('"', "\\\"")
        ));
    }
    src.push_str("    return 0;\n}\n");
    let c_file = dir.path().join("layout.c");
    let exe = dir.path().join("layout");
    std::fs::write(&c_file, src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg("-std=gnu11")
        .arg("-o")
        .arg(&exe)
        .arg(&c_file)
        .output()
        .expect("a C compiler (cc) is needed for the layout check");
    assert!(
        out.status.success(),
        "compiling against <infiniband/verbs.h> failed (apt-get install libibverbs-dev):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once('\t').unwrap();
            (k.to_string(), v.parse::<i128>().unwrap())
        })
        .collect()
}

/// The C program's view of the unsigned 64-bit value `__VERBS_ABI_IS_EXTENDED` printed
/// through `long long` comes back as -1; normalise before comparing.
fn as_unsigned_if_needed(expected: i128, got: i128) -> i128 {
    if expected > i128::from(i64::MAX) && got < 0 {
        got + (1i128 << 64)
    } else {
        got
    }
}

#[test]
fn every_mirror_constant_and_fold_matches_the_installed_header() {
    let mut checks = layout_checks();
    checks.extend(constant_checks());
    let samples = flow_label_samples();
    checks.extend(samples.iter().map(|&fl| {
        (
            format!("ibv_flow_label_to_udp_sport({fl:#x}u)"),
            i128::from(flow_label_to_udp_sport(fl)),
        )
    }));
    let grh_exprs: Vec<String> = (0..GRH_LEN).map(|i| format!("grh_byte({i})")).collect();
    let mut exprs: Vec<String> = checks.iter().map(|(e, _)| e.clone()).collect();
    exprs.extend(grh_exprs.iter().cloned());

    let c = run_c(&exprs);
    let mismatches: Vec<String> = checks
        .iter()
        .filter_map(|(expr, rust)| {
            let got = as_unsigned_if_needed(*rust, c[expr]);
            (got != *rust).then(|| format!("{expr}: header {got}, rust {rust}"))
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "layout mismatches against <infiniband/verbs.h>:\n{}",
        mismatches.join("\n")
    );

    // The header's struct ibv_grh, filled in C, parses to the values C put in.
    let bytes: Vec<u8> = grh_exprs
        .iter()
        .map(|e| u8::try_from(c[e]).unwrap())
        .collect();
    let grh = Grh::parse(&bytes).unwrap();
    assert_eq!(grh.version, IpVersion::V6);
    assert_eq!(
        (grh.traffic_class, grh.flow_label, grh.hop_limit),
        (0xA5, 0xB_CDEF, 7)
    );
    assert_eq!(grh.sgid, Gid::from_ip("fd00::1".parse().unwrap()));
    assert_eq!(grh.dgid, Gid::from_ip("fd00::2".parse().unwrap()));
}
