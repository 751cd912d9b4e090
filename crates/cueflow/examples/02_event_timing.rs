//! Timing a kernel with events.
//!
//! Records a start and a stop event on the default stream around a kernel that doubles 1M
//! floats, waits for the stop event and prints the elapsed time between them. Run with
//! `cargo run --release --example 02_event_timing` (`CUEFLOW_DEVICE=cuda:0` for a GPU).

use cueflow::{Device, DeviceBuffer, Event, Result, Stream};

fn main() -> Result<()> {
    let n = 1 << 20; // about 1M elements
    let dev = Device::from_env()?;
    println!("device: {}", dev.properties().name);

    let d_data = DeviceBuffer::<f32>::new(&dev, n)?;
    let stream = Stream::legacy(&dev);
    cueflow::kernels::fill(&stream, &d_data, 1.0)?;

    let start_event = Event::new(&dev)?; // cudaEventCreate
    let stop_event = Event::new(&dev)?;

    stream.record_event(&start_event)?; // cudaEventRecord(startEvent, 0)
    cueflow::kernels::scale(&stream, &d_data, 2.0)?; // simpleKernel<<<gridSize, blockSize>>>
    stream.record_event(&stop_event)?; // cudaEventRecord(stopEvent, 0)

    stop_event.synchronize()?; // cudaEventSynchronize(stopEvent)
    let elapsed = Event::elapsed_ms(&start_event, &stop_event)?; // cudaEventElapsedTime
    println!("Kernel execution time: {elapsed} ms");

    let mut out = vec![0.0f32; n];
    stream.read_pageable(&mut out, &d_data)?;
    assert!(out.iter().all(|&x| x == 2.0), "every element must be 2.0");
    Ok(())
}
