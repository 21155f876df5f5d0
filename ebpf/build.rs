//! Builds the BPF object embedded in the crate.
//!
//! 1. compiles and runs `bpf/verbs_offsets.c` on the host so the user-route program reads
//!    `struct ibv_qp` / `struct ibv_qp_attr` at the offsets of the real `<infiniband/verbs.h>`;
//! 2. compiles `bpf/service_trace.bpf.c` with clang for the BPF target.
//!
//! Needs (Debian): clang, libbpf-dev, libibverbs-dev. `CC` and `BPF_CLANG` override the compilers.
//! Both compilers and both headers are checked first: a missing one stops the build with a
//! message naming every Debian package to install (`bash scripts/system-deps.sh build`
//! installs them all).

use std::env;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Stops the build with `msg` (cargo shows a failed build script's stderr).
fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1);
}

/// Whether `cc` preprocesses `#include <header>` (the header is where the compiler looks).
fn has_header(cc: &str, header: &str) -> bool {
    let Ok(mut child) = Command::new(cc)
        .args(["-E", "-x", "c", "-o", "/dev/null", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let written = child
        .stdin
        .take()
        .is_some_and(|mut stdin| writeln!(stdin, "#include <{header}>").is_ok());
    child.wait().is_ok_and(|s| s.success()) && written
}

/// Checks the programs and headers both compiles need before either runs, so one message
/// names every missing Debian package.
fn preflight(cc: &str, clang: &str) {
    let runs = |program: &str| Command::new(program).arg("--version").output().is_ok();
    let mut missing = Vec::new();
    if !runs(clang) {
        missing.push("clang");
    }
    if !runs(cc) {
        missing.push("gcc");
    } else {
        for (header, package) in [
            ("infiniband/verbs.h", "libibverbs-dev"),
            ("bpf/bpf_helpers.h", "libbpf-dev"),
        ] {
            if !has_header(cc, header) {
                missing.push(package);
            }
        }
    }
    if !missing.is_empty() {
        fail(&format!(
            "rocemesh-ebpf compiles a BPF object and reads <infiniband/verbs.h>: install the \
             Debian packages {} (all build packages: bash scripts/system-deps.sh build)",
            missing.join(" ")
        ));
    }
}

/// Runs `cmd` and returns its stdout; a failure ends the build with the command's stderr.
fn run(cmd: &mut Command, what: &str) -> Vec<u8> {
    let out = cmd.output().unwrap_or_else(|e| {
        fail(&format!(
            "{what}: cannot run `{}`: {e}",
            cmd.get_program().to_string_lossy()
        ))
    });
    if !out.status.success() {
        fail(&format!(
            "{what} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    out.stdout
}

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bpf_dir = Path::new("bpf");
    for f in ["flow_event.h", "verbs_offsets.c", "service_trace.bpf.c"] {
        println!("cargo:rerun-if-changed=bpf/{f}");
    }
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-env-changed=BPF_CLANG");

    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let clang = env::var("BPF_CLANG").unwrap_or_else(|_| "clang".into());
    preflight(&cc, &clang);

    let probe = out_dir.join("verbs_offsets");
    run(
        Command::new(&cc)
            .arg("-o")
            .arg(&probe)
            .arg(bpf_dir.join("verbs_offsets.c")),
        "compiling bpf/verbs_offsets.c against <infiniband/verbs.h>",
    );
    let header = run(&mut Command::new(&probe), "running verbs_offsets");
    if let Err(e) = std::fs::write(out_dir.join("verbs_offsets.h"), header) {
        fail(&format!("writing verbs_offsets.h: {e}"));
    }

    run(
        Command::new(&clang)
            .args(["-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86"])
            .arg("-I/usr/include/x86_64-linux-gnu")
            .arg("-I")
            .arg(&out_dir)
            .arg("-c")
            .arg(bpf_dir.join("service_trace.bpf.c"))
            .arg("-o")
            .arg(out_dir.join("service_trace.bpf.o")),
        "compiling bpf/service_trace.bpf.c with clang -target bpf",
    );
}
