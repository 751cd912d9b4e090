//! Patterns of known defects that the generator leaves out unless asked for, so that a long
//! run keeps finding new defects instead of the known ones: the numbered items of issue 27
//! (`1`, `2`, …) and the defects the fuzzer found (`F1`, …; `tests/fuzz_found/`).
//! `FUZZ_KNOWN=1,6,F1` (or `all`) puts those patterns back, to check a fix.

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
    (
        "F1",
        "two devices: graph launches while another device has work pending (a launch that \
         another device's compute worker starts runs its first single-block kernels there: \
         a CUDA C kernel faults on its own device's memory); else every device finishes \
         before a graph launch",
    ),
    (
        "F2",
        "two devices, automatic ordering: copies between devices while other work is pending \
         (work that conflicts with pending work of its own device and of another waits for \
         the other device's only); else every device finishes before and after such a copy",
    ),
    (
        "F3",
        "two devices: read_pageable (after one, the sanitizer misses races with another \
         device's reads of the memory); else two-device programs leave it out",
    ),
    (
        "F4",
        "two devices, sanitizer: peer copies between device memory (after one and a \
         synchronization of its stream's device, the sanitizer misses races between streams of \
         the memory's device); else the random ordering leaves them out",
    ),
    (
        "F5",
        "two devices, sanitizer: copies that touch host memory of another device (a 14-step \
         program where a race on managed memory between the devices goes unreported); else \
         the random ordering leaves them out",
    ),
    (
        "F6",
        "two devices: host views of host memory that another device's stream copies into or \
         out of (an 11-step program where the host write does not wait for the copy); else the \
         copying device finishes right after such a copy",
    ),
    (
        "F7",
        "two devices, automatic ordering: work right after a collective (a 16-step program \
         where a read after write on one device goes unordered); else every device finishes \
         after each collective",
    ),
    (
        "F8",
        "two devices: copies that touch another device's memory, in every ordering (after one, \
         automatic ordering on the memory's device misses a write after write even with every \
         device idle; F2 to F7 are more of this family); else a copy between devices stays on \
         one device",
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
