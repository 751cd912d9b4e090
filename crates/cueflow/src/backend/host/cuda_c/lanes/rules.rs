//! The generator's version and the research note's rules R1–R5 as switches (measuring each
//! one's effect), both part of the disk cache's key.

/// The generator's version (part of the cache key: a new generator recompiles).
pub(crate) const VERSION: &str = "lanes-5";

/// The research note's rules, each of which can be turned off to measure its effect:
/// `CUEFLOW_HOST_CUDA_C_RULES=-R1,-R5` (part of the cache key through [`tag`]).
#[derive(Clone, Copy)]
pub(crate) struct Rules {
    /// R1: a lane that returned is masked only for memory and calls, not arithmetic.
    pub r1: bool,
    /// R2: lane values kept across thread loops are read into scalars and written back
    /// unconditionally (off: accessed in their arrays, masked stores and all).
    pub r2: bool,
    /// R3: `if (threadIdx.x < uniform)` narrows the thread loop (off: a mask).
    pub r3: bool,
    /// R4: shuffles read a padded snapshot with contiguous loads (off: an index per lane).
    pub r4: bool,
    /// R5: barrier-free runs go chunk by chunk of 64 threads (off: whole blocks).
    pub r5: bool,
}

/// The rules in force for this process.
pub(crate) fn rules() -> Rules {
    let on = crate::config::lane_rule_on;
    Rules {
        r1: on(1),
        r2: on(2),
        r3: on(3),
        r4: on(4),
        r5: on(5),
    }
}

/// The generator's version and rules, for the cache key.
pub(crate) fn tag() -> String {
    let r = rules();
    format!(
        "{VERSION} R1={} R2={} R3={} R4={} R5={}",
        r.r1, r.r2, r.r3, r.r4, r.r5
    )
}
