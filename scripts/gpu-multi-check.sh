#!/usr/bin/env bash
# The several-GPU check, in one device call on a machine with two GPUs (nvidia-h200-x2): the
# conformance suite (MD1-MD4 run on cuda:0 + cuda:1 there), the multi-process test (one process
# per GPU, NCCL), example 06_multi_gpu against the raw CUDA C++ / NCCL reference
# benches/cuda/multi.cu and PyTorch's torch.distributed (benches/torch/allreduce.py), and the
# demo split over both GPUs against one (SKIP_SPLIT=1 leaves it out).
# Run from the repository root after scripts/gpu-bundle.sh built .gpu/.
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}
mkdir -p "$out"
# Never NVLink multicast (the GPUs are shared; see the device tool's KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
step() { echo; echo "===== $*"; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
nvidia-smi topo -m 2>&1 | head -8
nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null \
  || dirname "$(dirname "$(find / -name libnccl.so.2 2>/dev/null | head -1)")")
echo "NCCL: $nccl_dir"; ls "$nccl_dir/lib" "$nccl_dir/include" 2>&1 | head -6
export LD_LIBRARY_PATH="$nccl_dir/lib:${LD_LIBRARY_PATH:-}"
export CUEFLOW_REQUIRE_CUDA=1 CUEFLOW_REQUIRE_NCCL=1 CUEFLOW_DEVICE=cuda:0 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
for t in ${TESTS:-conformance multiprocess examples}; do
  [ -x ".gpu/$t" ] || continue
  step "test $t ${FILTER:-}"
  ".gpu/$t" ${FILTER:-} --test-threads=1 2>&1 | tee "$out/test_$t.log" | grep -E "^test |test result|SKIP|panicked|XFAIL" | tail -${TAIL:-60}
done
step "example 06_multi_gpu cuda:0,cuda:1 ${MAX_MIB:-1024}"
.gpu/06_multi_gpu cuda:0,cuda:1 "${MAX_MIB:-1024}" 2>&1 | tee "$out/multi_cueflow.txt"
step "example 06_multi_gpu cuda:0,cuda:1 ${MAX_MIB:-1024} --processes (one process per GPU)"
.gpu/06_multi_gpu cuda:0,cuda:1 "${MAX_MIB:-1024}" --processes 2>&1 | tee "$out/multi_cueflow_processes.txt"
step "raw CUDA C++ / NCCL reference (benches/cuda/multi.cu)"
nvcc -O3 -std=c++17 -arch=sm_90 -I"$nccl_dir/include" -o "$out/multi" benches/cuda/multi.cu \
  -L"$nccl_dir/lib" -l:libnccl.so.2 2>&1 | tail -5
"$out/multi" --max-mib "${MAX_MIB:-1024}" 2>&1 | tee "$out/multi_raw.txt"
step "PyTorch reference: torch.distributed all_reduce, one process per GPU (benches/torch/allreduce.py)"
python3 benches/torch/allreduce.py --max-mib "${MAX_MIB:-1024}" 2>&1 | grep -v "^\[W" | tee "$out/multi_torch.txt"
[ -n "${SKIP_SPLIT:-}" ] && exit 0
step "cueflow demo --device cuda:0,cuda:1 --size ${SPLIT_MIB:-2048}"
(cd "$out" && "$OLDPWD/.gpu/cueflow" demo --device cuda:0,cuda:1 --size "${SPLIT_MIB:-2048}" --reps 5 2>&1 | tail -16)
