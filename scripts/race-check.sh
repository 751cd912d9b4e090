#!/usr/bin/env bash
# Data-race detection of the host backend's test suite (SPEC AC6: no safe program makes the
# host backend run two conflicting accesses at once).
#
#   bash scripts/race-check.sh tsan   # ThreadSanitizer: nightly toolchain with rust-src
#   bash scripts/race-check.sh drd    # valgrind DRD (any machine with valgrind)
#
# Both run the conformance suite, the sanitizer corpus, the differential test and the misuse
# tests on the host backend (the CUDA halves skip without a GPU). Suppressions, each with its
# reason, are in scripts/race-check/.
set -euo pipefail
cd "$(dirname "$0")/.."
tool=${1:-tsan}
tests=(conformance sanitizer differential misuse)
here=$(pwd)/scripts/race-check
case "$tool" in
  tsan)
    export RUSTFLAGS="-Zsanitizer=thread -Cforce-frame-pointers=yes"
    export RUSTDOCFLAGS="$RUSTFLAGS"
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$here/tsan.supp"
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/tsan}
    args=()
    for t in "${tests[@]}"; do args+=(--test "$t"); done
    cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu -p cueflow \
      "${args[@]}" -- --test-threads=2 host::
    cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu -p cueflow \
      --test sanitizer --test differential --test misuse
    ;;
  drd)
    cargo test --release -p cueflow --no-run "${tests[@]/#/--test=}" 2>&1 | tail -1
    for t in "${tests[@]}"; do
      exe=$(cargo test --release -p cueflow --test "$t" --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import sys,json
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable"): print(m["executable"])' | tail -1)
      echo "== drd: $t"
      valgrind --tool=drd --error-exitcode=3 --suppressions="$here/drd.supp" \
        --report-signal-unlocked=no "$exe" --test-threads=1 host_ racy_host correct_host \
        modes_host host:: random_ 2>&1 | tail -n 30
    done
    ;;
  *) echo "usage: $0 tsan|drd" >&2; exit 2 ;;
esac
