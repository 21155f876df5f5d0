#!/usr/bin/env bash
# The README's main command on a fresh Debian machine with Rust: installs the system packages
# the build and the demo need, builds the release binary as the calling user, then runs
# `rocemesh-lab demo ARGS...` as root (through sudo when not root: the demo builds network
# namespaces). With `--loopback` the demo needs no root and runs as the caller.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "demo.sh: cargo not found. Run this script as the user who installed Rust (not under" \
    "sudo: it uses sudo itself where root is needed), or install Rust 1.95 (rustup.rs)." >&2
  exit 1
fi
bash scripts/system-deps.sh demo
# The demo is a command of the lab binary; its agents run from the product binary beside it.
cargo build --release --locked -p rocemesh -p rocemesh-lab
bin=$PWD/target/release/rocemesh-lab
if [ "$(id -u)" = 0 ] || [[ " $* " == *" --loopback "* ]]; then
  exec "$bin" demo "$@"
fi
exec sudo "$bin" demo "$@"
