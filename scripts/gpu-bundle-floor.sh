#!/usr/bin/env bash
# Build what scripts/gpu-driver-floor.sh runs on the GPU machine into .gpu-floor/ (ignored by
# git), then pack it with scripts/gpu-pack.sh into .gpuz/gpu-floor.tar.xz (one solid xz stream
# with a 512 MiB window: the executables share most of their bytes, so the whole folder packs
# into a fraction of the 64 MiB a device call carries with the working tree):
#
#   .gpu-floor/run.sh          scripts/gpu-driver-floor.sh
#   .gpu-floor/bin/            the CUDA test executables (release, stripped), the cueflow binary,
#                              the sample binaries the sample tests run (bin/samples/), and an
#                              old-driver shim per CUDA version (bin/shim/12.x/), built here from
#                              the per-version function lists (gcc; no driver needed)
#   .gpu-floor/nvidia/         NVRTC 12 and the CUDA 12 headers (runtime and CCCL) from NVIDIA's
#                              pip wheels, in their pip layout (nvidia/<package>/{lib,include})
#
# The wheels go into the ignored .whl/ first:
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux2014_x86_64 -d .whl nvidia-cuda-nvrtc-cu12==12.9.86 \
#     nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-cccl-cu12==12.9.27
#
# (CCCL's headers, cuda/std and nv/target, are a package of their own in CUDA 12's pip layout:
# without it cooperative_groups.h does not compile. cueflow finds all three beside libnvrtc.)
#
# Then, on the GPU machine, carrying `.gpuz` (run.sh's header says why two calls of three
# versions each):
#
#   python3 scripts/gpu-unpack.py && VERSIONS="real 12.0 12.2" bash .gpu-floor/run.sh
#   python3 scripts/gpu-unpack.py && VERSIONS="12.4 12.6 12.8" bash .gpu-floor/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tests=${TESTS:-conformance cuda_smoke cuda_c reliability sanitizer interop cudarc cuda_read_check misuse misuse_kernels differential examples async_completions cuda_c_lanes kernel_cache unit_cueflow graph_samples memory_samples stream_samples}
versions=${VERSIONS:-12.0 12.2 12.4 12.6 12.8}
dest=.gpu-floor
rm -rf "$dest" && mkdir -p "$dest/bin/samples" "$dest/bin/shim"

cargo build --release -q -p cueflow-cli -p cueflow-samples --bins
cp ${CARGO_TARGET_DIR:-target}/release/cueflow "$dest/bin/"
cargo test --release --workspace --no-run --message-format=json 2>/dev/null \
  | TESTS="$tests" STAGE="$dest" python3 -c '
import json, os, shutil, sys
want, stage = set(os.environ["TESTS"].split()), os.environ["STAGE"]
for line in sys.stdin:
    m = json.loads(line)
    exe, t = m.get("executable"), m.get("target", {})
    if m.get("reason") != "compiler-artifact" or not exe:
        continue
    name = t["name"]
    if t["kind"] == ["bin"]:
        # The ported samples, which the sample tests run as a user would (the programs, not
        # their unit-test harnesses).
        if "cueflow-samples" in m["package_id"] and not m["profile"]["test"]:
            shutil.copy(exe, f"{stage}/bin/samples/{name}")
        continue
    if t["kind"] == ["lib"]:
        name = "unit_" + name
    elif t["kind"] != ["test"]:
        continue  # examples, benches
    if name in want:
        shutil.copy(exe, f"{stage}/bin/{name}")
        print("bundled", name)
'
# Only the samples the bundled sample tests run.
needed=$(for t in $tests; do
  f=crates/cueflow-samples/tests/$t.rs
  [ -f "$f" ] && grep -ohE "CARGO_BIN_EXE_[a-z0-9_]+" "$f" | sed 's/^CARGO_BIN_EXE_//'
done | sort -u)
for b in "$dest"/bin/samples/*; do
  echo "$needed" | grep -qx "$(basename "$b")" || rm -f "$b"
done
strip "$dest"/bin/* "$dest"/bin/samples/* 2>/dev/null || true
for t in $tests; do [ -x "$dest/bin/$t" ] || echo "warning: no test binary $t"; done

# A shim per version: exactly the driver functions of that version (first <= v <= last).
for v in $versions; do
  n=$(echo "$v" | awk -F. '{print $1*1000 + $2*10}')
  awk -v v="$n" '$1 == "driver" && $2 ~ /^cu[A-Z]/ && $3 <= v && ($4 == "-" || $4 >= v) {print $2}' \
    crates/cueflow/src/backend/cuda/driver/api-versions.txt > "$dest/syms-$v"
  bash tools/old-driver-shim/build.sh "$dest/bin/shim/$v" "" "$dest/syms-$v"
  rm -f "$dest/bin/shim/$v/syms"
done

rm -f "$dest"/syms-*
python3 - "$dest" <<'EOF'
import glob, sys, zipfile
dest = sys.argv[1]
# NVRTC itself and its builtins (not the .alt. variants), the runtime's headers, and CCCL's
# cuda/ and nv/ (cuda/std, nv/target: cooperative_groups.h and cuda_fp16.h include them; CUB
# and Thrust, which no bundled test includes, stay out).
for pattern, keep in [("nvidia_cuda_nvrtc_cu12-*.whl", ("/lib/",)),
                      ("nvidia_cuda_runtime_cu12-*.whl", ("/include/",)),
                      ("nvidia_cuda_cccl_cu12-*.whl", ("/include/cuda/", "/include/nv/"))]:
    wheels = sorted(glob.glob(".whl/" + pattern))
    if not wheels:
        sys.exit(f"no {pattern} in .whl/: download it first (see the script's header)")
    z = zipfile.ZipFile(wheels[-1])
    for i in z.infolist():
        if any(k in i.filename for k in keep) and not i.is_dir() and ".alt." not in i.filename:
            z.extract(i, dest)
EOF
cp scripts/gpu-driver-floor.sh "$dest/run.sh"
du -sh "$dest"/*; du -sh "$dest"
bash scripts/gpu-pack.sh "$dest"
