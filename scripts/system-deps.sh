#!/usr/bin/env bash
# Installs the Debian packages rocemesh needs that are missing, with apt-get (through sudo
# when not root). The one argument says what for; each set includes the one before:
#   build  compile the workspace: gcc + libc6-dev (rustc links through cc; ring and
#          libsqlite3-sys compile C), clang + libbpf-dev (ebpf/build.rs compiles the BPF
#          object), libibverbs-dev (ebpf/build.rs reads struct offsets from <infiniband/verbs.h>);
#   demo   run `rocemesh-lab demo`: iproute2 (ip netns, tc), nftables (fault injection), procps (sysctl);
#   test   scripts/test.sh: PostgreSQL, iptables, faketime (clock steps), chromium (dashboard
#          screenshots), rdma-core + ibverbs-providers (libibverbs at run time), g++ (libFuzzer
#          in scripts/fuzz.sh), python3-venv + ca-certificates (check_helm.sh and the kernel
#          benchmarks install pinned packages from PyPI), prometheus (promtool checks both
#          /metrics expositions).
# scripts/fresh_build_check.sh runs `build` in a clean Debian 12 chroot so this list cannot
# fall behind the build.
set -euo pipefail

build=(gcc libc6-dev clang libbpf-dev libibverbs-dev)
demo=("${build[@]}" iproute2 nftables procps)
test=("${demo[@]}" postgresql iptables faketime chromium rdma-core ibverbs-providers g++
  python3 python3-venv ca-certificates prometheus)
# The build and demo sets are lean (no recommended packages); the test set keeps Debian's
# recommendations (chromium's fonts, PostgreSQL's contrib) as a desktop install would.
lean=(--no-install-recommends)
case ${1:-} in
  build) want=("${build[@]}") ;;
  demo) want=("${demo[@]}") ;;
  test) want=("${test[@]}") lean=() ;;
  *) echo "usage: $0 build|demo|test" >&2; exit 2 ;;
esac

need=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps.sh: missing ${need[*]} and no apt-get here: install their equivalents" >&2
  exit 1
fi
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "system-deps.sh: installing ${need[*]} needs root (no sudo here)" >&2; exit 1
  fi
}
echo "system-deps.sh: installing ${need[*]}"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${lean[@]}" "${need[@]}" >/dev/null
