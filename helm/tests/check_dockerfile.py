"""Static checks of the repository's Dockerfile (no Docker daemon is needed or used).

The image is not built here (no Docker daemon on the development machine or in CI), so these
checks catch what would break the build or the chart before anyone runs `docker build`:
every path the Dockerfile copies from the context exists and is not dropped by .dockerignore
(with `COPY . .`: every workspace member, the manifests and the migrations), the binary it
builds and installs is the `rocemesh` binary of the workspace, the builder installs what the
build scripts say they need, builder and runtime are the same Debian release (glibc), the
runtime has the verbs packages, and the image's user and ports are the ones the chart uses.
It also checks the image's binary is built without debug info, and that the dependencies are
built in a layer of their own on the stub workspace of scripts/docker-skeleton.sh, which is
run here, outside Docker, and compared with the real workspace by `cargo metadata --locked`.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNTIME_PACKAGES = {"libibverbs1", "ibverbs-providers", "iproute2", "ca-certificates"}
# Build scripts that name the Debian packages they need in a "Needs (Debian): a, b" line.
BUILD_SCRIPTS = ("ebpf/build.rs",)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        word, _, rest = cur.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        cur = ""
    return out


def stages(instrs: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Instructions split at each FROM (the FROM opens its stage)."""
    out: list[list[tuple[str, str]]] = []
    for ins in instrs:
        if ins[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def ignore_regex(pattern: str) -> re.Pattern:
    """A .dockerignore pattern (Go filepath.Match plus `**`) as a regex on context paths."""
    pattern = pattern.strip("/")
    rx = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            rx, i = rx + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            rx, i = rx + ".*", i + 2
        elif pattern[i] == "*":
            rx, i = rx + "[^/]*", i + 1
        elif pattern[i] == "?":
            rx, i = rx + "[^/]", i + 1
        else:
            rx, i = rx + re.escape(pattern[i]), i + 1
    return re.compile(rx + r"\Z")


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore drops `path` (a path or any of its parents matching; last rule wins)."""
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    out = False
    for pat in patterns:
        negate = pat.startswith("!")
        rx = ignore_regex(pat[1:] if negate else pat)
        if any(rx.match(c) for c in candidates):
            out = not negate
    return out


def dockerignore_patterns() -> list[str]:
    """The non-comment lines of .dockerignore."""
    path = REPO / ".dockerignore"
    if not path.exists():
        return []
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def apt_packages(run_args: str) -> set[str]:
    """Package names of the `apt-get install` in a RUN line."""
    words = shlex.split(run_args.replace("&&", " && "))
    out: set[str] = set()
    for i, w in enumerate(words):
        if w == "install" and i and words[i - 1] == "apt-get":
            for pkg in words[i + 1:]:
                if pkg in ("&&", ";"):
                    break
                if not pkg.startswith("-"):
                    out.add(pkg)
    return out


def binary_targets() -> dict[str, str]:
    """Binary name -> package name for every workspace member that has one."""
    members = tomllib.loads((REPO / "Cargo.toml").read_text())["workspace"]["members"]
    out = {}
    for m in members:
        manifest = tomllib.loads((REPO / m / "Cargo.toml").read_text())
        pkg = manifest["package"]["name"]
        for b in manifest.get("bin", []):
            out[b["name"]] = pkg
        if (REPO / m / "src" / "main.rs").exists() and not manifest.get("bin"):
            out[pkg] = pkg
    return out


def system_deps(what: str) -> set[str]:
    """The packages scripts/system-deps.sh installs for `what` (its `build=(...)` array)."""
    m = re.search(rf"^{what}=\(([^)]*)\)", (REPO / "scripts/system-deps.sh").read_text(), re.M)
    return set(m.group(1).split()) if m else set()


def env_of_stage(stage: list[tuple[str, str]]) -> dict[str, str]:
    """The `ENV K=V ...` settings of a stage."""
    return dict(w.split("=", 1) for word, a in stage if word == "ENV" for w in shlex.split(a) if "=" in w)


def layer_problems(builder: list[tuple[str, str]], skeleton: list[tuple[str, str]] | None) -> list[str]:
    """The binary has no debug info, and the dependencies build in a layer of their own: a
    cargo build on the skeleton stage's stubs before the sources are copied."""
    p = []
    env = env_of_stage(builder)
    if env.get("CARGO_PROFILE_RELEASE_STRIP") not in ("debuginfo", "symbols", "true"):
        p.append("the builder does not set CARGO_PROFILE_RELEASE_STRIP (debug info would ship in the image)")
    if env.get("CARGO_PROFILE_RELEASE_DEBUG") not in ("false", "0", "none"):
        p.append("the builder compiles debug info (CARGO_PROFILE_RELEASE_DEBUG) only to strip it")
    if skeleton is None or not any(w == "RUN" and "scripts/docker-skeleton.sh" in a for w, a in skeleton):
        p.append("no `skeleton` stage running scripts/docker-skeleton.sh")
    steps = [(w, a) for w, a in builder if w in ("COPY", "RUN")]
    def first(pred) -> int:
        return next((i for i, (w, a) in enumerate(steps) if pred(w, a)), len(steps))
    sk = first(lambda w, a: w == "COPY" and "--from=skeleton" in a)
    deps = first(lambda w, a: w == "RUN" and "cargo build" in a)
    sources = first(lambda w, a: w == "COPY" and shlex.split(a)[:1] == ["."])
    if not sk < deps < sources:
        p.append("the builder does not build the skeleton's dependencies before copying the sources")
    elif not any(w == "RUN" and "touch" in a and "cargo build" in a for w, a in steps[sources:]):
        p.append("the sources are not touched before the final build (stubs newer than them would be kept)")
    return p


def targets(manifest: Path) -> tuple[set[tuple[str, str, str]], dict]:
    """(package, kind, name) of every target of the workspace at `manifest`, via `cargo
    metadata --locked` (which fails if the manifests no longer fit Cargo.lock). Not offline:
    metadata reads the manifests of every platform's dependencies, and a fresh machine's build
    has fetched only its own platform's."""
    r = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--manifest-path", str(manifest)],
        capture_output=True, text=True,
    )
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    meta = json.loads(r.stdout)
    members = set(meta["workspace_members"])
    out = {(p["name"], ",".join(t["kind"]), t["name"]) for p in meta["packages"] if p["id"] in members for t in p["targets"]}
    return out, meta


def skeleton_problems() -> list[str]:
    """Runs scripts/docker-skeleton.sh, then `cargo metadata --locked` on the skeleton: it is a
    workspace with every target of the real one (each a stub) and resolves to the same
    Cargo.lock, so the Dockerfile's dependency build sees the real dependency graph. (Not built
    here: in a shared target directory the stubs would replace the members' artifacts.)"""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "skeleton"
        r = subprocess.run(["bash", str(REPO / "scripts/docker-skeleton.sh"), str(out)], capture_output=True, text=True)
        if r.returncode != 0:
            return [f"scripts/docker-skeleton.sh failed: {r.stderr[-2000:]}"]
        try:
            real, _ = targets(REPO / "Cargo.toml")
            stub, _ = targets(out / "Cargo.toml")
        except RuntimeError as e:
            return [f"cargo metadata --locked: {e}"]
        p = [f"target {t} missing from the skeleton" for t in sorted(real - stub)]
        if (out / "Cargo.lock").read_bytes() != (REPO / "Cargo.lock").read_bytes():
            p.append("the skeleton's Cargo.lock differs from the repository's")
        sources = list(out.rglob("*.rs"))
        if not sources or any(f.read_text() != "fn main() {}\n" for f in sources):
            p.append("the skeleton holds real sources (its layer would not be cached)")
    return p


def problems(server_uid: int, server_port: int, metrics_port: int) -> list[str]:
    """Everything wrong with Dockerfile + .dockerignore, given what the chart expects."""
    p: list[str] = []
    text = (REPO / "Dockerfile").read_text()
    st = stages(instructions(text))
    if len(st) < 2:
        return [f"{len(st)} stage(s): wanted a builder and a runtime stage"]
    patterns = dockerignore_patterns()
    named = {stage[0][1].split()[-1].lower(): stage for stage in st if " as " in stage[0][1].lower()}
    builder, runtime = named.get("builder", st[0]), st[-1]
    builder_from = builder[0][1].split()[0]
    if not re.fullmatch(r"rust:1\.95-bookworm", builder_from):
        p.append(f"builder FROM {builder_from}: wanted rust:1.95-bookworm (the runtime's glibc)")
    if runtime[0][1].split()[0] != "debian:bookworm-slim":
        p.append(f"runtime FROM {runtime[0][1]}: wanted debian:bookworm-slim")
    # Context paths copied into the builder.
    members = tomllib.loads((REPO / "Cargo.toml").read_text())["workspace"]["members"]
    needed = ["Cargo.toml", "Cargo.lock", "migrations", *members]
    for word, args in builder:
        if word != "COPY" or "--from=" in args:
            continue
        *sources, _dest = shlex.split(args)
        for src in sources:
            if not (REPO / src).exists():
                p.append(f"COPY {src}: no such path in the repository")
            elif src != "." and ignored(src, patterns):
                p.append(f"COPY {src}: dropped by .dockerignore")
        copied_all = "." in sources
        for path in needed:
            covered = copied_all or any(path == s.rstrip("/") or path.startswith(s.rstrip("/") + "/") for s in sources)
            if covered and ignored(path, patterns):
                p.append(f"{path} is needed by the build but .dockerignore drops it")
    copies = [shlex.split(a) for w, a in builder if w == "COPY" and "--from=" not in a]
    copied = {s.rstrip("/") for c in copies for s in c[:-1]}
    if "." not in copied:
        for path in needed:
            if path not in copied:
                p.append(f"{path} (workspace) is not copied into the builder")
    # The binary: built, installed and run under the workspace's name.
    bins = binary_targets()
    builds = [a for w, a in builder if w == "RUN" and "cargo build" in a]
    if not builds:
        p.append("the builder runs no cargo build")
    for b in builds:
        if "--locked" not in b or "--release" not in b:
            p.append("cargo build without --release --locked")
        m = re.search(r"-p\s+(\S+)", b)
        if not m or m.group(1) != bins.get("rocemesh"):
            p.append(f"cargo build -p {m.group(1) if m else '?'}: the rocemesh binary is in package {bins.get('rocemesh')}")
    if builds and "target/release/rocemesh" not in builds[-1]:
        p.append("the builder's last build does not take target/release/rocemesh")
    p += layer_problems(builder, named.get("skeleton"))
    rt_copy = [shlex.split(a) for w, a in runtime if w == "COPY"]
    if not any(c[-1] == "/usr/local/bin/rocemesh" and c[0].startswith("--from=") for c in rt_copy):
        p.append("the runtime stage does not copy the binary to /usr/local/bin/rocemesh")
    entry = [a for w, a in runtime if w == "ENTRYPOINT"]
    if entry != ['["/usr/local/bin/rocemesh"]']:
        p.append(f"ENTRYPOINT {entry}: wanted [\"/usr/local/bin/rocemesh\"] (the chart passes the subcommand as args)")
    # Packages.
    builder_pkgs = set().union(*[apt_packages(a) for w, a in builder if w == "RUN"])
    if any(w == "RUN" and "system-deps.sh build" in a for w, a in builder):
        builder_pkgs |= system_deps("build")
    for script in BUILD_SCRIPTS:
        m = re.search(r"Needs \(Debian\): ([^.\n]+)", (REPO / script).read_text())
        wanted = {x.strip() for x in m.group(1).split(",")} if m else set()
        if not m:
            p.append(f"{script} no longer says what it needs (\"Needs (Debian): ...\")")
        if wanted - builder_pkgs:
            p.append(f"builder lacks {sorted(wanted - builder_pkgs)} that {script} needs")
    runtime_pkgs = set().union(*[apt_packages(a) for w, a in runtime if w == "RUN"])
    if RUNTIME_PACKAGES - runtime_pkgs:
        p.append(f"runtime lacks {sorted(RUNTIME_PACKAGES - runtime_pkgs)}")
    # User and ports as the chart uses them.
    user = [a for w, a in runtime if w == "USER"]
    if not user or user[-1].split(":")[0] != str(server_uid):
        p.append(f"USER {user}: the chart runs the server as uid {server_uid}")
    exposed = {int(x.split("/")[0]) for w, a in runtime if w == "EXPOSE" for x in a.split()}
    if {server_port, metrics_port} - exposed:
        p.append(f"EXPOSE {sorted(exposed)}: the chart uses {server_port} and {metrics_port}")
    return p


def run(report, rendered) -> None:
    """Adds the Dockerfile checks (and a self-test of the .dockerignore matcher) to `report`."""
    dep = rendered.one("Deployment", "-server")
    uid = dep["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    report.check("Dockerfile: copies, binary, packages, user and ports fit the workspace and the chart",
                 lambda: problems(uid, rendered.values["server"]["port"], rendered.values["agent"]["metrics"]["port"]))

    report.check("Dockerfile: the dependency layer's skeleton has every target and the locked dependencies (outside Docker)",
                 skeleton_problems)

    def matcher() -> list[str]:
        cases = [
            ("target", ["target"], True),
            ("target/release/rocemesh", ["target"], True),
            ("agent/src/x.db", ["**/*.db"], True),
            ("rocemesh.db", ["**/*.db"], True),
            ("agent/src/lib.rs", ["**/*.db", "target"], False),
            ("docs/a.md", ["docs", "!docs/a.md"], False),
            ("store", ["st?re"], True),
        ]
        return [f"ignored({path!r}, {pats}) != {want}" for path, pats, want in cases if ignored(path, pats) != want]

    report.check("Dockerfile: the .dockerignore matcher follows Docker's rules", matcher)
