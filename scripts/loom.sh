#!/usr/bin/env bash
# loom models of the host scheduler's lock-free protocols (node rules 1–3, the ready counters of
# graph runs): crates/cueflow/src/backend/host/loom_models.rs, which runs the real sched_node.rs and
# graph.rs code on loom's atomics and mutex (backend/host/sync.rs). Like crossbeam's ci/loom.sh.
#
#   bash scripts/loom.sh [TEST_FILTER]
#
# LOOM_MAX_PREEMPTIONS bounds the preemptions per execution (default 3; unset it with
# LOOM_MAX_PREEMPTIONS= for the full exploration). Each model prints its number of executions.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom"
if [ -z "${LOOM_MAX_PREEMPTIONS+set}" ]; then
  export LOOM_MAX_PREEMPTIONS=3
elif [ -z "$LOOM_MAX_PREEMPTIONS" ]; then
  unset LOOM_MAX_PREEMPTIONS
fi
# A target directory of its own: `--cfg loom` changes every crate's build, and sharing the
# normal one would rebuild it from scratch on the next plain `cargo` call.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
# The models need the host backend only.
cargo test -p cueflow --release --lib --no-default-features \
  "${1:-backend::host::loom_models}" -- --nocapture --test-threads=1
