#!/usr/bin/env bash
# usage: build.sh OUTDIR — libcuda.so(.1), libnvrtc.so and libnccl.so.2 in OUTDIR that do
# nothing and succeed (README.md). Every driver function cudarc binds that null_cuda.c does not define
# becomes a stub returning CUDA_SUCCESS. Needs gcc and cargo's copy of cudarc.
set -eu
here=$(cd "$(dirname "$0")" && pwd); out=$1
mkdir -p "$out"
sys=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19*/src/driver/sys/mod.rs | tail -1)
grep -oE '^pub unsafe fn cu[A-Za-z0-9_]+' "$sys" | awk '{print $4}' | sort -u > "$out/all"
grep -oE '^CUresult (cu[A-Za-z0-9_]+)' "$here/null_cuda.c" | awk '{print $2}' | sort -u > "$out/defined"
comm -23 "$out/all" "$out/defined" | awk '{print "int " $1 "(void) { return 0; }"}' > "$out/stubs.c"
gcc -O2 -shared -fPIC -o "$out/libcuda.so.1" "$here/null_cuda.c" "$out/stubs.c"
ln -sf libcuda.so.1 "$out/libcuda.so"
gcc -O2 -shared -fPIC -o "$out/libnvrtc.so" "$here/null_nvrtc.c"
gcc -O2 -shared -fPIC -o "$out/libnccl.so.2" "$here/null_nccl.c"
for v in 13 12; do ln -sf libnvrtc.so "$out/libnvrtc.so.$v"; done
echo "null-driver: $(wc -l < "$out/defined") functions defined, $(comm -23 "$out/all" "$out/defined" | wc -l) stubbed, in $out"
