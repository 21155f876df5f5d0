//! The binary's logs as a log collector sees them: stderr redirected to a file (not a
//! terminal) carries no ANSI escape codes, and `--log-json` makes every line a JSON object.

mod support;

use std::process::Stdio;

/// Runs `rocemesh [extra] server` on port 0 with `RUST_LOG=info` until it reports its
/// address, stops it with SIGTERM and returns what it wrote to stderr.
fn server_stderr(what: &str, extra: &[&str]) -> String {
    let dir = support::scratch_dir(what);
    let config = dir.join("server.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"sqlite://{}\"\n",
            dir.join("rocemesh.db").display()
        ),
    )
    .expect("write server.toml");
    let log = dir.join("stderr.log");
    let mut cmd = support::bin();
    cmd.args(extra)
        .args(["server", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stderr(Stdio::from(
            std::fs::File::create(&log).expect("create log"),
        ));
    let (mut server, _url) = support::spawn_listening(cmd);
    assert!(server.terminate(), "server did not stop cleanly on SIGTERM");
    let text = std::fs::read_to_string(&log).expect("read stderr");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(text.contains("listening"), "no start-up line in:\n{text}");
    text
}

#[test]
fn text_logs_to_a_file_have_no_escape_codes() {
    let text = server_stderr("log-text", &[]);
    assert!(
        !text.contains('\x1b'),
        "ANSI escapes in a redirected log:\n{text:?}"
    );
    assert!(
        text.lines().any(|l| l.contains(" INFO ")),
        "no INFO line:\n{text}"
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    let text = server_stderr("log-json", &["--log-json"]);
    assert!(
        !text.contains('\x1b'),
        "ANSI escapes in JSON logs:\n{text:?}"
    );
    let mut saw_start = false;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(
            v["level"].is_string() && v["timestamp"].is_string(),
            "{line}"
        );
        saw_start |= v["fields"]["message"] == "listening";
    }
    assert!(saw_start, "no `listening` event in:\n{text}");
}
