//! Loading the BPF object does not make aya parse vmlinux BTF: across a tracer start the
//! process's peak RSS grows by less than the vmlinux BTF file alone (~2.3 MB measured; with the
//! parse it grew ~19 MB: the 5.5 MB file plus ~9.4 MB of parsed types, and the rest of the
//! load). Root only; alone in its own test binary so no other test moves the peak.

mod common;

use std::path::Path;

use rocemesh_ebpf::{Route, ServiceTracer, TracerOptions};

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

#[test]
fn starting_the_tracer_does_not_parse_vmlinux_btf() {
    if !common::root_or_skip("load_memory") {
        return;
    }
    let vmlinux = Path::new("/sys/kernel/btf/vmlinux");
    let Ok(meta) = std::fs::metadata(vmlinux) else {
        eprintln!(
            "skipped load_memory: this kernel has no {}",
            vmlinux.display()
        );
        return;
    };
    let vmlinux_kib = meta.len() / 1024;
    let before = vm_hwm_kib();
    let tracer = ServiceTracer::start(TracerOptions {
        route: Route::User,
        scan_processes: false,
        ..TracerOptions::default()
    })
    .unwrap();
    let growth = vm_hwm_kib() - before;
    drop(tracer);
    eprintln!("VmHWM growth across the load: {growth} KiB (vmlinux BTF: {vmlinux_kib} KiB)");
    assert!(
        growth < vmlinux_kib,
        "peak RSS grew {growth} KiB across the load: vmlinux BTF ({vmlinux_kib} KiB) was read"
    );
}
