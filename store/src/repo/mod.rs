//! Typed repositories of the tables several components share: each owns its tables' SQL.

pub(crate) mod inventory;
pub(crate) mod problems;
pub(crate) mod sla;
pub(crate) mod task_pairs;

use crate::Backend;
use std::fmt::Write as _;

/// `INSERT INTO table (columns) VALUES (..), (..) <tail>` for `rows` rows of
/// `n_columns` placeholders each: the batched inserts of the period tables. SQLite gets
/// positional `?` (it resolves `$N` names by a linear search per parameter, which makes
/// a 10,000-parameter statement take ~0.3 s), PostgreSQL `$N`.
pub(crate) fn insert_values(
    backend: Backend,
    (table, columns, n_columns): (&str, &str, usize),
    rows: usize,
    tail: &str,
) -> String {
    let mut sql = format!("INSERT INTO {table} ({columns}) VALUES ");
    for i in 0..rows {
        sql.push_str(if i == 0 { "(" } else { ", (" });
        for c in 0..n_columns {
            let sep = if c == 0 { "" } else { ", " };
            if backend == Backend::Sqlite {
                let _ = write!(sql, "{sep}?");
            } else {
                let _ = write!(sql, "{sep}${}", i * n_columns + c + 1);
            }
        }
        sql.push(')');
    }
    sql.push(' ');
    sql.push_str(tail);
    sql
}
