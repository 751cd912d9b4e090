#!/usr/bin/env bash
# Automatic graphs on a GPU (issue 31), in one device call:
#   1. the AG conformance tests, then the conformance and sanitizer suites with the mode forced
#      on (CUEFLOW_AUTO_GRAPH=1), CUDA required;
#   2. the launch-bound benchmark: the raw CUDA C++ reference benches/cuda/auto_graph.cu (raw
#      launches, hand-captured graph; built here with nvcc) and cueflow's auto_graph example
#      (plain, automatic graphs, hand-captured through cueflow), alternating, REPEATS runs each;
#      then per program the medians and the ratios the issue asks for: raw launches / cueflow
#      automatic (>= 2 wanted) and cueflow automatic / raw graph (<= 1.1 wanted), and the device
#      time of one launch of each hand-captured graph, raw and cueflow's (PROBE lines);
#   3. every graph both programs instantiate, as the driver holds it (cuGraphDebugDotPrint,
#      verbose: AG_DOT, CUEFLOW_GRAPH_DOT) in $OUT/dot, with node and edge counts.
#
# Bundle: scripts/gpu-bundle-autograph.sh (carried as .gpu/). Run from the repository root:
#   bash scripts/gpu-autograph-check.sh
# Environment: OUT (default /tmp/cueflow-out), ITERS (100), ROUNDS (5), REPEATS (3),
# SKIP_TESTS=1, NVCC, CUDA_ARCH (sm_90), BASE=<path of an earlier build's auto_graph>: runs it
# too, alternating with the others, and prints its table after this build's.
# Exit status 0 when every step passed; otherwise 1 after every step ran.
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}
mkdir -p "$out"
iters=${ITERS:-100}
rounds=${ROUNDS:-5}
repeats=${REPEATS:-3}
failed=()
step() { echo; echo "===== $*"; }
check() { local rc=$1; shift; [ "$rc" -eq 0 ] || { echo "FAILED ($rc): $*"; failed+=("$*"); }; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
export CUEFLOW_REQUIRE_CUDA=1 RUST_BACKTRACE=1

if [ -z "${SKIP_TESTS:-}" ]; then
  step "AG conformance tests (mode per test)"
  .gpu/conformance cuda::ag --test-threads=1 2>&1 | tail -15; check "${PIPESTATUS[0]}" "AG tests"
  step "conformance suite, CUEFLOW_AUTO_GRAPH=1"
  CUEFLOW_AUTO_GRAPH=1 .gpu/conformance cuda:: 2>&1 | grep -E "FAILED|panicked|failed|test result" | head -30
  check "${PIPESTATUS[0]}" "conformance with automatic graphs"
  step "sanitizer suite (its cuda tests), CUEFLOW_AUTO_GRAPH=1"
  CUEFLOW_AUTO_GRAPH=1 .gpu/sanitizer cuda 2>&1 | grep -E "FAILED|panicked|failed|test result" | head -30
  check "${PIPESTATUS[0]}" "sanitizer with automatic graphs"
fi

step "build benches/cuda/auto_graph.cu"
"${NVCC:-nvcc}" -O3 -std=c++17 "-arch=${CUDA_ARCH:-sm_90}" -Xcompiler -ffp-contract=off \
  -o "$out/auto_graph_raw" benches/cuda/auto_graph.cu
check $? "nvcc auto_graph.cu"

step "benchmark: raw and cueflow alternating, $repeats runs each, $iters iterations, $rounds rounds"
: >"$out/auto_graph.txt"; : >"$out/auto_graph_base.txt"
for r in $(seq "$repeats"); do
  "$out/auto_graph_raw" "$iters" "$rounds" | tee -a "$out/auto_graph.txt"; check "${PIPESTATUS[0]}" "raw run $r"
  CUEFLOW_DEVICE=cuda:0 .gpu/bin/auto_graph "$iters" "$rounds" | tee -a "$out/auto_graph.txt"
  check "${PIPESTATUS[0]}" "cueflow run $r"
  if [ -n "${BASE:-}" ]; then
    CUEFLOW_DEVICE=cuda:0 "$BASE" "$iters" "$rounds" >>"$out/auto_graph_base.txt"
    check $? "base run $r"
  fi
done
summary() {
python3 - "$@" <<'PY'
import re, statistics, sys
t, calls, gpu = {}, {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"PROBE (auto_graph(?:_raw)?) program=(\w+) graph_gpu_us=([\d.]+)", line)
    if m:
        who = "raw" if m.group(1).endswith("raw") else "cueflow"
        gpu.setdefault((m.group(2), who), []).append(float(m.group(3)))
    m = re.match(r"RESULT (auto_graph(?:_raw)?) program=(\w+) mode=(\w+) us_per_iter=([\d.]+)"
                 r"(?: driver_calls_per_iter=([\d.]+))?", line)
    if m:
        who = "raw" if m.group(1).endswith("raw") else "cueflow"
        t.setdefault((m.group(2), who, m.group(3)), []).append(float(m.group(4)))
        if m.group(5):
            calls[(m.group(2), m.group(3))] = float(m.group(5))
    m = re.match(r"EVENTS auto_graph_raw program=(\w+) none=([\d.]+)", line)
    if m:
        t.setdefault((m.group(1), "raw", "steady"), []).append(float(m.group(2)))
    m = re.match(r"RECORDS auto_graph_raw program=(\w+) edges_only=([\d.]+) timing_record_nodes=([\d.]+)"
                 r" quiet_record_nodes=([\d.]+)(?: records_after=([\d.]+))?", line)
    if m and m.group(5):
        # The edges-only graph and its four timing-free events recorded after the launch.
        t.setdefault(("forkjoin", "raw", "after"), []).append(float(m.group(5)))
    if m:
        # forkjoin's events are timing-free, as the raw program's; forkjoin_timed's are timing
        # events, whose records a replay keeps in their streams' order.
        t.setdefault(("forkjoin", "raw", "records"), []).append(float(m.group(4)))
        t.setdefault(("forkjoin_timed", "raw", "records"), []).append(float(m.group(3)))
med = {k: statistics.median(v) for k, v in t.items()}
print(f"{'program':15}{'raw launch':>12}{'raw graph':>11}{'cf plain':>10}{'cf auto':>9}{'cf graph':>10}"
      f"{'rawlaunch/auto':>16}{'auto/rawgraph':>15}{'plain/rawlaunch':>17}")
PROGRAMS = ("tiny", "jacobi", "forkjoin", "forkjoin_timed", "forkjoin_joins", "temporaries")
raw_of = lambda p: "forkjoin" if p.startswith("forkjoin") else p
for p in PROGRAMS:
    g = lambda who, mode: med.get((raw_of(p) if who == "raw" else p, who, mode), float("nan"))
    rl, rg, cp, ca, cg = g("raw", "launch"), g("raw", "graph"), g("cueflow", "plain"), g("cueflow", "auto"), g("cueflow", "graph")
    print(f"{p:15}{rl:12.1f}{rg:11.1f}{cp:10.1f}{ca:9.1f}{cg:10.1f}{rl/ca:16.2f}{ca/rg:15.3f}{cp/rl:17.3f}")
print("(us per iteration, medians over the runs; wanted: rawlaunch/auto >= 2, auto/rawgraph <= 1.1)")
# The raw graph's own time moves with what ran before it: right after raw launches (the
# RESULT rounds) the tiny graph took 939 us an iteration, graph launches alone 1,118-1,121 us
# (H100, this probe). And a hand-captured graph turns the program's event records into edges,
# which a replay may not: the events must be recorded as without graphs (AG rules), so the
# replay keeps its records as record nodes (a timing-free event's as a leaf, off the critical
# path). The references, beside the first (records-after: the edges-only graph with the
# events recorded after the launch, which would make them complete with the whole launch):
print("raw graph references: program  steady (graph launches only)  with the program's record nodes"
      "  with its timing-free events recorded after the launch   auto/steady  auto/with-records"
      "  auto/records-after")
for p in PROGRAMS:
    g = lambda who, mode: med.get((p if mode in ("records", "after") or who == "cueflow" else raw_of(p), who, mode), float("nan"))
    st, rec, aft, ca = g("raw", "steady"), g("raw", "records"), g("raw", "after"), g("cueflow", "auto")
    print(f"  {p:15}{st:12.1f}{rec:14.1f}{aft:14.1f}{ca/st:16.3f}{ca/rec:14.3f}{ca/aft:14.3f}")
print("driver calls per iteration (cueflow, calling thread): program plain auto graph")
for p in PROGRAMS:
    print(f"  {p:15}" + "".join(f"{calls.get((p, m), float('nan')):10.1f}" for m in ("plain", "auto", "graph")))
print("device time of one hand-captured graph launch, us (median over runs): program raw cueflow")
for p in PROGRAMS:
    key = lambda who: (raw_of(p) if who == "raw" else p, who)
    g = lambda who: statistics.median(gpu[key(who)]) if key(who) in gpu else float("nan")
    print(f"  {p:15}{g('raw'):10.1f}{g('cueflow'):10.1f}")
PY
}
summary "$out/auto_graph.txt"
if [ -n "${BASE:-}" ]; then
  echo; echo "----- the base build ($BASE), against the same raw runs"
  grep -v "^RESULT auto_graph \|^PROBE auto_graph " "$out/auto_graph.txt" | cat - "$out/auto_graph_base.txt" >"$out/auto_graph_vs_base.txt"
  summary "$out/auto_graph_vs_base.txt"
fi

step "graphs as the driver holds them: $out/dot"
mkdir -p "$out/dot"
AG_DOT="$out/dot" "$out/auto_graph_raw" 3 1 >/dev/null; check $? "raw run with AG_DOT"
CUEFLOW_GRAPH_DOT="$out/dot" CUEFLOW_DEVICE=cuda:0 .gpu/bin/auto_graph 3 1 >/dev/null
check $? "cueflow run with CUEFLOW_GRAPH_DOT"
for f in "$out"/dot/*.dot; do
  echo "$(basename "$f"): $(grep -c ' -> ' "$f") edges, $(grep -c 'label=' "$f") labelled lines, $(wc -c <"$f") bytes"
done

echo
if [ ${#failed[@]} -eq 0 ]; then echo "ALL PASSED"; exit 0; fi
printf 'FAILED: %s\n' "${failed[@]}"; exit 1
