#!/usr/bin/env bash
# The memory/graph/CUDA-C/two-GPU session's check, in one device call on a machine with two GPUs
# (nvidia-h200-x2). Layout (built by scripts/gpu-bundle2.sh): release test executables at
# .gpu/<name>, sample binaries and examples at .gpu/bin/<name>.
#  1. every bundled test binary on cuda:0 (pair tests on cuda:0 + cuda:1), logs under $OUT;
#  2. every ported sample on cuda:0 (two-device ones on cuda:0,cuda:1), output kept;
#  3. raw CUDA C++ against cueflow in the same call: graph_build.cu vs graph_build,
#     zero_copy.cu + managed_prefetch.cu vs host_memory_bandwidth, multi_memory.cu vs
#     09_multi_memory (two GPUs: peer-read kernel, portable pinned copies, managed prefetch
#     between GPUs, all-reduce from streams vs captured graphs).
# NCCL_NVLS_ENABLE=0 always; no multicast objects are made.
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
export LD_LIBRARY_PATH="$nccl_dir/lib:${LD_LIBRARY_PATH:-}"
export CUEFLOW_REQUIRE_CUDA=1 CUEFLOW_DEVICE=cuda:0 CUEFLOW_SAMPLES_BIN_DIR=$PWD/.gpu/bin RUST_BACKTRACE=0
if [ -z "${SKIP_TESTS:-}" ]; then
  for t in ${TESTS:-$(ls .gpu | grep -v '^bin$\|\.sh$')}; do
    [ -x ".gpu/$t" ] || continue
    s=$(date +%s); timeout ${TT:-240} ".gpu/$t" --test-threads=1 > "$out/test_$t.log" 2>&1; rc=$?
    echo "===== test $t rc=$rc $(( $(date +%s) - s ))s"
    grep -E "test result|panicked at" -A2 "$out/test_$t.log" | grep -v "^--$\|RUST_BACKTRACE" | head -12
  done
fi
if [ -z "${SKIP_SAMPLES:-}" ]; then
  for b in .gpu/bin/*; do
    n=$(basename "$b"); case "$n" in [0-9]*|graph_build|host_memory_bandwidth) continue ;; esac
    dev=cuda:0; case "$n" in simple_p2p|simple_callback|simple_multi_gpu|cuda_open_mp|stream_ordered_allocation_p2p) dev=cuda:0,cuda:1 ;; esac
    echo "===== sample $n on $dev"; CUEFLOW_DEVICE=$dev timeout 120 "$b" > "$out/sample_$n.txt" 2>&1; echo "rc=$?"
    tail -${SAMPLE_TAIL:-4} "$out/sample_$n.txt"
  done
fi
[ -n "${SKIP_BENCH:-}" ] && exit 0
B=$out/bench; mkdir -p "$B"
for f in graph_build zero_copy managed_prefetch; do nvcc -O3 -std=c++17 -arch=sm_90 -o "$B/$f" benches/cuda/$f.cu 2>&1 | tail -3; done
nvcc -O3 -std=c++17 -arch=sm_90 -I"$nccl_dir/include" -o "$B/multi_memory" benches/cuda/multi_memory.cu -L"$nccl_dir/lib" -l:libnccl.so.2 2>&1 | tail -3
echo "===== graph_build: raw, cueflow, raw, cueflow"
for i in 1 2; do "$B/graph_build" 2>&1 | grep -E "RESULT|rror"; .gpu/bin/graph_build 2>&1 | grep -E "RESULT|rror"; done
echo "===== zero copy / managed prefetch: raw, cueflow"
"$B/zero_copy" 2>&1 | grep -E "RESULT|rror"; "$B/managed_prefetch" 2>&1 | grep -E "RESULT|rror"
.gpu/bin/host_memory_bandwidth --mib 256 2>&1 | grep -E "RESULT|rror"
echo "===== two GPUs: raw multi_memory, cueflow 09_multi_memory (twice)"
for i in 1 2; do "$B/multi_memory" --mib 256 2>&1 | grep -E "RESULT|SKIP|rror"; echo "rc=$?"
  .gpu/bin/09_multi_memory cuda:0,cuda:1 --mib 256 2>&1 | grep -E "RESULT|SKIP|rror|check"; echo "rc=${PIPESTATUS[0]}"; done
