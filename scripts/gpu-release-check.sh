#!/usr/bin/env bash
# One-GPU check of this release, in one device call: every test binary on cuda:0, the
# examples (07_async's wake latency in both modes, 08_sgemm with its trace), the demo at 1 GiB
# with this build against the build before the generic pipeline (.gpu/cueflow-base, alternating),
# and the pipeline as a graph (bench --graph-only).
# Run from the repository root after scripts/gpu-bundle.sh built .gpu/ (DEMO_BASE set).
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}
mkdir -p "$out"
step() { echo; echo "===== $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
export CUEFLOW_DEVICE=cuda:0 CUEFLOW_REQUIRE_CUDA=1
for t in ${TESTS:-conformance sanitizer differential misuse cuda_smoke trace smoke pipeline examples async_completions interop graphs}; do
  [ -x ".gpu/$t" ] || continue
  step "test $t"
  ".gpu/$t" --test-threads=1 2>&1 | tee "$out/test_$t.log" | grep -E "test result|SKIP|panicked|FAILED" | tail -${TAIL:-12}
done
step "examples"
for ex in 01_stream 02_event_timing 03_user_kernel 04_two_stage 05_graph; do
  echo "-- $ex"; ".gpu/$ex" 2>&1 | tail -4
done
echo "-- 07_async"; .gpu/07_async 2>&1 | tail -2
for mode in hostfn watcher; do
  for i in 1 2 3; do CUEFLOW_WAKE=$mode .gpu/07_async --latency 3000 2>&1 | tail -1; done
done
echo "-- 08_sgemm 1024"; .gpu/08_sgemm 1024 "$out" 2>&1 | tail -3
step "demo 1 GiB: this build vs the build before the generic pipeline, alternating"
for i in 1 2 3; do
  for b in cueflow cueflow-base; do
    [ -x ".gpu/$b" ] || continue
    echo "-- $b run $i"
    (cd "$out" && "$OLDPWD/.gpu/$b" demo --device cuda:0 --size 1024 --out "$out/demo_$b" 2>&1 | grep -E "^  (serial|concurrent) |auto:|concurrent takes")
  done
done
step "bench --graph-only --size 1024"
(cd "$out" && "$OLDPWD/.gpu/cueflow" bench --device cuda:0 --size 1024 --graph-only 2>&1 | tail -6)
