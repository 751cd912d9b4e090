#!/usr/bin/env bash
# Per-call costs on CUDA (issue 31) of this build against an earlier one, in one device call:
# `percall_profile` (each row cueflow against the raw driver call in the same process,
# alternating round by round) run RUNS times per build, the builds alternating run by run; then
# per row and build the cueflow/raw ratio of each run and their median.
#
# Bundle: scripts/gpu-bundle-percall.sh (.gpu/bin/percall_profile, .gpu/base/percall_profile).
#   bash scripts/gpu-percall-check.sh            (OUT, RUNS=3, ROUNDS=5, CALLS=10000)
set -uo pipefail
out=${OUT:-/tmp/cueflow-out}; mkdir -p "$out"
runs=${RUNS:-3}
: >"$out/percall.txt"
rc=0
for r in $(seq "$runs"); do
  for build in bin base; do
    CUEFLOW_DEVICE=cuda:0 ".gpu/$build/percall_profile" "${ROUNDS:-5}" "${CALLS:-10000}" 2>&1 \
      | sed "s/^/$build /" | tee -a "$out/percall.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  done
done
python3 - "$out/percall.txt" <<'PY'
import re, statistics, sys
r = {}
for line in open(sys.argv[1]):
    m = re.match(r"(bin|base) RESULT percall (\w+): raw ([\d.]+) us, cueflow ([\d.]+) us, cueflow/raw ([\d.]+)", line)
    if m:
        r.setdefault((m.group(2), m.group(1)), []).append((float(m.group(3)), float(m.group(4)), float(m.group(5))))
print(f"{'row':10}{'build':7}{'raw us':>16}{'cueflow us':>18}{'cueflow/raw per run':>34}{'median':>8}")
for (row, build), v in sorted(r.items()):
    raw = "–".join(f"{x[0]:.2f}" for x in (min(v), max(v)))
    cf = "–".join(f"{x:.2f}" for x in (min(y[1] for y in v), max(y[1] for y in v)))
    ratios = " ".join(f"{x[2]:.3f}" for x in v)
    print(f"{row:10}{'this' if build == 'bin' else 'base':7}{raw:>16}{cf:>18}{ratios:>34}{statistics.median(x[2] for x in v):8.3f}")
PY
exit $rc
