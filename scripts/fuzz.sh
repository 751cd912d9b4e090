#!/usr/bin/env bash
# The program fuzzer (crates/cueflow/tests/fuzz/) at length: random programs of streams,
# events, copies of every memory kind, built-in and CUDA C kernels, host functions and host
# tasks, pools, captures, graphs built node by node (every node kind, conditional nodes, graph
# memory), and two-device programs with collectives, on the host backend under the sanitizer
# and automatic ordering, checked against a sequential model. Runs batches of PROPTEST_CASES
# cases per ordering (fresh random seeds each batch) until MINUTES have passed, and counts the
# programs; a failure is shrunk, saved in tests/fuzz.proptest-regressions (commit it with its
# test in tests/fuzz_found/), and stops the run.
#
#   bash scripts/fuzz.sh [MINUTES] [CASES_PER_BATCH]
#
# FUZZ_KNOWN=1,12,… (or all) also generates the patterns of known defects (tests/fuzz/known.rs);
# FUZZ_STATS=1 prints what the programs did.
#
#   bash scripts/fuzz.sh --bundle-differential
#
# builds the differential mode (tests/differential_fuzz.rs: the same programs on the host
# backend and a GPU, bytes compared) and copies its test binary, stripped, to
# .gpu/differential_fuzz (the folder a GPU run carries); on the GPU machine:
#   FUZZ_PROGRAMS=10000 FUZZ_SEED=1 FUZZ_SECONDS=540 .gpu/differential_fuzz --nocapture --test-threads=1
set -euo pipefail
cd "$(dirname "$0")/.."
# The path of test target $1's executable, built in release.
test_binary() {
  cargo test -p cueflow --release --test "$1" --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$1"
}
if [ "${1:-}" = "--bundle-differential" ]; then
  mkdir -p .gpu
  cp "$(test_binary differential_fuzz)" .gpu/differential_fuzz
  strip .gpu/differential_fuzz 2>/dev/null || true
  ls -la .gpu/differential_fuzz
  exit 0
fi
minutes="${1:-30}"
export PROPTEST_CASES="${2:-2000}"
# Built once and run directly, so that editing the sources meanwhile does not change the run.
bin=$(test_binary fuzz)
# A copy, so that a rebuild meanwhile (another cargo command) does not change the run.
cp "$bin" "${bin}.fuzzing" && bin="${bin}.fuzzing"
log=$(mktemp /tmp/cueflow-fuzz.XXXXXX)
end=$(($(date +%s) + minutes * 60))
start_all=$(date +%s)
batch=0
programs=0
while [ "$(date +%s)" -lt "$end" ]; do
  batch=$((batch + 1))
  start=$(date +%s)
  if ! (cd crates/cueflow && "$bin" -q) > "$log" 2>&1; then
    grep -v "sanitizer: lint" "$log" | tail -n 60
    grep -E "^thread .* panicked|^Test failed" "$log" | cut -c1-600 || true
    cp "$log" /tmp/cueflow-fuzz-failed.log
    echo "fuzz: the whole output is in /tmp/cueflow-fuzz-failed.log"
    echo "fuzz: batch $batch failed after $programs programs clean (see crates/cueflow/tests/fuzz.proptest-regressions)"
    exit 1
  fi
  # Three orderings with one device (PROPTEST_CASES each), three with two (half as many).
  programs=$((programs + 3 * PROPTEST_CASES + 3 * (PROPTEST_CASES / 2)))
  echo "fuzz: batch $batch clean in $(($(date +%s) - start)) s; $programs programs so far"
done
echo "fuzz: $batch batches, $programs programs clean in $((($(date +%s) - start_all) / 60)) min"
