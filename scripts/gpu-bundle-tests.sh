#!/usr/bin/env bash
# Copy release test executables into a bundle folder, named after their test target:
#   bash scripts/gpu-bundle-tests.sh DEST [CARGO TEST ARGS...]
# builds `cargo test --release --no-run CARGO TEST ARGS` and copies each test target's
# executable to DEST/<name> (KEEP="a b", when set, keeps only those targets). The gpu-bundle
# scripts share it.
set -euo pipefail
dest=$1; shift
mkdir -p "$dest"
cargo test --release --no-run --message-format=json "$@" 2>/dev/null \
  | DEST="$dest" KEEP="${KEEP:-}" python3 -c '
import json, os, shutil, sys
dest, keep = os.environ["DEST"], set(os.environ["KEEP"].split())
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get("executable")
    if not exe or m.get("reason") != "compiler-artifact" or m["target"]["kind"] != ["test"]:
        continue
    name = m["target"]["name"]
    if not keep or name in keep:
        shutil.copy(exe, os.path.join(dest, name))
        print("bundled", name)
'
