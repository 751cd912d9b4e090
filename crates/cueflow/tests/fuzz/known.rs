//! Patterns of known defects (the numbered items of issue 27) that the generator leaves out
//! unless asked for, so that a long run keeps finding new defects instead of the known ones.
//! `FUZZ_KNOWN=1,6,13` (or `all`) puts those patterns back, to check a fix.

/// A set of issue items whose patterns are generated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Known(u32);

/// Every pattern the switch controls, with what it generates.
pub const PATTERNS: &[(u32, &str)] = &[
    (
        1,
        "a graph with an allocation node instantiated twice, the first instantiation launched",
    ),
    (
        2,
        "differential mode: pools created and dropped by every program on CUDA (else each \
         device's created pools serve every program)",
    ),
    (
        6,
        "read_pageable of memory a graph launch handed out (GR10)",
    ),
    (
        8,
        "event record and wait nodes anywhere in a built graph (else records after every node \
         and waits before, where CUDA's node scope and a launch-wide one agree)",
    ),
    (
        12,
        "two devices: pinned memory without the portable flag used by the other device",
    ),
    (
        13,
        "memory a graph handed out dropped instead of freed, then the graph launched again",
    ),
];

impl Known {
    /// The patterns `FUZZ_KNOWN` names (none when unset).
    pub fn from_env() -> Known {
        let Ok(v) = std::env::var("FUZZ_KNOWN") else {
            return Known(0);
        };
        let mut k = Known(0);
        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "all" {
                PATTERNS.iter().for_each(|(i, _)| k.0 |= 1 << i);
            } else {
                let i: u32 = item
                    .parse()
                    .unwrap_or_else(|_| panic!("FUZZ_KNOWN: `{item}` is not an item number"));
                assert!(
                    PATTERNS.iter().any(|(p, _)| *p == i),
                    "FUZZ_KNOWN: item {i} has no pattern; the patterns: {PATTERNS:?}"
                );
                k.0 |= 1 << i;
            }
        }
        k
    }

    pub fn with(self, item: u32) -> Known {
        Known(self.0 | 1 << item)
    }

    pub fn has(self, item: u32) -> bool {
        self.0 & (1 << item) != 0
    }
}
