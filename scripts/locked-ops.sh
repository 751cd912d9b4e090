#!/usr/bin/env bash
# Locked read-modify-write instructions (x86 `lock`-prefixed: atomic increments, compare-and-
# swaps, mutex lock and unlock) per call of a function, counted by callgrind: on the GPU
# machine's host each costs ~20 cycles, and cueflow's path pays them on every launch.
#
#   bash scripts/locked-ops.sh EXAMPLE 'TOGGLE' CALLS [EXAMPLE ARGS...]
#   e.g. LD_LIBRARY_PATH=/tmp/nulldrv CUEFLOW_DEVICE=cuda \
#        bash scripts/locked-ops.sh enqueue_cost 'cueflow::kernels::empty' 20000 3 4000
#
# TOGGLE is callgrind's --toggle-collect pattern (the function whose calls are counted), CALLS
# how many times the example calls it. Prints instructions and locked instructions per call
# and which functions execute the locked ones. With tools/null-driver as the driver, CUDA
# paths run without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
example=${1:?usage: locked-ops.sh EXAMPLE TOGGLE CALLS [ARGS...]}
toggle=${2:?toggle pattern}
calls=${3:?calls}
shift 3
${NO_BUILD:+:} cargo build --release -q -p cueflow --example "$example"
bin=${BIN_DIR:-target/release/examples}/$example
out=$(mktemp)
valgrind --tool=callgrind --dump-instr=yes --compress-pos=no --compress-strings=no \
  --callgrind-out-file="$out" --toggle-collect="$toggle" "$bin" "$@" >/dev/null 2>&1
python3 - "$out" "$bin" "$calls" <<'PY'
import collections, re, subprocess, sys
out, binary, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
name = binary.split("/")[-1]
count, fn_of = collections.Counter(), {}
skip, fn, obj, total = False, None, None, 0
for line in open(out):
    if line.startswith("ob="):
        obj = line.strip()[3:]
    elif line.startswith("fn="):
        fn = line.strip()[3:]
    elif line.startswith("calls="):
        skip = True  # the next position line is the call's inclusive cost
    elif line.startswith("0x"):
        if skip:
            skip = False
            continue
        p = line.split()
        c = int(p[2]) if len(p) > 2 else 0
        total += c
        if name in (obj or ""):
            a = int(p[0], 16)
            count[a] += c
            fn_of[a] = fn
mnemonic = {}
dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary], capture_output=True, text=True).stdout
for line in dis.splitlines():
    m = re.match(r"\s+([0-9a-f]+):\s+(\S+)", line)
    if m:
        mnemonic[int(m.group(1), 16)] = m.group(2)
locked = collections.Counter()
for a, c in count.items():
    if mnemonic.get(a) == "lock":
        locked[fn_of[a]] += c
print(f"instructions per call {total / calls:.0f}; locked per call {sum(locked.values()) / calls:.2f} (in {name} itself)")
for f, c in locked.most_common(20):
    print(f"{c / calls:6.2f}  {f[:120]}")
PY
rm -f "$out"
