//! The examples' own logic at small sizes on the host backend: `03_user_kernel` (a user kernel
//! through the pipeline, serial and `auto`, verified) and `04_two_stage` (two kernels chained
//! through per-stream scratch, `u16` in, `f32` out, verified). Each example's `run` returns an
//! error when an output element differs from its host reference.

#[path = "../examples/03_user_kernel.rs"]
#[allow(dead_code)] // the example's `main`
mod user_kernel;

#[path = "../examples/04_two_stage.rs"]
#[allow(dead_code)]
mod two_stage;

use cueflow::Device;

#[test]
fn user_kernel_example_verifies_serial_and_auto() {
    let dev = Device::host().unwrap();
    let o = user_kernel::run(&dev, 100_003, 5, 1).unwrap();
    assert!(o.serial_ms > 0.0 && o.pipelined_ms > 0.0);
    assert!(
        o.streams >= 1 && o.chunks >= o.streams,
        "{}×{}",
        o.streams,
        o.chunks
    );
}

#[test]
fn user_kernel_reference_is_what_the_kernel_computes() {
    // The reference is not the identity: a kernel that did nothing would fail verification.
    let x = user_kernel::input_value(7);
    assert_ne!(user_kernel::reference(x, 5), x);
}

#[test]
fn two_stage_example_verifies() {
    let dev = Device::host().unwrap();
    assert!(two_stage::run(&dev, 50_001).unwrap() > 0.0);
    assert!(two_stage::run(&dev, 3).unwrap() > 0.0); // fewer elements than chunks
}
