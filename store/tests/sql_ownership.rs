//! One owner per table: only the owner's files hold SQL naming it. Walks every crate's
//! `src` (test modules aside) and finds the statements that name each table of the
//! migrations (`FROM`, `INTO`, `UPDATE`, `JOIN`, `TABLE` followed by its name).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each table and the path prefix (from the workspace root) of the code that owns it.
const OWNERS: &[(&str, &str)] = &[
    ("problems", "store/src/repo/problems.rs"),
    ("problem_tasks", "store/src/repo/problems.rs"),
    ("hosts", "store/src/repo/inventory.rs"),
    ("rnics", "store/src/repo/inventory.rs"),
    ("tasks", "store/src/repo/inventory.rs"),
    ("task_endpoints", "store/src/repo/inventory.rs"),
    ("instances", "store/src/coord.rs"),
    ("leases", "store/src/coord.rs"),
    ("flow_summaries", "store/src/coord.rs"),
    ("sla_periods", "store/src/repo/sla.rs"),
    ("task_pair_periods", "store/src/repo/task_pairs.rs"),
    ("host_liveness", "analyzer/src/diagnosis/store.rs"),
    ("ingest_wal", "analyzer/src/wal.rs"),
    ("probe_keys", "controller/src/probe_keys.rs"),
    ("task_metric_samples", "impact/src/samples.rs"),
    ("task_objectives", "impact/src/samples.rs"),
    ("alert_episodes", "alerts/src/"),
    ("alert_meta", "alerts/src/"),
    ("alert_outbox", "alerts/src/"),
    ("alert_problems", "alerts/src/"),
    ("alert_receivers", "alerts/src/"),
];

/// SQL keywords that precede a table name.
const KEYWORDS: &[&str] = &["FROM", "INTO", "UPDATE", "JOIN", "TABLE"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the store crate sits in the workspace")
        .to_path_buf()
}

/// The tables the migrations of `dialect` create.
fn tables(dialect: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("migrations").join(dialect)).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let words: Vec<&str> = text.split_whitespace().collect();
        for w in words.windows(2) {
            if w[0].eq_ignore_ascii_case("TABLE") {
                let name = w[1].trim_end_matches('(');
                if !name.eq_ignore_ascii_case("IF") {
                    out.insert(name.to_string());
                }
            }
        }
        // `CREATE TABLE IF NOT EXISTS name`.
        for w in words.windows(5) {
            if w[0].eq_ignore_ascii_case("TABLE") && w[1].eq_ignore_ascii_case("IF") {
                out.insert(w[4].trim_end_matches('(').to_string());
            }
        }
    }
    out
}

/// Every `.rs` file under `dir`, test directories aside.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" && name != "benches" {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The code of a source file: comment lines and `#[cfg(test)] mod … { … }` blocks
/// dropped.
fn code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        let next = lines.get(i + 1).map(|l| l.trim()).unwrap_or("");
        if line == "#[cfg(test)]"
            && (next.starts_with("mod ") || next.starts_with("pub mod "))
            && next.ends_with('{')
        {
            let mut depth = 0i64;
            i += 1;
            while i < lines.len() {
                depth += lines[i].matches('{').count() as i64;
                depth -= lines[i].matches('}').count() as i64;
                i += 1;
                if depth <= 0 {
                    break;
                }
            }
            continue;
        }
        if !line.starts_with("//") {
            out.push_str(lines[i]);
            out.push('\n');
        }
        i += 1;
    }
    out
}

/// The tables of `tables` that `code` names after an SQL keyword.
fn named(code: &str, tables: &BTreeSet<String>) -> BTreeSet<String> {
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| KEYWORDS.contains(&w[0]) && tables.contains(w[1]))
        .map(|w| w[1].to_string())
        .collect()
}

/// Files (relative to the root) that name each table in SQL outside its owner.
fn strays(tables: &BTreeSet<String>) -> BTreeMap<String, Vec<String>> {
    let owners: BTreeMap<&str, &str> = OWNERS.iter().copied().collect();
    let root = root();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        if dir.is_dir() && dir.file_name().is_some_and(|n| n != "target") {
            sources(&dir.join("src"), &mut files);
        }
    }
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in files {
        let rel = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        for table in named(&code(&text), tables) {
            if !rel.starts_with(owners[table.as_str()]) {
                out.entry(table).or_default().push(rel.clone());
            }
        }
    }
    out
}

#[test]
fn every_table_has_one_owner() {
    let sqlite = tables("sqlite");
    assert_eq!(
        sqlite,
        tables("postgres"),
        "both dialects create the same tables"
    );
    let owned: BTreeSet<String> = OWNERS.iter().map(|(t, _)| t.to_string()).collect();
    let unowned: Vec<&String> = sqlite.difference(&owned).collect();
    assert!(
        unowned.is_empty(),
        "tables without an owner in OWNERS: {unowned:?}"
    );
    let gone: Vec<&String> = owned.difference(&sqlite).collect();
    assert!(
        gone.is_empty(),
        "OWNERS names tables no migration creates: {gone:?}"
    );
}

#[test]
fn only_the_owner_has_sql_for_a_table() {
    let strays = strays(&tables("sqlite"));
    assert!(
        strays.is_empty(),
        "SQL naming a table outside its owner (see OWNERS): {strays:#?}"
    );
}

#[test]
fn the_scan_sees_sql_and_skips_tests_and_prose() {
    let tables: BTreeSet<String> = ["problems".to_string(), "hosts".to_string()].into();
    let src = "fn f() { q(\"SELECT id FROM problems p JOIN hosts h ON h.id = p.id\"); }\n\
               // FROM problems in a comment\n\
               /// read from problems (prose)\n\
               #[cfg(test)]\n\
               mod tests {\n    fn g() { q(\"DELETE FROM hosts\"); }\n}\n";
    assert_eq!(named(&code(src), &tables), tables);
    let prose = "fn f() {}\n// DELETE FROM hosts\n#[cfg(test)]\nmod tests {\n  q(\"UPDATE problems\");\n}\n";
    assert!(named(&code(prose), &tables).is_empty());
}
