//! Port of NVIDIA's `graphConditionalNodes`: five graphs with conditional nodes (GR9) — an if
//! node (A → B \[C\]), a do-while loop (a while node whose condition defaults to 1 and resets
//! at each launch, its body [B → C → D] captured from a stream), a while loop inserted into a
//! stream capture (A → B \[C\] → D), an if/else node (A → B \[C | D\]) and a switch node
//! (A → B [C | D | E | F]). As in the original, each conditional node is added first and its
//! body graphs filled afterwards: by adding nodes to them, or by capturing a stream into them
//! (`Stream::begin_capture_to_graph`, cudaStreamBeginCaptureToGraph) — for the captured while
//! loop after the capture that added the node ended. The original prints from its kernels;
//! here each kernel appends its name's id to a device log, and the port checks, launch by
//! launch, which kernels ran.

use cueflow::{
    CaptureMode, CompileOptions, ConditionHandle, Device, DeviceBuffer, Graph, Kernel, KernelArgs,
    LaunchConfig, Stream, CONDITIONAL_CUDA_H,
};
use cueflow_samples::{main_with, Checks};

const SOURCE: &str = include_str!("../../kernels/graph_conditional_nodes.cu");
const LOG: usize = 64;

/// The kernels' names, by id (the log holds ids).
const NAMES: &[&str] = &[
    "ifGraphKernelA",
    "ifGraphKernelC",
    "ifGraphKernelD",
    "doWhileEmptyKernel",
    "doWhileLoopKernel",
    "capturedWhileKernel",
    "capturedWhileEmptyKernel",
    "switchGraphKernelA",
    "switchGraphKernelC",
    "switchGraphKernelD",
    "switchGraphKernelE",
    "switchGraphKernelF",
];

fn id(name: &str) -> u32 {
    NAMES
        .iter()
        .position(|n| *n == name)
        .expect("a known kernel") as u32
}

/// The host side of `append`: one atomic slot.
fn append(a: &cueflow::BlockArgs<'_>, i: usize, id: u32) {
    use std::sync::atomic::Ordering::SeqCst;
    let log = a.atomics_u32(i);
    let at = log[0].fetch_add(1, SeqCst) as usize;
    if let Some(slot) = log.get(1 + at) {
        slot.store(id, SeqCst);
    }
}

struct Kernels {
    set_if_odd: Kernel,
    set_to_byte: Kernel,
    report: Kernel,
    count_down: Kernel,
    test_and_count: Kernel,
}

fn kernels() -> Kernels {
    let k = |name: &str| {
        Kernel::new(name)
            .cuda_source(SOURCE, name)
            .cuda_options(CompileOptions::new().header("cueflow_conditional.h", CONDITIONAL_CUDA_H))
    };
    Kernels {
        set_if_odd: k("set_if_odd")
            .host(|_, a| {
                a.set_condition(1, (a.input::<u8>(0)[0] & 1) as u32);
                append(a, 2, a.scalar(3));
            })
            .build(),
        set_to_byte: k("set_to_byte")
            .host(|_, a| {
                a.set_condition(1, a.input::<u8>(0)[0] as u32);
                append(a, 2, a.scalar(3));
            })
            .build(),
        report: k("report").host(|_, a| append(a, 0, a.scalar(1))).build(),
        count_down: k("count_down")
            .host(|_, a| {
                let c = &mut a.tile_mut::<u8>(0)[0];
                *c = c.wrapping_sub(1);
                if *c == 0 {
                    a.set_condition(1, 0);
                }
                append(a, 2, a.scalar(3));
            })
            .build(),
        test_and_count: k("test_and_count")
            .host(|_, a| {
                let c = &mut a.tile_mut::<u8>(0)[0];
                if *c != 0 {
                    *c -= 1;
                }
                a.set_condition(1, *c as u32);
                append(a, 2, a.scalar(3));
            })
            .build(),
    }
}

fn one() -> LaunchConfig {
    LaunchConfig::new(1, 1)
}

/// What one sample graph works on: the byte, the log, a stream.
struct Run<'a> {
    dev: &'a Device,
    k: &'a Kernels,
    byte: DeviceBuffer<u8>,
    log: DeviceBuffer<u32>,
    s: Stream,
}

impl Run<'_> {
    /// Fill body `i` of conditional node `node` of `g` with one kernel reporting `name`.
    fn fill_report(
        &self,
        g: &mut Graph,
        node: cueflow::GraphNodeId,
        i: usize,
        name: &str,
    ) -> cueflow::Result<()> {
        let mut body = g.conditional_body(node, i)?;
        let args = KernelArgs::new().atomic(&self.log).scalar(id(name));
        body.add_kernel(&[], &self.k.report, one(), args)?;
        Ok(())
    }

    fn empty(&self) -> Graph {
        Graph::new(self.dev)
    }

    /// Set the byte, clear the log, launch, and return the names the log holds.
    fn launch(&self, exec: &cueflow::GraphExec, byte: u8) -> cueflow::Result<Vec<&'static str>> {
        self.s.memset(&self.byte, byte)?;
        self.s.memset(&self.log, 0)?;
        println!("Host: Launching graph with device memory set to {byte}");
        exec.launch(&self.s)?;
        let mut log = vec![0u32; LOG];
        self.s.read_pageable(&mut log, &self.log)?;
        let n = (log[0] as usize).min(LOG - 1);
        let ran: Vec<&'static str> = log[1..=n].iter().map(|&i| NAMES[i as usize]).collect();
        for name in &ran {
            println!("GPU: {name}");
        }
        Ok(ran)
    }

    fn setter(&self, h: &ConditionHandle, name: &str) -> KernelArgs {
        KernelArgs::new()
            .read(&self.byte)
            .condition(h)
            .atomic(&self.log)
            .scalar(id(name))
    }

    fn counter(&self, h: &ConditionHandle, name: &str) -> KernelArgs {
        KernelArgs::new()
            .write(&self.byte)
            .condition(h)
            .atomic(&self.log)
            .scalar(id(name))
    }
}

fn simple_if(r: &Run<'_>, checks: &mut Checks) -> cueflow::Result<()> {
    println!("simpleIfGraph: Building graph...");
    let mut g = Graph::new(r.dev);
    let h = g.condition(0, false);
    let a = g.add_kernel(&[], &r.k.set_if_odd, one(), r.setter(&h, "ifGraphKernelA"))?;
    let b = g.add_if(&[a], &h, &r.empty())?;
    r.fill_report(&mut g, b, 0, "ifGraphKernelC")?;
    let exec = g.instantiate()?;
    checks.eq(
        r.launch(&exec, 0)?,
        vec!["ifGraphKernelA"],
        "simpleIfGraph with 0: kernels",
    );
    checks.eq(
        r.launch(&exec, 1)?,
        vec!["ifGraphKernelA", "ifGraphKernelC"],
        "simpleIfGraph with 1: kernels",
    );
    println!("simpleIfGraph: Complete\n");
    Ok(())
}

fn simple_do_while(r: &Run<'_>, checks: &mut Checks) -> cueflow::Result<()> {
    println!("simpleDoWhileGraph: Building graph...");
    let mut g = Graph::new(r.dev);
    let h = g.condition(1, true);
    let node = g.add_while(&[], &h, &r.empty())?;
    // The body, captured from a stream into the node's body graph.
    let cap = Stream::new(r.dev)?;
    {
        let mut body = g.conditional_body(node, 0)?;
        let into = cap.begin_capture_to_graph(&mut body, &[], CaptureMode::Global)?;
        for _ in 0..2 {
            let args = KernelArgs::new()
                .atomic(&r.log)
                .scalar(id("doWhileEmptyKernel"));
            cap.launch(&r.k.report, one(), args)?;
        }
        cap.launch(&r.k.count_down, one(), r.counter(&h, "doWhileLoopKernel"))?;
        into.end()?;
    }
    let exec = g.instantiate()?;
    let ran = r.launch(&exec, 10)?;
    let mut want = Vec::new();
    for _ in 0..10 {
        want.extend([
            "doWhileEmptyKernel",
            "doWhileEmptyKernel",
            "doWhileLoopKernel",
        ]);
    }
    checks.eq(ran, want, "simpleDoWhileGraph with 10: kernels");
    println!("simpleDoWhileGraph: Complete\n");
    Ok(())
}

fn captured_while(r: &Run<'_>, checks: &mut Checks) -> cueflow::Result<()> {
    println!("capturedWhileGraph: Building graph...");
    // The condition of the capture's graph (the original creates it on the graph the capture
    // reports): tied to the capture when its node is added.
    let h = ConditionHandle::new(0, false);
    // A → B [ ] → D, captured.
    let cap = Stream::new(r.dev)?;
    cap.begin_capture(CaptureMode::Global)?;
    cap.launch(
        &r.k.test_and_count,
        one(),
        r.counter(&h, "capturedWhileKernel"),
    )?;
    let b = cap.capture_while(&h, &r.empty())?;
    let args = KernelArgs::new()
        .atomic(&r.log)
        .scalar(id("capturedWhileEmptyKernel"));
    cap.launch(&r.k.report, one(), args)?;
    let mut graph = cap.end_capture()?;
    // The body, kernel C, captured into B's body graph after the capture ended.
    let body_stream = Stream::new(r.dev)?;
    {
        let mut body = graph.conditional_body(b, 0)?;
        let into = body_stream.begin_capture_to_graph(&mut body, &[], CaptureMode::Global)?;
        body_stream.launch(
            &r.k.test_and_count,
            one(),
            r.counter(&h, "capturedWhileKernel"),
        )?;
        into.end()?;
    }
    let exec = graph.instantiate()?;
    checks.eq(
        r.launch(&exec, 0)?,
        vec!["capturedWhileKernel", "capturedWhileEmptyKernel"],
        "capturedWhileGraph with 0: kernels",
    );
    let mut want = vec!["capturedWhileKernel"; 10];
    want.push("capturedWhileEmptyKernel");
    checks.eq(
        r.launch(&exec, 10)?,
        want,
        "capturedWhileGraph with 10: kernels",
    );
    println!("capturedWhileGraph: Complete\n");
    Ok(())
}

fn simple_if_else(r: &Run<'_>, checks: &mut Checks) -> cueflow::Result<()> {
    println!("simpleIfElseGraph: Building graph...");
    let mut g = Graph::new(r.dev);
    let h = g.condition(0, false);
    let a = g.add_kernel(&[], &r.k.set_if_odd, one(), r.setter(&h, "ifGraphKernelA"))?;
    let b = g.add_if_else(&[a], &h, &r.empty(), &r.empty())?;
    r.fill_report(&mut g, b, 0, "ifGraphKernelC")?;
    r.fill_report(&mut g, b, 1, "ifGraphKernelD")?;
    let exec = g.instantiate()?;
    checks.eq(
        r.launch(&exec, 0)?,
        vec!["ifGraphKernelA", "ifGraphKernelD"],
        "simpleIfElseGraph with 0: kernels",
    );
    checks.eq(
        r.launch(&exec, 1)?,
        vec!["ifGraphKernelA", "ifGraphKernelC"],
        "simpleIfElseGraph with 1: kernels",
    );
    println!("simpleIfElseGraph: Complete\n");
    Ok(())
}

fn simple_switch(r: &Run<'_>, checks: &mut Checks) -> cueflow::Result<()> {
    println!("simpleSwitchGraph: Building graph...");
    let mut g = Graph::new(r.dev);
    let h = g.condition(0, false);
    let a = g.add_kernel(
        &[],
        &r.k.set_to_byte,
        one(),
        r.setter(&h, "switchGraphKernelA"),
    )?;
    let names = [
        "switchGraphKernelC",
        "switchGraphKernelD",
        "switchGraphKernelE",
        "switchGraphKernelF",
    ];
    let empty: Vec<Graph> = names.iter().map(|_| r.empty()).collect();
    let b = g.add_switch(&[a], &h, &empty.iter().collect::<Vec<_>>())?;
    for (i, name) in names.iter().enumerate() {
        r.fill_report(&mut g, b, i, name)?;
    }
    let exec = g.instantiate()?;
    for i in 0..5u8 {
        let mut want = vec!["switchGraphKernelA"];
        want.extend(names.get(i as usize));
        checks.eq(
            r.launch(&exec, i)?,
            want,
            format!("simpleSwitchGraph with {i}: kernels"),
        );
    }
    println!("simpleSwitchGraph: Complete\n");
    Ok(())
}

fn run(checks: &mut Checks) -> Result<(), Box<dyn std::error::Error>> {
    let dev = cueflow_samples::device()?;
    let k = kernels();
    let r = Run {
        dev: &dev,
        k: &k,
        byte: DeviceBuffer::new(&dev, 1)?,
        log: DeviceBuffer::new(&dev, LOG)?,
        s: Stream::new(&dev)?,
    };
    simple_if(&r, checks)?;
    simple_do_while(&r, checks)?;
    captured_while(&r, checks)?;
    simple_if_else(&r, checks)?;
    simple_switch(&r, checks)?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    main_with("graphConditionalNodes", run)
}
