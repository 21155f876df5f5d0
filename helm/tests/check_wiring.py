"""End-to-end checks of the chart's wiring with the real `rocemesh` binary, no cluster.

For each rendered scenario, the server runs with the rendered server.toml, the files of its
ConfigMap, the token files of its Secret and its ROCEMESH_DATABASE (SQLite in a temporary
directory; a PostgreSQL URL is replaced by SQLite: the database itself is tested elsewhere),
and an agent runs with the DaemonSet container's args and env: paths the pods mount
(/etc/rocemesh, /run/secrets/rocemesh, /var/lib/rocemesh) point into the temporary
directory, the server Service URL points at the local server, the node name is a made-up
one (the downward API) and the RNIC is a loopback address over udp. Everything listens on
127.0.0.1 and is stopped at the end.

Checked: both processes accept the rendered configuration (deny_unknown_fields parsers),
the server answers /healthz and /readyz, the API refuses a request without a token and
accepts the read token when auth is on, the agent registers under the node name with the
agent token, and its /metrics answers on the rendered metrics port.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

# The paths the chart mounts into the pods.
POD_PATHS = ("/etc/rocemesh", "/run/secrets/rocemesh", "/var/lib/rocemesh")
NODE_NAME = "node-wiring-a"
LOOPBACK_RNIC = "r0=127.0.0.1"
START_TIMEOUT_S = 20.0


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: none, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: none, user: {{}}}}]
contexts: [{{name: none, context: {{cluster: none, user: none}}}}]
current-context: none
"""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, token: str | None = None, timeout: float = 3.0) -> tuple[int, str]:
    """Status and body of a GET (status 0 = no connection)."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return 0, ""


def wait_for(what: str, fn, timeout: float = START_TIMEOUT_S):
    """Polls `fn` until it returns a truthy value; raises naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.2)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


class Scene:
    """The temporary stand-ins of one scenario's pod filesystems and processes."""

    def __init__(self, binary: Path, rendered, tmp: Path) -> None:
        self.binary = binary
        self.r = rendered
        self.tmp = tmp
        self.procs: list[tuple[subprocess.Popen, Path]] = []
        self.service_url = f"http://{rendered.one('Service', '-server')['metadata']['name']}." \
                           f"{rendered.one('Service', '-server')['metadata']['namespace']}.svc:" \
                           f"{rendered.values['server']['port']}"
        self.server_url = ""
        self.tokens: dict[str, str] = {}
        for p in POD_PATHS:
            self.local(p).mkdir(parents=True, exist_ok=True)

    def local(self, pod_path: str) -> Path:
        """Where a pod path lives in the temporary directory."""
        return self.tmp / pod_path.lstrip("/")

    def localize(self, text: str) -> str:
        """Pod paths and the server Service URL made local."""
        for p in POD_PATHS:
            text = text.replace(p, str(self.local(p)))
        if self.server_url:
            text = text.replace(self.service_url, self.server_url)
        return text

    def write_configmap(self, cm: dict) -> None:
        """A ConfigMap's keys as files, where the pod mounts them."""
        for key, text in cm["data"].items():
            (self.local("/etc/rocemesh") / key).write_text(self.localize(text))

    def write_tokens(self) -> None:
        """The tokens Secret's keys as files (a made-up Secret when the chart uses an existing one)."""
        created = [s for s in self.r.of_kind("Secret") if s["metadata"]["name"].endswith("-tokens")]
        if created:
            self.tokens = {k: base64.b64decode(v).decode() for k, v in created[0]["data"].items()}
        else:
            self.tokens = {role: f"{role}-token-of-an-existing-secret" for role in ("admin", "read", "agent")}
        for role, token in self.tokens.items():
            (self.local("/run/secrets/rocemesh") / role).write_text(token)

    def env(self, container: dict, extra: dict[str, str]) -> dict[str, str]:
        """The container's env resolved the way the kubelet would, made local."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROCEMESH_")}
        env["RUST_LOG"] = "warn"
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = self.localize(str(e["value"]))
                continue
            src = e["valueFrom"]
            if "fieldRef" in src:
                assert src["fieldRef"]["fieldPath"] == "spec.nodeName", src
                env[e["name"]] = NODE_NAME
            elif "secretKeyRef" in src:
                key = src["secretKeyRef"]["key"]
                if src["secretKeyRef"]["name"].endswith("-tokens") or src["secretKeyRef"]["name"] == self.r.values["auth"]["existingSecret"]:
                    env[e["name"]] = self.tokens[key]
                else:  # the PostgreSQL URL: the database is not what is tested here
                    env[e["name"]] = f"sqlite://{self.local('/var/lib/rocemesh')}/rocemesh.db"
        env.update(extra)
        return env

    def start(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        """Starts the binary with stdout to a log file."""
        log = self.tmp / f"{name}.log"
        proc = subprocess.Popen([str(self.binary), *args], env=env, stdout=open(log, "w"),
                                stderr=subprocess.STDOUT, cwd=self.tmp)
        self.procs.append((proc, log))
        return proc

    def log(self, name: str) -> str:
        """What a process printed so far."""
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> list[str]:
        """SIGTERM to every process started here (latest first); problems if one does not end cleanly."""
        problems = []
        for proc, log in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    problems.append(f"{log.stem} ignored SIGTERM for 15 s")
                    continue
                if proc.returncode != 0:
                    problems.append(f"{log.stem} exited {proc.returncode} on SIGTERM:\n{log.read_text()[-1500:]}")
        return problems


def run_scene(binary: Path, rendered) -> list[str]:
    """Runs the server and an agent as the rendered objects say; the problems found."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rocemesh-helm-") as d:
        s = Scene(binary, rendered, Path(d))
        try:
            problems += server_and_agent(s)
        finally:
            problems += s.stop()
    return problems


def server_and_agent(s: Scene) -> list[str]:
    p: list[str] = []
    r = s.r
    s.write_tokens()
    s.write_configmap(r.one("ConfigMap", "-server"))
    server = r.one("Deployment", "-server")["spec"]["template"]["spec"]["containers"][0]
    port = free_port()
    args = [s.localize(a) for a in server["args"]] + [f"--listen=127.0.0.1:{port}"]
    # [kubernetes] is on: the server gets a kubeconfig naming an API server that refuses
    # connections (its watches retry with back-off; the HTTP API must serve regardless).
    kubeconfig = s.tmp / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(port=free_port()))
    proc = s.start("server", args, s.env(server, {"KUBECONFIG": str(kubeconfig)}))

    def started() -> str | None:
        if proc.poll() is not None:
            return "exited"
        m = re.search(r"listening on (http://\S+)", s.log("server"))
        return m.group(1) if m else None

    url = wait_for("server start line", started)
    if url == "exited":
        return [f"server exited {proc.returncode} with the rendered config:\n{s.log('server')[-2000:]}"]
    s.server_url = url
    for path in ("/healthz", "/readyz"):
        status, body = http_get(url + path)
        if status != 200:
            p.append(f"GET {path}: {status} {body[:200]}")
    if r.values["auth"]["enabled"]:
        status, _ = http_get(url + "/api/v1/hosts")
        if status != 401:
            p.append(f"GET /api/v1/hosts without a token: {status}, wanted 401 (auth is on)")
        status, body = http_get(url + "/api/v1/hosts", s.tokens["read"])
        if status != 200:
            p.append(f"GET /api/v1/hosts with the read token: {status} {body[:200]}")
    if not r.values["agent"]["enabled"]:
        return p
    ds = r.one("DaemonSet")
    agent = ds["spec"]["template"]["spec"]["containers"][0]
    agent_cm = [c for c in r.of_kind("ConfigMap") if c["metadata"]["name"].endswith("-agent")]
    if agent_cm:
        s.write_configmap(agent_cm[0])
    metrics_port = free_port()
    args = []
    for a in agent["args"]:
        if a.startswith("--metrics-listen="):
            a = f"--metrics-listen=127.0.0.1:{metrics_port}"
        elif a.startswith("--rnic=") or a.startswith("--transport=") or a.startswith("--service-tracing="):
            continue  # the node's RNICs and transport: replaced by a loopback RNIC over udp below
        args.append(s.localize(a))
    args += [f"--rnic={LOOPBACK_RNIC}", "--transport=udp", "--service-tracing=off"]
    aproc = s.start("agent", args, s.env(agent, {}))
    try:
        wait_for("agent registration", lambda: aproc.poll() is not None or
                 NODE_NAME in http_get(url + "/api/v1/hosts", s.tokens.get("read"))[1])
    except TimeoutError as e:
        p.append(f"{e}: hosts = {http_get(url + '/api/v1/hosts', s.tokens.get('read'))[1][:300]}")
    if aproc.poll() is not None:
        return p + [f"agent exited {aproc.returncode} with the rendered args/env:\n{s.log('agent')[-2000:]}"]
    status, body = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
    if status != 200 or "rocemesh_" not in body:
        p.append(f"agent GET /metrics on the rendered metrics port: {status} {body[:200]}")
    return p


def run(report, binary: Path, rendered: dict[str, Any]) -> None:
    """Adds one end-to-end check per rendered scenario to `report`."""
    binary = binary.resolve()  # the processes run in their temporary directories
    for name, r in rendered.items():
        report.check(f"{name}: server and agent run with the rendered config, args and env",
                     lambda r=r: run_scene(binary, r))
