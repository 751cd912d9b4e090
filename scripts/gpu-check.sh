#!/usr/bin/env bash
# The whole GPU check, in one device call: conformance, differential, pipeline and example
# tests on cuda:0, the examples (03_user_kernel at 1 GiB), the demo at 1 GiB, cueflow bench,
# and the raw CUDA C++ references built with nvcc.
# Run from the repository root on the GPU machine after scripts/gpu-bundle.sh built .gpu/.
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
export CUEFLOW_DEVICE=cuda:0
step() { echo; echo "===== $*"; }
for t in ${TESTS:-conformance sanitizer differential misuse cuda_smoke trace smoke pipeline examples}; do
  [ -x ".gpu/$t" ] || continue
  step "test $t"
  ".gpu/$t" --test-threads=1 2>&1 | tee "$out/test_$t.log" | grep -E "^test |test result|SKIP|panicked" | tail -${TAIL:-80}
done
if [ -z "${SKIP_APPS:-}" ]; then
  step "examples"
  for ex in .gpu/[0-9][0-9]_*; do
    echo "-- $ex"
    "$ex" 2>&1 | tail -8
  done
  step "cueflow info"
  .gpu/cueflow info 2>&1 | tail -25
  step "raw CUDA C++ references"
  bash benches/cuda/run.sh "$out/ref" > "$out/ref.log" 2>&1; grep -E "RESULT|error" "$out/ref.log" | head -60
  step "cueflow demo --device cuda:0 --size 1024 --sanitize"
  (cd "$out" && "$OLDPWD/.gpu/cueflow" demo --device cuda:0 --size 1024 --sanitize 2>&1 | tail -42)
  step "cueflow bench --device cuda:0 --size ${BENCH_MIB:-1024}"
  (cd "$out" && "$OLDPWD/.gpu/cueflow" bench --device cuda:0 --size "${BENCH_MIB:-1024}" 2>&1 | tail -60)
fi
if [ -z "${SKIP_ENQUEUE:-}" ] && [ -d .gpu/enqueue ]; then
  for d in cuda:0 host; do
    step "enqueue cost on $d (scripts/enqueue-cost.sh)"
    CUEFLOW_DEVICE=$d ENQUEUE_BINS=.gpu/enqueue bash scripts/enqueue-cost.sh base "${ENQUEUE_ROUNDS:-7}" 2>&1 | tail -9
  done
fi
