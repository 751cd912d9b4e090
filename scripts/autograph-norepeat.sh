#!/usr/bin/env bash
# What automatic graphs cost on work that never repeats (issue 31 asks for <= 1.02x the time
# without the mode), on the device CUEFLOW_DEVICE names (default host):
#   1. examples/auto_graph_norepeat.rs: a reproducible random launch-bound program over four streams,
#      plain and in the mode alternating inside one process (its RATIO line);
#   2. `cueflow demo` (the chunked pipeline, fixed streams, chunks and steps) with and without
#      CUEFLOW_AUTO_GRAPH=1, alternating process by process, RUNS runs each: the median of the
#      serial and the concurrent run's times, and their ratios.
#
#   bash scripts/autograph-norepeat.sh               # builds, then measures
#   BIN=.gpu/bin bash scripts/autograph-norepeat.sh  # prebuilt binaries (a GPU bundle)
# Environment: RUNS (5), CALLS (20000), ROUNDS (7), DEMO_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
demo_args=${DEMO_ARGS:---streams 4 --chunks 32 --iters 16 --reps 9}
bin=${BIN:-}
if [ -z "$bin" ]; then
  cargo build --release -q -p cueflow --example auto_graph_norepeat
  cargo build --release -q -p cueflow-cli
  bin=target/release
  norepeat=$bin/examples/auto_graph_norepeat
else
  norepeat=$bin/auto_graph_norepeat
fi
out=$(mktemp -d)
echo "== auto_graph_norepeat ${CALLS:-20000} ${ROUNDS:-7}"
"$norepeat" "${CALLS:-20000}" "${ROUNDS:-7}" | tee "$out/norepeat.txt"
echo "== cueflow demo $demo_args, plain and CUEFLOW_AUTO_GRAPH=1 alternating, $runs runs each"
for r in $(seq "$runs"); do
  for mode in plain auto; do
    flag=; [ "$mode" = auto ] && flag=1
    # shellcheck disable=SC2086
    CUEFLOW_AUTO_GRAPH=$flag "$bin/cueflow" demo $demo_args --out "$out/demo" 2>&1 |
      awk -v m="$mode" '/^  (serial|concurrent) /{print m, $1, $4}' | tee -a "$out/demo.txt"
  done
done
python3 - "$out/demo.txt" <<'PY'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    mode, run, ms = line.split()
    t.setdefault((run, mode), []).append(float(ms))
for run in ("serial", "concurrent"):
    p, a = statistics.median(t[(run, "plain")]), statistics.median(t[(run, "auto")])
    print(f"RESULT demo run={run} plain_ms={p:.2f} auto_ms={a:.2f} auto/plain={a / p:.3f}")
PY
rm -rf "$out"
