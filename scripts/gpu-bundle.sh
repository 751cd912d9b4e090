#!/usr/bin/env bash
# Build everything the GPU check runs (release test executables, the cueflow binary, the
# examples) and copy them, stripped, into .gpu/ — the folder the device run carries.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu
cargo build --release -q -p cueflow-cli -p cueflow --examples --bins
cp target/release/cueflow .gpu/
for ex in 01_stream 02_event_timing; do cp "target/release/examples/$ex" .gpu/; done
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
strip .gpu/* 2>/dev/null || true
cp scripts/gpu-check.sh .gpu/
du -sh .gpu
