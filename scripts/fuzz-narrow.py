#!/usr/bin/env python3
"""Narrow a differential-fuzzer program whose fault ends the process down to the steps it needs.

The fuzzer's own shrinking cannot do this: after a fault that leaves CUDA unusable, every
later try fails the same way. Here each try is a new process that runs only the kept steps
(`FUZZ_STEPS`), `REPEAT` times over (`FUZZ_REPEAT`, for faults that show only now and then);
a try "fails" when the output holds `MATCH`. Delta debugging over the step list, within
`BUDGET` seconds.

    SEED=47 PROGRAM=2006 STEPS=36 MODES=auto [REPEAT=40] [BUDGET=300] [MATCH=poisoned] \
        python3 scripts/fuzz-narrow.py [.gpu/differential_fuzz]

`STEPS` is the program's number of steps (`FUZZ_PRINT=1` prints the program). Prints each
try and the smallest list of steps that still fails; replay it with
`FUZZ_SEED=… FUZZ_FROM=… FUZZ_PROGRAMS=1 FUZZ_STEPS=… FUZZ_PRINT=1`.
"""
import os
import subprocess
import sys
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else ".gpu/differential_fuzz"
SEED, PROGRAM, STEPS = os.environ["SEED"], os.environ["PROGRAM"], int(os.environ["STEPS"])
MODES = os.environ.get("MODES", "ordered,auto,random")
REPEAT = os.environ.get("REPEAT", "40")
BUDGET = float(os.environ.get("BUDGET", "300"))
MATCH = os.environ.get("MATCH", "poisoned")
START = time.time()


def fails(keep):
    env = dict(os.environ, FUZZ_SEED=SEED, FUZZ_FROM=PROGRAM, FUZZ_PROGRAMS="1",
               FUZZ_MODES=MODES, FUZZ_REPEAT=REPEAT, FUZZ_SHRINK_SECS="0",
               FUZZ_STEPS=",".join(map(str, keep)) or "999999")
    r = subprocess.run([BIN, "--nocapture"], env=env, capture_output=True, text=True)
    bad = r.returncode != 0 and MATCH in r.stderr
    what = "fails" if bad else "passes" if r.returncode == 0 else "fails otherwise"
    print(f"{time.time() - START:6.1f}s steps {keep}: {what}", flush=True)
    return bad


def main():
    keep = list(range(STEPS))
    if not fails(keep):
        sys.exit("the whole program does not fail: nothing to narrow")
    n = 2
    while len(keep) >= 2 and time.time() - START < BUDGET:
        size = max(1, len(keep) // n)
        for i in range(0, len(keep), size):
            rest = keep[:i] + keep[i + size:]
            if time.time() - START > BUDGET:
                break
            if fails(rest):
                keep, n = rest, max(n - 1, 2)
                break
        else:
            if size == 1:
                break
            n = min(len(keep), n * 2)
    print(f"smallest failing steps: {','.join(map(str, keep))}")


main()
