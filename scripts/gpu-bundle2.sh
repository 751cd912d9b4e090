#!/usr/bin/env bash
# Build what scripts/gpu-session-check2.sh runs into .gpu/ (the folder a device run carries,
# at most 64 MiB with the tree): release test executables (stripped) at .gpu/<name>, the
# ported samples and the measuring examples at .gpu/bin/<name>.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu/bin
cargo build --release -q -p cueflow-samples --bins
# WITH_CLI=1: also the `cueflow` binary (gpu-multi-check.sh's split demo).
[ -n "${WITH_CLI:-}" ] && cargo build --release -q -p cueflow-cli
cargo build --release -q -p cueflow --example graph_build --example host_memory_bandwidth --example 09_multi_memory --example 06_multi_gpu
keep=${KEEP:-"conformance cuda_c cuda_c_isolated graph_samples memory_samples stream_samples multi_samples misuse misuse_host_memory cuda_smoke sanitizer interop examples multiprocess reliability differential fuzz_found"}
KEEP="$keep" bash scripts/gpu-bundle-tests.sh .gpu --workspace > /dev/null
for b in ${CARGO_TARGET_DIR:-target}/release/*; do
  [ -f "$b" ] && [ -x "$b" ] || continue
  [ "$(basename "$b")" = cueflow ] && [ -z "${WITH_CLI:-}" ] && continue
  cp "$b" .gpu/bin/
done
for e in graph_build host_memory_bandwidth 09_multi_memory 06_multi_gpu; do cp "${CARGO_TARGET_DIR:-target}/release/examples/$e" .gpu/bin/; done
strip ${STRIP_DEBUG_ONLY:+--strip-debug} .gpu/* .gpu/bin/* 2>/dev/null || true
du -sh .gpu
