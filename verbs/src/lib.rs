//! placeholder
pub mod ah_cache;
pub mod error;
pub(crate) mod ffi;
pub mod flow_label;
pub mod gid;
pub mod gid_table;
pub mod grh;
pub mod qp_state;
pub mod timestamp;
