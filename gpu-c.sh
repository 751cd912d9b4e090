#!/usr/bin/env bash
set -u
export CUEFLOW_REQUIRE_CUDA=1 NCCL_NVLS_ENABLE=0
bash tools/driver-call-count/build.sh /tmp/cc >/dev/null 2>&1 && echo "counting driver built"
for b in base bin; do
  echo "== $b: driver calls per loop (count mode)"
  LD_LIBRARY_PATH=/tmp/cc:${LD_LIBRARY_PATH:-} .gpu/$b/percall_profile count 1 2000 2>&1 | grep "COUNTS cueflow" | cut -c1-300 | head -8
done
RUNS=${RUNS:-4} bash scripts/gpu-percall-check.sh 2>&1 | tail -12
