#!/usr/bin/env bash
# Host instructions per held call of automatic graphs, counted by callgrind on the host
# backend, against a build of an earlier commit: crates/cueflow/examples/auto_graph_cost.rs runs
# WINDOWS windows of CALLS `kernels::scale` launches and a synchronize on a stream in the mode
# (every call held, each window replayed: `held_windows`) and the same on a plain stream
# (`plain_windows`), then 10 * WINDOWS fork/join windows of 24 calls over four streams
# (`held_forkjoin`, `plain_forkjoin`). Each figure is the function's inclusive count on the
# calling thread divided by its calls, the median of RUNS runs. The held figures include the
# replay's share (the graph launch, the held calls' drop) and the synchronize; the host backend
# also tracks every call (AC6), which CUDA does not for device memory.
#
#   bash scripts/autograph-instructions.sh BASE_COMMIT [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: autograph-instructions.sh BASE_COMMIT [RUNS]}
runs=${2:-3}
windows=10
calls=1000
bins=$(mktemp -d)
cargo build --release -q -p cueflow --example auto_graph_cost
cp target/release/examples/auto_graph_cost "$bins/new"
wt=$(mktemp -d)
git worktree add -q --detach "$wt" "$base"
cp crates/cueflow/examples/auto_graph_cost.rs "$wt/crates/cueflow/examples/"
(cd "$wt" && CARGO_TARGET_DIR="$wt/target" cargo build --release -q -p cueflow --example auto_graph_cost)
cp "$wt/target/release/examples/auto_graph_cost" "$bins/base"
git worktree remove --force "$wt"
for r in $(seq "$runs"); do
  for mode in base new; do
    CUEFLOW_SANITIZE= CUEFLOW_AUTO_GRAPH= CUEFLOW_DEVICE=host valgrind --tool=callgrind \
      --callgrind-out-file="$bins/$mode.$r.out" "$bins/$mode" "$windows" "$calls" \
      >"$bins/$mode.$r.log" 2>&1
    callgrind_annotate --inclusive=yes "$bins/$mode.$r.out" >"$bins/$mode.$r.txt"
  done
done
grep -h "^windows=" "$bins/new.1.log" "$bins/base.1.log" || true
python3 - "$bins" "$runs" "$(( windows * calls ))" "$(( windows * 10 * 24 ))" <<'PY'
import re, statistics, sys
bins, runs, n, nf = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
funcs = {"auto_graph_cost::held_windows": n, "auto_graph_cost::plain_windows": n,
         "auto_graph_cost::held_forkjoin": nf, "auto_graph_cost::plain_forkjoin": nf}
def count(path, f):
    for line in open(path):
        m = re.match(r"\s*([\d,]+) .*\?\?\?:" + re.escape(f) + r" \[", line)
        if m:
            return int(m.group(1).replace(",", ""))
    return float("nan")
print(f"instructions per call (median of {runs} callgrind runs)")
print(f"{'function':36}{'base':>9}{'new':>9}{'new/base':>10}")
for f, calls in funcs.items():
    v = {m: statistics.median(count(f"{bins}/{m}.{r}.txt", f) for r in range(1, runs + 1)) / calls
         for m in ("base", "new")}
    print(f"{f:36}{v['base']:9.0f}{v['new']:9.0f}{v['new'] / v['base']:10.3f}")
PY
