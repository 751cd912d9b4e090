#!/usr/bin/env bash
# Instructions per enqueue call, counted by callgrind, against a build of an earlier commit:
# exact where timings on a shared machine are not. Each figure is the inclusive instruction
# count of the API function that enqueues (crates/cueflow/examples/enqueue_cost.rs calls each
# (BATCHES + 2) × CALLS times, all on the calling thread) divided by its calls, the median of
# RUNS runs (lock handoffs to engine threads make counts vary a little between runs).
#
#   bash scripts/enqueue-instructions.sh BASE_COMMIT [RUNS]
#
# Columns: the base build, this build, this build with CUEFLOW_SANITIZE=warn, and the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: enqueue-instructions.sh BASE_COMMIT [RUNS]}
runs=${2:-3}
batches=3
calls=200
bins=$(mktemp -d)
cargo build --release -q -p cueflow --example enqueue_cost
cp target/release/examples/enqueue_cost "$bins/new"
wt=$(mktemp -d)
git worktree add -q --detach "$wt" "$base"
cp crates/cueflow/examples/enqueue_cost.rs "$wt/crates/cueflow/examples/"
(cd "$wt" && CARGO_TARGET_DIR="$wt/target" cargo build --release -q -p cueflow --example enqueue_cost)
cp "$wt/target/release/examples/enqueue_cost" "$bins/base"
git worktree remove --force "$wt"
for r in $(seq "$runs"); do
  for mode in base new sanitize; do
    case $mode in
      sanitize) bin=$bins/new san=warn ;;
      *) bin=$bins/$mode san= ;; # blank: the build's default (off in release builds)
    esac
    CUEFLOW_SANITIZE=$san CUEFLOW_DEVICE=host valgrind --tool=callgrind \
      --callgrind-out-file="$bins/$mode.$r.out" "$bin" "$batches" "$calls" >/dev/null 2>&1
    callgrind_annotate --inclusive=yes "$bins/$mode.$r.out" >"$bins/$mode.$r.txt"
  done
done
python3 - "$bins" "$runs" "$(( (batches + 2) * calls ))" <<'PY'
import re, statistics, sys
bins, runs, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# function -> calls of it per run (launch_buffer and launch_4_streams_chunks both scale).
funcs = {
    "cueflow::kernels::empty": n,
    "cueflow::kernels::scale": 2 * n,
    "cueflow::api::stream::Stream::record_event": n + 1,
    "cueflow::api::stream::Stream::wait_event": n,
    "cueflow::core::stream::StreamCore::submit": 4 * n,
}
# Where a function moved, the path it has in newer builds (a base build may predate the move).
moved = {
    "cueflow::core::stream::StreamCore::submit": "cueflow::core::streams::stream::StreamCore::submit",
}
def count(path, f):
    names = "|".join(re.escape(name) for name in (f, moved.get(f, f)))
    for line in open(path):
        m = re.match(r"\s*([\d,]+) .*\?\?\?:(?:" + names + r") \[", line)
        if m:
            return int(m.group(1).replace(",", ""))
    return float("nan")
modes = ["base", "new", "sanitize"]
print(f"instructions per call (median of {runs} callgrind runs)")
print(f"{'function':46}{'base':>9}{'new':>9}{'sanitize':>10}{'new/base':>10}{'san/new':>9}")
for f, calls in funcs.items():
    v = {m: statistics.median(count(f"{bins}/{m}.{r}.txt", f) for r in range(1, runs + 1)) / calls
         for m in modes}
    print(f"{f:46}{v['base']:9.0f}{v['new']:9.0f}{v['sanitize']:10.0f}"
          f"{v['new'] / v['base']:10.3f}{v['sanitize'] / v['new']:9.2f}")
PY
