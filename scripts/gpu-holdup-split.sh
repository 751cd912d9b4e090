#!/usr/bin/env bash
# Split the intermittent hold-up of default-thread conformance runs on a GPU (docs/known-gaps.md:
# a CUDA test's own call held up until its gate kernel's 20 s timeout) into its halves, in one
# device call: the CUDA tests alone with the harness's default threads (only CUDA tests, which
# run one at a time, so nothing else reaches the GPU), then the whole suite with default threads
# (host tests beside them), then the whole suite with one thread, in turn until BUDGET seconds
# are spent. A half that never fails rules its side out. Runs with CUEFLOW_CUDA_DEBUG=1, so a
# driver call that waited half a second or more is noted with its thread (the test's name) and
# a backtrace (bundle with symbols: STRIP_DEBUG_ONLY=1). Prints per run: rc, seconds, the first
# failing test, and the waited calls noted (but rl4's own 0.6 s stream synchronize); keeps
# the logs of failed runs only.
#
# Bundle: KEEP="conformance" bash scripts/gpu-bundle2.sh (carried as .gpu/).
#   BUDGET=520 ORDER="whole_default cuda_alone whole_one_thread" bash scripts/gpu-holdup-split.sh
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}; mkdir -p "$out"
export CUEFLOW_REQUIRE_CUDA=1 NCCL_NVLS_ENABLE=0 CUEFLOW_CUDA_DEBUG=1
budget=${BUDGET:-520}
order=${ORDER:-"cuda_alone whole_default whole_one_thread"}
t0=$(date +%s)
one() {
  local name=$1; shift
  local s; s=$(date +%s)
  timeout 300 .gpu/conformance "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local first; first=$(grep -m1 "FAILED$" "$out/$name.log" | sed 's/^test //; s/ \.\.\. FAILED$//')
  echo "$name rc=$rc $(( $(date +%s) - s ))s first_failure=${first:-none}"
  grep "^cueflow cuda: cu.* took " "$out/$name.log" | grep -v "cuStreamSynchronize on thread \"cuda::rl4_" | head -20
  # Only a failed run's log comes back (a device call returns a limited number of files).
  [ "$rc" = 0 ] && rm -f "$out/$name.log"
}
r=0
while [ $(( $(date +%s) - t0 )) -lt "$budget" ]; do
  r=$((r + 1))
  for half in $order; do
    [ $(( $(date +%s) - t0 )) -lt "$budget" ] || break
    case $half in
      cuda_alone) one "cuda_alone_$r" cuda:: ;;
      whole_default) one "whole_default_$r" ;;
      whole_one_thread) one "whole_one_thread_$r" --test-threads=1 ;;
    esac
  done
done
