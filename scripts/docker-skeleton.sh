#!/usr/bin/env bash
# Writes to OUT the workspace as cargo needs it to build the dependencies only: the root
# manifest, Cargo.lock, every member's Cargo.toml, and a stub `fn main() {}` at the path of
# every target (libraries, binaries, build scripts, tests, benches). The Dockerfile builds
# this skeleton before copying the sources, so its dependency layer is rebuilt only when a
# manifest or the lock file changes (the cargo-chef idea, with cargo alone).
#
#   scripts/docker-skeleton.sh OUT
set -euo pipefail
out=${1:?usage: $0 OUT}
cd "$(dirname "$0")/.."
mkdir -p "$out"
cp Cargo.toml Cargo.lock "$out/"
# `--no-deps` reads the workspace's own manifests only: no registry, no network.
meta=$(cargo metadata --format-version 1 --no-deps)
root=$PWD/
grep -o '"manifest_path":"[^"]*"' <<<"$meta" | cut -d'"' -f4 | while read -r manifest; do
  rel=${manifest#"$root"}
  mkdir -p "$out/$(dirname "$rel")"
  cp "$manifest" "$out/$rel"
done
grep -o '"src_path":"[^"]*"' <<<"$meta" | cut -d'"' -f4 | while read -r src; do
  rel=${src#"$root"}
  mkdir -p "$out/$(dirname "$rel")"
  echo 'fn main() {}' >"$out/$rel"
done
