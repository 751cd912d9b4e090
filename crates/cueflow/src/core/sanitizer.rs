//! What the race sanitizer reports (SPEC AC4): races with both accesses, why nothing orders
//! them and the smallest fix, and lints for patterns that are legal but rarely meant.

use std::fmt;
use std::ops::Range;
use std::panic::Location;

use crate::backend::contract::memory::Access;

/// How the race sanitizer reacts to a race (`CUEFLOW_SANITIZE`, or
/// [`Device::set_sanitize`](crate::Device::set_sanitize)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SanitizeMode {
    /// No race checks, no happens-before bookkeeping (the default).
    #[default]
    Off,
    /// Print each race (once per pair of call sites) to stderr, and collect it.
    Warn,
    /// The call that completes a race returns [`Error::Race`](crate::Error::Race) and enqueues
    /// nothing.
    Error,
    /// The call that completes a race panics with the report, enqueuing nothing.
    Panic,
}

impl SanitizeMode {
    /// Parse `off`, `warn`, `error` or `panic` (also `0`/`1` for off/warn).
    pub fn parse(s: &str) -> Option<SanitizeMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "0" | "false" | "no" => Some(SanitizeMode::Off),
            "warn" | "1" | "on" | "true" | "yes" => Some(SanitizeMode::Warn),
            "error" => Some(SanitizeMode::Error),
            "panic" => Some(SanitizeMode::Panic),
            _ => None,
        }
    }

    /// The mode `CUEFLOW_SANITIZE` asks for; an unknown value warns once and means `warn`.
    pub fn from_env() -> SanitizeMode {
        let Ok(v) = std::env::var("CUEFLOW_SANITIZE") else {
            return SanitizeMode::Off;
        };
        SanitizeMode::parse(&v).unwrap_or_else(|| {
            eprintln!(
                "cueflow: CUEFLOW_SANITIZE={v:?} is not one of off, warn, error, panic; using warn"
            );
            SanitizeMode::Warn
        })
    }
}

/// One side of a race.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceAccess {
    /// The stream's id, or `None` for the host.
    pub stream: Option<u64>,
    /// Who made the access: `stream 3 ("copies", non-blocking)` or `the host`.
    pub actor: String,
    /// The operation and its part: `kernel \`cf_scale_f32\` (argument 0)`,
    /// `H2D copy (destination)`.
    pub operation: String,
    /// Read, write or atomic.
    pub access: Access,
    /// The bytes the access covers, within the allocation.
    pub bytes: Range<usize>,
    /// Where the call that made the access was written.
    pub site: &'static Location<'static>,
}

impl fmt::Display for RaceAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of bytes {}..{} by {} on {}, at {}",
            self.access.label(),
            self.bytes.start,
            self.bytes.end,
            self.operation,
            self.actor,
            self.site
        )
    }
}

/// A data race (AC3): two accesses to overlapping bytes, at least one a write, neither
/// ordered before the other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceReport {
    /// The allocation both accesses touch.
    pub allocation: String,
    /// The bytes both touch.
    pub overlap: Range<usize>,
    /// The access made first.
    pub earlier: RaceAccess,
    /// The access that completed the race.
    pub later: RaceAccess,
    /// Why nothing orders them.
    pub why: String,
    /// The smallest change that orders them.
    pub fix: String,
}

impl fmt::Display for RaceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "cueflow sanitizer: data race on bytes {}..{} of {}",
            self.overlap.start, self.overlap.end, self.allocation
        )?;
        writeln!(f, "  earlier: {}", self.earlier)?;
        writeln!(f, "  later:   {}", self.later)?;
        writeln!(f, "  why:     {}", self.why)?;
        write!(f, "  fix:     {}", self.fix)
    }
}

/// A pattern the sanitizer warns about although it is not a race (never an error).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LintKind {
    /// A pageable copy on a stream whose other copies use pinned memory: it blocks the host
    /// (CP3) where the program otherwise relies on asynchrony.
    PageableCopy,
    /// Work on the legacy default stream while two or more blocking streams have work pending:
    /// it waits for all of them and they all wait for it (ST4), serializing them.
    LegacySerializes,
    /// A wait on an event that was never recorded: it orders nothing (EV3), which is rarely
    /// what was meant.
    WaitNeverRecorded,
    /// A kernel wrote an argument it declared read-only (`KernelArgs::read`): its bytes
    /// changed across the kernel (AC7, checked this way on CUDA with the sanitizer on; the
    /// host backend makes such a write a kernel fault). Other streams are ordered against
    /// declared writes only, so a reader elsewhere may see stale or torn data.
    ReadArgumentWritten,
}

/// One lint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lint {
    /// Which pattern.
    pub kind: LintKind,
    /// What was seen, and what to do instead.
    pub message: String,
    /// Where the call was written.
    pub site: &'static Location<'static>,
}

impl fmt::Display for Lint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cueflow sanitizer: lint at {}: {}",
            self.site, self.message
        )
    }
}
