//! Running one test of this binary again in a child process (a measurement or a fault that
//! needs a process of its own), shared by the reliability and soak suites.

use std::process::{Command, Output};

/// Run test `name` of the current test binary alone in a child process, with `child_env` set
/// to `name` (so the child knows it is the child) and `env` added; an ignored test too (its
/// parent runs only when asked, `--ignored`).
pub fn rerun(name: &str, child_env: &str, env: &[(&str, &str)]) -> Output {
    let exe = std::env::current_exe().expect("the test binary's path");
    Command::new(exe)
        .args([
            name,
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "--include-ignored",
        ])
        .env(child_env, name)
        .envs(env.iter().copied())
        .output()
        .expect("starting a child process")
}
