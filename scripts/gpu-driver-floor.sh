#!/usr/bin/env bash
# The CUDA backend on every driver from CUDA 12.0 on, checked on one new driver: every CUDA
# test binary on the real driver, then through an old-driver shim (tools/old-driver-shim) for
# CUDA 12.0, 12.2, 12.4, 12.6 and 12.8 — a libcuda.so.1 that exports exactly the driver
# functions of that version (the per-version lists of
# crates/cueflow/src/backend/cuda/driver/api-versions.txt), forwards them to the real driver and
# reports that version from cuDriverGetVersion — with NVRTC 12 and the CUDA 12 headers
# (runtime and CCCL, NVIDIA's pip wheels, carried in their pip layout: a CUDA 12 driver needs
# NVRTC 12, and cueflow finds the headers beside it).
#
# Each version runs alone by default, one after another (PAR=N runs N at once: they then share
# the GPU, and the tests that measure concurrency or occupancy may fail for that alone), with a
# kernel cache folder of its own; its binaries run one after another, each within a time
# limit. A line per version as it ends (each binary's passed/failed/skipped counts), then a
# feature × driver table (from `cueflow info`), a binary × driver table, the skips by what was
# needed, and the first lines of each failure; every log goes to $OUT/floor-logs-<versions>.tar.xz.
#
# Made by scripts/gpu-bundle-floor.sh as .gpu-floor/run.sh beside what it runs (bin/, nvidia/),
# packed by scripts/gpu-pack.sh into .gpuz/gpu-floor.tar.xz. On the GPU machine (bash, awk,
# Python 3 for the unpacking, a CUDA driver; no Rust or compiler needed), carrying `.gpuz`:
#
#   python3 scripts/gpu-unpack.py && bash .gpu-floor/run.sh
#
# Time: a device call may run 600 s, unpacking included (about half a minute). One version
# alone runs its 19 binaries in an estimated 2–3 minutes on an H100 (conformance and the
# sanitizer corpus, which run their GPU tests one at a time, and reliability, which starts a
# process per fault, take most of it); six versions do not fit in one call. Split them over two
# calls of three:
#
#   VERSIONS="real 12.0 12.2" bash .gpu-floor/run.sh      (first call)
#   VERSIONS="12.4 12.6 12.8" bash .gpu-floor/run.sh      (second call)
#
# Whatever the estimate, the call ends in time: a version is started only while the time left
# (DEADLINE) holds the longest version measured so far (EST before the first one ends), each
# binary gets at most the time left, and the versions left out are printed with the VERSIONS=
# for the next call.
#
# Knobs: VERSIONS="real 12.0" (which drivers; RUNS is the older name), TESTS="conformance
# cuda_smoke" (which binaries), PAR=1 (versions at once), DEADLINE=500 (seconds for this
# script), EST=180 (seconds one version is assumed to take until one has been measured),
# PER_BIN=240 (seconds for one binary), OUT, and REAL_LIBCUDA (the real driver's file;
# default: the libcuda.so.1 ldconfig knows).
set -uo pipefail
bundle=$(cd "$(dirname "$0")" && pwd)
t0=$SECONDS
out=${OUT:-/tmp/cueflow-out}
mkdir -p "$out"
work=$(mktemp -d /tmp/cueflow-floor.XXXXXX)
res="$work/results"
mkdir -p "$res"
versions=${VERSIONS:-${RUNS:-real 12.0 12.2 12.4 12.6 12.8}}
# Most telling first: a binary the deadline cuts off is one of the last.
tests=${TESTS:-conformance cuda_smoke cuda_c reliability sanitizer interop cudarc cuda_read_check misuse misuse_kernels differential examples async_completions cuda_c_lanes kernel_cache unit_cueflow graph_samples memory_samples stream_samples}
par=${PAR:-1}
deadline=${DEADLINE:-500}
est=${EST:-180}
per_bin=${PER_BIN:-240}
bin="$bundle/bin"

real=${REAL_LIBCUDA:-$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')}
[ -n "$real" ] || { echo "no libcuda.so.1 on this machine"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || echo "(no nvidia-smi)"
[ -x "$bin/cueflow" ] || { echo "no $bin/cueflow: unpack the bundle first (python3 scripts/gpu-unpack.py)"; exit 1; }
nvrtc_lib="$bundle/nvidia/cuda_nvrtc/lib"
[ -f "$nvrtc_lib/libnvrtc.so.12" ] || { echo "no libnvrtc.so.12 in the bundle"; exit 1; }
echo "versions: $versions; $par at once; deadline ${deadline} s"

# Every run: the GPU, the samples beside the tests, CUDA required.
export CUEFLOW_DEVICE=cuda:0 CUEFLOW_REQUIRE_CUDA=1 CUEFLOW_SAMPLES_BIN_DIR="$bin/samples" \
  RUST_BACKTRACE=0
num() { echo "$1" | awk -F. '{print $1*1000 + $2*10}'; }

# The environment of version $1, one VAR=value a line: a kernel cache of its own, and for a
# shimmed version the shim first on the loader path, NVRTC 12 next, no CUDA 13 toolkit's headers.
run_env() {
  echo "CUEFLOW_KERNEL_CACHE=$work/cache-$1"
  if [ "$1" != real ]; then
    echo "LD_LIBRARY_PATH=$bin/shim/$1:$nvrtc_lib:${LD_LIBRARY_PATH:-}"
    echo "SHIM_REAL=$real"
    echo "SHIM_VERSION=$(num "$1")"
    echo "CUDA_HOME=" ; echo "CUDA_PATH=" ; echo "CUDA_ROOT=" ; echo "CUEFLOW_CUDA_INCLUDE="
  fi
}

# "passed/failed sN[ uN]" of one log: N skipped as Unsupported on that driver; uN skipped
# because CUDA was unavailable (a failure here; a test that needs a second GPU, on a machine
# with one, is not counted).
cell() {
  awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
    /SKIP .*needs a CUDA/ { s++ } /SKIP.*[Uu]navailable/ && !/second GPU|two GPUs|device 1 does not exist/ { u++ }
    END { printf "%d/%d s%d", p, f, s; if (u) printf " u%d", u }' "$1"
}

# One version: `cueflow info`, then each binary within its time limit and the deadline (output
# not captured, so that every SKIP line shows); then its summary line.
one_run() {
  local r=$1 dir="$res/$1" s0=$SECONDS
  mkdir -p "$dir"
  mapfile -t vars < <(run_env "$r")
  env "${vars[@]}" SHIM_VERBOSE=1 timeout -k 5 60 "$bin/cueflow" info > "$dir/info.txt" 2>&1
  for t in $tests; do
    [ -x "$bin/$t" ] || continue
    local left=$((deadline - (SECONDS - t0)))
    [ "$left" -gt 10 ] || { echo late > "$dir/$t.rc"; continue; }
    local limit=$((left < per_bin ? left : per_bin)) args=()
    # The library's unit tests: the CUDA backend's (the rest does not depend on the driver).
    [ "$t" = unit_cueflow ] && args=(backend::cuda)
    local s=$SECONDS
    (cd "$work" && env "${vars[@]}" timeout -k 5 "$limit" "$bin/$t" "${args[@]}" \
      --test-threads=1 --nocapture > "$dir/$t.log" 2>&1)
    echo "$?" > "$dir/$t.rc"
    echo "$((SECONDS - s))" > "$dir/$t.secs"
  done
  echo "$((SECONDS - s0))" > "$dir/secs"
  # The summary line: each binary's passed/failed/skipped, and the totals.
  local line="" tp=0 tf=0 ts=0 tu=0 bad="" late=""
  for t in $tests; do
    [ -f "$dir/$t.rc" ] || continue
    local rc c
    rc=$(cat "$dir/$t.rc")
    if [ "$rc" = late ]; then line="$line $t:late"; late="$late $t"; continue; fi
    c=$(cell "$dir/$t.log")
    read -r p f sk u <<< "$(echo "$c" | awk -F'[/ su]+' '{print $1, $2, $3, $4 + 0}')"
    tp=$((tp + p)); tf=$((tf + f)); ts=$((ts + sk)); tu=$((tu + u))
    line="$line $t:$p/$f/$sk"
    { [ "$rc" = 0 ] && [ "$u" = 0 ]; } || bad="$bad $t"
  done
  [ -z "$late" ] || echo "$late" > "$dir/late"
  printf '[%s] %d s: passed %d, failed %d, skipped %d (as Unsupported), CUDA unavailable %d;%s%s\n' \
    "$r" "$(cat "$dir/secs")" "$tp" "$tf" "$ts" "$tu" "${bad:+ FAILING:$bad;}" \
    "${late:+ NOT RUN (no time left):$late}"
  printf '[%s]   binary:passed/failed/skipped%s\n' "$r" "$line"
}

# Start each version while the time left holds one: the longest whole version so far, else
# EST; none once a version was cut short (its binaries ran out of time). The first always
# starts (its binaries are bounded by the deadline anyway).
ran="" left_out=""
for r in $versions; do
  while [ "$(jobs -rp | wc -l)" -ge "$par" ]; do wait -n; done
  longest=$est cut=""
  for d in "$res"/*/; do
    [ -f "$d/secs" ] || continue
    if [ -f "$d/late" ]; then cut=1; elif [ "$(cat "$d/secs")" -gt "$longest" ]; then longest=$(cat "$d/secs"); fi
  done
  if [ -n "$ran" ] && { [ -n "$cut" ] || [ $((SECONDS - t0 + longest)) -gt "$deadline" ]; }; then
    left_out="$left_out $r"
    continue
  fi
  ran="$ran $r"
  one_run "$r" &
done
wait
ran=${ran# }
# A version cut short runs again, whole, in the next call.
for r in $ran; do [ -f "$res/$r/late" ] && left_out=" $r$left_out"; done
echo "ran $ran in $((SECONDS - t0)) s"

# The tables.
awk -v runs="$ran" -v res="$res" '
BEGIN {
  n = split(runs, R, " ")
  printf "\nfeature x driver (ok; \"fb X\": its fallback runs, the feature itself needs CUDA X; \"no X\": Unsupported, needs CUDA X)\n"
  for (i = 1; i <= n; i++) {
    f = res "/" R[i] "/info.txt"; on = 0; cudadev = 0
    while ((getline l < f) > 0) {
      if (l ~ /driver features/) { on = 1; continue }
      if (on && l ~ /^    /) {
        sub(/^ +/, "", l)
        name = l; sub(/  +(available|needs CUDA).*$/, "", name)
        st = "ok"
        if (match(l, /needs CUDA [0-9.]+/)) {
          v = substr(l, RSTART + 11, RLENGTH - 11)
          st = (l ~ /Unsupported here/ ? "no " : "fb ") v
        }
        if (!(name in seen)) { seen[name] = 1; order[++m] = name; if (length(name) > w) w = length(name) }
        cell[name, i] = st
      } else if (on) on = 0
      if (l ~ /^device /) cudadev = (l ~ /^device cuda/)
      if (cudadev && l ~ /^  (driver|NVRTC) version/) { sub(/^ +/, "", l); gsub(/  +/, " ", l); drv[i] = drv[i] (i in drv ? "; " : "") l }
      if (l ~ /^  cuda +unavailable/) { sub(/^ +/, "", l); gsub(/  +/, " ", l); drv[i] = l }
    }
    close(f)
  }
  for (i = 1; i <= n; i++) printf "  %-6s %s\n", R[i], substr(i in drv ? drv[i] : "no cueflow info", 1, 200)
  printf "%-" w "s", "feature"; for (i = 1; i <= n; i++) printf " %8s", R[i]; print ""
  for (k = 1; k <= m; k++) {
    printf "%-" w "s", order[k]
    for (i = 1; i <= n; i++) printf " %8s", ((order[k], i) in cell ? cell[order[k], i] : "-")
    print ""
  }
}'
echo
echo "test binary x driver (passed/failed, sN: N tests skipped as Unsupported on that driver, seconds; uN: N skips"
echo "because CUDA was unavailable; !RC: exit code; TIME: cut off)"
bad=0
printf "%-16s" binary; for r in $ran; do printf " %18s" "$r"; done; echo
for t in $tests; do
  [ -x "$bin/$t" ] || continue
  printf "%-16s" "$t"
  for r in $ran; do
    f="$res/$r/$t"
    if [ ! -f "$f.rc" ]; then printf " %18s" "-"; bad=1; continue; fi
    rc=$(cat "$f.rc")
    if [ "$rc" = late ]; then printf " %18s" "not run"; bad=1; continue; fi
    cellv=$(cell "$f.log")
    case "$cellv" in *" u"[0-9]*) bad=1 ;; esac
    case $rc in
      0) ;;
      124|137) cellv="$cellv TIME"; bad=1 ;;
      *) cellv="$cellv !$rc"; bad=1 ;;
    esac
    printf " %18s" "$cellv $(cat "$f.secs" 2>/dev/null)s"
  done
  echo
done

echo
echo "skipped as Unsupported (what, the version it needs: the drivers where it was):"
for r in $ran; do
  cat "$res/$r"/*.log 2>/dev/null | grep -o "unsupported: .* needs a CUDA [0-9.]* driver" \
    | sed 's/^unsupported: //; s/ driver$//' | sort -u | sed "s/^/$r	/"
done | awk -F'\t' '{ w[$2] = w[$2] " " $1 } END { for (k in w) print "  " k ":" w[k] }' | sort

echo
echo "failures (first lines of each failing binary's log):"
{ for r in $ran; do
  for t in $tests; do
    f="$res/$r/$t"
    [ -f "$f.rc" ] || continue
    rc=$(cat "$f.rc"); [ "$rc" = 0 ] || [ "$rc" = late ] && continue
    echo "-- $r $t (exit $rc)"
    { grep -E "^test .* FAILED|panicked at|^Error|unsupported|unavailable" "$f.log" || tail -3 "$f.log"; } \
      | grep -v "^test result" | head -${FAIL_LINES:-6} | cut -c1-220
  done
done; } | head -"${FAIL_TOTAL:-90}"

if [ -n "$left_out" ]; then
  bad=1
  echo
  echo "NOT RUN or cut short (no time left in this call):$left_out"
  echo "next call: python3 scripts/gpu-unpack.py && VERSIONS=\"${left_out# }\" bash .gpu-floor/run.sh"
fi
logs="$out/floor-logs-$(echo "$ran" | tr ' ' '_').tar.xz"
tar -cJf "$logs" -C "$work" results 2>/dev/null \
  && echo "logs: \$OUT/$(basename "$logs") ($(du -h "$logs" | cut -f1))"
echo "whole check: $((SECONDS - t0)) s"
rm -rf "$work"
exit $bad
