#!/usr/bin/env bash
# The README's main command on a fresh Debian machine with Rust: installs the system packages
# the build and the demo need, builds the release binary as the calling user, then runs
# `rocemesh demo ARGS...` as root (through sudo when not root: the demo builds network
# namespaces). With `--loopback` the demo needs no root and runs as the caller.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/system-deps.sh demo
cargo build --release --locked -p rocemesh
bin=$PWD/target/release/rocemesh
if [ "$(id -u)" = 0 ] || [[ " $* " == *" --loopback "* ]]; then
  exec "$bin" demo "$@"
fi
exec sudo "$bin" demo "$@"
