#!/usr/bin/env bash
# Run every test executable of a bundle (.gpu/<name>, from scripts/gpu-bundle2.sh) on the GPU,
# JOBS at a time (default 4; each binary runs its tests one at a time), each under a time limit
# (TT seconds, default 300), logs in $OUT/test_<name>.log; prints each binary's result lines
# and the first failures. TESTS="a b" picks binaries. Exit 1 if any binary failed.
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nccl_dir=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
export LD_LIBRARY_PATH="$nccl_dir/lib:${LD_LIBRARY_PATH:-}"
export CUEFLOW_REQUIRE_CUDA=1 CUEFLOW_DEVICE=${CUEFLOW_DEVICE:-cuda:0} RUST_BACKTRACE=0
export CUEFLOW_SAMPLES_BIN_DIR=$PWD/.gpu/bin OUT=$out TT=${TT:-300}
one() {
  local t=$1 s rc
  s=$(date +%s); timeout "$TT" ".gpu/$t" --test-threads=1 > "$OUT/test_$t.log" 2>&1; rc=$?
  { echo "===== test $t rc=$rc $(( $(date +%s) - s ))s"
    grep -E "test result|panicked at|^    [a-z_:0-9]+$" -A2 "$OUT/test_$t.log" | grep -v "^--$\|RUST_BACKTRACE" | head -16
  } > "$OUT/summary_$t.txt"
  return $rc
}
export -f one
list=${TESTS:-$(cd .gpu && for f in *; do [ -f "$f" ] && [ -x "$f" ] && echo "$f"; done)}
printf '%s\n' $list | xargs -P "${JOBS:-4}" -I{} bash -c 'one {}'
rc=$?
cat "$out"/summary_*.txt
grep -l "rc=[1-9]" "$out"/summary_*.txt | sed 's/.*summary_/FAILED: /; s/\.txt$//'
exit $(( rc != 0 ))
