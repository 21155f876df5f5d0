//! Helpers shared by the integration tests: compiling C fixtures and root checks.
#![allow(dead_code)] // each test binary uses a subset

use std::path::{Path, PathBuf};
use std::process::Command;

/// Directory with the C fixtures.
pub(crate) fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Runs a compiler (or any tool) and panics with its stderr on failure.
pub(crate) fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// True when running as root; otherwise prints why the test is skipped.
pub(crate) fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped {test}: needs root to load BPF programs");
    }
    root
}

/// Parses `name value` lines printed by a fixture program.
pub(crate) fn parse_pairs(text: &str) -> std::collections::HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_owned(), v.trim().parse().ok()?))
        })
        .collect()
}

/// Compiles `fixtures/ib_structs_btf.c` (look-alike ib_core structs) with clang for BPF
/// into `dir` and parses the object's `.BTF` section: the BTF the kernel route reads.
pub(crate) fn fixture_btf(dir: &Path) -> rocemesh_ebpf::btf::Btf {
    use object::{Object, ObjectSection, read::elf::ElfFile64};
    let fx = fixtures();
    let obj = dir.join("ib_structs.o");
    let include = format!("-I{}", fx.display());
    run(
        "clang",
        &[
            "-g",
            "-O2",
            "-target",
            "bpf",
            "-I/usr/include/x86_64-linux-gnu",
            &include,
            "-c",
            fx.join("ib_structs_btf.c").to_str().unwrap(),
            "-o",
            obj.to_str().unwrap(),
        ],
    );
    let data = std::fs::read(&obj).unwrap();
    let elf = ElfFile64::<object::Endianness>::parse(&*data).unwrap();
    let btf = elf
        .section_by_name(".BTF")
        .expect(".BTF section")
        .data()
        .unwrap()
        .to_vec();
    rocemesh_ebpf::btf::Btf::parse(btf).unwrap()
}
