#!/usr/bin/env bash
# The CUDA backend on every driver from CUDA 12.0 on, checked on one new driver: for each of
# CUDA 12.0, 12.2, 12.4, 12.6 and 12.8 an old-driver shim (tools/old-driver-shim) stands in for
# libcuda.so.1, hiding every driver function that version lacks (the per-version lists of
# crates/cueflow/src/backend/cuda/driver/api-versions.txt) and reporting that version from
# cuDriverGetVersion; every CUDA test binary then runs through it with NVRTC 12 (a CUDA 12
# driver needs it: the pip wheel nvidia-cuda-nvrtc-cu12, carried), and one more run uses NVRTC
# 12 on the real driver. Prints a feature × version table (from `cueflow info` under each shim:
# available, or the version the feature needs) and a test binary × version table (passed,
# failed, and tests skipped because a feature is Unsupported on that version).
#
# Run from the bundle's parent after scripts/gpu-bundle-floor.sh made .gpu/ (GPU machine:
# gcc, nm, python3, a CUDA driver). VERSIONS="12.0 12.4" and TESTS="conformance cuda_smoke"
# narrow a run (each version takes one pass over the test binaries); NVRTC_RUN=0 skips the run
# on the real driver. Logs go to $OUT (default /tmp/cueflow-out).
set -uo pipefail
bundle=${BUNDLE:-.gpu}
floor="$bundle/floor"
out=${OUT:-/tmp/cueflow-out}/floor
mkdir -p "$out"
work=$(mktemp -d)
versions=${VERSIONS:-12.0 12.2 12.4 12.6 12.8}
tests=${TESTS:-conformance sanitizer differential cuda_smoke cuda_c interop misuse reliability examples unit_cueflow graph_samples memory_samples stream_samples}
real=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
[ -n "$real" ] || { echo "no libcuda.so.1 on this machine"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

# NVRTC 12 and the CUDA 12 headers, in the pip packages' layout (site-packages/nvidia/...).
tar -xJf "$floor/nvrtc12.tar.xz" -C "$work"
nvrtc_lib="$work/nvidia/cuda_nvrtc/lib"
[ -f "$nvrtc_lib/libnvrtc.so.12" ] || { echo "no libnvrtc.so.12 in the bundle"; exit 1; }
# Headers come from beside NVRTC (the CUDA 12 runtime package), not from a CUDA 13 toolkit.
unset CUDA_HOME CUDA_PATH CUDA_ROOT CUEFLOW_CUDA_INCLUDE
export CUEFLOW_DEVICE=cuda:0 CUEFLOW_REQUIRE_CUDA=1

# The functions a version lacks: those a later version brought (the shim hides them).
hidden() { awk -v v="$1" '$1=="driver" && $3>v {print $2}' "$floor/api-versions.txt" | tr '\n' ' '; }
num() { echo "$1" | awk -F. '{print $1*1000 + $2*10}'; }

# One pass: `cueflow info` and every test binary, with the environment given; results in
# $out/$1/.
pass() {
  local name=$1; shift
  local dir="$out/$name"; mkdir -p "$dir"
  env "$@" "$bundle/cueflow" info > "$dir/info.txt" 2>&1
  for t in $tests; do
    [ -x "$bundle/$t" ] || continue
    env "$@" "$bundle/$t" --test-threads=1 > "$dir/$t.log" 2>&1
    echo "$?" > "$dir/$t.rc"
  done
  echo "-- $name: $(grep -h 'driver version\|NVRTC version' "$dir/info.txt" | sed 's/  */ /g' | tr '\n' ';')"
}

for v in $versions; do
  shim="$work/shim-$v"
  bash "$floor/old-driver-shim/build.sh" "$shim" "$(hidden "$(num "$v")")" > "$out/shim-$v.txt" 2>&1 \
    || { echo "shim $v did not build:"; cat "$out/shim-$v.txt"; continue; }
  pass "$v" SHIM_REAL="$real" SHIM_VERSION="$(num "$v")" \
    LD_LIBRARY_PATH="$shim:$nvrtc_lib:${LD_LIBRARY_PATH:-}"
done
if [ "${NVRTC_RUN:-1}" = 1 ]; then
  pass nvrtc12 CUEFLOW_NVRTC_LIB="$nvrtc_lib/libnvrtc.so.12"
fi

python3 - "$out" $versions $([ "${NVRTC_RUN:-1}" = 1 ] && echo nvrtc12) <<'EOF'
import os, re, sys
out, runs = sys.argv[1], sys.argv[2:]
feats, order = {}, []
for r in runs:
    p = os.path.join(out, r, "info.txt")
    if not os.path.exists(p):
        continue
    lines = open(p).read().splitlines()
    on = False
    for l in lines:
        if "driver features" in l:
            on = True
            continue
        if on and l.startswith("    "):
            m = re.match(r"\s+(.*?)\s{2,}(available|needs CUDA [0-9.]+)(.*)", l)
            if m:
                name, state, rest = m.group(1), m.group(2), m.group(3)
                if name not in feats:
                    feats[name] = {}
                    order.append(name)
                if state == "available":
                    feats[name][r] = "ok"
                else:
                    v = state.split()[-1]
                    feats[name][r] = ("Unsupp " if "Unsupported" in rest else "fallbk ") + v
        elif on:
            on = False
w = max([len(n) for n in order] + [7])
print("\nfeature × driver ('ok'; 'fallbk X' runs its fallback until CUDA X; 'Unsupp X' is Unsupported naming X)")
print("feature".ljust(w), *[r.rjust(12) for r in runs])
for n in order:
    print(n.ljust(w), *[feats[n].get(r, "-").rjust(12) for r in runs])
print("\ntest binary × driver (passed/failed, skipped: tests Unsupported on that driver)")
tests = sorted({f[:-4] for r in runs if os.path.isdir(os.path.join(out, r))
                for f in os.listdir(os.path.join(out, r)) if f.endswith(".log")})
print("binary".ljust(16), *[r.rjust(16) for r in runs])
bad = False
for t in tests:
    cells = []
    for r in runs:
        p = os.path.join(out, r, t + ".log")
        if not os.path.exists(p):
            cells.append("-")
            continue
        text = open(p, errors="replace").read()
        ok = sum(int(x) for x in re.findall(r"test result: \w+\. (\d+) passed", text))
        failed = sum(int(x) for x in re.findall(r"(\d+) failed", text))
        skipped = len(re.findall(r"^SKIP .*needs a CUDA", text, re.M))
        rc = open(os.path.join(out, r, t + ".rc")).read().strip()
        bad |= rc != "0"
        cells.append(f"{ok}/{failed} s{skipped}" + ("" if rc == "0" else " RC" + rc))
    print(t.ljust(16), *[c.rjust(16) for c in cells])
print("\nskips, by what was Unsupported:")
why = {}
for r in runs:
    d = os.path.join(out, r)
    if not os.path.isdir(d):
        continue
    for f in os.listdir(d):
        if f.endswith(".log"):
            for m in re.finditer(r"unsupported: (.*?) needs a CUDA ([0-9.]+) driver", open(os.path.join(d, f), errors="replace").read()):
                why.setdefault((m.group(1), m.group(2)), set()).add(r)
for (what, v), rs in sorted(why.items()):
    print(f"  {what} (needs {v}): {' '.join(sorted(rs))}")
sys.exit(1 if bad else 0)
EOF
status=$?
rm -rf "$work"
exit $status
