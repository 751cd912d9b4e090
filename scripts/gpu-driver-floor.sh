#!/usr/bin/env bash
# The CUDA backend on every driver from CUDA 12.0 on, checked on one new driver in one run:
# every CUDA test binary on the real driver, then through an old-driver shim
# (tools/old-driver-shim) for each of CUDA 12.0, 12.2, 12.4, 12.6 and 12.8 — a libcuda.so.1
# that exports exactly the driver functions of that version (the per-version lists of
# crates/cueflow/src/backend/cuda/driver/api-versions.txt), forwards them to the real driver and
# reports that version from cuDriverGetVersion — with NVRTC 12 (the pip wheel
# nvidia-cuda-nvrtc-cu12 and the CUDA 12 headers, carried: a CUDA 12 driver needs NVRTC 12).
# The six runs go at once (one process each, the binaries of a run one after another), each
# binary within a time limit and all of them before a deadline, so the whole check ends in
# time. Prints a feature × driver table (from `cueflow info` under each), a test binary × driver
# table and what failed; every log goes to $OUT/floor-logs.tar.xz.
#
# Made by scripts/gpu-bundle-floor.sh as .gpu-floor/run.sh beside what it runs; on the GPU
# machine (bash, awk, tar with xz, a CUDA driver; no Rust, Python or compiler needed):
#
#   bash .gpu-floor/run.sh
#
# Knobs: RUNS="real 12.0" (which drivers), TESTS="conformance cuda_smoke" (which binaries),
# DEADLINE=480 (seconds for all runs), PER_BIN=300 (seconds for one binary), OUT, and
# REAL_LIBCUDA (the real driver's file; default: the libcuda.so.1 ldconfig knows).
set -uo pipefail
bundle=$(cd "$(dirname "$0")" && pwd)
t0=$SECONDS
out=${OUT:-/tmp/cueflow-out}
mkdir -p "$out"
work=$(mktemp -d /tmp/cueflow-floor.XXXXXX)
res="$work/results"
runs=${RUNS:-real 12.0 12.2 12.4 12.6 12.8}
# Most telling first: a binary the deadline cuts off is one of the last.
tests=${TESTS:-conformance cuda_smoke cuda_c reliability sanitizer interop cudarc cuda_read_check misuse misuse_kernels differential examples async_completions cuda_c_lanes kernel_cache unit_cueflow graph_samples memory_samples stream_samples}
deadline=${DEADLINE:-480}
per_bin=${PER_BIN:-300}

real=${REAL_LIBCUDA:-$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')}
[ -n "$real" ] || { echo "no libcuda.so.1 on this machine"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || echo "(no nvidia-smi)"
tar -xJf "$bundle/bins.tar.xz" -C "$work" || { echo "bins.tar.xz did not unpack"; exit 1; }
tar -xJf "$bundle/nvrtc12.tar.xz" -C "$work" || { echo "nvrtc12.tar.xz did not unpack"; exit 1; }
nvrtc_lib="$work/nvidia/cuda_nvrtc/lib"
[ -f "$nvrtc_lib/libnvrtc.so.12" ] || { echo "no libnvrtc.so.12 in the bundle"; exit 1; }
echo "unpacked in $((SECONDS - t0)) s; runs: $runs; deadline ${deadline} s"

# Every run: the GPU, the samples beside the tests, a kernel cache of its own, CUDA required.
export CUEFLOW_DEVICE=cuda:0 CUEFLOW_REQUIRE_CUDA=1 CUEFLOW_KC_TEST_CUDA=1 \
  CUEFLOW_SAMPLES_BIN_DIR="$work/bin/samples" RUST_BACKTRACE=0
num() { echo "$1" | awk -F. '{print $1*1000 + $2*10}'; }

# The environment of run $1, one VAR=value a line.
run_env() {
  echo "CUEFLOW_KERNEL_CACHE=$work/cache-$1"
  if [ "$1" != real ]; then
    # NVRTC 12 and its headers (beside it, the pip layout), never a CUDA 13 toolkit's.
    echo "LD_LIBRARY_PATH=$work/bin/shim/$1:$nvrtc_lib:${LD_LIBRARY_PATH:-}"
    echo "SHIM_REAL=$real"
    echo "SHIM_VERSION=$(num "$1")"
    echo "CUDA_HOME=" ; echo "CUDA_PATH=" ; echo "CUDA_ROOT=" ; echo "CUEFLOW_CUDA_INCLUDE="
  fi
}

# One run: `cueflow info`, then each binary within its time limit and the deadline (output not
# captured, so that every SKIP line shows).
one_run() {
  local r=$1 dir="$res/$1"
  mkdir -p "$dir"
  mapfile -t vars < <(run_env "$r")
  env "${vars[@]}" SHIM_VERBOSE=1 timeout -k 5 60 "$work/bin/cueflow" info > "$dir/info.txt" 2>&1
  for t in $tests; do
    [ -x "$work/bin/$t" ] || continue
    local left=$((deadline - (SECONDS - start)))
    [ "$left" -gt 10 ] || { echo late > "$dir/$t.rc"; continue; }
    local limit=$((left < per_bin ? left : per_bin)) args=()
    # The library's unit tests: the CUDA backend's (the rest does not depend on the driver).
    [ "$t" = unit_cueflow ] && args=(backend::cuda)
    local s=$SECONDS
    (cd "$work" && env "${vars[@]}" timeout -k 5 "$limit" "$work/bin/$t" "${args[@]}" \
      --test-threads=1 --nocapture > "$dir/$t.log" 2>&1)
    echo "$?" > "$dir/$t.rc"
    echo "$((SECONDS - s))" > "$dir/$t.secs"
  done
}

start=$SECONDS
for r in $runs; do one_run "$r" & done
wait
echo "ran in $((SECONDS - start)) s"

# The tables.
awk -v runs="$runs" -v res="$res" '
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
printf "%-16s" binary; for r in $runs; do printf " %18s" "$r"; done; echo
for t in $tests; do
  [ -x "$work/bin/$t" ] || continue
  printf "%-16s" "$t"
  for r in $runs; do
    f="$res/$r/$t"
    if [ ! -f "$f.rc" ]; then printf " %18s" "-"; bad=1; continue; fi
    rc=$(cat "$f.rc")
    if [ "$rc" = late ]; then printf " %18s" "not run"; bad=1; continue; fi
    cellv=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
      /SKIP .*needs a CUDA/ { s++ } /SKIP.*[Uu]navailable/ { u++ }
      END { printf "%d/%d s%d", p, f, s; if (u) printf " u%d", u }' "$f.log")
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
for r in $runs; do
  cat "$res/$r"/*.log 2>/dev/null | grep -o "unsupported: .* needs a CUDA [0-9.]* driver" \
    | sed 's/^unsupported: //; s/ driver$//' | sort -u | sed "s/^/$r	/"
done | awk -F'\t' '{ w[$2] = w[$2] " " $1 } END { for (k in w) print "  " k ":" w[k] }' | sort

echo
echo "failures (first lines of each failing binary's log):"
{ for r in $runs; do
  for t in $tests; do
    f="$res/$r/$t"
    [ -f "$f.rc" ] || continue
    rc=$(cat "$f.rc"); [ "$rc" = 0 ] || [ "$rc" = late ] && continue
    echo "-- $r $t (exit $rc)"
    { grep -E "^test .* FAILED|panicked at|^Error|unsupported|unavailable" "$f.log" || tail -3 "$f.log"; } \
      | grep -v "^test result" | head -${FAIL_LINES:-6} | cut -c1-220
  done
done; } | head -"${FAIL_TOTAL:-90}"

tar -cJf "$out/floor-logs.tar.xz" -C "$work" results 2>/dev/null \
  && echo "logs: \$OUT/floor-logs.tar.xz ($(du -h "$out/floor-logs.tar.xz" | cut -f1))"
echo "whole check: $((SECONDS - t0)) s"
rm -rf "$work"
exit $bad
