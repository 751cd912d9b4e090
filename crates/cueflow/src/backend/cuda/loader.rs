//! The kernel files' way to NVRTC until they call the driver layer's (`driver::nvrtc`).

/// NVRTC's `(major, minor)` version, or why none can be used.
pub(super) fn nvrtc() -> Result<(i32, i32), String> {
    let n = super::driver::nvrtc::load()?;
    Ok((n.version.major() as i32, n.version.minor() as i32))
}
