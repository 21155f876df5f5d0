#!/usr/bin/env bash
# rocemesh's benchmarks in one command: builds the release binaries, runs every section of
# rocemesh-bench (controller scale, 1,000-agent load, agent cost, analyzer, kernels vs the
# Python stack), prints one Markdown table and writes the rows to target/bench.json.
# Extra arguments go to rocemesh-bench, e.g. `scripts/bench.sh --quick` or
# `scripts/bench.sh --only load`. Each row prints its target and, where one is measured in
# the same run, its baseline: `--base-rocemesh <rocemesh binary of another commit>` makes the
# analyzer process rows measure that build's analyzer too, as their baseline.
# Figures and how to read them: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- system packages: the release build (eBPF object, verbs) and the kernels section's venv
need=()
command -v clang >/dev/null 2>&1 || need+=(clang)
[ -e /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
[ -e /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev rdma-core ibverbs-providers)
python3 -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 11)' 2>/dev/null || need+=(python3 python3-venv)
# The agent section's two namespaces: veth GRO (NAPI) is switched on with ethtool.
command -v ethtool >/dev/null 2>&1 || need+=(ethtool)
if [ ${#need[@]} -gt 0 ]; then
  echo "bench.sh: installing ${need[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >/dev/null
fi

# --- build and run ------------------------------------------------------------------
cargo build --release --locked -p rocemesh -p rocemesh-bench
./target/release/rocemesh-bench --rocemesh ./target/release/rocemesh --json target/bench.json "$@"
echo "bench.sh: rows written to target/bench.json"
