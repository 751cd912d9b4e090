#!/usr/bin/env bash
# Builds and runs the raw CUDA reference programs (overhead, graph, deep_queue, zero_copy and
# managed_prefetch beside cueflow's host_memory_bandwidth example, then pipeline --balance).
#
#   bash benches/cuda/run.sh [outdir]          (default outdir: /tmp/cueflow-cuda-ref)
#
# Environment:
#   PIPELINE_ARGS   extra arguments for pipeline, appended after --balance, e.g.
#                   PIPELINE_ARGS="--mib 512 --configs 1x1,4x16 --reps 5"
#                   (an --iters K there overrides --balance: the last one wins)
#   OVERHEAD_ARGS   extra arguments for overhead, e.g. "--batches 10 --calls 2000"
#   NVCC            the compiler (default: nvcc on PATH)
#   CUDA_ARCH       the -arch value (default: sm_90, H100)
# Outputs: the binaries and overhead.txt / pipeline.txt (full output, RESULT lines included)
# in outdir.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-/tmp/cueflow-cuda-ref}"
nvcc_bin="${NVCC:-nvcc}"
arch="${CUDA_ARCH:-sm_90}"
mkdir -p "$out"

if ! command -v "$nvcc_bin" >/dev/null 2>&1; then
    echo "run.sh: $nvcc_bin not found (set NVCC or put the CUDA toolkit's bin on PATH)" >&2
    exit 1
fi

# libcuda.so (unversioned) may be missing on driver-only installs; the toolkit's stub library
# is enough to link against, the real driver is loaded at run time.
cuda_home="${CUDA_HOME:-$(dirname "$(dirname "$(command -v "$nvcc_bin")")")}"
link_extra=()
for d in "$cuda_home/lib64/stubs" "$cuda_home/targets/x86_64-linux/lib/stubs" \
         "$cuda_home/targets/sbsa-linux/lib/stubs"; do
    if [ -d "$d" ]; then
        link_extra+=("-L$d")
    fi
done

common=(-O3 -std=c++17 "-arch=$arch" -Xcompiler -ffp-contract=off)

echo "== building into $out ($("$nvcc_bin" --version | tail -n 1))"
"$nvcc_bin" "${common[@]}" -o "$out/overhead" "$here/overhead.cu" \
    ${link_extra[@]+"${link_extra[@]}"} -lcuda
"$nvcc_bin" "${common[@]}" -o "$out/pipeline" "$here/pipeline.cu"
"$nvcc_bin" "${common[@]}" -o "$out/graph" "$here/graph.cu"
"$nvcc_bin" "${common[@]}" -o "$out/graph_build" "$here/graph_build.cu"
"$nvcc_bin" "${common[@]}" -o "$out/deep_queue" "$here/deep_queue.cu" \
    ${link_extra[@]+"${link_extra[@]}"} -lcuda
"$nvcc_bin" "${common[@]}" -o "$out/zero_copy" "$here/zero_copy.cu"
"$nvcc_bin" "${common[@]}" -o "$out/managed_prefetch" "$here/managed_prefetch.cu"

read -r -a overhead_args <<< "${OVERHEAD_ARGS:-}"
read -r -a pipeline_args <<< "${PIPELINE_ARGS:-}"

if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current \
        --format=csv || true
fi

echo "== overhead"
"$out/overhead" ${overhead_args[@]+"${overhead_args[@]}"} | tee "$out/overhead.txt"

echo "== graph"
"$out/graph" | tee "$out/graph.txt"

echo "== graph_build"
"$out/graph_build" | tee "$out/graph_build.txt"

echo "== deep_queue"
"$out/deep_queue" | tee "$out/deep_queue.txt"

echo "== zero_copy and managed_prefetch, then cueflow's host_memory_bandwidth (same run)"
"$out/zero_copy" | tee "$out/zero_copy.txt"
"$out/managed_prefetch" | tee "$out/managed_prefetch.txt"
if command -v cargo >/dev/null 2>&1; then
    (cd "$here/../.." && CUEFLOW_DEVICE=cuda:0 cargo run --release -q -p cueflow \
        --example host_memory_bandwidth) | tee "$out/host_memory_bandwidth.txt" || true
fi

echo "== pipeline --balance ${PIPELINE_ARGS:-}"
"$out/pipeline" --balance ${pipeline_args[@]+"${pipeline_args[@]}"} | tee "$out/pipeline.txt"

echo "== done; outputs in $out"
