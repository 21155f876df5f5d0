//! Field offsets of the ib_core structs the kernel-route kprobes read, from BTF.

use std::path::Path;

use crate::btf::{Btf, BtfError, BtfLoadError};

/// Byte offsets handed to the kernel-route BPF program as read-only globals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelOffsets {
    /// `struct ib_qp.qp_num`.
    pub qp_num: u32,
    /// `struct ib_qp_attr.qp_state`.
    pub qp_state: u32,
    /// `struct ib_qp_attr.dest_qp_num`.
    pub dest_qp_num: u32,
    /// `struct ib_qp_attr.ah_attr.grh.dgid` (`rdma_ah_attr` / `ib_global_route`).
    pub dgid: u32,
    /// `struct ib_qp_attr.ah_attr.grh.flow_label`.
    pub flow_label: u32,
}

impl KernelOffsets {
    /// Looks the offsets up in BTF that describes `ib_qp` and `ib_qp_attr`.
    pub fn from_btf(btf: &Btf) -> Result<Self, BtfError> {
        Ok(KernelOffsets {
            qp_num: btf.member_offset("ib_qp", &["qp_num"])?,
            qp_state: btf.member_offset("ib_qp_attr", &["qp_state"])?,
            dest_qp_num: btf.member_offset("ib_qp_attr", &["dest_qp_num"])?,
            dgid: btf.member_offset("ib_qp_attr", &["ah_attr", "grh", "dgid"])?,
            flow_label: btf.member_offset("ib_qp_attr", &["ah_attr", "grh", "flow_label"])?,
        })
    }

    /// Reads `btf_dir/vmlinux` + `btf_dir/ib_core` (normally `/sys/kernel/btf`).
    pub fn from_sys_fs(btf_dir: &Path) -> Result<Self, KernelOffsetsError> {
        let btf = Btf::from_sys_fs(btf_dir, Some("ib_core"))?;
        Ok(Self::from_btf(&btf)?)
    }
}

/// Why the ib_core offsets are unavailable.
#[derive(Debug, thiserror::Error)]
pub enum KernelOffsetsError {
    /// BTF files missing or unreadable (no ib_core module loaded, or kernel without BTF).
    #[error("ib_core BTF unavailable: {0}")]
    Load(#[from] BtfLoadError),
    /// ib_core BTF does not describe the expected fields.
    #[error("ib_core BTF lacks a field the kernel route needs: {0}")]
    Layout(#[from] BtfError),
}
