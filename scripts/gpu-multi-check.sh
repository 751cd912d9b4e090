#!/usr/bin/env bash
# The two-GPU check (issue 22), in one device call on a machine with two GPUs (nvidia-h200-x2):
#   1. conformance MD1-MD4, HM2, HM4, HM6 and GR11 on cuda:0 + cuda:1 (the suite's pair tests
#      take the second GPU when there is one), and the multi-process test (one process per GPU);
#   2. the examples' two-device tests (06_multi_gpu, 09_multi_memory) on CUDA;
#   3. the two-device samples on host:2x and on cuda:0,cuda:1 through their test binaries
#      (simple_p2p, simple_callback: memory_samples; simple_multi_gpu, cuda_open_mp:
#      multi_samples), and each sample once more on cuda:0,cuda:1 with its own output kept;
#   4. benches/cuda/multi_memory.cu (raw CUDA C++ / NCCL, built here with nvcc) against example
#      09_multi_memory: peer_read, portable_h2d, managed_p2p, allreduce, allreduce_graph, with
#      the ratio cueflow / raw per op;
#   5. as before: example 06_multi_gpu against benches/cuda/multi.cu and PyTorch's
#      torch.distributed (benches/torch/allreduce.py), and the demo split over both GPUs
#      against one.
#
# Bundle layout (built by WITH_CLI=1 scripts/gpu-bundle2.sh, carried as .gpu/; run from the repository
# root, where benches/ is):
#   .gpu/<name>        release test executables by test target name: conformance, multiprocess,
#                      examples, memory_samples, multi_samples
#   .gpu/bin/<name>    binaries and examples: cueflow, 06_multi_gpu, 09_multi_memory, and the
#                      sample binaries simple_p2p, simple_callback, simple_multi_gpu,
#                      cuda_open_mp (the samples' tests find them through
#                      CUEFLOW_SAMPLES_BIN_DIR=.gpu/bin)
#
# Environment: OUT (output folder, default /tmp/cueflow-out), MAX_MIB (06 / multi.cu sizes,
# default 1024), MM_MIB / MM_REPS / MM_ITERS (multi_memory, default 256 / 11 / 20),
# SKIP_TORCH=1, SKIP_SPLIT=1 (leave those steps out), SPLIT_MIB, NCCL_DEBUG, TAIL.
# Exit status: 0 when every step passed; otherwise 1, after every step ran (the summary at the
# end names the failed ones).
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}
mkdir -p "$out"
bin=$PWD/.gpu/bin
# Never NVLink multicast (the GPUs are shared; see the device tool's KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
failed=()
step() { echo; echo "===== $*"; }
# Record a step's exit status (its first command's, through pipes).
check() { local rc=$1; shift; [ "$rc" -eq 0 ] || { echo "FAILED ($rc): $*"; failed+=("$*"); }; }

nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
nvidia-smi topo -m 2>&1 | head -8
nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null \
  || dirname "$(dirname "$(find / -name libnccl.so.2 2>/dev/null | head -1)")")
echo "NCCL: $nccl_dir"; ls "$nccl_dir/lib" "$nccl_dir/include" 2>&1 | head -6
export LD_LIBRARY_PATH="$nccl_dir/lib:${LD_LIBRARY_PATH:-}"
export CUEFLOW_REQUIRE_CUDA=1 CUEFLOW_REQUIRE_NCCL=1 CUEFLOW_DEVICE=cuda:0 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export CUEFLOW_SAMPLES_BIN_DIR=$bin

# Run test executable .gpu/$1 with filters $2...; keep its log, show the result lines.
run_tests() {
  local t=$1; shift
  step "test $t $*"
  if [ ! -x ".gpu/$t" ]; then check 1 "test $t: .gpu/$t missing"; return; fi
  ".gpu/$t" "$@" --test-threads=1 2>&1 | tee "$out/test_$t.log" \
    | grep -E "^test |test result|SKIP|panicked|XFAIL" | tail -"${TAIL:-60}"
  check "${PIPESTATUS[0]}" "test $t $*"
}

# 1. Rules on two GPUs, and one process per GPU.
run_tests conformance cuda::md1_ cuda::md2_ cuda::md3_ cuda::md4_ cuda::hm2_ cuda::hm4_ cuda::hm6_ cuda::gr11_
run_tests multiprocess
# 2. The examples' two-device tests (06_multi_gpu, 09_multi_memory; host:2x and CUDA).
run_tests examples multi_
# 3. The two-device samples (each test runs host:2x, then cuda:0,cuda:1).
run_tests memory_samples simple_p2p simple_callback
run_tests multi_samples
for s in simple_p2p simple_callback simple_multi_gpu cuda_open_mp; do
  step "sample $s on cuda:0,cuda:1"
  CUEFLOW_DEVICE=cuda:0,cuda:1 "$bin/$s" 2>&1 | tee "$out/sample_$s.txt" | tail -"${TAIL:-20}"
  check "${PIPESTATUS[0]}" "sample $s"
done

# 4. Memory and graphs on two GPUs: raw CUDA C++ / NCCL against cueflow, same call.
mm_args=(--mib "${MM_MIB:-256}" --reps "${MM_REPS:-11}" --iters "${MM_ITERS:-20}")
step "raw CUDA C++ / NCCL reference (benches/cuda/multi_memory.cu) ${mm_args[*]}"
nvcc -O3 -std=c++17 -arch=sm_90 -I"$nccl_dir/include" -o "$out/multi_memory" \
  benches/cuda/multi_memory.cu -L"$nccl_dir/lib" -l:libnccl.so.2 2>&1 | tail -5
check "${PIPESTATUS[0]}" "nvcc multi_memory.cu"
"$out/multi_memory" "${mm_args[@]}" 2>&1 | tee "$out/multi_memory_raw.txt"
check "${PIPESTATUS[0]}" "multi_memory (raw)"
step "example 09_multi_memory cuda:0,cuda:1 ${mm_args[*]}"
"$bin/09_multi_memory" cuda:0,cuda:1 "${mm_args[@]}" 2>&1 | tee "$out/multi_memory_cueflow.txt"
check "${PIPESTATUS[0]}" "09_multi_memory"
step "multi_memory: cueflow / raw (us ratio > 1: cueflow slower)"
awk '
  function field(k,   i, kv) { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } }
  /^RESULT multi_memory /          { raw[field("op")] = field("us"); rg[field("op")] = field("gbps") }
  /^RESULT cueflow_multi_memory /  { cf[field("op")] = field("us"); cg[field("op")] = field("gbps"); order[++n] = field("op") }
  END {
    printf "%-16s %12s %12s %10s %10s %8s\n", "op", "raw_us", "cueflow_us", "raw_gbps", "cf_gbps", "ratio"
    for (i = 1; i <= n; i++) { op = order[i]
      if (op in raw) printf "%-16s %12s %12s %10s %10s %8.3f\n", op, raw[op], cf[op], rg[op], cg[op], cf[op] / raw[op]
      else printf "%-16s %12s %12s (no raw figure)\n", op, "-", cf[op] }
  }' "$out/multi_memory_raw.txt" "$out/multi_memory_cueflow.txt" | tee "$out/multi_memory_ratio.txt"

# 5. Peer copies and all-reduce against multi.cu and torch.distributed, as before.
step "example 06_multi_gpu cuda:0,cuda:1 ${MAX_MIB:-1024}"
"$bin/06_multi_gpu" cuda:0,cuda:1 "${MAX_MIB:-1024}" 2>&1 | tee "$out/multi_cueflow.txt"
check "${PIPESTATUS[0]}" "06_multi_gpu"
step "example 06_multi_gpu cuda:0,cuda:1 ${MAX_MIB:-1024} --processes (one process per GPU)"
"$bin/06_multi_gpu" cuda:0,cuda:1 "${MAX_MIB:-1024}" --processes 2>&1 | tee "$out/multi_cueflow_processes.txt"
check "${PIPESTATUS[0]}" "06_multi_gpu --processes"
step "raw CUDA C++ / NCCL reference (benches/cuda/multi.cu)"
nvcc -O3 -std=c++17 -arch=sm_90 -I"$nccl_dir/include" -o "$out/multi" benches/cuda/multi.cu \
  -L"$nccl_dir/lib" -l:libnccl.so.2 2>&1 | tail -5
check "${PIPESTATUS[0]}" "nvcc multi.cu"
"$out/multi" --max-mib "${MAX_MIB:-1024}" 2>&1 | tee "$out/multi_raw.txt"
check "${PIPESTATUS[0]}" "multi (raw)"
if [ -z "${SKIP_TORCH:-}" ]; then
  step "PyTorch reference: torch.distributed all_reduce, one process per GPU (benches/torch/allreduce.py)"
  python3 benches/torch/allreduce.py --max-mib "${MAX_MIB:-1024}" 2>&1 | grep -v "^\[W" | tee "$out/multi_torch.txt"
fi
if [ -z "${SKIP_SPLIT:-}" ]; then
  step "cueflow demo --device cuda:0,cuda:1 --size ${SPLIT_MIB:-2048}"
  (cd "$out" && "$bin/cueflow" demo --device cuda:0,cuda:1 --size "${SPLIT_MIB:-2048}" --reps 5 2>&1 | tail -16)
fi

step "summary"
if [ ${#failed[@]} -eq 0 ]; then
  echo "every step passed"
else
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
