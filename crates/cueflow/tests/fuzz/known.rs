//! Patterns of known defects that the generator leaves out unless asked for, so that a long
//! run keeps finding new defects instead of the known ones: the numbered items of issue 27
//! (`1`, `2`, …) and defects the fuzzer found and that are not fixed yet (`F9`, …; each with
//! its test in `tests/fuzz_found/`; F1 to F8 are fixed and generated always).
//! `FUZZ_KNOWN=1,6` (or `all`) puts those patterns back, to check a fix.

/// A set of patterns that are generated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Known(u64);

/// Every pattern the switch controls: its name, and what it generates.
pub const PATTERNS: &[(&str, &str)] = &[
    (
        "1",
        "a graph with an allocation node instantiated twice, the first instantiation launched",
    ),
    (
        "2",
        "differential mode: pools created and dropped by every program on CUDA (else each \
         device's created pools serve every program)",
    ),
    (
        "6",
        "read_pageable of memory a graph launch handed out (GR10)",
    ),
    (
        "8",
        "event record and wait nodes anywhere in a built graph (else records after every node \
         and waits before, where CUDA's node scope and a launch-wide one agree)",
    ),
    (
        "12",
        "two devices: pinned memory without the portable flag used by the other device",
    ),
    (
        "13",
        "memory a graph handed out dropped instead of freed, then the graph launched again",
    ),
];

impl Known {
    /// The patterns `FUZZ_KNOWN` names (none when unset).
    pub fn from_env() -> Known {
        Known::parse(&std::env::var("FUZZ_KNOWN").unwrap_or_default())
    }

    /// The patterns of a comma-separated list of names, or `all`.
    pub fn parse(list: &str) -> Known {
        let mut k = Known(0);
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "all" {
                k.0 = (1 << PATTERNS.len()) - 1;
                continue;
            }
            let i = PATTERNS
                .iter()
                .position(|(name, _)| *name == item)
                .unwrap_or_else(|| {
                    panic!("FUZZ_KNOWN: no pattern `{item}`; the patterns: {PATTERNS:#?}")
                });
            k.0 |= 1 << i;
        }
        k
    }

    /// Whether pattern `name` is generated.
    pub fn has(self, name: &str) -> bool {
        let i = PATTERNS
            .iter()
            .position(|(n, _)| *n == name)
            .expect("a pattern of PATTERNS");
        self.0 & (1 << i) != 0
    }
}
