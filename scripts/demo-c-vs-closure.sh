#!/usr/bin/env bash
# The demo pipeline with its kernel as the Rust closure and forced to CUDA C
# (CUEFLOW_HOST_KERNELS=c), alternated, RUNS pairs (issue 30: C within 1.2x of the closure).
# Each line: the kernel stage alone, the serial and concurrent pipelines (medians of the
# demo's own repetitions) and concurrent/serial. Extra arguments go to `cueflow demo`.
#
#   cargo build --release -p cueflow-cli && scripts/demo-c-vs-closure.sh [--size 64]
#   RUNS=5 ITERS=balanced scripts/demo-c-vs-closure.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/cueflow}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for i in $(seq 1 "${RUNS:-5}"); do
  for mode in closure c; do
    if [ "$mode" = c ]; then export CUEFLOW_HOST_KERNELS=c; else unset CUEFLOW_HOST_KERNELS; fi
    out=$("$BIN" demo --iters "${ITERS:-64}" --out "$OUT" "$@" 2>&1)
    kernel=$(echo "$out" | awk '$1 == "kernel" && $3 == "ms" {print $2}')
    serial=$(echo "$out" | awk '$1 == "serial" {print $4}')
    conc=$(echo "$out" | awk '$1 == "concurrent" && $2 ~ /^[0-9]+$/ {print $4}')
    ratio=$(echo "$out" | awk '/^concurrent takes/ {print $3}')
    echo "run $i $mode: kernel $kernel ms, serial $serial ms, concurrent $conc ms, concurrent/serial $ratio"
  done
done
