#!/usr/bin/env bash
# Instantiation cost on CUDA (issue 31) of this build against an earlier one, in one device
# call: `instantiate_profile ROUNDS N` (raw driver calls and cueflow in the same process,
# alternating round by round) for each N of SIZES, RUNS processes per build, the builds
# alternating process by process; then per row, size and build the cueflow/raw ratio of
# each run and their median.
#
# Bundle: .gpu/bin/instantiate_profile (this build), .gpu/bin/instantiate_profile_base.
#   bash scripts/gpu-instantiate-check.sh        (OUT, RUNS=3, ROUNDS=21, SIZES="1000 3000")
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}; mkdir -p "$out"
: >"$out/instantiate.txt"
rc=0
for n in ${SIZES:-1000 3000}; do
  for r in $(seq "${RUNS:-3}"); do
    for build in this base; do
      bin=.gpu/bin/instantiate_profile; [ "$build" = base ] && bin=${bin}_base
      CUEFLOW_DEVICE=cuda:0 "$bin" "${ROUNDS:-21}" "$n" 2>&1 | sed "s/^/$build /" \
        | tee -a "$out/instantiate.txt"
      [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    done
  done
done
python3 - "$out/instantiate.txt" <<'PY'
import re, statistics, sys
r = {}
for line in open(sys.argv[1]):
    m = re.match(r"(this|base) RESULT instantiate_profile row=(\w+) nodes=(\d+) raw_us=([\d.]+) cueflow_us=([\d.]+) cueflow/raw=([\d.]+)", line)
    if m:
        r.setdefault((m.group(2), int(m.group(3)), m.group(1)), []).append(float(m.group(6)))
print(f"{'row':10}{'nodes':>6} {'build':6}{'cueflow/raw per run':>28}{'median':>8}")
for (row, n, build), v in sorted(r.items()):
    print(f"{row:10}{n:>6} {build:6}{' '.join(f'{x:.3f}' for x in v):>28}{statistics.median(v):8.3f}")
PY
exit $rc
