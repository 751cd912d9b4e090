#!/usr/bin/env bash
# Build what a per-call check runs into .gpu/: the test executables and samples of
# scripts/gpu-bundle2.sh, and `percall_profile`, `auto_graph` and `enqueue_cost` of this build
# (.gpu/bin/) and of an earlier commit (.gpu/base/, BASE=<commit>, built in its own worktree and
# target folder) for scripts/gpu-percall-check.sh and
# `BASE=.gpu/base/auto_graph scripts/gpu-autograph-check.sh`; and tools/null-driver at
# .gpu/nulldrv, so `enqueue_cost` can time cueflow's own host path on the GPU machine's CPU.
#
#   BASE=3baf880 bash scripts/gpu-bundle-percall.sh && bash scripts/gpu-pack.sh .gpu
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BASE:?BASE=<commit> to compare with}
KEEP=${KEEP:-} bash scripts/gpu-bundle2.sh
examples=(percall_profile auto_graph enqueue_cost)
cargo build --release -q -p cueflow "${examples[@]/#/--example=}"
for e in "${examples[@]}"; do cp "${CARGO_TARGET_DIR:-target}/release/examples/$e" .gpu/bin/; done
bash tools/null-driver/build.sh "$PWD/.gpu/nulldrv" >/dev/null
mkdir -p .gpu/base
wt=$(mktemp -d)
git worktree add -q --detach "$wt" "$base"
target=${BASE_TARGET:-$PWD/../base-target}
(cd "$wt" && CARGO_TARGET_DIR="$target" cargo build --release -q -p cueflow "${examples[@]/#/--example=}")
for e in "${examples[@]}"; do cp "$target/release/examples/$e" .gpu/base/; done
git worktree remove --force "$wt"
strip .gpu/bin/* .gpu/base/* 2>/dev/null || true
du -sh .gpu
