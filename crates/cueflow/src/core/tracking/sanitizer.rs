//! What the race sanitizer reports (SPEC AC4): races with both accesses, why nothing orders
//! them and the smallest fix, and lints for patterns that are legal but rarely meant.

use std::fmt;
use std::ops::Range;
use std::panic::Location;

use crate::config;
use crate::types::Access;

/// How the race sanitizer reacts to a race (`CUEFLOW_SANITIZE`, or
/// [`Device::set_sanitize`](crate::Device::set_sanitize)).
///
/// A device starts in the mode `CUEFLOW_SANITIZE` names; unset, in [`Warn`](Self::Warn) when
/// cueflow is built with debug assertions (a debug build, as `cargo build` and `cargo test`
/// make by default) and [`Off`](Self::Off) otherwise, as Rust's integer overflow checks are on
/// in debug builds and off in release ones. See [`from_env`](Self::from_env).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SanitizeMode {
    /// No race checks, no happens-before bookkeeping (the default of release builds, and
    /// `Default::default()`).
    #[default]
    Off,
    /// Print each race (once per pair of call sites) to stderr, and collect it (the default of
    /// debug builds).
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
        config::sanitize_word(s).map(SanitizeMode::from)
    }

    /// The mode a device starts in: the one `CUEFLOW_SANITIZE` names, else `Warn` in a build
    /// with debug assertions and `Off` in one without. An unknown value warns once and means
    /// `warn`.
    pub fn from_env() -> SanitizeMode {
        Self::from_setting(config::sanitize(), cfg!(debug_assertions))
    }

    /// The mode for a `CUEFLOW_SANITIZE` setting (`None`: not set) in a build with or
    /// without debug assertions.
    fn from_setting(value: Option<config::Sanitize>, debug_assertions: bool) -> SanitizeMode {
        match value {
            Some(m) => m.into(),
            None if debug_assertions => SanitizeMode::Warn,
            None => SanitizeMode::Off,
        }
    }
}

impl From<config::Sanitize> for SanitizeMode {
    fn from(m: config::Sanitize) -> SanitizeMode {
        match m {
            config::Sanitize::Off => SanitizeMode::Off,
            config::Sanitize::Warn => SanitizeMode::Warn,
            config::Sanitize::Error => SanitizeMode::Error,
            config::Sanitize::Panic => SanitizeMode::Panic,
        }
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

/// The message, then what each rule it cites means, as errors do.
impl fmt::Display for Lint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cueflow sanitizer: lint at {}: {}",
            self.site, self.message
        )?;
        crate::rules::explain(&self.message, f)
    }
}

#[cfg(test)]
mod tests {
    use super::SanitizeMode::{self, *};
    use super::{config, Lint, LintKind};

    #[test]
    fn a_lint_says_what_the_rules_it_cites_mean() {
        let lint = Lint {
            kind: LintKind::PageableCopy,
            message: "pageable copy blocks the host (CP3)".into(),
            site: std::panic::Location::caller(),
        };
        let meaning = crate::rules::meaning("CP3").unwrap();
        assert!(
            lint.to_string()
                .ends_with(&format!("(CP3) (CP3: {meaning})")),
            "{lint}"
        );
    }

    /// The default follows the build, as overflow checks do; `CUEFLOW_SANITIZE` overrides it
    /// either way.
    #[test]
    fn warn_by_default_in_debug_builds_off_in_release_builds_unless_asked() {
        // What `from_env` does with the variable's text (blank: not set).
        let mode = |v: Option<&str>, debug| {
            let setting = v
                .filter(|v| !v.trim().is_empty())
                .map(config::sanitize_setting);
            SanitizeMode::from_setting(setting, debug)
        };
        assert_eq!(mode(None, true), Warn);
        assert_eq!(mode(None, false), Off);
        assert_eq!(mode(Some(" "), true), Warn, "blank is not set");
        assert_eq!(mode(Some(""), false), Off);
        assert_eq!(mode(Some("off"), true), Off);
        assert_eq!(mode(Some("0"), true), Off);
        assert_eq!(mode(Some("warn"), false), Warn);
        assert_eq!(mode(Some("error"), false), Error);
        assert_eq!(mode(Some("panic"), true), Panic);
        assert_eq!(mode(Some("loud"), false), Warn, "unknown values warn");
        let this_build = if cfg!(debug_assertions) { Warn } else { Off };
        if config::sanitize().is_none() {
            assert_eq!(SanitizeMode::from_env(), this_build);
        }
    }
}
