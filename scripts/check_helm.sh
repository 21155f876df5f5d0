#!/usr/bin/env bash
# Checks the Helm chart (helm/rocemesh) with real tools from PyPI, kept in a venv under target/:
#   helm-python-sdk      Helm's own Go engine (libhelm_c over the Helm v4 SDK): render + lint
#   kubernetes-validate  the Kubernetes OpenAPI JSON schemas, strict validation
# then helm/tests/check_chart.py checks what the agent and the server need in the rendered
# objects. With a built binary (ROCEMESH_BIN, else target/release or
# target/debug rocemesh) it also runs the server and an agent with the rendered config, args
# and env over 127.0.0.1. Prints a cargo-style `test result:` line; exit 1 on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Python >= 3.11 (tomllib) with venv.
if ! python3 -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 11)' 2>/dev/null; then
  echo "check_helm.sh: installing python3 python3-venv"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq python3 python3-venv >/dev/null
fi

reqs="helm-python-sdk==0.2.2 kubernetes-validate==1.37.0 PyYAML==6.0.3"
venv=target/helm-check/venv
if [ "$(cat "$venv/.requirements" 2>/dev/null)" != "$reqs" ]; then
  echo "check_helm.sh: installing $reqs into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086 # one word per requirement
  "$venv/bin/pip" install --quiet --disable-pip-version-check $reqs
  echo "$reqs" >"$venv/.requirements"
fi

bin=${ROCEMESH_BIN:-}
if [ -z "$bin" ]; then
  for b in target/release/rocemesh target/debug/rocemesh; do
    if [ -x "$b" ]; then bin=$b; break; fi
  done
fi
exec "$venv/bin/python" helm/tests/check_chart.py ${bin:+--binary "$bin"}
