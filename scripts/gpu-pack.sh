#!/usr/bin/env bash
# Pack a bundle folder (default .gpu/) into one solid xz archive for a device run, which
# carries at most 64 MiB: the release binaries share most of their bytes (the standard
# library, cueflow, the CUDA C front end), so ~450 MiB of stripped executables pack into
# ~12 MiB. On the GPU machine: `python3 scripts/gpu-unpack.py` (no xz binary needed).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-.gpu}
mkdir -p .gpuz
ex=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$ex")"
grep -qx '/.gpuz/' "$ex" 2>/dev/null || echo '/.gpuz/' >> "$ex"
tar cf - "$src" | xz -T1 -6 --lzma2=preset=6,dict=512MiB > ".gpuz/$(basename "$src" | sed "s/^\.//").tar.xz"
du -sh ".gpuz/$(basename "$src" | sed "s/^\.//").tar.xz"
