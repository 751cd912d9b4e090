#!/usr/bin/env bash
# The bundle scripts/gpu-driver-floor.sh runs from: the release test executables that use CUDA
# and the cueflow binary (stripped), the old-driver shim's sources, the per-version function
# lists, and NVRTC 12 with the CUDA 12 headers from NVIDIA's pip wheels, repacked with xz (the
# whole NVRTC wheel is 90 MB; the device run carries 64 MiB at most). Download the wheels
# first, into the ignored .whl/:
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux2014_x86_64 -d .whl nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12
set -euo pipefail
cd "$(dirname "$0")/.."
tests=${TESTS:-conformance sanitizer differential cuda_smoke cuda_c interop misuse reliability examples unit_cueflow graph_samples memory_samples stream_samples}
rm -rf .gpu && mkdir -p .gpu/floor
cargo build --release -q -p cueflow-cli
cp target/release/cueflow .gpu/
cargo test --release --workspace --no-run --message-format=json 2>/dev/null \
  | TESTS="$tests" python3 -c '
import json, os, sys, shutil
want = set(os.environ["TESTS"].split())
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get("executable")
    if m.get("reason") == "compiler-artifact" and exe and m["target"]["kind"] != ["bin"]:
        name = m["target"]["name"]
        if m["target"]["kind"] == ["lib"]:
            name = "unit_" + name
        if name in want:
            shutil.copy(exe, ".gpu/" + name)
            print("bundled", name)
'
strip .gpu/* 2>/dev/null || true
cp -r tools/old-driver-shim .gpu/floor/
cp crates/cueflow/src/backend/cuda/driver/api-versions.txt scripts/gpu-driver-floor.sh .gpu/floor/
python3 - <<'EOF'
import glob, io, sys, tarfile, zipfile
out = tarfile.open(".gpu/floor/nvrtc12.tar.xz", "w:xz", preset=6)
for pattern, keep in [("nvidia_cuda_nvrtc_cu12-*.whl", "/lib/"), ("nvidia_cuda_runtime_cu12-*.whl", "/include/")]:
    wheels = sorted(glob.glob(".whl/" + pattern))
    if not wheels:
        sys.exit(f"no {pattern} in .whl/: download it first (see the script's header)")
    z = zipfile.ZipFile(wheels[-1])
    for i in z.infolist():
        # NVRTC itself and its builtins (not the .alt. variants), and the runtime's headers.
        if keep in i.filename and not i.is_dir() and ".alt." not in i.filename:
            data = z.read(i)
            t = tarfile.TarInfo(i.filename)
            t.size, t.mode = len(data), 0o755
            out.addfile(t, io.BytesIO(data))
out.close()
EOF
du -sh .gpu .gpu/floor/nvrtc12.tar.xz
