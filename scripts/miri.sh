#!/usr/bin/env bash
# miri over core's pure data structures: the access maps (core/tracking/access.rs), the vector clocks
# (core/tracking/clock.rs) and the capture bookkeeping (core/graphs/capture.rs), whose unit tests need no
# device, no FFI and (but for one thread id) no threads. Like crossbeam's ci/miri.sh.
#
#   bash scripts/miri.sh [TEST_FILTER...]
#
# Needs a nightly toolchain with miri: rustup component add --toolchain nightly miri rust-src
# MIRIFLAGS defaults to strict provenance and symbolic alignment checks (Stacked Borrows); set
# it to add e.g. -Zmiri-tree-borrows.
set -euo pipefail
cd "$(dirname "$0")/.."
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-strict-provenance -Zmiri-symbolic-alignment-check}"
filters=("$@")
if [ ${#filters[@]} -eq 0 ]; then
  filters=(core::tracking::access:: core::tracking::clock:: core::graphs::capture:: backend::contract::node_op::)
fi
# The host side only: the CUDA loader is FFI, which miri cannot run.
cargo +nightly miri test -p cueflow --lib --no-default-features -- "${filters[@]}"
