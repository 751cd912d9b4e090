#!/usr/bin/env bash
# The differential fuzzer under load, in one device call: PROCS processes share the GPU, each
# running PER programs of seed SEED from its own start. Two kinds of difference have shown
# only this way (issue 27): GPU faults in the ordered and automatic orderings, and
# random-ordering results that differ from the model; replayed alone, in a fresh process,
# none of them came back. So while the load runs, every program a process names as having
# poisoned CUDA ("poisoned by program P") is run again, under the same load, by
# compute-sanitizer's memcheck (at most MEMCHECK of them), and every differing program is
# replayed REPLAYS times alone after the load, to tell load from program.
#
# Bundle (here): KEEP=differential_fuzz bash scripts/gpu-bundle-tests.sh .gpu -p cueflow \
#                  --test differential_fuzz && strip .gpu/* && bash scripts/gpu-pack.sh .gpu
# Run (there, carrying .gpuz):
#   python3 scripts/gpu-unpack.py && bash scripts/gpu-fuzz-load.sh
# Environment: SEED (17), PROCS (12), PER (1000), SECS (100, each process's FUZZ_SECONDS),
# MEMCHECK (2), REPLAYS (3), OUT (/tmp/cueflow-out). Exit status 0 when nothing differed.
set -uo pipefail
seed=${SEED:-17}
procs=${PROCS:-12}
per=${PER:-1000}
secs=${SECS:-100}
memchecks=${MEMCHECK:-2}
replays=${REPLAYS:-3}
out=${OUT:-/tmp/cueflow-out}
bin=.gpu/differential_fuzz
mkdir -p "$out"
work=$(mktemp -d)
export CUEFLOW_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

fuzz() { # fuzz FROM PROGRAMS SECONDS LOG [WRAPPER ARGS...]: the wrapper runs the binary
  local from=$1 n=$2 s=$3 log=$4
  shift 4
  env FUZZ_SEED="$seed" FUZZ_FROM="$from" FUZZ_PROGRAMS="$n" FUZZ_SECONDS="$s" \
    FUZZ_SHRINK_SECS=0 timeout $((s + 60)) "$@" "$bin" --nocapture --test-threads=1 2>&1 \
    | grep -v "sanitizer: lint" >"$log"
}

pids=()
for i in $(seq 0 $((procs - 1))); do
  fuzz $((i * per)) "$per" "$secs" "$work/load$i.txt" &
  pids+=($!)
done

# While the load runs: memcheck each program that poisoned a process, under the same load.
checked=""
running() { for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
while running; do
  for p in $(grep -ho "poisoned by program [0-9]*" "$work"/load*.txt 2>/dev/null | grep -o "[0-9]*$" | sort -un); do
    case " $checked " in *" $p "*) continue ;; esac
    [ "$(wc -w <<<"$checked")" -ge "$memchecks" ] && break
    checked="$checked $p"
    echo "memcheck of program $p under load"
    fuzz "$p" 1 60 "$out/memcheck-$p.txt" compute-sanitizer --tool memcheck --print-limit 10 \
      --show-backtrace device
  done
  sleep 2
done
wait

echo
echo "== load: $procs processes, seed $seed"
grep -h "^differential_fuzz: .*programs (seed" "$work"/load*.txt | cut -c1-200
grep -h "poisoned by program\|program [0-9]* differs" "$work"/load*.txt | cut -c1-300
differing=$(grep -ho "program [0-9]* differs" "$work"/load*.txt | grep -o "[0-9]*" | sort -un)

echo
echo "== each differing program alone, $replays times"
for p in $differing; do
  for k in $(seq 1 "$replays"); do
    fuzz "$p" 1 60 "$work/alone-$p-$k.txt"
    grep -h "^differential_fuzz: 1 programs" "$work/alone-$p-$k.txt" | cut -c1-200
  done
done

for f in "$out"/memcheck-*.txt; do
  [ -f "$f" ] || continue
  echo
  echo "== $(basename "$f"): $(grep -c "=========" "$f") memcheck lines"
  grep -m 20 "=========" "$f"
done
tar -C "$work" -cJf "$out/fuzz-load-logs.tar.xz" .
[ -z "$differing" ]
