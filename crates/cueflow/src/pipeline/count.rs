//! [`Count`]: a stream or chunk count that is either given or left to the performance model.

use std::fmt;
use std::str::FromStr;

/// How many streams, or how many chunks, a [`ChunkedPipeline`](super::ChunkedPipeline) uses:
/// a fixed number, or `auto` (chosen by the performance model, see [`super::auto`]).
///
/// A plain number converts into a fixed count, so `.streams(4)` reads as it should; text parses
/// as the command line writes it (`"auto"`, `"4"`).
///
/// ```
/// use cueflow::pipeline::Count;
/// assert_eq!(Count::from(4), Count::Fixed(4));
/// assert_eq!("auto".parse::<Count>(), Ok(Count::Auto));
/// assert!("0".parse::<Count>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Count {
    /// Chosen by the performance model from measurements of the device and of the work.
    #[default]
    Auto,
    /// Exactly this many (a pipeline refuses 0 with [`Error::InvalidLayout`](crate::Error)).
    Fixed(u32),
}

impl Count {
    /// True for [`Count::Auto`].
    pub fn is_auto(self) -> bool {
        self == Count::Auto
    }
}

impl From<u32> for Count {
    fn from(n: u32) -> Self {
        Count::Fixed(n)
    }
}

/// Why a text is not a [`Count`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseCountError(&'static str);

impl fmt::Display for ParseCountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ParseCountError {}

impl FromStr for Count {
    type Err = ParseCountError;

    /// `auto` (any case) or a positive integer; surrounding blanks are ignored.
    fn from_str(s: &str) -> Result<Self, ParseCountError> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("auto") {
            return Ok(Count::Auto);
        }
        match s.parse::<u32>() {
            Ok(0) => Err(ParseCountError("must be at least 1 (or `auto`)")),
            Ok(n) => Ok(Count::Fixed(n)),
            Err(_) => Err(ParseCountError("expected a positive integer or `auto`")),
        }
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Count::Auto => write!(f, "auto"),
            Count::Fixed(n) => write!(f, "{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        assert_eq!(" Auto ".parse::<Count>(), Ok(Count::Auto));
        assert_eq!("16".parse::<Count>(), Ok(Count::Fixed(16)));
        for bad in ["0", "-1", "four", "", "4.5"] {
            assert!(bad.parse::<Count>().is_err(), "{bad}");
        }
        assert_eq!(Count::Fixed(3).to_string(), "3");
        assert_eq!(Count::Auto.to_string(), "auto");
        assert!(Count::default().is_auto());
    }
}
