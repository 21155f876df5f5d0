//! Self-fault: the disk under the server's SQLite database fills up (issue 8 item 3), root
//! only. The server runs in a private mount namespace with its database on a 4 MiB tmpfs
//! (gone with the process); two loopback agents upload. A filler file takes every free
//! byte for 8 s: the server logs a clear "disk is full" error and answers a write (an
//! agent registering) with a 503 naming it, nothing panics, and once the filler is removed
//! the same process stores every SLA period of the outage (pending buffer).

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::self_fault::{
    assert_no_false_alarm, cluster_periods, register_host, status_of, two_agents_storing,
};
use support::{Proc, scratch_dir, spawn_listening, wait_for};

const PERIOD_MS: i64 = 2_000;
const FULL_FOR: Duration = Duration::from_secs(8);

/// Runs `script` with `sh -c` in the mount namespace of process `pid`.
fn in_namespace(pid: u32, script: &str) -> std::process::Output {
    Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-m", "--", "sh", "-c", script])
        .output()
        .expect("run nsenter")
}

/// `rocemesh server` in a new mount namespace whose `mnt` is a 4 MiB tmpfs.
fn start_on_tmpfs(dir: &Path, mnt: &Path) -> (Proc, String) {
    let config = dir.join("server.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"sqlite://{}/rocemesh.db\"\n[controller]\nupload_period = \"1s\"\npinglist_poll = \"1s\"\n[analyzer]\nperiod = \"{PERIOD_MS}ms\"\ngrace = \"1500ms\"\n",
            mnt.display()
        ),
    )
    .expect("write server.toml");
    let log = std::fs::File::create(dir.join("server.log")).expect("create server.log");
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs -o size=4m rocemesh-sf6 \"$0\" && exec \"$@\"")
        .arg(mnt)
        .arg(env!("CARGO_BIN_EXE_rocemesh"))
        .args(["server", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stderr(log);
    spawn_listening(cmd)
}

#[test]
fn a_full_disk_is_a_clear_error_and_heals_when_space_returns() {
    if !support::is_root() {
        println!("skipping self_fault_disk: needs root (mount namespace, tmpfs)");
        return;
    }
    let dir = scratch_dir("selffault-disk");
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).expect("create the mount point");
    let (server, url) = start_on_tmpfs(&dir, &mnt);
    let pid = server.0.id();
    let (_agents, start_ms) = two_agents_storing(&url, "sf-disk", "127.94");

    // --- fill the disk ---------------------------------------------------------------
    let filler = mnt.join("filler");
    let fill = in_namespace(
        pid,
        &format!(
            "cat /dev/zero > {} 2>&1; df -k {}",
            filler.display(),
            mnt.display()
        ),
    );
    eprintln!(
        "self_fault_disk: filled: {}",
        String::from_utf8_lossy(&fill.stdout).trim()
    );
    let full = Instant::now();
    let full_ms = rocemesh_proto::now_unix_ms();
    let (status, body) = register_host(&url, "sf-disk-late", "127.94.9.1");
    eprintln!("self_fault_disk: a registration while the disk is full: {status} {body}");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("full"), "{body}");
    std::thread::sleep(FULL_FOR.saturating_sub(full.elapsed()));
    let log = std::fs::read_to_string(dir.join("server.log")).expect("read server.log");
    assert!(
        log.contains("disk is full"),
        "no clear error logged:\n{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
    assert!(status_of(&format!("{url}/healthz")).is_some_and(|(s, _)| s == 200));

    // --- free it: the same process heals ------------------------------------------------
    let freed = in_namespace(pid, &format!("rm {}", filler.display()));
    assert!(freed.status.success(), "{freed:?}");
    let back = Instant::now();
    let back_ms = rocemesh_proto::now_unix_ms();
    let want_through = (back_ms / PERIOD_MS + 1) * PERIOD_MS;
    let rows = wait_for(
        "the periods of the full disk",
        Duration::from_secs(20),
        || {
            let rows = cluster_periods(&url, start_ms);
            rows.last()
                .is_some_and(|r| r.period_start_ms >= want_through)
                .then_some(rows)
        },
    );
    let stored_again = back.elapsed();
    let starts: Vec<i64> = rows.iter().map(|r| r.period_start_ms).collect();
    for w in starts.windows(2) {
        assert_eq!(w[1] - w[0], PERIOD_MS, "a period is missing: {starts:?}");
    }
    let full_rows = rows
        .iter()
        .filter(|r| r.period_start_ms >= full_ms - PERIOD_MS && r.period_start_ms < back_ms)
        .count();
    assert!(full_rows >= 4, "{starts:?}");
    let (status, body) = register_host(&url, "sf-disk-late", "127.94.9.1");
    assert_eq!(status, 200, "a registration after space returned: {body}");
    assert_no_false_alarm(&url, "after the disk was full");
    eprintln!(
        "self_fault_disk: disk full {FULL_FOR:?}; the {full_rows} periods of it stored {stored_again:?} after space returned; periods {starts:?}"
    );
}
