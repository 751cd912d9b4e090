#!/usr/bin/env bash
# Build everything the GPU check runs (release test executables, the cueflow binary, the
# examples) and copy them, stripped, into .gpu/ — the folder the device run carries.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu
cargo build --release -q -p cueflow-cli -p cueflow --examples --bins
cp ${CARGO_TARGET_DIR:-target}/release/cueflow .gpu/
for ex in ${CARGO_TARGET_DIR:-target}/release/examples/[0-9][0-9]_*; do
  case "$ex" in *.d|*-*) ;; *) cp "$ex" .gpu/ ;; esac
done
# The enqueue-cost example at HEAD and at the base commit it is compared with
# (scripts/enqueue-cost.sh runs them alternately there, ENQUEUE_BINS=.gpu/enqueue).
mkdir -p .gpu/enqueue
cp ${CARGO_TARGET_DIR:-target}/release/examples/enqueue_cost .gpu/enqueue/new
base=${ENQUEUE_BASE:-91270fa}
wt=$(mktemp -d)
git worktree add -q --detach "$wt" "$base"
cp crates/cueflow/examples/enqueue_cost.rs "$wt/crates/cueflow/examples/"
(cd "$wt" && CARGO_TARGET_DIR="${BASE_TARGET:-$PWD/../base-target}" cargo build --release -q -p cueflow --example enqueue_cost \
  && cp "${BASE_TARGET:-$PWD/../base-target}/release/examples/enqueue_cost" "$OLDPWD/.gpu/enqueue/base")
git worktree remove --force "$wt"
# The cueflow CLI at an earlier commit, for comparisons in the same run (DEMO_BASE=<commit>).
if [ -n "${DEMO_BASE:-}" ]; then
  wt=$(mktemp -d)
  git worktree add -q --detach "$wt" "$DEMO_BASE"
  (cd "$wt" && CARGO_TARGET_DIR="${BASE_TARGET:-$PWD/../base-target}" cargo build --release -q -p cueflow-cli \
    && cp "${BASE_TARGET:-$PWD/../base-target}/release/cueflow" "$OLDPWD/.gpu/cueflow-base")
  git worktree remove --force "$wt"
fi
cargo test --release --workspace --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get("executable")
    if m.get("reason") == "compiler-artifact" and exe and m["target"]["kind"] != ["bin"]:
        name = m["target"]["name"]
        if m["target"]["kind"] == ["lib"]:
            name = "unit_" + name
        shutil.copy(exe, ".gpu/" + name)
        print("bundled", name)
'
strip .gpu/* .gpu/enqueue/* 2>/dev/null || true
cp scripts/gpu-check.sh scripts/gpu-multi-check.sh scripts/gpu-release-check.sh .gpu/
du -sh .gpu
