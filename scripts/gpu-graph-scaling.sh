#!/usr/bin/env bash
# Graph capture, instantiation, launch and upload costs as they grow with the graph, cueflow
# against raw CUDA in one device call: the cudaGraphsPerfScaling port (graphs_perf_scaling,
# averaged rows) and its raw twin benches/cuda/graphs_perf_scaling.cu (built here with nvcc),
# alternating REPEATS times per configuration; then per configuration and column the medians
# over the repeats and cueflow / raw.
#
#   bash scripts/gpu-graph-scaling.sh        (BIN=.gpu/bin, OUT, REPEATS=3, TRIALS=5,
#                                             CONFIGS="20:1:0:200:820 20:4:1:200:820")
# CONFIGS: LENGTH:WIDTH:PATTERN:STRIDE:MAX_LENGTH each. BASE_BIN: the port built at an earlier
# commit, run as a third side in the same rounds (its column: base / raw). PIN: a prefix for
# every run, e.g. "taskset -c 2,3". The driver's instantiation time differs by up to 1.5 x from
# one process to the next on the same machine, pinned or not: for instantiation, compare in
# one process (examples/instantiate_profile.rs).
set -uo pipefail
PIN=${PIN:-}
out=${OUT:-/tmp/cueflow-out}; mkdir -p "$out"
bin=${BIN:-.gpu/bin}
raw="$out/graphs_perf_scaling_raw"
${NVCC:-nvcc} -O3 -std=c++17 -arch=${CUDA_ARCH:-sm_90} -o "$raw" benches/cuda/graphs_perf_scaling.cu || exit 1
: >"$out/graph_scaling.txt"
rc=0
for cfg in ${CONFIGS:-20:1:0:200:820 20:4:1:200:820}; do
  IFS=: read -r len width pattern stride max <<<"$cfg"
  for r in $(seq "${REPEATS:-3}"); do
    $PIN "$raw" "${TRIALS:-5}" "$len" "$width" "$pattern" "$stride" "$max" | sed 's/^/raw /' >>"$out/graph_scaling.txt" || rc=1
    CUEFLOW_DEVICE=cuda:0 $PIN "$bin/graphs_perf_scaling" 4 "${TRIALS:-5}" "$len" "$width" "$pattern" "$stride" "$max" \
      | grep -E '^[0-9]' | sed 's/^/cueflow /' >>"$out/graph_scaling.txt" || rc=1
    if [ -n "${BASE_BIN:-}" ]; then
      CUEFLOW_DEVICE=cuda:0 $PIN "$BASE_BIN" 4 "${TRIALS:-5}" "$len" "$width" "$pattern" "$stride" "$max" \
        | grep -E '^[0-9]' | sed 's/^/base /' >>"$out/graph_scaling.txt" || rc=1
    fi
  done
done
python3 - "$out/graph_scaling.txt" <<'PY'
import statistics, sys
names = ["capture", "instantiation", "first_launch_api", "first_launch_total",
         "repeat_launch_api", "repeat_launch_total", "first_launch_device", "timeout",
         "repeat_launch_device", "timeout", "upload_api_time", "upload_device_time", "timeout"]
rows = {}
for line in open(sys.argv[1]):
    side, rest = line.split(" ", 1)
    if not rest[:1].isdigit():
        continue
    v = [float(x) for x in rest.replace(",", " ").split()]
    rows.setdefault((tuple(int(x) for x in v[:3]), side), []).append(v[3:])
for key in sorted({k for k, _ in rows}):
    r, c, b = rows.get((key, "raw")), rows.get((key, "cueflow")), rows.get((key, "base"))
    if not r or not c:
        continue
    extra = ", base / raw" if b else ""
    print(f"length {key[0]} width {key[1]} pattern {key[2]}: raw us, cueflow us, cueflow/raw{extra} (medians of {len(r)} runs)")
    ratio = lambda a, z: a / z if z else float("nan")
    for i, n in enumerate(names):
        if n == "timeout":
            continue
        rm, cm = statistics.median(x[i] for x in r), statistics.median(x[i] for x in c)
        tail = f"{ratio(statistics.median(x[i] for x in b), rm):8.2f}" if b else ""
        print(f"  {n:22}{rm:12.2f}{cm:12.2f}{ratio(cm, rm):8.2f}{tail}")
    both = lambda rs: statistics.median(x[0] + x[1] for x in rs)
    tail = f"{ratio(both(b), both(r)):8.2f}" if b else ""
    print(f"  {'capture+instantiation':22}{both(r):12.2f}{both(c):12.2f}{ratio(both(c), both(r)):8.2f}{tail}")
PY
exit $rc
