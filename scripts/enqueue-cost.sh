#!/usr/bin/env bash
# Enqueue cost per operation in every ordering mode, against a build of an earlier commit, in
# one run: the binaries run alternately, round by round, and each figure is the median over
# rounds of the example's own medians (crates/cueflow/examples/enqueue_cost.rs).
#
#   bash scripts/enqueue-cost.sh [BASE_COMMIT] [ROUNDS]
#
# BASE defaults to the commit before the tracking layer (91270fa). Set CUEFLOW_DEVICE=cuda:0 to
# measure a GPU; with ENQUEUE_BINS=DIR the two binaries are taken from DIR (new, base) instead
# of being built (for a machine without a Rust toolchain).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-91270fa}
rounds=${2:-7}
bins=${ENQUEUE_BINS:-}
if [ -z "$bins" ]; then
  bins=$(mktemp -d)
  cargo build --release -q -p cueflow --example enqueue_cost
  cp target/release/examples/enqueue_cost "$bins/new"
  wt=$(mktemp -d)
  git worktree add -q --detach "$wt" "$base"
  cp crates/cueflow/examples/enqueue_cost.rs "$wt/crates/cueflow/examples/"
  (cd "$wt" && CARGO_TARGET_DIR="$wt/target" cargo build --release -q -p cueflow --example enqueue_cost)
  cp "$wt/target/release/examples/enqueue_cost" "$bins/base"
  git worktree remove --force "$wt"
fi
out=$(mktemp -d)
for r in $(seq "$rounds"); do
  "$bins/base" > "$out/base.$r" 2>/dev/null
  "$bins/new" > "$out/default.$r" 2>/dev/null
  CUEFLOW_AUTO_ORDER=1 "$bins/new" > "$out/auto.$r" 2>/dev/null
  CUEFLOW_SANITIZE=warn "$bins/new" > "$out/sanitize.$r" 2>/dev/null
done
python3 - "$out" "$rounds" <<'PY'
import sys, statistics
out, rounds = sys.argv[1], int(sys.argv[2])
modes = ["base", "default", "auto", "sanitize"]
med = {}
for m in modes:
    runs = {}
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{m}.{r}"):
            op, ns = line.split()
            runs.setdefault(op, []).append(float(ns))
    med[m] = {op: statistics.median(v) for op, v in runs.items()}
ops = list(med["base"])
print(f"enqueue cost, ns per call (median of {rounds} alternating rounds); ratios against 'default'"
      " and 'default' against the base build")
print(f"{'operation':26}{'base':>9}{'default':>9}{'auto':>9}{'sanitize':>10}"
      f"{'def/base':>10}{'auto/def':>10}{'san/def':>9}")
for op in ops:
    b, d, a, s = (med[m][op] for m in modes)
    print(f"{op:26}{b:9.1f}{d:9.1f}{a:9.1f}{s:10.1f}{d/b:10.2f}{a/d:10.2f}{s/d:9.2f}")
PY
