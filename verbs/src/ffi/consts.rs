//! `<infiniband/verbs.h>` enum values this crate passes or compares (each one checked
//! against the real header by `layout_check`).

/// `IBV_QP_STATE`.
pub(crate) const IBV_QP_STATE: u32 = 1 << 0;
/// `IBV_QP_PKEY_INDEX`.
pub(crate) const IBV_QP_PKEY_INDEX: u32 = 1 << 4;
/// `IBV_QP_PORT`.
pub(crate) const IBV_QP_PORT: u32 = 1 << 5;
/// `IBV_QP_QKEY`.
pub(crate) const IBV_QP_QKEY: u32 = 1 << 6;
/// `IBV_QP_SQ_PSN`.
pub(crate) const IBV_QP_SQ_PSN: u32 = 1 << 16;

/// `IBV_QPT_UD`.
pub(crate) const IBV_QPT_UD: u32 = 4;
/// `IBV_WR_SEND`.
pub(crate) const IBV_WR_SEND: u32 = 2;
/// `IBV_SEND_SIGNALED`.
pub(crate) const IBV_SEND_SIGNALED: u32 = 1 << 1;
/// `IBV_ACCESS_LOCAL_WRITE`.
pub(crate) const IBV_ACCESS_LOCAL_WRITE: i32 = 1;

/// `IBV_WC_SUCCESS`.
pub(crate) const IBV_WC_SUCCESS: u32 = 0;
/// `IBV_WC_WR_FLUSH_ERR`: the QP went to the error state.
pub(crate) const IBV_WC_WR_FLUSH_ERR: u32 = 5;
/// `IBV_WC_GRH`: the receive buffer starts with a valid GRH.
pub(crate) const IBV_WC_GRH: u32 = 1 << 0;

/// `IBV_WC_EX_WITH_BYTE_LEN`.
pub(crate) const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1 << 0;
/// `IBV_WC_EX_WITH_SRC_QP`.
pub(crate) const IBV_WC_EX_WITH_SRC_QP: u64 = 1 << 3;
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`.
pub(crate) const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`.
pub(crate) const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;

/// `IBV_LINK_LAYER_ETHERNET`.
pub(crate) const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// `__VERBS_ABI_IS_EXTENDED`: `ibv_context.abi_compat` of a context embedded in a
/// `struct verbs_context`.
pub(crate) const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// Bytes of an `enum ibv_mtu` value (`IBV_MTU_256` = 1 … `IBV_MTU_4096` = 5).
pub(crate) fn mtu_bytes(mtu: u32) -> Option<usize> {
    (1..=5).contains(&mtu).then(|| 128usize << mtu)
}

#[cfg(test)]
mod tests {
    #[test]
    fn mtu_enum_maps_to_bytes() {
        let sizes: Vec<Option<usize>> = (0..=6).map(super::mtu_bytes).collect();
        assert_eq!(
            sizes,
            vec![
                None,
                Some(256),
                Some(512),
                Some(1024),
                Some(2048),
                Some(4096),
                None
            ]
        );
    }
}
