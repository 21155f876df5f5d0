#!/usr/bin/env python3
"""Checks the rocemesh Helm chart the way a cluster would see it.

* renders it with the real Helm engine (Helm's Go SDK through libhelm_c, PyPI
  `helm-python-sdk`) and lints it (`helm lint`), for the default values and for every
  scenario in helm/rocemesh/ci/*-values.yaml;
* validates every manifest against the Kubernetes OpenAPI JSON schemas (PyPI
  `kubernetes-validate`, strict: unknown fields are errors) of the oldest and the newest
  Kubernetes the chart supports; Prometheus Operator objects (no schema shipped) get
  structural checks instead (they select a rendered Service and one of its ports);
* checks that the rendered objects give the agent what a RoCE host needs (host network and
  PID namespace, the capabilities, the host mounts, the RDMA device or device-plugin
  resource, tolerations, priority class) and the server what it needs (config file, database,
  tokens, probes), deriving the expectations from the values of each scenario;
* checks that the checker itself fails on broken objects and that bad values are refused.

`scripts/check_helm.sh` sets up the Python environment and runs this. The Dockerfile checks
of check_dockerfile.py run too, and with `--binary PATH` (the built `rocemesh`) the
end-to-end checks of check_wiring.py.
Prints one line per check and a cargo-style `test result:` line; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import tomllib
import traceback
from pathlib import Path
from typing import Any, Callable

import check_dockerfile
import check_wiring
import helm_python
import kubernetes_validate
import yaml
from kubernetes_validate.utils import SchemaNotFoundError

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "rocemesh"
RELEASE = "rm"
NAMESPACE = "roce-monitoring"
# Oldest (Chart.yaml kubeVersion) and newest Kubernetes the manifests are validated against.
KUBE_VERSIONS = ("1.25.0", "1.37.0")
# RNICs the default scenario adds (the chart has no default for them).
DEFAULT_RNICS = ["mlx5_0=@ens1f0np0,rail=0"]
# What the agent needs on a RoCE host (agent/README.md, "Running on real RoCE hosts").
AGENT_CAPABILITIES = {"BPF", "PERFMON", "NET_ADMIN", "NET_RAW", "IPC_LOCK"}
AGENT_HOST_MOUNTS = {
    "/sys/fs/bpf": False,
    "/sys/kernel/btf": True,
    "/sys/kernel/tracing": False,
}
SYS_CLASS_INFINIBAND = "/sys/class/infiniband"
DEV_INFINIBAND = "/dev/infiniband"
MONITORING_GROUP = "monitoring.coreos.com/v1"


class Report:
    """Counts named checks, prints each one, and the closing tally."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.ignored = 0

    def check(self, name: str, fn: Callable[[], list[str] | None]) -> None:
        """Runs `fn`; a non-empty list of problems (or an exception) fails the check."""
        try:
            problems = fn() or []
        except (helm_python.HelmError, AssertionError, TimeoutError) as e:  # a plain finding
            problems = [f"{type(e).__name__}: {e}"]
        except Exception as e:  # a crash in a check is that check's failure, not the run's
            problems = [f"{type(e).__name__}: {e}", traceback.format_exc(limit=3)]
        if problems:
            self.failed += 1
            print(f"check {name} ... FAILED")
            for p in problems:
                print(f"    {p}")
        else:
            self.passed += 1
            print(f"check {name} ... ok")

    def skip(self, name: str, why: str) -> None:
        """Records a check that could not run here."""
        self.ignored += 1
        print(f"check {name} ... ignored ({why})")

    def summary(self) -> str:
        """The cargo-style closing line scripts/test.sh adds to its tally."""
        state = "ok" if self.failed == 0 else "FAILED"
        return (
            f"test result: {state}. {self.passed} passed; {self.failed} failed; "
            f"{self.ignored} ignored; 0 measured; 0 filtered out"
        )


def deep_merge(base: dict, over: dict) -> dict:
    """Values overlay as Helm does it for maps (lists and scalars replace)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def scenarios() -> dict[str, dict]:
    """Scenario name -> user values: the defaults plus every ci/*-values.yaml."""
    out = {"default": {"agent": {"rnics": DEFAULT_RNICS}}}
    for f in sorted((CHART / "ci").glob("*-values.yaml")):
        values = yaml.safe_load(f.read_text()) or {}
        if not values.get("agent", {}).get("rnics") and not values.get("agent", {}).get("config"):
            values = deep_merge(values, {"agent": {"rnics": DEFAULT_RNICS}})
        out[f.name.removesuffix("-values.yaml")] = values
    return out


class Rendered:
    """One scenario rendered: merged values and the objects by (kind, name)."""

    def __init__(self, chart: helm_python.Chart, values: dict) -> None:
        self.values = chart.merge_values(values)
        self.files = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        self.objects: list[dict] = []
        for path, text in sorted(self.files.items()):
            if path.endswith("NOTES.txt"):
                continue
            for doc in yaml.safe_load_all(text):
                if doc:
                    doc.setdefault("__source", path)
                    self.objects.append(doc)

    def of_kind(self, kind: str) -> list[dict]:
        """Every rendered object of a kind."""
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name_suffix: str = "") -> dict:
        """The one object of a kind (whose name ends with `name_suffix`)."""
        found = [o for o in self.of_kind(kind) if o["metadata"]["name"].endswith(name_suffix)]
        if len(found) != 1:
            raise AssertionError(f"expected one {kind} *{name_suffix}, found {len(found)}")
        return found[0]


def strip_source(obj: dict) -> dict:
    """The object as the API server would get it."""
    return {k: v for k, v in obj.items() if k != "__source"}


def schema_problems(r: Rendered) -> list[str]:
    """Strict Kubernetes schema validation of every core object (both versions)."""
    problems = []
    for obj in r.objects:
        if obj["apiVersion"] == MONITORING_GROUP:
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(strip_source(obj), version, strict=True)
            except kubernetes_validate.ValidationError as e:
                where = "/".join(str(p) for p in e.path)
                problems.append(f"{obj['kind']}/{obj['metadata']['name']} (k8s {version}) at {where}: {e.message}")
            except SchemaNotFoundError:
                problems.append(f"{obj['kind']} {obj['apiVersion']}: no schema in Kubernetes {version}")
    return problems


def container(workload: dict) -> dict:
    """The first container of a workload's pod template."""
    return workload["spec"]["template"]["spec"]["containers"][0]


def env_of(c: dict) -> dict[str, dict]:
    """Container env by name."""
    return {e["name"]: e for e in c.get("env", [])}


def mounts_of(workload: dict) -> dict[str, tuple[dict, dict]]:
    """mountPath -> (volumeMount, volume) of the first container."""
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
    return {m["mountPath"]: (m, volumes.get(m["name"], {})) for m in container(workload).get("volumeMounts", [])}


def rdma_mode(values: dict) -> str:
    """The RDMA mode rendered: `auto` looks nodes up at install, and a render without a
    cluster finds none (hostPath)."""
    mode = values["rdma"]["mode"]
    return "hostPath" if mode == "auto" else mode


def exported_api_requests() -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every Kubernetes request the server makes (k8s/src/rbac.rs)."""
    text = (REPO / "k8s" / "src" / "rbac.rs").read_text()
    return set(re.findall(r'^\s*ApiRequest::new\("([^"]*)", "([^"]+)", "([^"]+)"\),', text, re.M))


def rbac_problems(r: Rendered) -> list[str]:
    """The ClusterRole grants exactly the requests the code makes, to the server's account."""
    roles = r.of_kind("ClusterRole")
    if not r.values["kubernetes"]["enabled"] or not r.values["rbac"]["create"]:
        return [f"RBAC without kubernetes.enabled: {[x['metadata']['name'] for x in roles]}"] if roles else []
    if len(roles) != 1:
        return [f"{len(roles)} ClusterRoles, wanted 1"]
    granted = {(g, res, verb) for rule in roles[0]["rules"] for g in rule["apiGroups"]
               for res in rule["resources"] for verb in rule["verbs"]}
    wanted = exported_api_requests()
    p = []
    if not wanted:
        p.append("no ApiRequest::new lines read from k8s/src/rbac.rs")
    if granted - wanted:
        p.append(f"granted but never requested: {sorted(granted - wanted)}")
    if wanted - granted:
        p.append(f"requested but not granted: {sorted(wanted - granted)}")
    binding = r.one("ClusterRoleBinding")
    server_sa = r.one("Deployment", "-server")["spec"]["template"]["spec"]["serviceAccountName"]
    if binding["roleRef"]["name"] != roles[0]["metadata"]["name"]:
        p.append("the ClusterRoleBinding names another role")
    if [s["name"] for s in binding["subjects"]] != [server_sa]:
        p.append(f"bound to {binding['subjects']}, not the server's account {server_sa!r}")
    return p


def daemonset_problems(ds: dict, values: dict) -> list[str]:
    """What the rendered agent DaemonSet lacks for the agent to work on a RoCE host."""
    p = []
    pod = ds["spec"]["template"]["spec"]
    c = container(ds)
    if pod.get("hostNetwork") is not True:
        p.append("hostNetwork is not true (probes must leave from the RNICs' addresses)")
    if pod.get("dnsPolicy") != "ClusterFirstWithHostNet":
        p.append(f"dnsPolicy {pod.get('dnsPolicy')!r}: the server Service does not resolve on the host network")
    if pod.get("hostPID") is not True:
        p.append("hostPID is not true (uprobes need the host's pids and /proc/PID/root)")
    sc = c.get("securityContext", {})
    added = set(sc.get("capabilities", {}).get("add", []))
    missing = AGENT_CAPABILITIES - added
    if missing:
        p.append(f"capabilities missing: {sorted(missing)}")
    if sc.get("runAsUser") != 0:
        p.append(f"runAsUser {sc.get('runAsUser')!r}: added capabilities are effective only for root")
    if sc.get("privileged") and sc.get("allowPrivilegeEscalation") is False:
        p.append("privileged with allowPrivilegeEscalation false: the API server refuses it")
    if pod.get("automountServiceAccountToken") is not False:
        p.append("the agent gets a service account token, but it makes no Kubernetes API request")
    mounts = mounts_of(ds)
    expected = dict(AGENT_HOST_MOUNTS)
    mode = rdma_mode(values)
    if mode != "none":
        expected[SYS_CLASS_INFINIBAND] = True
    if mode == "hostPath":
        expected[DEV_INFINIBAND] = False
    for path, read_only in expected.items():
        if path not in mounts:
            p.append(f"no mount at {path}")
            continue
        m, vol = mounts[path]
        if "hostPath" not in vol:
            p.append(f"{path} is not a hostPath volume")
        if read_only and not m.get("readOnly"):
            p.append(f"{path} is not read-only")
    res = c.get("resources", {})
    rdma_limit = res.get("limits", {}).get(values["rdma"]["resourceName"])
    if mode == "hostPath":
        if not sc.get("privileged"):
            p.append("/dev/infiniband by hostPath without privileged: the device cgroup refuses the devices")
    elif mode == "devicePlugin":
        if str(rdma_limit) != str(values["rdma"]["resourceCount"]):
            p.append(f"limit {values['rdma']['resourceName']} = {rdma_limit!r}, wanted {values['rdma']['resourceCount']}")
        if DEV_INFINIBAND in mounts:
            p.append("device plugin mode still mounts /dev/infiniband")
        if sc.get("privileged"):
            p.append("device plugin mode is privileged")
    if pod.get("tolerations") != values["agent"]["tolerations"] or not pod.get("tolerations"):
        p.append(f"tolerations {pod.get('tolerations')!r}: tainted GPU nodes get no agent")
    if pod.get("priorityClassName") != values["agent"]["priorityClassName"]:
        p.append(f"priorityClassName {pod.get('priorityClassName')!r}, wanted {values['agent']['priorityClassName']!r}")
    if values["agent"]["nodeSelector"] and pod.get("nodeSelector") != values["agent"]["nodeSelector"]:
        p.append(f"nodeSelector {pod.get('nodeSelector')!r}, wanted {values['agent']['nodeSelector']!r}")
    env = env_of(c)
    host = env.get("ROCEMESH_HOST", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    if host != "spec.nodeName":
        p.append(f"ROCEMESH_HOST from {host!r}, wanted the downward API spec.nodeName")
    server_url = f"http://{RELEASE}-rocemesh-server.{NAMESPACE}.svc:{values['server']['port']}"
    for var in ("ROCEMESH_CONTROLLER", "ROCEMESH_ANALYZER"):
        if env.get(var, {}).get("value") != server_url:
            p.append(f"{var} = {env.get(var, {}).get('value')!r}, wanted the server Service {server_url}")
    token = env.get("ROCEMESH_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef", {})
    if values["auth"]["enabled"] and token.get("key") != "agent":
        p.append(f"ROCEMESH_TOKEN from {token!r}, wanted key agent of the tokens Secret")
    if not values["auth"]["enabled"] and token:
        p.append("ROCEMESH_TOKEN set with auth disabled")
    port = values["agent"]["metrics"]["port"]
    args = c.get("args", [])
    if f"--metrics-listen=0.0.0.0:{port}" not in args:
        p.append(f"no --metrics-listen=0.0.0.0:{port} in {args}")
    if not any(cp.get("name") == "metrics" and cp.get("containerPort") == port for cp in c.get("ports", [])):
        p.append(f"no container port 'metrics' = {port}")
    for probe in ("livenessProbe", "readinessProbe"):
        if c.get(probe, {}).get("httpGet", {}).get("port") not in ("metrics", port):
            p.append(f"{probe} does not use the metrics port")
    p += log_format_problems(args, values)
    rnic_args = [a.removeprefix("--rnic=") for a in args if a.startswith("--rnic=")]
    if rnic_args != list(values["agent"]["rnics"]):
        p.append(f"--rnic args {rnic_args}, wanted {values['agent']['rnics']}")
    if values["agent"]["config"] and env.get("ROCEMESH_AGENT_CONFIG", {}).get("value") != "/etc/rocemesh/agent.toml":
        p.append("agent.config given but ROCEMESH_AGENT_CONFIG does not point at the mounted file")
    return p


def log_format_problems(args: list[str], values: dict) -> list[str]:
    """`--log-json` exactly when `logging.format` is json (log collectors parse the lines)."""
    if (values["logging"]["format"] == "json") != ("--log-json" in args):
        return [f"logging.format {values['logging']['format']!r} but args {args}"]
    return []


def server_problems(r: Rendered) -> list[str]:
    """What the rendered server Deployment, its config and Service lack."""
    v = r.values
    p = []
    dep = r.one("Deployment", "-server")
    pod = dep["spec"]["template"]["spec"]
    c = container(dep)
    if dep["spec"]["replicas"] != v["server"]["replicas"]:
        p.append("replicas differ from server.replicas")
    if c.get("args", [])[:2] != ["server", "--config=/etc/rocemesh/server.toml"]:
        p.append(f"args {c.get('args')}")
    p += log_format_problems(c.get("args", []), v)
    if not pod.get("securityContext", {}).get("runAsNonRoot"):
        p.append("server is not forced to run as non-root")
    ports = {cp["name"]: cp["containerPort"] for cp in c.get("ports", [])}
    if ports.get("http") != v["server"]["port"]:
        p.append(f"container port http = {ports.get('http')}, wanted {v['server']['port']}")
    if c.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/healthz":
        p.append("liveness probe is not GET /healthz")
    if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/readyz":
        p.append("readiness probe is not GET /readyz")
    mounts = mounts_of(dep)
    cm_name = mounts.get("/etc/rocemesh", ({}, {}))[1].get("configMap", {}).get("name")
    cm = r.one("ConfigMap", "-server")
    if cm_name != cm["metadata"]["name"]:
        p.append(f"/etc/rocemesh mounts ConfigMap {cm_name!r}, not {cm['metadata']['name']!r}")
    cfg = tomllib.loads(cm["data"]["server.toml"])
    if cfg.get("listen") != f"0.0.0.0:{v['server']['port']}":
        p.append(f"listen = {cfg.get('listen')!r}")
    for file_name in v["server"]["files"]:
        if file_name not in cm["data"]:
            p.append(f"server.files {file_name} is not in the ConfigMap")
    db = env_of(c).get("ROCEMESH_DATABASE", {})
    if v["database"]["type"] == "sqlite":
        if db.get("value") != "sqlite:///var/lib/rocemesh/rocemesh.db":
            p.append(f"ROCEMESH_DATABASE {db!r}")
        vol = mounts.get("/var/lib/rocemesh", ({}, {}))[1]
        claim = vol.get("persistentVolumeClaim", {}).get("claimName")
        if v["database"]["sqlite"]["persistence"]["enabled"]:
            pvcs = [o["metadata"]["name"] for o in r.of_kind("PersistentVolumeClaim")]
            if claim not in pvcs:
                p.append(f"SQLite volume claims {claim!r}, rendered PVCs {pvcs}")
        if dep["spec"].get("strategy", {}).get("type") != "Recreate":
            p.append("SQLite on a ReadWriteOnce volume needs strategy Recreate")
    else:
        ref = db.get("valueFrom", {}).get("secretKeyRef", {})
        pg = v["database"]["postgresql"]
        want = pg["existingSecret"] or f"{RELEASE}-rocemesh-database"
        if ref != {"name": want, "key": pg["existingSecretKey"]}:
            p.append(f"ROCEMESH_DATABASE from {ref!r}, wanted {want}/{pg['existingSecretKey']}")
        if r.of_kind("PersistentVolumeClaim"):
            p.append("PostgreSQL mode still creates a PVC")
    tokens = cfg.get("auth", {}).get("tokens", [])
    if v["auth"]["enabled"]:
        roles = {t.get("role") for t in tokens}
        if roles != {"admin", "read", "agent"}:
            p.append(f"[auth] token roles {roles}")
        secret = mounts.get("/run/secrets/rocemesh", ({}, {}))[1].get("secret", {}).get("secretName")
        want = v["auth"]["existingSecret"] or f"{RELEASE}-rocemesh-tokens"
        if secret != want:
            p.append(f"tokens mounted from {secret!r}, wanted {want!r}")
        for t in tokens:
            if t.get("token_file") != f"/run/secrets/rocemesh/{t.get('role')}":
                p.append(f"token_file {t.get('token_file')!r} is not the mounted Secret key")
        if not v["auth"]["existingSecret"]:
            s = r.one("Secret", "-tokens")
            if set(s["data"]) != {"admin", "read", "agent"}:
                p.append(f"tokens Secret keys {sorted(s['data'])}")
    elif tokens:
        p.append("auth disabled but [auth] tokens written")
    svc = r.one("Service", "-server")
    p += service_problems(svc, dep)
    return p


def service_problems(svc: dict, workload: dict) -> list[str]:
    """A Service must select the workload's pods and target its named ports."""
    p = []
    labels = workload["spec"]["template"]["metadata"]["labels"]
    sel = svc["spec"]["selector"]
    if any(labels.get(k) != val for k, val in sel.items()):
        p.append(f"Service {svc['metadata']['name']} selector {sel} does not match pod labels")
    names = {cp["name"] for cp in container(workload).get("ports", [])}
    for sp in svc["spec"]["ports"]:
        if sp["targetPort"] not in names:
            p.append(f"Service port {sp['name']} targets {sp['targetPort']!r}, not a container port")
    return p


def monitoring_problems(r: Rendered) -> list[str]:
    """ServiceMonitors select rendered Services by their ports; rules use existing metrics."""
    v = r.values["monitoring"]
    p = []
    monitors = [o for o in r.of_kind("ServiceMonitor")]
    if v["serviceMonitor"]["enabled"]:
        if len(monitors) != 1 + int(r.values["agent"]["enabled"]):
            p.append(f"{len(monitors)} ServiceMonitors")
        for sm in monitors:
            sel = sm["spec"]["selector"]["matchLabels"]
            svcs = [s for s in r.of_kind("Service") if all(s["metadata"]["labels"].get(k) == x for k, x in sel.items())]
            if len(svcs) != 1:
                p.append(f"ServiceMonitor {sm['metadata']['name']} selects {len(svcs)} Services")
                continue
            port_names = {sp["name"] for sp in svcs[0]["spec"]["ports"]}
            for ep in sm["spec"]["endpoints"]:
                if ep.get("port") not in port_names or ep.get("path") != "/metrics":
                    p.append(f"{sm['metadata']['name']} endpoint {ep} is not a /metrics port of {port_names}")
            for k, x in v["serviceMonitor"]["labels"].items():
                if sm["metadata"]["labels"].get(k) != x:
                    p.append(f"{sm['metadata']['name']} lacks label {k}={x}")
    elif monitors:
        p.append("ServiceMonitors rendered while disabled")
    rules = r.of_kind("PrometheusRule")
    if v["prometheusRule"]["enabled"]:
        known = exported_metric_names()
        exprs = [rule["expr"] for g in rules[0]["spec"]["groups"] for rule in g["rules"]]
        for name in sorted({m for e in exprs for m in metric_names_in(e)}):
            if name not in known:
                p.append(f"alert rule uses {name}, which no rocemesh crate exports ({sorted(known)[:8]}...)")
        alerts = {rule["alert"] for g in rules[0]["spec"]["groups"] for rule in g["rules"]}
        for want in ("RocemeshP0Problem", "RocemeshAgentDown", "RocemeshProbeTimeoutRateHigh"):
            if want not in alerts:
                p.append(f"no alert {want}")
    elif rules:
        p.append("PrometheusRule rendered while disabled")
    dashboards = [o for o in r.of_kind("ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]
    if v["grafanaDashboard"]["enabled"]:
        shipped = (CHART / "dashboards" / "rocemesh.json").read_text()
        if len(dashboards) != 1 or dashboards[0]["data"]["rocemesh.json"].strip() != shipped.strip():
            p.append("the dashboard ConfigMap does not carry dashboards/rocemesh.json")
        else:
            json.loads(dashboards[0]["data"]["rocemesh.json"])
            for k, x in v["grafanaDashboard"]["labels"].items():
                if dashboards[0]["metadata"]["labels"].get(k) != x:
                    p.append(f"dashboard ConfigMap lacks the sidecar label {k}={x}")
    elif dashboards:
        p.append("dashboard ConfigMap rendered while disabled")
    return p


def metric_names_in(expr: str) -> set[str]:
    """rocemesh_* series names an expression reads, as families (suffixes removed)."""
    out = set()
    for m in re.findall(r"\brocemesh_[a-z0-9_]+", expr):
        for suffix in ("_bucket", "_count", "_sum", "_total", "_seconds"):
            m = m.removesuffix(suffix)
        out.add(m)
    return out


def exported_metric_names() -> set[str]:
    """Metric family names registered in the Rust sources ("rocemesh_..." string literals)."""
    names = set()
    for src in REPO.glob("*/src/**/*.rs"):
        if "/target/" in str(src):
            continue
        names.update(re.findall(r'"(rocemesh_[a-z0-9_]+)"', src.read_text(errors="replace")))
    return names


def render_error(chart: helm_python.Chart, values: dict) -> str:
    """The error text of a render that must fail ('' if it rendered)."""
    try:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    except helm_python.HelmError as e:
        return str(e)
    return ""


def self_test_problems(r: Rendered) -> list[str]:
    """The DaemonSet check must catch each way the agent would be broken."""
    p = []
    ds = r.one("DaemonSet")
    breakages: dict[str, Callable[[dict], None]] = {
        "hostPID": lambda d: d["spec"]["template"]["spec"].pop("hostPID"),
        "hostNetwork": lambda d: d["spec"]["template"]["spec"].__setitem__("hostNetwork", False),
        "capabilities": lambda d: container(d)["securityContext"]["capabilities"]["add"].remove("PERFMON"),
        "/sys/kernel/btf": lambda d: container(d)["volumeMounts"].__setitem__(
            slice(None), [m for m in container(d)["volumeMounts"] if m["mountPath"] != "/sys/kernel/btf"]
        ),
        "tolerations": lambda d: d["spec"]["template"]["spec"].pop("tolerations"),
        "priorityClassName": lambda d: d["spec"]["template"]["spec"].pop("priorityClassName"),
        "ROCEMESH_HOST": lambda d: container(d).__setitem__("env", container(d)["env"][1:]),
        "logging.format": lambda d: container(d)["args"].remove("--log-json"),
        "/dev/infiniband": lambda d: container(d)["securityContext"].__setitem__("privileged", False),
        "service account token": lambda d: d["spec"]["template"]["spec"].pop("automountServiceAccountToken"),
    }
    for what, breaker in breakages.items():
        broken = copy.deepcopy(ds)
        breaker(broken)
        found = daemonset_problems(broken, r.values)
        if not any(what.split("/")[-1] in f or what in f for f in found):
            p.append(f"breaking {what} went unnoticed (found: {found})")
    return p


def schema_self_test(r: Rendered) -> list[str]:
    """A misspelt field in the DaemonSet must fail the schema check."""
    broken = copy.deepcopy(r)
    ds = broken.one("DaemonSet")
    ds["spec"]["template"]["spec"]["hostPid"] = ds["spec"]["template"]["spec"].pop("hostPID")
    found = schema_problems(broken)
    return [] if any("hostPid" in f for f in found) else [f"hostPid went unnoticed: {found}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", type=Path, help="built rocemesh binary for the end-to-end wiring checks")
    args = ap.parse_args()
    report = Report()
    print(f"helm engine {helm_python.helm_sdk_version()} (libhelm_c {helm_python.helm_c_version()}), "
          f"kubernetes-validate {kubernetes_validate.__version__ if hasattr(kubernetes_validate, '__version__') else ''}")
    rendered: dict[str, Rendered] = {}
    with helm_python.Chart.load(CHART) as chart:
        for name, values in scenarios().items():
            def render(name: str = name, values: dict = values) -> list[str]:
                rendered[name] = Rendered(chart, values)
                return []

            report.check(f"{name}: renders", render)
            if name not in rendered:
                continue
            r = rendered[name]
            report.check(f"{name}: helm lint", lambda values=values: [
                f"{m['path']}: {m['error']}" for m in helm_python.lint(CHART, values, strict=True,
                                                                       namespace=NAMESPACE)["messages"]
                if m["severity"] >= 2
            ])
            report.check(f"{name}: kubernetes schemas {' and '.join(KUBE_VERSIONS)}", lambda r=r: schema_problems(r))
            if r.values["agent"]["enabled"]:
                report.check(f"{name}: agent DaemonSet has what a RoCE host needs",
                             lambda r=r: daemonset_problems(r.one("DaemonSet"), r.values))
                report.check(f"{name}: agent Service selects the agents",
                             lambda r=r: service_problems(r.one("Service", "-agent"), r.one("DaemonSet")))
            report.check(f"{name}: server Deployment, config, database, tokens", lambda r=r: server_problems(r))
            report.check(f"{name}: monitoring objects", lambda r=r: monitoring_problems(r))
            report.check(f"{name}: RBAC is exactly the Kubernetes requests the server makes",
                         lambda r=r: rbac_problems(r))
        if "default" in rendered:
            report.check("the DaemonSet check catches broken DaemonSets", lambda: self_test_problems(rendered["default"]))
            report.check("strict schema validation refuses an unknown field", lambda: schema_self_test(rendered["default"]))
            check_dockerfile.run(report, rendered["default"])
        refusals = {
            "no RNICs": ({}, "agent.rnics is empty"),
            "unknown rdma.mode": ({"agent": {"rnics": DEFAULT_RNICS}, "rdma": {"mode": "sriov"}},
                                  "at '/rdma/mode': value must be one of"),
            "unknown database.type": ({"agent": {"rnics": DEFAULT_RNICS}, "database": {"type": "mysql"}},
                                      "at '/database/type': value must be one of"),
            "a wrong-typed value (schema)": ({"agent": {"rnics": DEFAULT_RNICS}, "server": {"port": "eighty"}},
                                             "at '/server/port': got string, want integer"),
            "a wrong-typed boolean (schema)": ({"agent": {"rnics": DEFAULT_RNICS}, "kubernetes": {"taint": "yes"}},
                                               "at '/kubernetes/taint': got string, want boolean"),
            "an unknown key (schema)": ({"agent": {"rnics": DEFAULT_RNICS, "rnic": ["mlx5_0=@x"]}},
                                        "at '/agent': additional properties 'rnic' not allowed"),
            "a malformed duration (schema)": ({"agent": {"rnics": DEFAULT_RNICS},
                                               "monitoring": {"prometheusRule": {"agentDownFor": "5 minutes"}}},
                                              "at '/monitoring/prometheusRule/agentDownFor'"),
            "postgresql without URL": ({"agent": {"rnics": DEFAULT_RNICS}, "database": {"type": "postgresql"}},
                                       "database.postgresql.url or database.postgresql.existingSecret"),
        }
        for what, (values, message) in refusals.items():
            report.check(f"refuses {what}", lambda values=values, message=message: (
                [] if message in (err := render_error(chart, values)) else [f"rendered or other error: {err!r}"]))
    if args.binary:
        check_wiring.run(report, args.binary, rendered)
    else:
        report.skip("end-to-end wiring with the rocemesh binary", "no --binary")
    print(report.summary())
    return 0 if report.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
