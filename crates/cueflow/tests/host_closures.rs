//! Host-backend Rust closures that write a buffer other than tile by tile: per-block slices
//! (`KernelArgs::write_per_block`, CUDA's `out[blockIdx.x]`) and whole-buffer writes
//! (`KernelArgs::write_whole`, run block after block), known to the sanitizer (AC1, AC4).

use cueflow::{Device, DeviceBuffer, Error, Kernel, KernelArgs, LaunchConfig, Stream};

fn upload<T: bytemuck::Pod>(s: &Stream, data: &[T]) -> DeviceBuffer<T> {
    let d = DeviceBuffer::<T>::new(s.device(), data.len()).unwrap();
    s.write_pageable(&d, data).unwrap();
    d
}

fn download<T: bytemuck::Pod + Default>(s: &Stream, d: &DeviceBuffer<T>) -> Vec<T> {
    let mut out = vec![T::default(); d.len()];
    s.read_pageable(&mut out, d).unwrap();
    out
}

/// Rust closures beside CUDA C: a per-block slice of a written buffer (`out[blockIdx.x]`,
/// block `b` owns `b*k..(b+1)*k`), computed on every block's worker, not in block 0.
#[test]
fn closures_write_per_block_slices() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let (blocks, threads) = (5usize, 512usize);
    let data: Vec<u32> = (0..(blocks * threads) as u32).map(|i| i % 97).collect();
    let input = upload(&s, &data);
    let out = upload(&s, &vec![0u32; blocks * 2]);
    let k = Kernel::new("per_block_sum")
        .host(|ctx, a| {
            let x = a.input::<u32>(0);
            let o = a.block_mut::<u32>(1);
            let r = ctx.thread_range();
            o[0] = x[r.start as usize..r.end as usize].iter().sum();
            o[1] = ctx.linear_block as u32;
        })
        .build();
    s.launch(
        &k,
        LaunchConfig::new(blocks as u32, threads as u32),
        KernelArgs::new().read(&input).write_per_block(&out, 2),
    )
    .unwrap();
    let want: Vec<u32> = data
        .chunks(threads)
        .enumerate()
        .flat_map(|(b, c)| [c.iter().sum(), b as u32])
        .collect();
    assert_eq!(download(&s, &out), want);
    // k = 0 is refused at launch (ER3).
    assert!(matches!(
        s.launch(
            &k,
            LaunchConfig::new(1, 1),
            KernelArgs::new().read(&input).write_per_block(&out, 0)
        ),
        Err(Error::InvalidArgument { .. })
    ));
}

/// Rust closures: a whole-buffer write (every block reads and writes beyond its tile, as an
/// in-place sum does): the host runs the blocks one after another, so the result is exact;
/// the sanitizer sees the write of the whole buffer (AC1, AC4).
#[test]
fn closures_write_whole_runs_blocks_in_turn_and_is_tracked() {
    let dev = Device::host().unwrap();
    let s = Stream::new(&dev).unwrap();
    let d = upload(&s, &[1u32; 40]);
    let k = Kernel::new("every_block_adds_everywhere")
        .host(|_, a| {
            for x in a.whole_mut::<u32>(0) {
                *x += 1;
            }
        })
        .build();
    s.launch(
        &k,
        LaunchConfig::new(4, 32),
        KernelArgs::new().write_whole(&d),
    )
    .unwrap();
    assert_eq!(download(&s, &d), vec![5u32; 40]);

    dev.set_sanitize(cueflow::SanitizeMode::Error);
    let a = Stream::new(&dev).unwrap();
    let b = Stream::new(&dev).unwrap();
    a.launch(
        &k,
        LaunchConfig::new(4, 32),
        KernelArgs::new().write_whole(&d),
    )
    .unwrap();
    let out = DeviceBuffer::<u32>::new(&dev, 40).unwrap();
    // Reading `d` on another stream without a wait races with the whole-buffer write.
    match b.copy_d2d(&out, &d) {
        Err(Error::Race(_)) => {}
        other => panic!("expected a race report, got {other:?}"),
    }
    b.wait_event(&a.record().unwrap()).unwrap();
    b.copy_d2d(&out, &d).unwrap();
    b.synchronize().unwrap();
    assert_eq!(download(&b, &out), vec![9u32; 40]); // 1 + 4 blocks, twice
}
