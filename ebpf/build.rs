//! Builds the BPF object embedded in the crate.
//!
//! 1. compiles and runs `bpf/verbs_offsets.c` on the host so the user-route program reads
//!    `struct ibv_qp` / `struct ibv_qp_attr` at the offsets of the real `<infiniband/verbs.h>`;
//! 2. compiles `bpf/service_trace.bpf.c` with clang for the BPF target.
//!
//! Needs (Debian): clang, libbpf-dev, libibverbs-dev. `CC` and `BPF_CLANG` override the compilers.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(cmd: &mut Command, what: &str) -> Vec<u8> {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("{what}: cannot run {cmd:?}: {e} (install clang, libbpf-dev, libibverbs-dev)")
    });
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
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
        "compiling bpf/verbs_offsets.c against <infiniband/verbs.h>",
    );
    let header = run(&mut Command::new(&probe), "running verbs_offsets");
    std::fs::write(out_dir.join("verbs_offsets.h"), header).expect("write verbs_offsets.h");

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
        "compiling bpf/service_trace.bpf.c with clang -target bpf",
    );
}
