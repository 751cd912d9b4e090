//! The command's one error type and its exit codes: 2 for bad arguments, 1 for everything that
//! went wrong while running (device errors, failed verification, files that cannot be written).

use std::fmt;

/// What made a command fail.
#[derive(Debug)]
pub enum CliError {
    /// Bad arguments, found before any work was done. Exit code 2.
    Usage(String),
    /// The device or the runtime refused or failed. Exit code 1.
    Device(cueflow::Error),
    /// A pipeline run produced a wrong output element. Exit code 1.
    Verify(String),
    /// The device has too little memory for what was asked. Exit code 1.
    Memory(String),
    /// Traces that cannot be merged (`cueflow trace merge`). Exit code 1.
    Trace(cueflow::trace::merge::MergeError),
    /// A file or directory could not be written. Exit code 1.
    Io {
        /// What was being written.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// Result alias of the command.
pub type CliResult<T> = Result<T, CliError>;

impl CliError {
    /// A usage error with this message.
    pub fn usage(msg: impl Into<String>) -> Self {
        CliError::Usage(msg.into())
    }

    /// A closure turning an I/O error into a [`CliError::Io`] about `what`.
    pub fn io(what: impl fmt::Display) -> impl FnOnce(std::io::Error) -> CliError {
        let what = what.to_string();
        move |source| CliError::Io { what, source }
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage(m) => write!(f, "{m}"),
            CliError::Device(e) => write!(f, "{e}"),
            CliError::Verify(m) => write!(f, "verification failed: {m}"),
            CliError::Memory(m) => write!(f, "not enough memory: {m}"),
            CliError::Trace(e) => write!(f, "{e}"),
            CliError::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for CliError {}

impl From<cueflow::Error> for CliError {
    fn from(e: cueflow::Error) -> Self {
        CliError::Device(e)
    }
}
