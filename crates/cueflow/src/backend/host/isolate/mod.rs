//! Compiled kernels in a worker process: faults, not corruption (SPEC HK3). This first step:
//! the shared device-memory arena that host-backend memory comes from (see [`arena`]).

// Used by the worker (next commit) and the CUDA-C launch path of issue 21.
#![cfg_attr(not(test), allow(dead_code))]

pub(crate) mod arena;
