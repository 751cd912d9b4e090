#!/usr/bin/env bash
# Build what scripts/gpu-autograph-check.sh runs into .gpu/ (the folder a device run carries, at
# most 64 MiB with the tree): the auto_graph example at .gpu/bin/auto_graph and the
# `conformance` and `sanitizer` test executables at .gpu/<name>, stripped. The raw CUDA
# reference (benches/cuda/auto_graph.cu) is built by the check itself, with nvcc on the GPU
# machine.
#
#   bash scripts/gpu-bundle-autograph.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu/bin
cargo build --release -q -p cueflow --example auto_graph
cp ${CARGO_TARGET_DIR:-target}/release/examples/auto_graph .gpu/bin/
bash scripts/gpu-bundle-tests.sh .gpu -p cueflow --test conformance --test sanitizer
strip .gpu/* .gpu/bin/* 2>/dev/null || true
du -sh .gpu
