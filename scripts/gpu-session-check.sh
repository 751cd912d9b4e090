#!/usr/bin/env bash
# One-GPU check of the structure, reliability, overlap and device/compilation work, in one
# device call (run from the repository root after scripts/gpu-bundle.sh filled .gpu/):
#  1. every test binary on cuda:0 (logs under $OUT);
#  2. KC2/KC3: the first launch of a kernel in fresh processes, cache cold, warm, prepared;
#  3. RL1: 200,000 empty kernels drained against raw CUDA (benches/cuda/deep_queue.cu), and
#     4,000,000 queued kernels' peak memory;
#  4. issue 17: the compute kernel at 1 GiB / 1008 steps in cueflow (bench) and in raw CUDA C++
#     (benches/cuda/pipeline.cu), and the demo at 1 GiB.
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export CUEFLOW_DEVICE=cuda:0 CUEFLOW_REQUIRE_CUDA=1
for t in ${TESTS:-conformance cuda_smoke reliability soak interop examples sanitizer misuse pipeline async_completions differential trace smoke from_env unit_cueflow}; do
  [ -x ".gpu/$t" ] || { echo "===== test $t: not bundled"; continue; }
  echo "===== test $t"
  timeout 300 ".gpu/$t" --test-threads=1 > "$out/test_$t.log" 2>&1; echo "rc=$?"
  grep -E "test result|panicked|FAILED|^failures" "$out/test_$t.log" | tail -6
done
echo "===== KC3 first launch: cold, warm, warm, prepared"
kc=$(mktemp -d)
for run in cold warm warm; do echo "-- $run"; CUEFLOW_KERNEL_CACHE=$kc .gpu/kernel_first_launch 2>&1 | tail -3; done
echo "-- prepared (cache off)"; CUEFLOW_KERNEL_CACHE=off .gpu/kernel_first_launch --prepare 2>&1 | tail -4
echo "===== RL1 deep queue: cueflow vs raw CUDA, 200000 empty kernels"
nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/dq benches/cuda/deep_queue.cu -lcuda 2>&1 | tail -3
for i in 1 2; do .gpu/deep_queue 200000 5 2>&1 | grep RESULT; /tmp/dq --n 200000 --reps 5 2>&1 | grep RESULT; done
echo "-- 4,000,000 kernels queued behind a 500 ms kernel"; .gpu/deep_queue 4000000 1 500 2>&1 | tail -2
echo "===== issue 17: compute kernel, 1 GiB, 1008 steps"
nvcc -O3 -std=c++17 -arch=sm_90 -Xcompiler -ffp-contract=off -o /tmp/pipe benches/cuda/pipeline.cu -lcuda 2>&1 | tail -3
/tmp/pipe --mib 1024 --iters 1008 --configs 1x1,4x32 --reps 3 2>&1 | grep -E "kernel|RESULT|duplex" | head -8
(cd "$out" && "$OLDPWD/.gpu/cueflow" bench --device cuda:0 --size 1024 --iters 1008 --reps 3 2>&1 | tail -25)
for i in 1 2; do (cd "$out" && "$OLDPWD/.gpu/cueflow" demo --device cuda:0 --size 1024 2>&1 | grep -E "^  (serial|concurrent) |auto:|concurrent takes|kernel"); done
