#!/usr/bin/env bash
# The full rocemesh test suite on a fresh Debian machine with Rust.
# Installs the system packages it needs, starts a throwaway PostgreSQL (so every storage
# test runs against both SQLite and PostgreSQL), runs every test, and cleans up.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- system packages -------------------------------------------------------------
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v sysctl >/dev/null 2>&1 || need+=(procps)
command -v faketime >/dev/null 2>&1 || need+=(faketime) # self_fault_clock: clock steps
command -v clang >/dev/null 2>&1 || need+=(clang)
[ -e /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
[ -e /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev rdma-core ibverbs-providers)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v promtool >/dev/null 2>&1 || need+=(prometheus) # metrics: promtool check metrics
if [ ${#need[@]} -gt 0 ]; then
  echo "test.sh: installing ${need[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >/dev/null
fi

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
cargo check --workspace --locked --benches
# The localization suite (root) measures seconds-scale detection: run it on a release build.
cargo build --release --locked -p rocemesh
export ROCEMESH_EVAL_BIN="$PWD/target/release/rocemesh"
log="$pgdir/cargo-test.log"
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# Helm chart + Dockerfile: real Helm engine, Kubernetes schemas, the release binary run with
# the rendered config; its `test result:` line joins the tally below.
bash scripts/check_helm.sh 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
# Fuzzing (docs/fuzzing.md): every target's corpus replayed (a `test result:` line), then
# the wire/config/JSON targets 5 s each coverage-guided; longer runs: scripts/fuzz.sh 600.
bash scripts/fuzz.sh 5 packet batch paths ebpf_events agent_config api_json 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
set -e
# Artifacts the tests keep (the dashboard screenshot taken during an injected fault).
for f in target/test-artifacts/*; do [ -e "$f" ] && echo "test.sh: artifact $PWD/$f"; done
# One closing line for the whole run (cargo prints one per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit "$status"
