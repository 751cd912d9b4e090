#!/usr/bin/env bash
# Build what scripts/gpu-driver-floor.sh runs on the GPU machine into .gpu-floor/ (ignored by
# git; the device run carries it, 64 MiB at most with the working tree, so everything is packed
# with xz: about 42 MiB):
#
#   .gpu-floor/run.sh          scripts/gpu-driver-floor.sh
#   .gpu-floor/bins.tar.xz     bin/: the CUDA test executables (release, stripped), the cueflow
#                              binary, the sample binaries the sample tests run (bin/samples/),
#                              and an old-driver shim per CUDA version (bin/shim/12.x/), built
#                              here from the per-version function lists (gcc; no driver needed)
#   .gpu-floor/nvrtc12.tar.xz  NVRTC 12 and the CUDA 12 headers (runtime and CCCL) from NVIDIA's
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
# Then, on the GPU machine, one command: `bash .gpu-floor/run.sh` (carry `.gpu-floor`).
set -euo pipefail
cd "$(dirname "$0")/.."
tests=${TESTS:-conformance cuda_smoke cuda_c reliability sanitizer interop cudarc cuda_read_check misuse misuse_kernels differential examples async_completions cuda_c_lanes kernel_cache unit_cueflow graph_samples memory_samples stream_samples}
versions=${VERSIONS:-12.0 12.2 12.4 12.6 12.8}
dest=.gpu-floor
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin/samples" "$stage/bin/shim"
rm -rf "$dest" && mkdir -p "$dest"

cargo build --release -q -p cueflow-cli -p cueflow-samples --bins
cp target/release/cueflow "$stage/bin/"
cargo test --release --workspace --no-run --message-format=json 2>/dev/null \
  | TESTS="$tests" STAGE="$stage" python3 -c '
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
for b in "$stage"/bin/samples/*; do
  echo "$needed" | grep -qx "$(basename "$b")" || rm -f "$b"
done
strip "$stage"/bin/* "$stage"/bin/samples/* 2>/dev/null || true
for t in $tests; do [ -x "$stage/bin/$t" ] || echo "warning: no test binary $t"; done

# A shim per version: exactly the driver functions of that version (first <= v <= last).
for v in $versions; do
  n=$(echo "$v" | awk -F. '{print $1*1000 + $2*10}')
  awk -v v="$n" '$1 == "driver" && $2 ~ /^cu[A-Z]/ && $3 <= v && ($4 == "-" || $4 >= v) {print $2}' \
    crates/cueflow/src/backend/cuda/driver/api-versions.txt > "$stage/syms-$v"
  bash tools/old-driver-shim/build.sh "$stage/bin/shim/$v" "" "$stage/syms-$v"
  rm -f "$stage/bin/shim/$v/syms"
done

# One solid stream with xz's 64 MiB window: the binaries share most of their code (38 MiB with
# the default window, about 11 with this one).
tar -cf - -C "$stage" bin | xz -9e -T2 > "$dest/bins.tar.xz"
python3 - "$dest" <<'EOF'
import glob, io, lzma, sys, tarfile, zipfile
out = tarfile.open(sys.argv[1] + "/nvrtc12.tar.xz", "w:xz", preset=9 | lzma.PRESET_EXTREME)
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
            data = z.read(i)
            t = tarfile.TarInfo(i.filename)
            t.size, t.mode = len(data), 0o755
            out.addfile(t, io.BytesIO(data))
out.close()
EOF
cp scripts/gpu-driver-floor.sh "$dest/run.sh"
du -sh "$dest"/*; du -sh "$dest"
