#!/usr/bin/env bash
# Builds rocemesh the way a fresh Debian 12 machine with only Rust would, so a build step that
# needs a system package nobody installs cannot slip in unnoticed (the development and CI
# machines have everything installed, which hides such a gap).
#
# How: a debootstrap'd bookworm minbase chroot (no compiler, no headers: what a fresh machine
# has besides Rust), this machine's Rust toolchain and cargo registry bind-mounted read-only,
# the repository read-only. Inside: first, with only gcc installed, the ebpf build must stop
# with a message naming clang, libibverbs-dev and libbpf-dev (not a panic); then
# `scripts/system-deps.sh build` installs its list and `cargo check --locked --offline` checks
# every package with a build script among the rocemesh binary's dependencies, which compiles
# and runs those build scripts (linked by the chroot's cc) and the ones of their build and
# proc-macro dependencies. Packages without a build script are left out: they cannot ask the
# system for anything, and checking all 300+ crates and the workspace would cost CI several
# more minutes for no more coverage. Not covered: libraries only named for the final link
# (none today: libibverbs is loaded at run time, SQLite is bundled) and dev-only dependencies.
# Cost: 3.2 min of CPU (user) plus the downloads (debootstrap ~40 s, apt ~30 s on an idle
# machine; 24 min wall on the shared development machine at load 15).
#
#   scripts/fresh_build_check.sh        (root, or sudo; needs a Debian mirror: DEBIAN_MIRROR)
#
# Prints a cargo-style `test result:` line; exit 1 when the fresh build fails.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

if [ "$(id -u)" != 0 ]; then exec sudo --preserve-env=PATH,RUSTUP_HOME,CARGO_HOME,DEBIAN_MIRROR bash "$0" "$@"; fi
command -v debootstrap >/dev/null 2>&1 || {
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
}

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
sysroot=$(rustc --print sysroot)
registry=${CARGO_HOME:-$HOME/.cargo}/registry
host=$(rustc -vV | sed -n 's/^host: //p')
# Every locked crate into the registry: the chroot reads it offline (only apt uses the network).
cargo fetch --locked >/dev/null
# The packages with a build script among the rocemesh binary's dependencies on this platform
# (normal edges, as `cargo tree` lists them), as name@version: the dependencies in one list,
# the workspace members in another (`cargo check -p` resolves from the members it is given,
# else from the default member, rocemesh). Build-only and proc-macro dependencies are not
# named (cargo cannot select a host-only package for the target), but checking the others
# compiles them and runs their build scripts too.
built=$(cargo tree --locked --offline -e normal,no-proc-macro --target "$host" \
  --prefix none --format '{p}' | awk '{ print $1 "@" substr($2, 2) }' | sort -u)
lists=$(cargo metadata --format-version 1 --locked --offline --filter-platform "$host" |
  BUILT=$built python3 -c '
import json, os, sys
m = json.load(sys.stdin)
built = set(os.environ["BUILT"].split())
deps, members = [], []
for p in m["packages"]:
    spec = p["name"] + "@" + p["version"]
    if spec in built and any("custom-build" in t["kind"] for t in p["targets"]):
        (members if p["id"] in m["workspace_members"] else deps).append(spec)
print(" ".join(deps))
print(" ".join(members))')
read -r -a deps <<<"$(sed -n 1p <<<"$lists")"
read -r -a members <<<"$(sed -n 2p <<<"$lists")"

root=$(mktemp -d "${TMPDIR:-/var/tmp}/rocemesh-fresh.XXXXXX")
chmod 755 "$root" # the chroot's /: apt drops to user _apt
cleanup() { rm -rf --one-file-system "$root"; }
trap cleanup EXIT
t0=$SECONDS
echo "fresh_build_check: debootstrap bookworm minbase from $mirror"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
  tail -20 "$root.log"; rm -f "$root.log"; echo "test result: FAILED. 0 passed; 1 failed; 0 ignored"; exit 1; }
rm -f "$root.log"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/opt/rust" "$root/opt/cargo/registry" "$root/src" "$root/build"
echo "fresh_build_check: chroot ready in $((SECONDS - t0)) s; installing, then checking the" \
  "${#deps[@]} dependencies and ${#members[@]} workspace members that have build scripts"

# The steps inside. First the message a fresh machine shows: with a C compiler but without
# clang and the headers, the ebpf build must stop naming every package to install, not panic. Then the
# install step of the scripts and the build.
cat >"$root/build/steps.sh" <<'STEPS'
cd /src
check() { cargo check --locked --offline --target-dir /build/target "$@"; }
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
if check -p rocemesh-ebpf >/build/bare.log 2>&1; then
  echo "fresh_build_check: rocemesh-ebpf built without <infiniband/verbs.h>?"; exit 1
fi
wanted='install the Debian packages clang libibverbs-dev libbpf-dev'
if ! grep -q "$wanted" /build/bare.log || grep -q panicked /build/bare.log; then
  cat /build/bare.log
  echo "fresh_build_check: the ebpf build did not say \"$wanted\" (above)"; exit 1
fi
echo "fresh_build_check: without clang and headers the ebpf build says: $(grep -m1 "$wanted" /build/bare.log)"
bash scripts/system-deps.sh build
# Arguments: the dependencies, `--`, the workspace members (see above).
deps=() members=() into=deps
for a in "$@"; do
  if [ "$a" = -- ]; then into=members; elif [ $into = deps ]; then deps+=(-p "$a"); else members+=(-p "$a"); fi
done
check "${deps[@]}"
check "${members[@]}"
STEPS

# A private mount namespace: every mount below disappears with it, whatever happens.
set +e
unshare --mount --propagation private bash -euo pipefail -c '
  root=$1 sysroot=$2 registry=$3 repo=$4; shift 4
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --bind -o ro "$sysroot" "$root/opt/rust"
  mount --bind -o ro "$registry" "$root/opt/cargo/registry"
  mount --bind -o ro "$repo" "$root/src"
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb CARGO_HOME=/opt/cargo \
    PATH=/opt/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -euo pipefail /build/steps.sh "$@"
' fresh-build "$root" "$sysroot" "$registry" "$repo" "${deps[@]}" -- "${members[@]}"
status=$?
set -e
echo "fresh_build_check: $((SECONDS - t0)) s in all"
if [ "$status" = 0 ]; then
  echo "test result: ok. 1 passed; 0 failed; 0 ignored (fresh Debian 12 build)"
else
  echo "test result: FAILED. 0 passed; 1 failed; 0 ignored (fresh Debian 12 build)"
fi
exit "$status"
