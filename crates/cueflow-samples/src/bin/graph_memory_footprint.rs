//! Port of NVIDIA's `graphMemoryFootprint`: how the memory of graph allocation nodes is
//! reused (GR7, GR10, GR12), shown by the device's graph memory footprint
//! (`Device::graph_memory`, the original's `cudaDeviceGetGraphMemAttribute` of the memory in
//! use) after each step, and `Device::trim_graph_memory` between the parts:
//!
//! 1. one graph allocating, freeing and allocating again: the second allocation may take the
//!    first one's address;
//! 2. eight graphs (allocation → a kernel that spins for 5 µs a thread → free) launched one
//!    after another on one stream: on CUDA they share one reservation; each has its own
//!    address, which the original checks (the port's one check, as there);
//! 3. the eight launched on eight streams at once: each needs memory of its own;
//! 4. eight graphs that allocate without freeing: each launch keeps its memory, a trim keeps
//!    it, freeing it (as `cudaFree` does) does not shrink the footprint, a trim after that does.
//!
//! On the host backend each instantiation holds its graph memory from when it is made until
//! it is dropped (GR12), so the footprints it prints differ from CUDA's: made, the eight
//! graphs of part 2 already hold 512 MiB, and a trim gives back nothing.

use cueflow::{Device, DeviceBuffer, Graph, GraphExec, Kernel, KernelArgs, LaunchConfig, Stream};
use cueflow_samples::{main_with, on_gpu, spin_clocks, Checks};

const NUM_GRAPHS: usize = 8;
const THREADS_PER_BLOCK: u32 = 512;
const SOURCE: &str = include_str!("../../kernels/graph_memory_footprint.cu");

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The original's printMemoryFootprint: the bytes graph allocations use now.
fn print_footprint(dev: &Device) -> Res<()> {
    println!("    FOOTPRINT: {} bytes", dev.graph_memory()?.used);
    Ok(())
}

/// clockBlock: spin for `clock_count` ticks (on the host backend, of a clock at the device's
/// rate, once per block).
fn clock_block(clock_rate_khz: u32) -> Kernel {
    Kernel::new("clock_block")
        .cuda_source(SOURCE, "clock_block")
        .host(move |_, args| {
            spin_clocks(clock_rate_khz, args.scalar::<i64>(0));
        })
        .build()
}

/// Part 1's graph: allocate A, free A, allocate B after that free, free B.
fn virt_addr_reuse_graph(dev: &Device, bytes: usize) -> Res<GraphExec> {
    let mut g = Graph::new(dev);
    let (alloc_a, a) = g.add_alloc::<f32>(&[], bytes / 4)?;
    let free_a = g.add_free(&[alloc_a], &a)?;
    // The dependency on A's free lets B take A's address.
    let (alloc_b, b) = g.add_alloc::<f32>(&[free_a], bytes / 4)?;
    g.add_free(&[alloc_b], &b)?;
    let exec = g.instantiate()?; // Addresses are the instantiation's (GR7).
    if a.device_addr() == b.device_addr() {
        println!("Check confirms that d_a and d_b share a virtual address.");
    } else {
        println!("Check shows that d_a and d_b DO NOT share a virtual address.");
    }
    Ok(exec)
}

fn virtual_address_reuse_single_graph(dev: &Device, bytes: usize) -> Res<()> {
    println!("================================");
    println!("Running virtual address reuse example.");
    println!(
        "Sequential allocations & frees within a single graph enable CUDA to reuse virtual \
         addresses.\n"
    );
    let exec = virt_addr_reuse_graph(dev, bytes)?;
    let stream = Stream::builder(dev).non_blocking().build()?;
    exec.launch(&stream)?;
    stream.synchronize()?;
    print_footprint(dev)
}

/// A graph allocating `bytes`, running `clock_block` on them for 5 µs a thread, freeing
/// them; returns its instantiation and the allocation's address.
fn simple_alloc_free_graph(dev: &Device, k: &Kernel, bytes: usize) -> Res<(GraphExec, u64)> {
    let mut g = Graph::new(dev);
    let (alloc_a, a) = g.add_alloc::<f32>(&[], bytes / 4)?;
    let kernel_time_us = 5.0;
    let clocks = (kernel_time_us / 1000.0 * dev.properties().clock_rate_khz as f64) as i64;
    let blocks = (bytes / 4) as u32 / THREADS_PER_BLOCK;
    let cfg = LaunchConfig::new(blocks, THREADS_PER_BLOCK);
    let block = g.add_kernel(&[alloc_a], k, cfg, KernelArgs::new().scalar(clocks))?;
    g.add_free(&[block], &a)?;
    let exec = g.instantiate()?;
    Ok((exec, a.device_addr()))
}

fn physical_memory_reuse_single_stream(
    dev: &Device,
    k: &Kernel,
    bytes: usize,
    c: &mut Checks,
) -> Res<()> {
    println!("================================");
    println!("Running physical memory reuse example.");
    println!(
        "CUDA reuses the same physical memory for allocations from separate graphs when the \
         allocation lifetimes don't overlap.\n"
    );
    let mut graphs = Vec::new();
    for _ in 0..NUM_GRAPHS {
        graphs.push(simple_alloc_free_graph(dev, k, bytes)?);
    }
    println!("Creating the graph execs does not reserve any physical memory.");
    print_footprint(dev)?;
    let stream = Stream::builder(dev).non_blocking().build()?;
    graphs[0].0.launch(&stream)?;
    println!("\nThe first graph launched reserves the memory it needs.");
    print_footprint(dev)?;
    graphs[0].0.launch(&stream)?;
    print!("A subsequent launch of the same graph in the same stream reuses the same physical memory. ");
    println!("Thus the memory footprint does not grow here.");
    print_footprint(dev)?;
    print!(
        "\nSubsequent launches of other graphs in the same stream also reuse the physical memory. "
    );
    println!("Thus the memory footprint does not grow here.");
    for (i, (exec, _)) in graphs.iter().enumerate().skip(1) {
        exec.launch(&stream)?;
        print!("{i:02}: ");
        print_footprint(dev)?;
    }
    stream.synchronize()?;
    let mut differ = true;
    for i in 0..NUM_GRAPHS {
        for j in i + 1..NUM_GRAPHS {
            if graphs[i].1 == graphs[j].1 {
                differ = false;
                println!("Error: Graph exec {i} and {j} have the same virtual address!");
            }
        }
    }
    c.check(differ, "all graphs use a different virtual address");
    if differ {
        println!("\nCheck confirms all graphs use a different virtual address.");
    } else {
        println!("\nAll graphs do NOT use different virtual addresses. Exiting test.");
    }
    Ok(())
}

fn simultaneous_streams(dev: &Device, k: &Kernel, bytes: usize) -> Res<()> {
    println!("================================");
    println!("Running simultaneous streams example.");
    print!("Graphs that can run concurrently need separate physical memory. ");
    println!(
        "In this example, each graph launched in a separate stream increases the total memory \
         footprint.\n"
    );
    print!("When launching a new graph, CUDA may reuse physical memory from a graph whose execution has already ");
    print!("finished -- even if the new graph is being launched in a different stream from the completed graph. ");
    println!("Therefore, a kernel node is added to the graphs to increase runtime.\n");
    let mut graphs = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..NUM_GRAPHS {
        graphs.push(simple_alloc_free_graph(dev, k, bytes)?.0);
        streams.push(Stream::builder(dev).non_blocking().build()?);
    }
    println!("Initial footprint:");
    print_footprint(dev)?;
    println!("\nEach graph launch in a seperate stream grows the memory footprint:");
    for i in 1..NUM_GRAPHS {
        graphs[i].launch(&streams[i])?;
        print!("{i:02}: ");
        print_footprint(dev)?;
    }
    for s in &streams {
        s.synchronize()?;
    }
    Ok(())
}

/// A graph allocating `bytes` and freeing nothing: the memory is handed out (GR10).
fn simple_alloc_no_free_graph(dev: &Device, bytes: usize) -> Res<(GraphExec, DeviceBuffer<f32>)> {
    let mut g = Graph::new(dev);
    let (_, a) = g.add_alloc::<f32>(&[], bytes / 4)?;
    Ok((g.instantiate()?, a))
}

fn unfreed_allocations(dev: &Device, bytes: usize) -> Res<()> {
    println!("================================");
    println!("Running unfreed streams example.");
    println!(
        "CUDA cannot reuse phyiscal memory from graphs which do not free their allocations.\n"
    );
    let mut graphs = Vec::new();
    for _ in 0..NUM_GRAPHS {
        graphs.push(simple_alloc_no_free_graph(dev, bytes)?);
    }
    let stream = Stream::builder(dev).non_blocking().build()?;
    print!(
        "Despite being launched in the same stream, each graph launch grows the memory footprint. "
    );
    println!("Since the allocation is not freed, CUDA keeps the memory valid for use.");
    for (i, (exec, _)) in graphs.iter().enumerate() {
        exec.launch(&stream)?;
        print!("{i:02}: ");
        print_footprint(dev)?;
    }
    stream.synchronize()?;
    dev.trim_graph_memory()?;
    println!(
        "\nTrimming does not impact the memory footprint since the un-freed allocations are \
         still holding onto the memory."
    );
    print_footprint(dev)?;
    let (execs, buffers): (Vec<GraphExec>, Vec<DeviceBuffer<f32>>) = graphs.into_iter().unzip();
    for b in buffers {
        b.free()?; // cudaFree
    }
    println!("\nFreeing the allocations does not shrink the footprint.");
    print_footprint(dev)?;
    dev.trim_graph_memory()?;
    println!(
        "\nSince the allocations are now freed, trimming does reduce the footprint even when \
         the graph execs are not yet destroyed."
    );
    print_footprint(dev)?;
    drop(execs);
    Ok(())
}

fn cleanup_memory(dev: &Device) -> Res<()> {
    dev.trim_graph_memory()?;
    println!("\nCleaning up example by trimming device memory.");
    print_footprint(dev)?;
    println!();
    Ok(())
}

fn run(c: &mut Checks) -> Res<()> {
    let bytes = 64 * 1024 * 1024;
    let dev = cueflow_samples::device()?;
    let props = dev.properties();
    let v = props.driver_version;
    println!("Driver version is: {}.{}", v / 1000, (v % 100) / 10);
    if !props.memory_pools {
        println!("Waiving execution as device does not support Memory Pools");
        return Ok(());
    }
    println!("Running sample.");
    if !on_gpu(&dev) {
        println!("(host backend: each instantiation holds its graph memory while it lives)");
    }
    let k = clock_block(props.clock_rate_khz);
    virtual_address_reuse_single_graph(&dev, bytes)?;
    cleanup_memory(&dev)?;
    physical_memory_reuse_single_stream(&dev, &k, bytes, c)?;
    cleanup_memory(&dev)?;
    simultaneous_streams(&dev, &k, bytes)?;
    cleanup_memory(&dev)?;
    unfreed_allocations(&dev, bytes)?;
    cleanup_memory(&dev)?;
    println!("================================");
    println!("Sample complete.");
    Ok(())
}

fn main() -> std::process::ExitCode {
    main_with("graphMemoryFootprint", run)
}
