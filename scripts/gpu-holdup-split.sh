#!/usr/bin/env bash
# Split the intermittent hold-up of default-thread conformance runs on a GPU (docs/known-gaps.md:
# a CUDA test's own call held up until its gate kernel's 20 s timeout) into its halves, in one
# device call: RUNS times each, the CUDA tests alone with the harness's default threads (only
# CUDA tests, which run one at a time, so nothing else reaches the GPU), then the whole suite
# with default threads (host tests beside them), then the whole suite with one thread. A half
# that never fails rules its side out. Prints per run: rc, seconds, the first failing test.
#
# Bundle: KEEP="conformance" bash scripts/gpu-bundle2.sh (carried as .gpu/).
#   RUNS=3 bash scripts/gpu-holdup-split.sh
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}; mkdir -p "$out"
export CUEFLOW_REQUIRE_CUDA=1 NCCL_NVLS_ENABLE=0
runs=${RUNS:-3}
one() {
  local name=$1; shift
  local s; s=$(date +%s)
  timeout 300 .gpu/conformance "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local first; first=$(grep -m1 "FAILED$" "$out/$name.log" | sed 's/^test //; s/ \.\.\. FAILED$//')
  echo "$name rc=$rc $(( $(date +%s) - s ))s first_failure=${first:-none}"
}
for r in $(seq "$runs"); do
  one "cuda_alone_$r" cuda::
  one "whole_default_$r"
  one "whole_one_thread_$r" --test-threads=1
done
