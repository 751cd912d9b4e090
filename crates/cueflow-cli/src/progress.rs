//! The progress bar shown while a command measures: an `indicatif` bar on stderr when stdout is
//! a terminal, and nothing at all otherwise (pipes, files, CI logs, tests).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar over a known number of steps, hidden when stdout is not a terminal.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `steps` steps.
    pub fn new(steps: u64) -> Self {
        let bar = if std::io::stdout().is_terminal() {
            let bar = ProgressBar::new(steps);
            let style = ProgressStyle::with_template(
                "{spinner:.cyan} [{elapsed_precise}] [{bar:32.cyan/blue}] {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        } else {
            ProgressBar::hidden()
        };
        Progress { bar }
    }

    /// Say what is being done now.
    pub fn phase(&self, msg: impl Into<String>) {
        self.bar.set_message(msg.into());
    }

    /// One step done.
    pub fn step(&self) {
        self.bar.inc(1);
    }

    /// Add `n` steps to the total (work discovered on the way).
    pub fn add_steps(&self, n: u64) {
        self.bar.inc_length(n);
    }

    /// Print a line to stdout without tearing the bar.
    pub fn println(&self, line: impl AsRef<str>) {
        self.bar.suspend(|| println!("{}", line.as_ref()));
    }

    /// Remove the bar from the terminal before results are printed.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}
