//! GR8, GR1 (issue 27 item 14): graph copies take pageable host memory, as CUDA's memcpy nodes
//! and captured copies take `malloc`ed memory — a [`PageableBuffer`] that owns its memory, so
//! the graph keeps it alive (GR4) and the host reaches it only through guarded views (MM3).

use cueflow::{kernels, CaptureMode, Device, Graph, KernelArgs, LaunchConfig, PageableBuffer};

use crate::support::*;

/// GR8: a built graph copies from and into pageable memory at every launch — what the host
/// wrote between launches goes in, the result comes back — also host to host; the graph keeps
/// the memory after the program dropped its buffers (GR4).
pub fn gr8_pageable_memory_in_built_graph_copies(dev: &Device) {
    let s = side_stream(dev);
    let mut input = PageableBuffer::from_vec(dev, vec![1.0f32; N]).unwrap();
    let mut output = PageableBuffer::<f32>::new(dev, N).unwrap();
    let mut echo = PageableBuffer::<f32>::new(dev, N).unwrap();
    let d = zeros(dev, N);
    let mut g = Graph::new(dev);
    let up = g.add_copy_h2d(&[], &d, &input).unwrap();
    let scale = g
        .add_kernel(
            &[up],
            &kernels::SCALE_F32,
            LaunchConfig::for_elements(N, kernels::BLOCK),
            KernelArgs::new().write(&d).scalar(3.0f32).scalar(N as u64),
        )
        .unwrap();
    let down = g.add_copy_d2h(&[scale], &mut output, &d).unwrap();
    g.add_copy_h2h(&[down], &mut echo, &output).unwrap();
    let exec = g.instantiate().unwrap();
    for v in [1.0f32, 5.0] {
        input.write().unwrap().fill(v);
        exec.launch(&s).unwrap();
        assert_all(&output.read().unwrap(), 3.0 * v);
        assert_all(&echo.read().unwrap(), 3.0 * v);
    }
    drop((input, output, echo));
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_all(&download(&d), 15.0);
}

/// GR1: copies captured from a stream take pageable memory too, and a stream copy outside a
/// capture does (CUDA's pageable copy).
pub fn gr1_pageable_memory_in_captured_copies(dev: &Device) {
    let s = side_stream(dev);
    let input = PageableBuffer::from_vec(dev, (0..N).map(|i| i as f32).collect()).unwrap();
    let mut output = PageableBuffer::<f32>::new(dev, N).unwrap();
    let d = zeros(dev, N);
    let cap = side_stream(dev);
    cap.begin_capture(CaptureMode::Global).unwrap();
    cap.copy_h2d(&d, &input).unwrap();
    kernels::scale(&cap, &d, 2.0).unwrap();
    cap.copy_d2h(&mut output, &d).unwrap();
    let exec = cap.end_capture().unwrap().instantiate().unwrap();
    exec.launch(&s).unwrap();
    let want: Vec<f32> = (0..N).map(|i| 2.0 * i as f32).collect();
    assert_eq!(&output.read().unwrap()[..], &want[..]);
    s.copy_h2d(&d, &input).unwrap();
    s.copy_d2h(&mut output, &d).unwrap();
    let want: Vec<f32> = (0..N).map(|i| i as f32).collect();
    assert_eq!(&output.read().unwrap()[..], &want[..]);
}
