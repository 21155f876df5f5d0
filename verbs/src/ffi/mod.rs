//! Minimal, run-time loaded libibverbs binding: the structures, constants, exported
//! functions and re-implemented `static inline` helpers the UD transport needs.

pub(crate) mod consts;
pub(crate) mod inline;
pub(crate) mod library;
pub(crate) mod types;

#[cfg(test)]
mod layout_check;
