#!/usr/bin/env bash
# usage: build.sh OUTDIR — a libcuda.so(.1) in OUTDIR that forwards every driver function to the
# real driver and counts the calls (see README.md). Needs gcc, nm, python3 (on the GPU machines).
set -eu
here=$(cd "$(dirname "$0")" && pwd); out=$1
real=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
mkdir -p "$out"; echo "$real" > "$out/real"
nm -D --defined-only "$real" | awk '$2=="T"{print $3}' | sed 's/@.*//' | sort -u > "$out/syms"
python3 "$here/gen.py" "$out/syms" > "$out/stubs.S"
gcc -O2 -shared -fPIC -o "$out/libcuda.so.1" "$out/stubs.S" "$here/count.c" -ldl
ln -sf libcuda.so.1 "$out/libcuda.so"
echo "driver-call-count: $(wc -l < "$out/syms") functions counted and forwarded to $real"
