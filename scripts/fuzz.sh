#!/usr/bin/env bash
# Fuzzes every parser of untrusted input (fuzz/, see docs/fuzzing.md) on stable Rust.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s, every target)
#
# 1. installs cargo-fuzz into target/tools (once; cached with the target dir);
# 2. replays every committed corpus input as a plain `cargo test` (fuzz/tests/corpus.rs);
# 3. runs each target coverage-guided with libFuzzer for SECONDS_PER_TARGET. cargo-fuzz
#    builds with `--sanitizer none`: the SanitizerCoverage passes it needs are stable rustc
#    flags, only AddressSanitizer would need nightly (safe Rust needs no ASan for memory
#    safety; overflow checks and debug assertions stay on).
# New inputs go to target/fuzz/corpus/<target> (the committed seeds stay as they are);
# a crash input lands in fuzz/artifacts/<target>/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
shift || true
cargo_fuzz_version=0.13.2
export PATH="$PWD/target/tools/bin:$PATH"
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $cargo_fuzz_version" ]; then
  cargo install cargo-fuzz --locked --version "$cargo_fuzz_version" --root target/tools
fi
fuzz_dir=target/fuzz

# Corpus replay. fuzz/ is its own workspace: its Cargo.lock follows the main one, without
# --locked so a dependency the main workspace just gained does not break the replay.
cargo test --manifest-path fuzz/Cargo.toml --target-dir target

mapfile -t all < <(cargo fuzz list)
targets=("${@:-${all[@]}}")
# The whole-server targets need feature `server` (default); without them the build is small.
features=--no-default-features
for t in "${targets[@]}"; do
  case $t in server_config | server_api | analyzer_ingest) features= ;; esac
done
cargo fuzz build -s none $features --target-dir "$fuzz_dir"

status=0
printf '%-16s %10s %8s %8s %s\n' target runs exec/s new result
for t in "${targets[@]}"; do
  work="$fuzz_dir/corpus/$t"
  mkdir -p "$work"
  log="$fuzz_dir/$t.log"
  if cargo fuzz run -s none $features --target-dir "$fuzz_dir" "$t" "$work" "fuzz/corpus/$t" -- \
      -max_total_time="$secs" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
    result=ok
  else
    result="CRASH (see $log, fuzz/artifacts/$t/)"
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  printf '%-16s %10s %8s %8s %s\n' "$t" "${runs:-?}" "${rate:-?}" "$(ls "$work" | wc -l)" "$result"
done
exit "$status"
