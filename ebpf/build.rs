//! Builds the BPF object embedded in the crate.
//!
//! 1. compiles and runs `bpf/verbs_offsets.c` on the host so the user-route program reads
//!    `struct ibv_qp` / `struct ibv_qp_attr` at the offsets of the real `<infiniband/verbs.h>`;
//! 2. compiles `bpf/service_trace.bpf.c` with clang for the BPF target.
//!
//! Needs (Debian): clang, libbpf-dev, libibverbs-dev. `CC` and `BPF_CLANG` override the compilers.
//! A missing compiler or header stops the build with the Debian packages that provide them
//! (`bash scripts/system-deps.sh build` installs them all).

use std::env;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Headers the two compiles include, each with the Debian package that provides it.
const HEADER_PACKAGES: [(&str, &str); 6] = [
    ("infiniband/verbs.h", "libibverbs-dev"),
    ("bpf/bpf_helpers.h", "libbpf-dev"),
    ("bpf/bpf_tracing.h", "libbpf-dev"),
    ("linux/", "linux-libc-dev"),
    ("asm/", "linux-libc-dev"),
    ("stdio.h", "libc6-dev"),
];

/// Stops the build with `msg` (cargo shows a failed build script's stderr).
fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1);
}

/// The packages providing the headers a failed compile reports missing ("fatal error:
/// bpf/bpf_helpers.h: No such file" from gcc, "'bpf/bpf_helpers.h' file not found" from clang).
fn missing_packages(stderr: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    for line in stderr.lines() {
        if !(line.contains("No such file") || line.contains("file not found")) {
            continue;
        }
        for (header, package) in HEADER_PACKAGES {
            if line.contains(header) && !out.contains(&package) {
                out.push(package);
            }
        }
    }
    out
}

/// Runs `cmd` (whose program comes from Debian package `package`, if any) and returns its
/// stdout; a missing program or header ends the build naming the packages to install.
fn run(cmd: &mut Command, package: Option<&str>, what: &str) -> Vec<u8> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) => match (e.kind(), package) {
            (ErrorKind::NotFound, Some(package)) => fail(&format!(
                "{what}: `{program}` not found. Install the Debian package {package} \
                 (all build packages: bash scripts/system-deps.sh build)"
            )),
            _ => fail(&format!("{what}: cannot run `{program}`: {e}")),
        },
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let missing = missing_packages(&stderr);
        if !missing.is_empty() {
            fail(&format!(
                "{what}: missing system headers. Install the Debian packages {} \
                 (all build packages: bash scripts/system-deps.sh build)\n{stderr}",
                missing.join(" ")
            ));
        }
        fail(&format!("{what} failed ({}):\n{stderr}", out.status));
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
    let probe = out_dir.join("verbs_offsets");
    run(
        Command::new(&cc)
            .arg("-o")
            .arg(&probe)
            .arg(bpf_dir.join("verbs_offsets.c")),
        Some("gcc"),
        "compiling bpf/verbs_offsets.c against <infiniband/verbs.h>",
    );
    let header = run(&mut Command::new(&probe), None, "running verbs_offsets");
    if let Err(e) = std::fs::write(out_dir.join("verbs_offsets.h"), header) {
        fail(&format!("writing verbs_offsets.h: {e}"));
    }

    let clang = env::var("BPF_CLANG").unwrap_or_else(|_| "clang".into());
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
        Some("clang"),
        "compiling bpf/service_trace.bpf.c with clang -target bpf",
    );
}
