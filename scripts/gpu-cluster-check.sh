#!/usr/bin/env bash
# The cluster check (issue 32), in one device call on a machine with two GPUs: two processes
# started as `torchrun --nproc-per-node 2 --no-python` starts them (the variables set here, no
# torchrun needed), NCCL forced onto its network transport as between two nodes
# (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo
# NCCL_NVLS_ENABLE=0: sockets over the loopback interface).
#   1. tests/launchers.rs (with the CUDA case required) and tests/multiprocess.rs;
#   2. the transport NCCL chose, from one short run with NCCL_DEBUG=INFO (lines `via NET/...`);
#   3. all-reduce 1 MiB..MAX_MIB (default 256) verified and timed: the raw NCCL program
#      benches/cuda/cluster_allreduce.cu (built here with nvcc) and cueflow's example
#      cluster_allreduce (Communicator::from_env), alternating, REPEATS (3) runs each, in this
#      one call; per size the median of the runs' times, and the ratio table
#      cueflow busbw / raw busbw (1.00: as fast as raw NCCL);
#   4. a short traced run (CUEFLOW_TRACE=$OUT/trace-{rank}.json), the two ranks' traces merged
#      with `cueflow trace merge` into $OUT/merged.json, and what the merged trace holds;
#   5. when PyTorch is installed: the example under the real `torchrun --no-python` (its static
#      rendezvous, whose agent serves PyTorch's store at MASTER_PORT, and --standalone).
#
# Bundle (scripts/gpu-bundle-cluster.sh, carried as .gpu/): .gpu/launchers, .gpu/multiprocess,
# .gpu/bin/cluster_allreduce, .gpu/bin/cueflow. Run from the repository root (benches/ is read).
# Environment: OUT (default /tmp/cueflow-out), MAX_MIB, REPEATS, REPS / ITERS (per run: batches,
# calls per batch; default 7 / 20), PORT (first MASTER_PORT, default 29500), SKIP_TESTS=1.
# Exit status 0 when every step passed; otherwise 1 after every step ran.
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}
mkdir -p "$out"
bin=$PWD/.gpu/bin
max_mib=${MAX_MIB:-256}
repeats=${REPEATS:-3}
port=${PORT:-29500}
failed=()
step() { echo; echo "===== $*"; }
check() { local rc=$1; shift; [ "$rc" -eq 0 ] || { echo "FAILED ($rc): $*"; failed+=("$*"); }; }

nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null \
  || dirname "$(dirname "$(find / -name libnccl.so.2 2>/dev/null | head -1)")")
echo "NCCL: $nccl_dir"; ls "$nccl_dir/lib" "$nccl_dir/include" 2>&1 | head -6
export LD_LIBRARY_PATH="$nccl_dir/lib:${LD_LIBRARY_PATH:-}"
# NCCL as between nodes: no peer-to-peer, no shared memory, no InfiniBand; sockets on `lo`.
# Never NVLink multicast (the GPUs are shared).
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo \
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export CUEFLOW_REQUIRE_CUDA=1 CUEFLOW_REQUIRE_NCCL=1 RUST_BACKTRACE=0
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT CUEFLOW_TRACE

# Start "$@" as rank 0 and rank 1 of a torchrun job on this machine (one GPU each), each job
# at a port of its own; each rank's output goes to $out/$tag.rank<r>.txt (rank 1's tail is
# shown when a rank failed). Status: 0 if both passed. (Not in a pipeline: the port counter
# must survive.)
torchrun2() {
  local tag=$1; shift
  port=$((port + 1))
  local pids=() r rc=0
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 GROUP_RANK=0 ROLE_RANK=$r \
      ROLE_WORLD_SIZE=2 GROUP_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      TORCHELASTIC_RUN_ID=cueflow-check CLUSTER_ID_FILE="$out/$tag.id" \
      timeout 300 "$@" > "$out/$tag.rank$r.txt" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || rc=$?; done
  rm -f "$out/$tag.id"
  [ "$rc" -eq 0 ] || { echo "--- $tag failed; rank 1:"; tail -20 "$out/$tag.rank1.txt"; }
  return "$rc"
}

# 1. Launched ranks on the host backend and on both GPUs (the CUDA case needs NCCL: required).
if [ -z "${SKIP_TESTS:-}" ]; then
  for t in launchers multiprocess; do
    step "test $t"
    timeout 300 ".gpu/$t" --test-threads=1 2>&1 | tee "$out/test_$t.log" \
      | grep -E "^test |test result|SKIP|panicked" | tail -30
    check "${PIPESTATUS[0]}" "test $t"
  done
fi

# 2. Which transport NCCL took between the two ranks.
step "NCCL transport (cueflow, 1 MiB, NCCL_DEBUG=INFO)"
NCCL_DEBUG=INFO torchrun2 transport "$bin/cluster_allreduce" \
  --max-mib 1 --reps 1 --iters 1
check $? "transport run"
grep -hE "NET/|via |Using network" "$out"/transport.rank*.txt | sed 's/^.*NCCL INFO //' | sort | uniq -c | head -12
if grep -qE "via (P2P|SHM)" "$out"/transport.rank*.txt; then
  echo "a channel went through P2P or SHM: the network transport was not forced"
  check 1 "network transport"
fi

# 3. Raw NCCL against cueflow, alternating, in this one call.
step "nvcc benches/cuda/cluster_allreduce.cu"
inc=(); [ -f "$nccl_dir/include/nccl.h" ] && inc=(-I"$nccl_dir/include")
nvcc -O3 -std=c++17 -arch=sm_90 "${inc[@]}" -o "$out/cluster_allreduce_raw" \
  benches/cuda/cluster_allreduce.cu -L"$nccl_dir/lib" -l:libnccl.so.2 2>&1 | tail -5
check "${PIPESTATUS[0]}" "nvcc cluster_allreduce.cu"
args=(--max-mib "$max_mib" --reps "${REPS:-7}" --iters "${ITERS:-20}")
: > "$out/cluster_results.txt"
for i in $(seq 1 "$repeats"); do
  step "run $i/$repeats: raw NCCL ${args[*]}"
  torchrun2 "raw$i" "$out/cluster_allreduce_raw" "${args[@]}"
  check $? "raw run $i"
  tee -a "$out/cluster_results.txt" < "$out/raw$i.rank0.txt"
  step "run $i/$repeats: cueflow ${args[*]}"
  CUEFLOW_DEVICE=cuda torchrun2 "cueflow$i" "$bin/cluster_allreduce" "${args[@]}"
  check $? "cueflow run $i"
  tee -a "$out/cluster_results.txt" < "$out/cueflow$i.rank0.txt"
done
step "all-reduce over NCCL's network transport, 2 ranks: cueflow / raw NCCL (median of $repeats runs each)"
awk '
  function field(k,   i, kv) { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } }
  function med(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  /^RESULT raw_cluster / { b = field("bytes"); raw[b] = raw[b] " " field("us"); if (!(b in seen)) { seen[b] = 1; order[++n] = b } }
  /^RESULT cluster /     { b = field("bytes"); cf[b] = cf[b] " " field("us"); if (!(b in seen)) { seen[b] = 1; order[++n] = b } }
  END {
    printf "%10s %12s %12s %11s %11s %8s\n", "MiB", "raw_us", "cueflow_us", "raw_busbw", "cf_busbw", "ratio"
    for (i = 1; i <= n; i++) { b = order[i]
      if (!(b in raw) || !(b in cf)) { printf "%10g (missing: raw %s, cueflow %s)\n", b / 1048576, raw[b], cf[b]; continue }
      r = med(raw[b]); c = med(cf[b]); rb = b / (r * 1e3); cb = b / (c * 1e3)
      printf "%10g %12.1f %12.1f %11.2f %11.2f %8.3f\n", b / 1048576, r, c, rb, cb, cb / rb }
    print "busbw in GB/s (2 ranks: bytes / time); ratio = cueflow busbw / raw busbw"
  }' "$out/cluster_results.txt" | tee "$out/cluster_ratio.txt"

# 4. The two ranks' traces, merged.
step "traced run (CUEFLOW_TRACE=$out/trace-{rank}.json) and cueflow trace merge"
rm -f "$out"/trace-*.json
CUEFLOW_DEVICE=cuda CUEFLOW_TRACE="$out/trace-{rank}.json" torchrun2 traced \
  "$bin/cluster_allreduce" --max-mib 16 --reps 2 --iters 5
check $? "traced run"
"$bin/cueflow" trace merge "$out/trace-0.json" "$out/trace-1.json" -o "$out/merged.json"
check $? "cueflow trace merge"
python3 - "$out/merged.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
print("ranks:", [(r["rank"], r["device"], round(r["shift_us"], 1)) for r in d["otherData"]["ranks"]])
for e in ev:
    if e.get("name") == "process_name":
        pid = e["pid"]
        xs = [x for x in ev if x.get("pid") == pid and x.get("ph") == "X"]
        coll = [x for x in xs if x.get("cat") == "collective"]
        print(f'{e["args"]["name"]}: {len(xs)} slices, {len(coll)} collective slices '
              f'from {min(x["ts"] for x in xs):.1f} to {max(x["ts"] + x["dur"] for x in xs):.1f} us')
marks = [e["ts"] for e in ev if e.get("cat") == "clock sync"]
print("clock-sync marks at", marks, "us (one instant: aligned)")
# How well aligned: the ends of each collective call, rank 0 against rank 1 (stream tracks).
ends = {}
for e in ev:
    if e.get("ph") == "X" and e.get("cat") == "collective" and e.get("tid", 0) >= 100:
        ends.setdefault(e["pid"], []).append(e["ts"] + e["dur"])
if len(ends) == 2:
    a, b = (sorted(v) for v in ends.values())
    skew = sorted(abs(x - y) for x, y in zip(a, b))
    print(f"collective ends, rank 0 vs rank 1: median skew {skew[len(skew) // 2]:.1f} us, max {skew[-1]:.1f} us over {len(skew)} calls")
PY
check $? "merged trace"

# 5. The real torchrun, when PyTorch is here: its agent serves PyTorch's store at MASTER_PORT
#    (TORCHELASTIC_USE_AGENT_STORE=True), so cueflow's store takes the next port.
if python3 -c "import torch.distributed.run" 2>/dev/null; then
  for mode in "--master-port $((port + 10))" "--standalone"; do
    step "torchrun --nproc-per-node 2 $mode --no-python cluster_allreduce (PyTorch $(python3 -c 'import torch; print(torch.__version__)'))"
    CUEFLOW_DEVICE=cuda timeout 300 python3 -m torch.distributed.run --nproc-per-node 2 $mode \
      --no-python "$bin/cluster_allreduce" --max-mib 16 --reps 2 > "$out/torchrun${mode%% *}.txt" 2>&1
    rc=$?
    grep -vE "^\[W|^W[0-9]|OMP_NUM_THREADS|^\*+$" "$out/torchrun${mode%% *}.txt" | tail -8
    check "$rc" "torchrun $mode"
  done
else
  step "SKIP the real torchrun: PyTorch is not importable here"
fi

step "summary"
if [ ${#failed[@]} -eq 0 ]; then
  echo "every step passed"
else
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
