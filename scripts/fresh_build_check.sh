#!/usr/bin/env bash
# Builds rocemesh the way a fresh Debian 12 machine with only Rust would, so a build step that
# needs a system package nobody installs cannot slip in unnoticed (the development and CI
# machines have everything installed, which hides such a gap).
#
# How: a debootstrap'd bookworm minbase chroot (no compiler, no headers: what a fresh machine
# has besides Rust), this machine's Rust toolchain and cargo registry bind-mounted read-only,
# the repository read-only. Inside, `scripts/system-deps.sh build` installs what it lists,
# then `cargo check --locked --offline` runs every build script of the dependency graph: every
# package that has one is checked, which compiles and runs its build script (linked by the
# chroot's cc) after its build dependencies. Packages without a build script are left out:
# they cannot ask the system for anything at check time, and checking all 300+ crates would
# add several minutes to CI for no more coverage. What this does not cover: libraries only
# named for the final link (none today: libibverbs is loaded at run time, SQLite is bundled).
# Cost on a 2-core machine: about a minute of debootstrap and apt (network) plus the checks.
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
# Every package the build compiles for this platform (normal and build dependencies, as
# `cargo tree` lists them) that has a build script, as name@version. Dev-only dependencies
# are left out: `cargo check -p` cannot select them without building their own tests.
built=$(cargo tree --locked --offline --workspace -e normal,build --target "$host" \
  --prefix none --format '{p}' | awk '{ print $1 "@" substr($2, 2) }' | sort -u)
mapfile -t packages < <(cargo metadata --format-version 1 --locked --offline --filter-platform "$host" |
  BUILT=$built python3 -c '
import json, os, sys
built = set(os.environ["BUILT"].split())
for p in json.load(sys.stdin)["packages"]:
    spec = p["name"] + "@" + p["version"]
    if spec in built and any("custom-build" in t["kind"] for t in p["targets"]):
        print(spec)')

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
echo "fresh_build_check: chroot ready in $((SECONDS - t0)) s; installing and checking ${#packages[@]} packages with build scripts"

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
specs=()
for p in "$@"; do specs+=(-p "$p"); done
check "${specs[@]}"
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
' fresh-build "$root" "$sysroot" "$registry" "$repo" "${packages[@]}"
status=$?
set -e
echo "fresh_build_check: $((SECONDS - t0)) s in all"
if [ "$status" = 0 ]; then
  echo "test result: ok. 1 passed; 0 failed; 0 ignored (fresh Debian 12 build)"
else
  echo "test result: FAILED. 0 passed; 1 failed; 0 ignored (fresh Debian 12 build)"
fi
exit "$status"
