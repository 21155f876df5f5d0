//! Running commands (`ip`, `nft`, `iptables`, `tc`, `sysctl`) inside network namespaces, and
//! running Rust code inside one (sockets created there stay in that namespace).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// Runs `program args…` to completion; returns stdout, or an error quoting stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    run_with_stdin(program, args, None)
}

/// Like [`run`], feeding `stdin` to the command (for `ip -batch -`, `nft -f -`).
pub fn run_with_stdin(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let shown = || format!("{program} {}", args.join(" "));
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{}`", shown()))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .with_context(|| format!("writing stdin of `{}`", shown()))?;
    }
    let out = child
        .wait_with_output()
        .with_context(|| format!("waiting for `{}`", shown()))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}{}",
            shown(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            stdin.map(|s| format!("\ninput:\n{s}")).unwrap_or_default()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `argv` inside namespace `ns` (via `ip netns exec`) and returns its stdout.
pub fn exec(ns: &str, argv: &[&str]) -> Result<String> {
    let mut args = vec!["netns", "exec", ns];
    args.extend_from_slice(argv);
    run("ip", &args)
}

/// A `Command` that runs `program` inside namespace `ns`; for long-running processes such as
/// agents (the caller adds arguments, stdio and spawns it).
pub fn command(ns: &str, program: &str) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, program]);
    cmd
}

/// Runs `ip` commands (one per line, without the leading `ip`) in namespace `ns` in one process.
pub fn ip_batch(ns: Option<&str>, lines: &[String]) -> Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut args = Vec::new();
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(["-batch", "-"]);
    run_with_stdin("ip", &args, Some(&(lines.join("\n") + "\n")))?;
    Ok(())
}

/// Names of all network namespaces (`ip netns list`).
pub fn list() -> Result<Vec<String>> {
    let out = run("ip", &["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Pids of the processes inside namespace `ns`.
pub fn pids(ns: &str) -> Result<Vec<i32>> {
    let out = run("ip", &["netns", "pids", ns])?;
    Ok(out.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// Runs `f` on a fresh thread that has joined namespace `ns`; sockets `f` creates belong to
/// that namespace for their whole life, so tests and tools can send real traffic from any host.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let path = format!("/var/run/netns/{ns}");
    let file =
        File::open(&path).with_context(|| format!("namespace {ns} does not exist ({path})"))?;
    let handle = std::thread::spawn(move || {
        // SAFETY: setns on a valid namespace fd affects only this (new, private) thread.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(f())
    });
    match handle.join() {
        Ok(res) => res.with_context(|| format!("setns into {ns}")),
        Err(_) => bail!("thread running in namespace {ns} panicked"),
    }
}
