//! How a variable's text becomes a value: what counts as unset, on and off, a number, a
//! size, a list — and what a value that means none of them does (one warning line on
//! standard error per variable and process, naming the variable, its value, the accepted
//! values and what cueflow does instead; the caller then gets the default).

use std::ffi::OsString;
use std::path::PathBuf;

use parking_lot::Mutex;

/// One `CUEFLOW_*` variable: its name and, for the warning a bad value earns, what it accepts.
#[derive(Debug)]
pub(crate) struct Var {
    /// The variable's name.
    pub name: &'static str,
    /// What it accepts, as the warning for a bad value says it.
    pub accepted: &'static str,
}

/// The words that turn a switch on, and those that turn it off (case does not matter).
const ON: [&str; 4] = ["1", "on", "true", "yes"];
const OFF: [&str; 4] = ["0", "off", "false", "no"];

impl Var {
    /// The variable `name`, which accepts what `accepted` says.
    pub const fn new(name: &'static str, accepted: &'static str) -> Var {
        Var { name, accepted }
    }

    /// The variable's value; `None` when unset, empty or blank. A value that is not UTF-8
    /// warns and counts as unset.
    pub fn text(&self) -> Option<String> {
        let raw = self.os()?;
        match raw.into_string() {
            Ok(s) if s.trim().is_empty() => None,
            Ok(s) => Some(s),
            Err(raw) => {
                self.warn(&raw.to_string_lossy(), "ignoring it");
                None
            }
        }
    }

    /// The variable's value as the operating system has it (paths); `None` when unset or
    /// empty.
    pub fn os(&self) -> Option<OsString> {
        std::env::var_os(self.name).filter(|v| !v.is_empty())
    }

    /// A path (unset or empty: `None`).
    pub fn path(&self) -> Option<PathBuf> {
        self.os().map(PathBuf::from)
    }

    /// A switch: one of `1`/`on`/`true`/`yes` or `0`/`off`/`false`/`no`; unset or blank,
    /// `default`; anything else warns and is `default`.
    pub fn switch(&self, default: bool) -> bool {
        let Some(v) = self.text() else {
            return default;
        };
        parse_switch(&v).unwrap_or_else(|| {
            let as_default = if default { "on" } else { "off" };
            self.warn(&v, &format!("leaving it {as_default}"));
            default
        })
    }

    /// One of `choices` (`(word, value)`, case does not matter); unset or blank, `None`;
    /// anything else warns, saying `otherwise`, and is `None`.
    pub fn choice<T: Copy>(&self, choices: &[(&str, T)], otherwise: &str) -> Option<T> {
        let v = self.text()?;
        let found = choices
            .iter()
            .find(|(w, _)| v.trim().eq_ignore_ascii_case(w))
            .map(|&(_, t)| t);
        if found.is_none() {
            self.warn(&v, otherwise);
        }
        found
    }

    /// A value `parse` accepts (given the trimmed text); unset or blank, `None`; anything
    /// `parse` refuses warns, saying `otherwise`, and is `None`.
    pub fn parsed<T>(&self, parse: impl Fn(&str) -> Option<T>, otherwise: &str) -> Option<T> {
        let v = self.text()?;
        let out = parse(v.trim());
        if out.is_none() {
            self.warn(&v, otherwise);
        }
        out
    }

    /// Say once per process that `value` is not what this variable accepts, and what is done
    /// instead.
    pub fn warn(&self, value: &str, instead: &str) {
        static SAID: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
        let mut said = SAID.lock();
        if said.contains(&self.name) {
            return;
        }
        said.push(self.name);
        eprintln!(
            "cueflow: {}={value:?} is not {}; {instead}",
            self.name, self.accepted
        );
    }
}

/// `Some(true)` for an on word, `Some(false)` for an off word, else `None`.
pub(crate) fn parse_switch(v: &str) -> Option<bool> {
    let v = v.trim();
    if ON.iter().any(|w| v.eq_ignore_ascii_case(w)) {
        Some(true)
    } else if OFF.iter().any(|w| v.eq_ignore_ascii_case(w)) {
        Some(false)
    } else {
        None
    }
}

/// A size in bytes: a plain number, or one with a binary suffix (`512K`, `256M`, `2G`;
/// `KiB`, `MiB`, `GiB`, `KB`… too, all powers of 1024). `None` for anything else.
pub(crate) fn parse_bytes(v: &str) -> Option<u64> {
    let lower = v.trim().to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = match lower[digits.len()..].trim() {
        "" | "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    let n = digits.trim().parse::<u64>().ok()?;
    Some(n.saturating_mul(unit))
}

/// Whether `v` is one of the words that turn something off (`off`, `0`, `none`, `false`).
pub(crate) fn is_off_word(v: &str) -> bool {
    ["off", "0", "none", "false"]
        .iter()
        .any(|w| v.trim().eq_ignore_ascii_case(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_take_on_and_off_words_only() {
        for on in ["1", "on", "TRUE", " yes "] {
            assert_eq!(parse_switch(on), Some(true), "{on}");
        }
        for off in ["0", "Off", "false", "no"] {
            assert_eq!(parse_switch(off), Some(false), "{off}");
        }
        for bad in ["2", "enable", "y", ""] {
            assert_eq!(parse_switch(bad), None, "{bad}");
        }
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_bytes("1000"), Some(1000));
        assert_eq!(parse_bytes("512K"), Some(512 << 10));
        assert_eq!(parse_bytes(" 256 MiB "), Some(256 << 20));
        assert_eq!(parse_bytes("2g"), Some(2 << 30));
        assert_eq!(parse_bytes("12 parsecs"), None);
        assert_eq!(parse_bytes("-5"), None);
        assert_eq!(parse_bytes("M"), None);
    }
}
