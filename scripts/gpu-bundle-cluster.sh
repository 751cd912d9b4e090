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
cp target/release/cueflow target/release/examples/cluster_allreduce .gpu/bin/
cargo test --release -p cueflow --test launchers --test multiprocess --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get("executable")
    if exe and m.get("reason") == "compiler-artifact" and m["target"]["kind"] == ["test"]:
        shutil.copy(exe, ".gpu/" + m["target"]["name"])
        print("bundled", m["target"]["name"])
'
strip .gpu/* .gpu/bin/* 2>/dev/null || true
du -sh .gpu
