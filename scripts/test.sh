#!/usr/bin/env bash
# The full rocemesh test suite on a fresh Debian machine with Rust.
# Installs the system packages it needs, starts a throwaway PostgreSQL (so every storage
# test runs against both SQLite and PostgreSQL), runs every test, and cleans up.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- system packages (the list and why: scripts/system-deps.sh) -------------------
bash scripts/system-deps.sh test

# --- throwaway PostgreSQL --------------------------------------------------------
pgbin=$(dirname "$(ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n1)")
pgdir=$(mktemp -d /tmp/rocemesh-pg.XXXXXX)
pgport=$(( 40000 + RANDOM % 20000 ))
run_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$pgdir"
cleanup() {
  run_pg "$pgbin/pg_ctl -D $pgdir/data -m immediate stop" >/dev/null 2>&1 || true
  rm -rf "$pgdir"
}
trap cleanup EXIT
run_pg "$pgbin/initdb -A trust -U postgres -D $pgdir/data" >/dev/null
run_pg "$pgbin/pg_ctl -D $pgdir/data -l $pgdir/log -w -o '-p $pgport -k $pgdir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300' start" >/dev/null
export ROCEMESH_TEST_PG_URL="postgres://postgres@127.0.0.1:$pgport/postgres"
echo "test.sh: PostgreSQL on port $pgport"

# --- tests -----------------------------------------------------------------------
# A fresh build: incremental caches would only cost disk (gigabytes) and time.
export CARGO_INCREMENTAL=0
disk() { echo "test.sh: disk $1: $(df -h --output=avail . | tail -n1 | tr -d ' ') free, target $(du -sh target 2>/dev/null | cut -f1)"; }
disk start
# Style and lints first (the workspace lints of Cargo.toml, warnings as errors): a
# formatting slip or a lint fails here in minutes, not after the whole suite. Clippy also
# type-checks every target, benches included.
command -v rustfmt >/dev/null && cargo clippy --version >/dev/null 2>&1 ||
  rustup component add rustfmt clippy
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The localization suite (root) measures seconds-scale detection: run it on a release build
# (the lab binary, whose labs run agents from the `rocemesh` binary beside it).
cargo build --release --locked -p rocemesh -p rocemesh-lab
export ROCEMESH_EVAL_BIN="$PWD/target/release/rocemesh-lab"
log="$pgdir/cargo-test.log"
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# The product binary (and its image) links neither the namespace testbed nor the simulator:
# they belong to the lab binary. A `test result:` line joins the tally below.
tree=$(cargo tree --locked -p rocemesh -e normal,build --prefix none) || tree="cargo tree failed"
lab_deps=$(grep -E '^(rocemesh-(testbed|sim|lab) |cargo tree failed)' <<<"$tree" | sort -u || true)
if [ -n "$lab_deps" ]; then
  echo "test.sh: the rocemesh binary depends on lab crates:"; echo "$lab_deps"
  echo "test result: FAILED. 0 passed; 1 failed; 0 ignored" | tee -a "$log"; status=1
else
  echo "test result: ok. 1 passed; 0 failed; 0 ignored (rocemesh links no lab crate)" | tee -a "$log"
fi
# Helm chart + Dockerfile: real Helm engine, Kubernetes schemas, the release binary run with
# the rendered config; its `test result:` line joins the tally below.
bash scripts/check_helm.sh 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
# The build on a fresh Debian 12 machine (a clean chroot): the package list of
# scripts/system-deps.sh is complete and a missing header is a clear message.
bash scripts/fresh_build_check.sh 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
# Fuzzing (docs/fuzzing.md): every target's corpus replayed (a `test result:` line), then
# the wire/config/JSON targets 5 s each coverage-guided; longer runs: scripts/fuzz.sh 600.
bash scripts/fuzz.sh 5 packet batch paths ebpf_events agent_config api_json 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
set -e
disk end
# Artifacts the tests keep (the dashboard screenshot taken during an injected fault).
for f in target/test-artifacts/*; do [ -e "$f" ] && echo "test.sh: artifact $PWD/$f"; done
# One closing line for the whole run (cargo prints one per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit "$status"
