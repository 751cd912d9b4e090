#!/usr/bin/env bash
# The program fuzzer (crates/cueflow/tests/fuzz.rs) at length: random programs of streams,
# events, copies, kernels, host functions, captures and frees on the host backend under the
# sanitizer and automatic ordering, checked against a sequential model. Runs batches of
# PROPTEST_CASES cases per ordering (fresh random seeds each batch) until MINUTES have passed;
# a failure is shrunk, saved in tests/fuzz.proptest-regressions (commit it with the fix), and
# stops the run.
#
#   bash scripts/fuzz.sh [MINUTES] [CASES_PER_BATCH]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-30}"
export PROPTEST_CASES="${2:-20000}"
cargo test -p cueflow --release --test fuzz --no-run
end=$(($(date +%s) + minutes * 60))
batch=0
while [ "$(date +%s)" -lt "$end" ]; do
  batch=$((batch + 1))
  start=$(date +%s)
  cargo test -p cueflow --release --test fuzz -q 2>&1 | tail -n 40 > /tmp/cueflow-fuzz-last.log || {
    cat /tmp/cueflow-fuzz-last.log
    echo "fuzz: batch $batch failed (see crates/cueflow/tests/fuzz.proptest-regressions)"
    exit 1
  }
  echo "fuzz: batch $batch clean: 3 x $PROPTEST_CASES programs in $(($(date +%s) - start)) s"
done
echo "fuzz: $batch batches clean in $minutes min"
