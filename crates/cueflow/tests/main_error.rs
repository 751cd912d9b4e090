//! `fn main() -> cueflow::Result<()>` prints the error's message, as `Display` words it, not a
//! dump of the variant's fields: Rust prints an error returned from `main` with `Debug`, and
//! cueflow's `Debug` is its `Display`.
//!
//! This file is a program of its own (`harness = false` in Cargo.toml): run as a test, it runs
//! itself again as a child whose `main` returns an error, and checks what the child printed
//! and its exit status.

use std::process::Command;

use cueflow::{Device, DeviceBuffer, Stream};

/// Set in the child, whose `main` then returns the error.
const CHILD: &str = "CUEFLOW_MAIN_ERROR_CHILD";

/// A user's program with a bug: 16 elements written into a buffer of 8.
fn program() -> cueflow::Result<()> {
    let dev = Device::host()?;
    let s = Stream::new(&dev)?;
    let d = DeviceBuffer::<f32>::new(&dev, 8)?;
    s.write_pageable(&d, &[0.0f32; 16])?;
    Ok(())
}

fn main() -> cueflow::Result<()> {
    if std::env::var_os(CHILD).is_some() {
        return program();
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let out = Command::new(exe)
        .env(CHILD, "1")
        .output()
        .expect("running the child");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let error = program().unwrap_err();
    assert_eq!(stderr, format!("Error: {error}\n"));
    assert!(
        stderr.starts_with(
            "Error: out of bounds (CP4): write_pageable: device range is 32 bytes but the slice \
             is 64 bytes (CP4: a copy or memset stays within its buffers"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("OutOfBounds"), "{stderr}");
    println!("main_error: a main returning cueflow's error printed its message: ok");
    Ok(())
}
