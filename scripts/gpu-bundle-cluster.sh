#!/usr/bin/env bash
# Build what scripts/gpu-cluster-check.sh runs into .gpu/ (the folder a device run carries,
# at most 64 MiB with the tree): the `launchers` and `multiprocess` test executables at
# .gpu/<name>, the cluster_allreduce example and the cueflow binary at .gpu/bin/<name>, all
# stripped. The raw NCCL reference (benches/cuda/cluster_allreduce.cu) is built by the check
# itself, with nvcc on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu/bin
cargo build --release -q -p cueflow-cli -p cueflow --example cluster_allreduce
cp ${CARGO_TARGET_DIR:-target}/release/cueflow ${CARGO_TARGET_DIR:-target}/release/examples/cluster_allreduce .gpu/bin/
bash scripts/gpu-bundle-tests.sh .gpu -p cueflow --test launchers --test multiprocess
strip .gpu/* .gpu/bin/* 2>/dev/null || true
du -sh .gpu
