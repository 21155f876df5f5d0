//! Typed repositories of the tables several components share: each owns its tables' SQL.

pub(crate) mod inventory;
pub(crate) mod problems;
pub(crate) mod sla;
pub(crate) mod task_pairs;
