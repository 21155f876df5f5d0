//! The dashboard in a real browser: Debian's headless `chromium` loads `/` from a
//! running server with real data and the rendered DOM is checked against the API's
//! own numbers. Three cases: live loopback agents (no root), the same server behind a
//! proxy that fails some endpoints (the rest must still render), and a namespace lab
//! with an injected link fault (root), which also writes the screenshot
//! `target/test-artifacts/dashboard-fault.png`.
//!
//! The loopback cases share one server and its agents (their addresses are fixed), so
//! they run in order inside one test; the dead-agent case, which kills an agent, last.

mod support;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rocemesh_lab::lab::{Lab, LabTiming};
use rocemesh_proto::api::{Problem, ProblemKind, RnicInfo, SlaRow};
use rocemesh_testbed::{Direction, Fault};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{
    Proc, get_json, loopback_agent, scratch_dir, serve_in_background, start_sqlite_server, wait_for,
};

// ---------------------------------------------------------------------------------
// Formatting: the dashboard's format.js rules (integer rounding, half up).

fn fmt_ns(ns: Option<u64>) -> String {
    match ns {
        None => "—".into(),
        Some(ns) if ns < 999_950 => format!("{:.1} µs", ((ns + 50) / 100) as f64 / 10.0),
        Some(ns) => format!("{:.2} ms", ((ns + 5_000) / 10_000) as f64 / 100.0),
    }
}

fn fmt_pct(rate: f64) -> String {
    format!("{:.2} %", (rate * 10_000.0).round() / 100.0)
}

// ---------------------------------------------------------------------------------
// The rendered DOM, as chromium's --dump-dom serializes it.

/// One element of the dumped DOM: its attributes, its inner HTML and its text.
#[derive(Debug)]
struct Node {
    attrs: HashMap<String, String>,
    inner: String,
    text: String,
}

impl Node {
    fn attr(&self, name: &str) -> &str {
        self.attrs.get(name).map_or("", String::as_str)
    }
    fn has_class(&self, class: &str) -> bool {
        self.attr("class").split_whitespace().any(|c| c == class)
    }
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// Attributes of a start tag's inside (`td class="x" data-a="1"`), values unescaped.
fn attributes(tag: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = tag.split_once(char::is_whitespace).map_or("", |(_, r)| r);
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq].trim().to_string();
        let after = &rest[eq + 1..];
        let Some(value) = after.strip_prefix('"') else {
            break;
        };
        let end = value.find('"').unwrap_or(value.len());
        out.insert(name, unescape(&value[..end]));
        rest = &value[(end + 1).min(value.len())..];
    }
    out
}

fn strip_tags(html: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    unescape(&text)
}

/// Every `<tag>` carrying `class` (any when `class` is empty); same tags are not
/// nested in our markup.
fn nodes(html: &str, tag: &str, class: &str) -> Vec<Node> {
    let open = format!("<{tag}");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find(&open) {
        let from = &rest[start + 1..];
        rest = &rest[start + open.len()..];
        // `<td>` or `<td ...>`, not `<tdx`.
        if !rest.starts_with([' ', '>']) {
            continue;
        }
        let Some(gt) = from.find('>') else { break };
        let body = &from[gt + 1..];
        let end = body.find(&close).unwrap_or(body.len());
        let node = Node {
            attrs: attributes(&from[..gt]),
            inner: body[..end].to_string(),
            text: strip_tags(&body[..end]),
        };
        if class.is_empty() || node.has_class(class) {
            out.push(node);
        }
        rest = body;
    }
    out
}

/// The element with this id: its attributes and text.
fn by_id(html: &str, tag: &str, id: &str) -> Node {
    let needle = format!("id=\"{id}\"");
    let start = html[..html.find(&needle).unwrap_or_else(|| panic!("no #{id}"))]
        .rfind(&format!("<{tag} "))
        .unwrap_or_else(|| panic!("#{id} is not a <{tag}>"));
    let from = &html[start + 1..];
    let gt = from.find('>').unwrap();
    let body = &from[gt + 1..];
    let end = body.find(&format!("</{tag}>")).unwrap_or(body.len());
    Node {
        attrs: attributes(&from[..gt]),
        inner: body[..end].to_string(),
        text: strip_tags(&body[..end]),
    }
}

// ---------------------------------------------------------------------------------
// Chromium.

/// Debian's chromium; `None` (with the reason printed) when it is missing and this
/// is not CI, where a missing browser is a failure.
fn chromium(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
        assert!(
            !ci,
            "{test}: chromium is missing (apt-get install chromium)"
        );
        eprintln!("skipping {test}: chromium is not installed (apt-get install chromium)");
    }
    found
}

/// Runs headless chromium on `url` with `extra` arguments; returns its stdout.
fn run_chromium(browser: &Path, url: &str, extra: &[String]) -> String {
    let profile = scratch_dir("dash-chromium-profile");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--virtual-time-budget=4000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).unwrap();
        s
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within 60 s on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&profile);
    reader.join().unwrap()
}

fn dump_dom(browser: &Path, url: &str) -> String {
    let dom = run_chromium(browser, url, &["--dump-dom".into()]);
    assert!(
        dom.contains("<table") || dom.contains("panel"),
        "no DOM from chromium: {dom}"
    );
    dom
}

/// `target/test-artifacts/<name>` (created), where screenshots are kept for people.
fn artifact(name: &str) -> PathBuf {
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("target"));
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn screenshot(browser: &Path, url: &str, png: &Path) {
    let _ = std::fs::remove_file(png);
    run_chromium(
        browser,
        url,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1440,1200".into(),
        ],
    );
    let bytes = std::fs::read(png).expect("chromium wrote no screenshot");
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
        "not a real PNG"
    );
}

// ---------------------------------------------------------------------------------
// Checks shared by the cases.

/// The latest tor_pair rows and the DOM rendered from the same period: the API is
/// read before and after the browser, and the read of the period the page shows is
/// kept (a period can roll over while the page loads).
fn render_consistent(browser: &Path, api: &str, page: &str) -> (Vec<SlaRow>, String) {
    let latest = || -> Vec<SlaRow> { get_json(&format!("{api}/api/v1/sla/latest?scope=tor_pair")) };
    for _ in 0..3 {
        let before = latest();
        let dom = dump_dom(browser, page);
        let after = latest();
        let shown = nodes(&dom, "table", "heatmap")
            .first()
            .map(|t| t.attr("data-period-start-ms").to_string());
        let period = |rows: &[SlaRow]| rows.first().map(|r| r.period_start_ms.to_string());
        for rows in [before, after] {
            if shown.is_some() && shown == period(&rows) {
                return (rows, dom);
            }
        }
        eprintln!("the page showed period {shown:?}, not one the API served around it");
    }
    panic!("the heatmap never showed the API's latest period");
}

/// Every ToR labels a row and a column, and each cell shows the API's numbers.
fn assert_heatmap_matches(dom: &str, rows: &[SlaRow], tors: &[&str]) {
    let cols: Vec<String> = nodes(dom, "th", "dst")
        .iter()
        .map(|n| n.attr("data-tor").to_string())
        .collect();
    let srcs: Vec<String> = nodes(dom, "th", "src")
        .iter()
        .map(|n| n.text.clone())
        .collect();
    assert_eq!(cols, tors, "column labels");
    assert_eq!(srcs, tors, "row labels");
    let cells = nodes(dom, "td", "cell");
    assert_eq!(
        cells.len(),
        tors.len() * tors.len(),
        "one cell per ToR pair"
    );
    assert!(!rows.is_empty());
    for r in rows {
        let (src, dst) = r.key.split_once("->").unwrap();
        let cell = cells
            .iter()
            .find(|c| c.attr("data-src") == src && c.attr("data-dst") == dst)
            .unwrap_or_else(|| panic!("no cell for {}", r.key));
        let p99 = r.network_rtt_ns.p99;
        assert_eq!(
            cell.attr("data-rtt-p99-ns"),
            p99.map_or(String::new(), |v| v.to_string()),
            "{}",
            r.key
        );
        assert_eq!(cell.attr("data-probes"), r.probes.to_string(), "{}", r.key);
        // serde_json's default float parsing may be one ULP off the browser's exact one.
        let loss: f64 = cell.attr("data-loss").parse().unwrap();
        assert!(
            (loss - r.timeout_rate).abs() <= 1e-12,
            "{}: {loss} vs {}",
            r.key,
            r.timeout_rate
        );
        // The RTT view shows the p99, and the loss under it when there is any.
        let shown = match r.timeouts {
            0 => fmt_ns(p99),
            _ => format!("{}{} loss", fmt_ns(p99), fmt_pct(r.timeout_rate)),
        };
        assert_eq!(cell.text, shown, "{} shown", r.key);
        assert!(
            cell.attr("title").contains(&fmt_pct(r.timeout_rate)),
            "{}: {}",
            r.key,
            cell.attr("title")
        );
        assert_eq!(cell.has_class("lossy"), r.timeouts > 0, "{}", r.key);
    }
}

/// The "unavailable — ..." line of a panel, when the panel says it has no data.
fn panel_unavailable(dom: &str, id: &str) -> Option<String> {
    let panel = by_id(dom, "section", id);
    let state = nodes(&panel.inner, "div", "panel-state")
        .into_iter()
        .next()
        .map(|n| n.text)
        .unwrap_or_default();
    assert_eq!(
        panel.has_class("unavailable"),
        state.starts_with("unavailable"),
        "{id}: class and state line agree ({state})"
    );
    panel.has_class("unavailable").then_some(state)
}

// ---------------------------------------------------------------------------------
// A proxy that fails chosen endpoints (graceful degradation).

#[derive(Clone)]
struct Proxy {
    upstream: String,
    /// Path prefixes answered with 503.
    failing: Vec<&'static str>,
}

async fn forward(State(p): State<Proxy>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let target = format!(
        "{}{}",
        p.upstream,
        req.uri().path_and_query().map_or("/", |pq| pq.as_str())
    );
    let error = |status: StatusCode, msg: &str| {
        (status, axum::Json(serde_json::json!({ "error": msg }))).into_response()
    };
    if p.failing.iter().any(|f| path.starts_with(f)) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "injected failure");
    }
    let fetched = tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut resp = agent.get(&target).call()?;
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_string();
        let body = resp.body_mut().read_to_vec()?;
        Ok::<_, ureq::Error>((resp.status().as_u16(), ct, body))
    })
    .await
    .unwrap();
    match fetched {
        Ok((status, ct, body)) => (
            StatusCode::from_u16(status).unwrap(),
            [("content-type", ct)],
            body,
        )
            .into_response(),
        Err(e) => error(StatusCode::BAD_GATEWAY, &e.to_string()),
    }
}

/// Serves `proxy` on 127.0.0.1; returns its base URL.
fn start_proxy(proxy: Proxy) -> String {
    serve_in_background(axum::Router::new().fallback(forward).with_state(proxy))
}

// ---------------------------------------------------------------------------------
// Loopback fixture: a real server process and three real agents on 127.89.x.y.

struct Loopback {
    url: String,
    _server: Proc,
    /// Agents of dash-host-1, -2 (tor-a) and -3 (tor-b), in that order.
    agents: Vec<Proc>,
}

const LOOPBACK_TORS: [&str; 2] = ["tor-a", "tor-b"];

/// What the loopback cases share, torn down after the last one.
#[derive(Default)]
struct Fixtures {
    loopback: Option<Loopback>,
}

impl Fixtures {
    /// Started on first use; ready when every ToR pair has a row.
    fn loopback(&mut self) -> &mut Loopback {
        self.loopback.get_or_insert_with(start_loopback)
    }
}

/// The loopback cases in order against one fixture: the dead-agent case kills an agent.
#[test]
fn loopback_cases() {
    let mut fixtures = Fixtures::default();
    loopback_renders_the_api_numbers(&mut fixtures);
    task_page_shows_the_verdict(&mut fixtures);
    degraded_endpoints_leave_the_rest_working(&mut fixtures);
    dead_agent_marks_its_rnics(&mut fixtures);
}

fn start_loopback() -> Loopback {
    let (server, url) = start_sqlite_server(
        &scratch_dir("dash-loopback"),
        "[controller]\nupload_period = \"1s\"\npinglist_poll = \"1s\"\n[analyzer]\nperiod = \"3s\"\ngrace = \"1500ms\"\n[analyzer.diagnosis]\nhost_down_after = \"4s\"\nhost_silent = \"2500ms\"\n",
    );
    let agents = [(1, "tor-a"), (2, "tor-a"), (3, "tor-b")]
        .iter()
        .map(|&(host, tor)| {
            let mut cmd = loopback_agent(
                &url,
                &format!("dash-host-{host}"),
                &format!("127.89.{host}"),
                tor,
            );
            Proc(cmd.spawn().expect("spawn agent"))
        })
        .collect();
    wait_for(
        "SLA rows of every ToR pair",
        Duration::from_secs(40),
        || {
            let rows: Vec<SlaRow> = get_json(&format!("{url}/api/v1/sla/latest?scope=tor_pair"));
            (rows.len() == 4 && rows.iter().all(|r| r.probes > 0)).then_some(())
        },
    );
    Loopback {
        url,
        _server: server,
        agents,
    }
}

fn loopback_renders_the_api_numbers(fx: &mut Fixtures) {
    let Some(browser) = chromium("loopback_renders_the_api_numbers") else {
        return;
    };
    let lb = fx.loopback();
    let page = format!("{}/#pair=tor-a-%3Etor-b", lb.url);
    let all_problems =
        || -> Vec<Problem> { get_json(&format!("{}/api/v1/problems?state=all&limit=100", lb.url)) };
    // Problems are never forgotten (state=all), so one seen before the render is on the
    // page, and none seen after it means none was there to draw.
    let problems_before = all_problems();
    let (rows, dom) = render_consistent(&browser, &lb.url, &page);
    let problems_after = all_problems();
    assert_heatmap_matches(&dom, &rows, &LOOPBACK_TORS);
    for panel in [
        "heatmap-panel",
        "rnics-panel",
        "problems-panel",
        "service-panel",
    ] {
        assert_eq!(panel_unavailable(&dom, panel), None, "{panel}");
    }
    assert!(
        by_id(&dom, "form", "auth").attrs.contains_key("hidden"),
        "no token asked for"
    );
    // No task here and no service probe: the service-network panel says so.
    let service = by_id(&dom, "div", "service-sla");
    assert!(
        service
            .text
            .contains("no task or service probes in the latest period")
            || service.inner.contains("service-sla"),
        "{}",
        service.inner
    );

    // Every registered RNIC is in the grid under its ToR and host.
    let rnics: Vec<RnicInfo> = get_json(&format!("{}/api/v1/rnics", lb.url));
    let chips = nodes(&dom, "span", "chip");
    for r in &rnics {
        let name = format!("{}/{}", r.host, r.ifname);
        let chip = chips
            .iter()
            .find(|c| c.attr("data-rnic") == name)
            .unwrap_or_else(|| panic!("no chip for {name}"));
        assert_eq!(chip.attr("data-rnic-id"), r.id.to_string());
        assert!(
            ["ok", "problem", "silent"].contains(&chip.attr("data-status")),
            "{name}: {}",
            chip.attr("data-status")
        );
    }
    assert_eq!(rnics.len(), 6);

    // The problem list is the API's (healthy loopback: usually empty).
    let listed = nodes(&dom, "tr", "problem");
    if problems_after.is_empty() {
        assert!(listed.is_empty() && dom.contains("No problem seen."));
    }
    if !problems_before.is_empty() {
        assert!(!listed.is_empty(), "{problems_before:?} not listed");
    }

    // The drill-down opened from the URL: the pair's stored periods as a chart.
    let drill = by_id(&dom, "section", "drilldown-panel");
    assert_eq!(drill.attr("data-pair"), "tor-a->tor-b");
    assert!(!drill.attrs.contains_key("hidden"), "drill-down shown");
    let stored: Vec<SlaRow> = get_json(&format!(
        "{}/api/v1/sla?scope=tor_pair&key=tor-a-%3Etor-b&limit=60",
        lb.url
    ));
    let chart = nodes(&dom, "svg", "series");
    assert_eq!(chart.len(), 1, "one chart");
    let periods: usize = chart[0].attr("data-periods").parse().unwrap();
    assert!(
        periods >= 1 && periods.abs_diff(stored.len()) <= 1,
        "{periods} vs {}",
        stored.len()
    );
    assert!(
        !dom.contains("part-unavailable"),
        "both drill-down parts loaded"
    );
}

fn degraded_endpoints_leave_the_rest_working(fx: &mut Fixtures) {
    let Some(browser) = chromium("degraded_endpoints_leave_the_rest_working") else {
        return;
    };
    let lb = fx.loopback();
    let proxy = start_proxy(Proxy {
        upstream: lb.url.clone(),
        failing: vec!["/api/v1/problems", "/api/v1/topology", "/api/v1/paths"],
    });
    let (rows, dom) =
        render_consistent(&browser, &lb.url, &format!("{proxy}/#pair=tor-b-%3Etor-a"));
    // The heatmap works from the SLA rows alone (ToR names from the row keys).
    assert_heatmap_matches(&dom, &rows, &LOOPBACK_TORS);
    assert_eq!(panel_unavailable(&dom, "heatmap-panel"), None);
    assert!(
        dom.contains("topology unavailable"),
        "heatmap notes the missing topology"
    );
    // The problem panel says what failed.
    let why = panel_unavailable(&dom, "problems-panel").expect("problems panel unavailable");
    assert!(
        why.contains("/api/v1/problems") && why.contains("503"),
        "{why}"
    );
    // The RNIC grid still shows every RNIC, noting that statuses are partial.
    assert_eq!(panel_unavailable(&dom, "rnics-panel"), None);
    assert_eq!(
        nodes(&dom, "span", "chip")
            .iter()
            .filter(|c| c.attrs.contains_key("data-rnic"))
            .count(),
        6
    );
    assert!(dom.contains("problems unavailable: statuses are partial"));
    // The drill-down: series present, paths part marked unavailable.
    assert_eq!(nodes(&dom, "svg", "series").len(), 1);
    let paths = nodes(&dom, "p", "part-unavailable");
    assert_eq!(paths.len(), 1);
    assert!(paths[0].text.contains("/api/v1/paths"), "{}", paths[0].text);
    // Of the page's own refresh (the drill-down fetches paths itself): topology, problems.
    let stamp = by_id(&dom, "div", "refreshed").text;
    assert!(stamp.contains("2 endpoint(s) failing"), "{stamp}");
}

#[test]
fn auth_on_asks_for_a_token() {
    let Some(browser) = chromium("auth_on_asks_for_a_token") else {
        return;
    };
    let (_server, url) = start_sqlite_server(
        &scratch_dir("dash-auth"),
        "[auth]\ntokens = [{ role = \"read\", token = \"read-token-0123456789\" }]\n",
    );
    // The page and its assets are open; the API answers 401 without a token. On a loaded
    // machine a dump may come before the page has heard the 401s: dump again, up to a
    // deadline, until the page has rendered them.
    const PANELS: [&str; 4] = [
        "heatmap-panel",
        "rnics-panel",
        "problems-panel",
        "tasks-panel",
    ];
    let asks = |dom: &str, panel: &str| {
        panel_unavailable(dom, panel).is_some_and(|why| why.contains("enter an API token"))
    };
    let shown = |dom: &str| !by_id(dom, "form", "auth").attrs.contains_key("hidden");
    let rendered = |dom: &str| shown(dom) && PANELS.iter().all(|p| asks(dom, p));
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut dom = dump_dom(&browser, &format!("{url}/"));
    while !rendered(&dom) && Instant::now() < deadline {
        dom = dump_dom(&browser, &format!("{url}/"));
    }
    assert!(shown(&dom), "token field shown");
    for panel in PANELS {
        let why = panel_unavailable(&dom, panel).unwrap_or_else(|| panic!("{panel} claims data"));
        assert!(why.contains("enter an API token"), "{panel}: {why}");
    }
}

/// The task page: a task over two loopback RNICs, selected from the URL, shows the API's
/// verdict and its hang/slow part, or why that was not judged.
fn task_page_shows_the_verdict(fx: &mut Fixtures) {
    use rocemesh_proto::api::TaskInfo;
    let Some(browser) = chromium("task_page_shows_the_verdict") else {
        return;
    };
    let lb = fx.loopback();
    let spec = serde_json::json!({"name": "dash-train", "endpoints": [
        {"host": "dash-host-1", "rnic": "r1"}, {"host": "dash-host-3", "rnic": "r1"}]});
    let task: TaskInfo = ureq::post(&format!("{}/api/v1/tasks", lb.url))
        .send_json(&spec)
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    let dom = dump_dom(&browser, &format!("{}/#task={}", lb.url, task.id));
    assert_eq!(panel_unavailable(&dom, "tasks-panel"), None);
    let row = nodes(&dom, "tr", "task-row")
        .into_iter()
        .find(|r| r.attr("data-task-id") == task.id.to_string())
        .expect("a row for the task");
    assert!(
        row.has_class("selected") && row.text.contains("dash-train"),
        "{row:?}"
    );
    let v: serde_json::Value = get_json(&format!("{}/api/v1/tasks/{}/verdict", lb.url, task.id));
    let shown = nodes(&dom, "p", "verdict");
    assert_eq!(shown.len(), 1, "one verdict shown");
    assert_eq!(
        shown[0].attr("data-verdict"),
        v["verdict"].as_str().unwrap()
    );
    // The hang/slow part: judged windows (a class or none yet) or the reason it is not.
    let health = nodes(&dom, "p", "health");
    assert_eq!(health.len(), 1, "one health line");
    if health[0].has_class("none") {
        assert!(
            health[0].text.contains("Hang/slow not judged: "),
            "{:?}",
            health[0]
        );
    } else {
        let worst = health[0].attr("data-worst");
        assert!(
            [
                "",
                "healthy",
                "communication_slow",
                "non_communication_slow",
                "communication_hang",
                "non_communication_hang"
            ]
            .contains(&worst),
            "{worst}"
        );
    }
}

/// Runs last of the loopback cases: it kills an agent of the shared fixture.
fn dead_agent_marks_its_rnics(fx: &mut Fixtures) {
    let Some(browser) = chromium("dead_agent_marks_its_rnics") else {
        return;
    };
    let lb = fx.loopback();
    lb.agents[2].kill();
    let url = lb.url.clone();
    let dead = "dash-host-3";
    // A host going silent may first look like noise on its RNICs; wait for the verdict.
    wait_for("host-down problem", Duration::from_secs(60), || {
        let active: Vec<Problem> = get_json(&format!("{url}/api/v1/problems"));
        active
            .iter()
            .any(|p| p.component == dead && p.kind == ProblemKind::HostDown)
            .then_some(())
    });
    let (rows, dom) = render_consistent(&browser, &url, &format!("{url}/"));
    assert_heatmap_matches(&dom, &rows, &LOOPBACK_TORS);
    let row = nodes(&dom, "tr", "problem")
        .into_iter()
        .find(|r| r.attr("data-component") == dead && r.attr("data-kind") == "host_down")
        .expect("the problem list names the dead host as down");
    assert_eq!(row.attr("data-state"), "active");
    let chips = nodes(&dom, "span", "chip");
    let status = |rnic: &str| {
        chips
            .iter()
            .find(|c| c.attr("data-rnic") == rnic)
            .map(|c| c.attr("data-status").to_string())
    };
    let problems: Vec<Problem> = get_json(&format!("{url}/api/v1/problems"));
    // A live host may be called noisy (its agent starved of CPU on a loaded machine), never
    // down or faulty because another host died.
    let blamed: Vec<&Problem> = problems
        .iter()
        .filter(|p| {
            p.component.starts_with("dash-host-1") || p.component.starts_with("dash-host-2")
        })
        .filter(|p| !matches!(p.kind, ProblemKind::HostNoise | ProblemKind::HighLatency))
        .collect();
    assert!(blamed.is_empty(), "live hosts blamed: {blamed:#?}");
    for r in 1..=2 {
        assert_eq!(
            status(&format!("{dead}/r{r}")).as_deref(),
            Some("problem"),
            "{problems:#?}"
        );
        // The live hosts keep probing each other.
        let live = status(&format!("dash-host-1/r{r}"));
        assert!(
            matches!(live.as_deref(), Some("ok" | "problem")),
            "dash-host-1/r{r}: {live:?}"
        );
    }
}

// ---------------------------------------------------------------------------------
// Root: a namespace lab with an injected link fault.

const LAB_PREFIX: &str = "rmdash";
const FAULTY_LINK: &str = "t0-s1";

#[test]
fn lab_fault_is_shown_and_screenshotted() {
    if !support::is_root() {
        eprintln!("skipping lab_fault_is_shown_and_screenshotted: needs root (network namespaces)");
        return;
    }
    let Some(browser) = chromium("lab_fault_is_shown_and_screenshotted") else {
        return;
    };
    let lab = Lab::up(
        rocemesh_lab::eval::lab_spec(LAB_PREFIX),
        &LabTiming::default(),
    )
    .expect("lab up");
    lab.wait_ready(Duration::from_secs(30))
        .expect("agents ready");
    let tors = ["t0", "t1", "t2"];
    wait_for(
        "SLA rows of every ToR pair",
        Duration::from_secs(40),
        || {
            let rows: Vec<SlaRow> = lab.get("/api/v1/sla/latest?scope=tor_pair").ok()?;
            (rows.len() == tors.len() * tors.len()).then_some(())
        },
    );
    let onset = Instant::now();
    lab.fabric
        .apply(&Fault::Loss {
            link: FAULTY_LINK.into(),
            direction: Direction::Both,
            percent: 100,
        })
        .expect("inject loss");
    let link_problem = |p: &Problem| p.component == FAULTY_LINK && p.resolved_ms.is_none();
    wait_for(
        "an active problem on the faulty link",
        Duration::from_secs(40),
        || lab.problems().ok()?.iter().any(link_problem).then_some(()),
    );
    eprintln!(
        "problem on {FAULTY_LINK} after {:.1} s",
        onset.elapsed().as_secs_f64()
    );
    wait_for(
        "a finalized period with the loss, the problem's priority assessed",
        Duration::from_secs(20),
        || {
            let rows: Vec<SlaRow> = lab.get("/api/v1/sla/latest?scope=tor_pair").ok()?;
            // The impact loop assesses a stored problem within its tick (2 s).
            let assessed = lab
                .problems()
                .ok()?
                .iter()
                .any(|p| link_problem(p) && p.priority.is_some());
            (assessed
                && rows
                    .iter()
                    .any(|r| r.key.starts_with("t0->") && r.timeouts > 0))
            .then_some(())
        },
    );

    let page = format!("{}/#pair=t0-%3Et1", lab.url);
    let (rows, dom) = render_consistent(&browser, &lab.url, &page);
    assert_heatmap_matches(&dom, &rows, &tors);
    assert!(nodes(&dom, "td", "lossy").len() >= 2, "lossy pairs marked");
    let row = nodes(&dom, "tr", "problem")
        .into_iter()
        .find(|r| r.attr("data-component") == FAULTY_LINK)
        .expect("the problem list names the faulty link");
    assert_eq!(row.attr("data-state"), "active");
    assert_eq!(row.attr("data-component-kind"), "link");
    assert!(row.text.contains(FAULTY_LINK));
    // Priority as the API gives it (the page shows "—" until the impact loop assessed it).
    let id: i64 = row.attr("data-id").parse().unwrap();
    let api: Problem = lab
        .get(&format!("/api/v1/problems/{id}"))
        .expect("the problem by id");
    let shown = row.attr("data-priority");
    let assessed = api.priority.expect("assessed before the page was rendered");
    assert_eq!(shown, assessed.as_str());
    let first_cell = nodes(&row.inner, "td", "")
        .into_iter()
        .next()
        .map(|c| c.text)
        .unwrap_or_default();
    assert_eq!(first_cell, shown);
    // Drill-down of t0 -> t1: paths traced through the spines, named by the fabric map.
    let paths = nodes(&dom, "li", "path");
    assert!(!paths.is_empty(), "traced paths between t0 and t1");
    assert!(
        paths.iter().all(|p| p.attr("data-hops").starts_with("t0")),
        "{:?}",
        paths
            .iter()
            .map(|p| p.attr("data-hops"))
            .collect::<Vec<_>>()
    );

    let png = artifact("dashboard-fault.png");
    screenshot(&browser, &page, &png);
    println!("dashboard screenshot during the fault: {}", png.display());
    drop(lab);
}

// ---------------------------------------------------------------------------------
// A lossy pair whose RTT is the fabric's median, in the RTT view.

/// Registers `host` with RNICs `(ifname, ip)` under `tor`; returns (host id, RNIC ids).
fn register(url: &str, host: &str, tor: &str, rnics: &[(&str, &str)]) -> (u32, Vec<u32>) {
    use rocemesh_proto::api::{RegisterRequest, RegisterResponse, RnicRegistration};
    let req = RegisterRequest {
        host: host.into(),
        epoch: 1,
        rnics: rnics
            .iter()
            .map(|(ifname, ip)| RnicRegistration {
                ifname: ifname.to_string(),
                ip: ip.parse().unwrap(),
                gid: None,
                qpn: 7,
                port: 4791,
                tor: Some(tor.into()),
                rail: None,
                gateway: None,
            })
            .collect(),
    };
    let resp: RegisterResponse = ureq::post(&format!("{url}/api/v1/agents/register"))
        .send_json(&req)
        .expect("register")
        .body_mut()
        .read_json()
        .expect("register answer");
    (resp.host_id, resp.rnics.iter().map(|r| r.id).collect())
}

/// The `rgb(r, g, b)` of a cell's inline background.
fn background(cell: &Node) -> [u8; 3] {
    let style = cell.attr("style");
    let inner = style
        .split("rgb(")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap_or_else(|| panic!("no rgb background in {style:?}"));
    let v: Vec<u8> = inner
        .split(',')
        .map(|c| c.trim().parse().unwrap())
        .collect();
    [v[0], v[1], v[2]]
}

/// Real uploads through a real server: every ToR pair at the same 5 µs RTT, tor-a ->
/// tor-b losing 2 % of its probes. In the RTT view (the default) that pair must not
/// look like the healthy ones: its cell is marked lossy, rated at least half-way up the
/// colour scale and painted from the bad half of the palette, while the loss-free pairs
/// get the scale's good end. The screenshot is kept in target/test-artifacts.
#[test]
fn lossy_pair_is_never_drawn_healthy_in_the_rtt_view() {
    use rocemesh_proto::batch::{BatchHeader, CONTENT_TYPE, encode_batch};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let Some(browser) = chromium("lossy_pair_is_never_drawn_healthy_in_the_rtt_view") else {
        return;
    };
    let dir = scratch_dir("dash-lossy");
    // Periods long enough that a page rendered on a loaded machine shows the period the
    // API served around it.
    let (_server, url) =
        start_sqlite_server(&dir, "[analyzer]\nperiod = \"10s\"\ngrace = \"500ms\"\n");
    let a = register(
        &url,
        "lossy-host-a",
        "tor-a",
        &[("r0", "10.77.0.1"), ("r1", "10.77.0.2")],
    );
    let b = register(
        &url,
        "lossy-host-b",
        "tor-b",
        &[("r0", "10.77.1.1"), ("r1", "10.77.1.2")],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let uploader = {
        let (stop, url) = (stop.clone(), url.clone());
        std::thread::spawn(move || {
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                seq += 1;
                let now = rocemesh_proto::now_unix_ms();
                for (host, own, other, lossy_side) in
                    [(a.0, &a.1, &b.1, true), (b.0, &b.1, &a.1, false)]
                {
                    let mut records = Vec::new();
                    for i in 0..50u32 {
                        // Same ToR, then the other ToR; tor-a -> tor-b loses one in 50.
                        let local =
                            rocemesh_proto::testing::probe_result(own[0], own[1], now, true, 5_000);
                        let lossy = lossy_side && i == 0;
                        let remote = rocemesh_proto::testing::probe_result(
                            own[1], other[0], now, !lossy, 5_000,
                        );
                        records.extend([local, remote].map(|mut r| {
                            r.seq = i;
                            r
                        }));
                    }
                    let body = encode_batch(
                        BatchHeader {
                            host_id: host,
                            epoch: 1,
                            batch_seq: seq,
                            dropped: 0,
                        },
                        &records,
                    );
                    let _ = ureq::post(&format!("{url}/api/v1/results"))
                        .header("Content-Type", CONTENT_TYPE)
                        .send(&body[..]);
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };
    wait_for(
        "a finalized period with every ToR pair, tor-a -> tor-b lossy",
        Duration::from_secs(40),
        || {
            let rows: Vec<SlaRow> = get_json(&format!("{url}/api/v1/sla/latest?scope=tor_pair"));
            (rows.len() == 4
                && rows
                    .iter()
                    .all(|r| r.probes > 0 && (r.timeouts > 0) == (r.key == "tor-a->tor-b")))
            .then_some(())
        },
    );
    let page = format!("{url}/");
    let (rows, dom) = render_consistent(&browser, &url, &page);
    assert_heatmap_matches(&dom, &rows, &LOOPBACK_TORS);
    assert_eq!(
        nodes(&dom, "table", "heatmap")[0].attr("data-metric"),
        "rtt",
        "the RTT view is the default"
    );
    let cells = nodes(&dom, "td", "cell");
    let lossy_key = rows.iter().find(|r| r.timeouts > 0).map(|r| r.key.clone());
    for cell in &cells {
        let key = format!("{}->{}", cell.attr("data-src"), cell.attr("data-dst"));
        let badness: f64 = cell.attr("data-badness").parse().unwrap();
        let [r, g, bl] = background(cell);
        if Some(&key) == lossy_key.as_ref() {
            assert!(cell.has_class("lossy"), "{key}");
            assert!(badness >= 0.5, "{key}: lossy pair rated {badness}");
            // Cividis: the good end is dark blue (0, 34, 78); the bad half is grey to yellow.
            assert!(
                r >= 120 && g >= 120 && bl <= 125,
                "{key}: lossy pair painted rgb({r}, {g}, {bl})"
            );
        } else {
            assert_eq!(badness, 0.0, "{key}: loss-free pair at the median RTT");
            assert_eq!([r, g, bl], [0, 34, 78], "{key}: the scale's good end");
        }
    }

    // Problems as the localization core stores them: a flow no single component explains
    // (with its suspects) and a link faulty in one direction. The flow's evidence opens
    // from the page link, with the RNIC addresses named host/ifname.
    let (flow, link) = insert_problems(&dir.join("rocemesh.db"));
    let page = format!("{url}/#pair=tor-a-%3Etor-b&problem={flow}");
    let opened_at = rocemesh_proto::now_unix_ms();
    let dom = dump_dom(&browser, &page);
    let rows = nodes(&dom, "tr", "problem");
    let row = |id: i64| {
        rows.iter()
            .find(|r| r.attr("data-id") == id.to_string())
            .unwrap_or_else(|| panic!("no row for problem {id}"))
    };
    assert_eq!(row(flow).attr("data-component-kind"), "flow");
    assert!(
        row(flow).text.contains("suspect t0-s1 60 %"),
        "{}",
        row(flow).text
    );
    assert!(row(flow).has_class("open"));
    let direction = nodes(&row(link).inner, "span", "direction");
    assert_eq!(direction.len(), 1, "{}", row(link).inner);
    assert_eq!(direction[0].attr("data-direction"), "s0 → t1");
    // Its twin, which the probes cannot tell from it, is named beside it, not as a suspect.
    let text = &row(link).text;
    assert!(
        text.contains("or t0-s0") && !text.contains("suspect"),
        "{text}"
    );
    let evidence = nodes(&dom, "tr", "problem-evidence");
    let opened = |id: i64| {
        evidence
            .iter()
            .find(|e| e.attr("data-id") == id.to_string())
            .unwrap_or_else(|| panic!("no evidence row for {id}"))
    };
    assert!(
        !opened(flow).attrs.contains_key("hidden"),
        "the linked problem is open"
    );
    assert!(
        opened(link).attrs.contains_key("hidden"),
        "the others stay closed"
    );
    let suspects: Vec<(String, String)> = nodes(&opened(flow).inner, "li", "")
        .iter()
        .filter(|l| l.attrs.contains_key("data-component"))
        .map(|l| (l.attr("data-component").to_string(), l.text.clone()))
        .collect();
    assert_eq!(
        suspects,
        [
            (
                "t0-s1".to_string(),
                "link t0-s1 (t0 → s1) — 60 %".to_string()
            ),
            ("s1".to_string(), "switch s1 — 30 %".to_string())
        ]
    );
    let paths = nodes(&opened(flow).inner, "li", "ev-path");
    assert_eq!(paths.len(), 1);
    assert_eq!(
        paths[0].text, "lossy-host-a/r1 -> t0 -> s1 -> t1 -> lossy-host-b/r0",
        "addresses named host/ifname"
    );
    // The drill-down covers the default time range, the last hour.
    let drill = by_id(&dom, "div", "drilldown");
    let from: i64 = drill.attr("data-from-ms").parse().unwrap();
    assert!(
        (opened_at - 3_600_000 - 60_000..=rocemesh_proto::now_unix_ms() - 3_600_000)
            .contains(&from),
        "drill-down from {from}"
    );
    assert!(
        by_id(&dom, "select", "drilldown-range")
            .inner
            .contains("value=\"86400000\"")
    );

    let png = artifact("dashboard-lossy-rtt.png");
    screenshot(&browser, &page, &png);
    println!(
        "dashboard screenshot, lossy pair in the RTT view: {}",
        png.display()
    );
    stop.store(true, Ordering::Relaxed);
    uploader.join().unwrap();
}

/// Stores a flow problem with two suspects and a one-direction link problem with a twin
/// in the server's database; returns their ids.
fn insert_problems(db: &Path) -> (i64, i64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let db = rocemesh_store::Db::connect(&format!("sqlite://{}", db.display()))
            .await
            .expect("open the server's database");
        let now = rocemesh_proto::now_unix_ms();
        let flow = serde_json::json!({
            "probes": 40, "timeouts": 12, "votes": 0, "ok_paths": 0,
            "example_paths": ["10.77.0.2 -> t0 -> s1 -> t1 -> 10.77.1.1"],
            "detail": "flow 10.77.0.2:50000 -> 10.77.1.1:4791 fails; no single component explains it",
            "candidates": [
                {"component_kind": "link", "component": "t0-s1", "direction": {"from": "t0", "to": "s1"}, "confidence": 0.6},
                {"component_kind": "switch", "component": "s1", "confidence": 0.3}
            ]
        });
        let link = serde_json::json!({
            "probes": 90, "timeouts": 30, "votes": 7, "ok_paths": 0, "example_paths": [],
            "detail": "lossy in one direction", "direction": {"from": "s0", "to": "t1"},
            "candidates": [
                {"component_kind": "link", "component": "t1-s0", "direction": {"from": "s0", "to": "t1"}, "confidence": 0.5},
                {"component_kind": "link", "component": "t0-s0", "direction": {"from": "t0", "to": "s0"}, "confidence": 0.5}
            ]
        });
        let mut ids = Vec::new();
        for (kind, component_kind, component, evidence) in [
            ("flow_fault", "flow", "lossy-host-a/r1 -> lossy-host-b/r0 sport 50000", flow),
            ("link_fault", "link", "t1-s0", link),
        ] {
            let (id,): (i64,) = sqlx::query_as(
                "INSERT INTO problems (kind, component_kind, component, state, confidence, network, \
                 first_seen_ms, last_seen_ms, evidence) \
                 VALUES ($1, $2, $3, 'active', 0.8, 1, $4, $4, $5) RETURNING id",
            )
            .bind(kind)
            .bind(component_kind)
            .bind(component)
            .bind(now)
            .bind(evidence.to_string())
            .fetch_one(db.pool())
            .await
            .expect("insert a problem");
            ids.push(id);
        }
        (ids[0], ids[1])
    })
}
