//! An asynchronous copy and a kernel on the default stream.
//!
//! Both calls return to the host at once (microseconds), while the device still works through
//! the 256 MiB copy and then the kernel: the copy "blocks" the kernel on the device, not the
//! host. Run with `cargo run --release --example 01_stream` (set `CUEFLOW_DEVICE=cuda:0` for a
//! GPU; pass a size in MiB as the first argument to change the 256 MiB default).

use std::time::Instant;

use cueflow::{Device, DeviceBuffer, PinnedBuffer, Result, Stream};

fn main() -> Result<()> {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(256);
    let n = (mib << 20) / std::mem::size_of::<f32>();
    let dev = Device::from_env()?;
    println!("device: {}", dev.properties().name);

    // Page-locked host memory so the copy can be asynchronous (CP2).
    let mut h_data = PinnedBuffer::<f32>::new(&dev, n)?;
    h_data.write()?.fill(1.0);
    let d_data = DeviceBuffer::<f32>::new(&dev, n)?;

    // The default (legacy) stream, as `cudaStream_t stream = 0`.
    let stream = Stream::legacy(&dev);

    let t0 = Instant::now();
    stream.copy_h2d(&d_data, &h_data)?; // cudaMemcpyAsync(..., HostToDevice, stream)
    let t1 = Instant::now();
    cueflow::kernels::scale(&stream, &d_data, 2.0)?; // dummyKernel<<<grid, 256, 0, stream>>>
    let t2 = Instant::now();
    dev.synchronize()?; // cudaDeviceSynchronize
    let t3 = Instant::now();

    println!(
        "Time for copy_h2d call (host): {} microseconds",
        (t1 - t0).as_micros()
    );
    println!(
        "Time for kernel launch call (host): {} microseconds",
        (t2 - t1).as_micros()
    );
    println!(
        "Total elapsed time until synchronization: {} ms",
        (t3 - t0).as_millis()
    );

    // Check the result came out of the device as the kernel computes it.
    stream.copy_d2h(&mut h_data, &d_data)?;
    let ok = h_data.read()?.iter().all(|&x| x == 2.0);
    println!("result verified: {ok}");
    assert!(ok, "every element must be 2.0");
    Ok(())
}
