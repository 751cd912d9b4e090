#!/usr/bin/env bash
# Build what a per-call check runs into .gpu/: the test executables and samples of
# scripts/gpu-bundle2.sh, and `percall_profile` and `auto_graph` of this build (.gpu/bin/) and of
# an earlier commit (.gpu/base/, BASE=<commit>, built in its own worktree and target folder) for
# scripts/gpu-percall-check.sh and `BASE=.gpu/base/auto_graph scripts/gpu-autograph-check.sh`.
#
#   BASE=3baf880 bash scripts/gpu-bundle-percall.sh && bash scripts/gpu-pack.sh .gpu
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BASE:?BASE=<commit> to compare with}
KEEP=${KEEP:-} bash scripts/gpu-bundle2.sh
cargo build --release -q -p cueflow --example percall_profile --example auto_graph
cp target/release/examples/percall_profile target/release/examples/auto_graph .gpu/bin/
mkdir -p .gpu/base
wt=$(mktemp -d)
git worktree add -q --detach "$wt" "$base"
target=${BASE_TARGET:-$PWD/../base-target}
(cd "$wt" && CARGO_TARGET_DIR="$target" cargo build --release -q -p cueflow --example percall_profile --example auto_graph)
cp "$target/release/examples/percall_profile" "$target/release/examples/auto_graph" .gpu/base/
git worktree remove --force "$wt"
strip .gpu/bin/* .gpu/base/* 2>/dev/null || true
du -sh .gpu
