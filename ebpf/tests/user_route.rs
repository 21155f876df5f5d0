//! The real user-route BPF program attached to a libibverbs stand-in with libibverbs' symbol
//! versions, driven by a C program making real calls (root only).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rocemesh_ebpf::elf_symbol::exported_versions;
use rocemesh_ebpf::{
    ActiveRoute, EventSource, FlowEvent, FlowEventKind, FlowTable, Route, ServiceTracer,
    TableChange, TracerOptions, flow_label_to_udp_sport,
};

/// Builds `libibverbs.so.1` (versioned stand-in) and the `qp_app` program linked to it.
fn build_fixtures(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let fx = common::fixtures();
    let lib = dir.join("libibverbs.so.1");
    let version_script = format!(
        "-Wl,--version-script={}",
        fx.join("fakeverbs.map").display()
    );
    common::run(
        "cc",
        &[
            "-shared",
            "-fPIC",
            "-O0",
            "-Wl,-soname,libibverbs.so.1",
            &version_script,
            fx.join("fakeverbs.c").to_str().unwrap(),
            "-o",
            lib.to_str().unwrap(),
        ],
    );
    let app = dir.join("qp_app");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    common::run(
        "cc",
        &[
            fx.join("qp_app.c").to_str().unwrap(),
            "-o",
            app.to_str().unwrap(),
            &format!("-L{}", dir.display()),
            "-l:libibverbs.so.1",
            &rpath,
            "-ldl",
        ],
    );
    (lib, app)
}

/// cgroup v2 id of this process (inode of its cgroup directory), if cgroup v2 is mounted.
fn own_cgroup_id() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let line = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = line.lines().find_map(|l| l.strip_prefix("0::"))?;
    std::fs::metadata(format!("/sys/fs/cgroup{path}"))
        .ok()
        .map(|m| m.ino())
}

fn collect_until_exit(tracer: &mut ServiceTracer, pid: u32) -> Vec<FlowEvent> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut events = Vec::new();
    while Instant::now() < deadline {
        events.extend(
            tracer
                .poll(Duration::from_millis(100))
                .unwrap()
                .into_iter()
                .filter(|e| e.pid == pid),
        );
        if events.iter().any(|e| e.kind == FlowEventKind::ProcessExit) {
            break;
        }
    }
    events
}

#[test]
fn user_route_sees_rtr_destroy_and_exit_on_the_default_symbol_version() {
    if !common::root_or_skip("user_route") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (lib, app) = build_fixtures(dir.path());

    let mut tracer = ServiceTracer::start(TracerOptions {
        route: Route::User,
        libraries: vec![lib.clone()],
        scan_processes: false,
        ..TracerOptions::default()
    })
    .unwrap();
    assert_eq!(
        tracer.route(),
        ActiveRoute::User,
        "failures: {:?}",
        tracer.failures()
    );
    assert!(tracer.failures().is_empty(), "{:?}", tracer.failures());

    // Attached to the default @@IBVERBS_1.1 definitions, not the compat @IBVERBS_1.0 ones.
    let attached = tracer
        .attached_libraries()
        .iter()
        .find(|l| l.path == lib)
        .expect("fixture hooked");
    assert_eq!(attached.modify_qp.version.as_deref(), Some("IBVERBS_1.1"));
    assert_eq!(attached.destroy_qp.version.as_deref(), Some("IBVERBS_1.1"));
    let versions = exported_versions(&lib, "ibv_modify_qp").unwrap();
    assert_eq!(versions.len(), 2, "{versions:?}");
    let compat = versions
        .iter()
        .find(|v| v.version.as_deref() == Some("IBVERBS_1.0"))
        .unwrap();
    assert!(!compat.is_default);
    assert_ne!(compat.file_offset, attached.modify_qp.file_offset);

    // qp_app checks its own calls (including that the compat symbol was reachable): exit 0.
    let mut child = Command::new(&app).spawn().unwrap();
    let pid = child.id();
    let status = child.wait().unwrap();
    assert!(status.success(), "qp_app failed: {status}");

    let events = collect_until_exit(&mut tracer, pid);
    let summary: Vec<_> = events.iter().map(|e| (e.kind, e.local_qpn)).collect();
    assert_eq!(
        summary,
        vec![
            (FlowEventKind::Rtr, 0x1234),
            (FlowEventKind::Destroy, 0x1234),
            (FlowEventKind::Rtr, 0x9999),
            (FlowEventKind::ProcessExit, 0),
        ],
        "INIT, RTR without IBV_QP_STATE and the compat call (QPN 0xDEAD) must not appear"
    );

    let rtr = &events[0];
    assert_eq!(rtr.source, EventSource::User);
    assert_eq!((rtr.dest_qpn, rtr.flow_label), (0x5678, 0xABCDE));
    assert_eq!(
        rtr.dgid,
        [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55
        ]
    );
    assert_eq!(rtr.comm, "qp_app");
    assert_eq!(rtr.tid, pid);
    if let Some(cg) = own_cgroup_id() {
        assert_eq!(rtr.cgroup_id, cg);
    }
    assert_eq!(events[2].dest_qpn, 0x7777);
    assert_eq!(events[3].source, EventSource::Scheduler);

    // The flow table follows: add, remove on destroy, add, remove on process exit.
    let mut table = FlowTable::new(16);
    let changes: Vec<_> = events.iter().map(|e| table.apply(e)).collect();
    assert_eq!(
        changes,
        vec![
            TableChange::Added,
            TableChange::Removed(1),
            TableChange::Added,
            TableChange::Removed(1)
        ]
    );
    assert!(table.is_empty());
    let mut replay = FlowTable::new(16);
    replay.apply(rtr);
    assert_eq!(
        replay.get(pid, 0x1234).unwrap().udp_sport,
        flow_label_to_udp_sport(0xABCDE)
    );

    let stats = tracer.stats();
    assert_eq!((stats.bad_events, stats.ring_drops), (0, 0));
    assert!(stats.events >= 4);
}

#[test]
fn user_route_finds_a_running_process_library_through_proc_maps_and_root() {
    if !common::root_or_skip("user_route discovery") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (lib, app) = build_fixtures(dir.path());
    // The process maps the stand-in and waits; the tracer is told nothing about the library.
    let mut child = Command::new(&app)
        .arg("wait")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // The scan must find the library mapped: wait until the dynamic loader has mapped it
    // (right after spawn the process may not even have exec'd yet).
    let name = lib.file_name().unwrap().to_string_lossy().into_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains(&name)) {
        assert!(
            std::time::Instant::now() < deadline,
            "qp_app never mapped {name}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut tracer = ServiceTracer::start(TracerOptions {
        route: Route::User,
        scan_processes: true,
        ..TracerOptions::default()
    })
    .unwrap();
    let attached = tracer
        .attached_libraries()
        .iter()
        .find(|l| l.path.starts_with(format!("/proc/{pid}/root")) || l.path == lib)
        .map(|l| l.path.clone());
    // Release the process (dropping stdin closes the pipe).
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(b"g")
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "qp_app failed: {status}");
    let attached = attached.expect("library of the running process discovered");
    assert!(
        attached.starts_with("/proc"),
        "reached through the process root: {}",
        attached.display()
    );

    let events = collect_until_exit(&mut tracer, pid);
    let qpns: Vec<_> = events.iter().map(|e| (e.kind, e.local_qpn)).collect();
    assert_eq!(
        qpns[..2],
        [
            (FlowEventKind::Rtr, 0x1234),
            (FlowEventKind::Destroy, 0x1234)
        ]
    );
}
