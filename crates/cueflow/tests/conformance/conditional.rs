//! GR9: conditional nodes — if, if/else, while and switch, nested — whose condition kernels
//! set at run time (CUDA C: `cudaGraphSetConditional`; host: `BlockArgs::set_condition`),
//! with default values and the reset-each-launch flag; the sanitizer sees every body's
//! accesses.

use cueflow::{
    CompileOptions, ConditionHandle, Device, DeviceBuffer, Error, Graph, Kernel, KernelArgs,
    LaunchConfig, ManagedBuffer, PinnedBuffer, PinnedFlags, SanitizeMode, CONDITIONAL_CUDA_H,
};

use crate::support::*;

const SOURCE: &str = r#"
#include "cueflow_conditional.h"
extern "C" __global__ void cf_count_step(unsigned int *count, cudaGraphConditionalHandle h,
                                         unsigned int limit) {
  unsigned int c = ++count[0];
  cudaGraphSetConditional(h, c < limit ? 1u : 0u);
}
extern "C" __global__ void cf_set_cond(cudaGraphConditionalHandle h, unsigned int v) {
  cudaGraphSetConditional(h, v);
}
extern "C" __global__ void cf_put(unsigned int *out, unsigned int v) { out[0] = v; }
"#;

fn opts() -> CompileOptions {
    CompileOptions::new().header("cueflow_conditional.h", CONDITIONAL_CUDA_H)
}

pub fn count_step() -> Kernel {
    Kernel::new("cf_count_step")
        .cuda_source(SOURCE, "cf_count_step")
        .cuda_options(opts())
        .host(|_, a| {
            let limit: u32 = a.scalar(2);
            let c = &mut a.tile_mut::<u32>(0)[0];
            *c += 1;
            a.set_condition(1, (*c < limit) as u32);
        })
        .build()
}

pub fn set_cond() -> Kernel {
    Kernel::new("cf_set_cond")
        .cuda_source(SOURCE, "cf_set_cond")
        .cuda_options(opts())
        .host(|_, a| a.set_condition(0, a.scalar(1)))
        .build()
}

pub fn put() -> Kernel {
    Kernel::new("cf_put")
        .cuda_source(SOURCE, "cf_put")
        .cuda_options(opts())
        .host(|_, a| a.tile_mut::<u32>(0)[0] = a.scalar(1))
        .build()
}

pub fn one() -> LaunchConfig {
    LaunchConfig::new(1, 1)
}

/// A body that writes `v` into `out`.
pub fn putting(dev: &Device, out: &DeviceBuffer<u32>, v: u32) -> Graph {
    let mut g = Graph::new(dev);
    g.add_kernel(&[], &put(), one(), KernelArgs::new().write(out).scalar(v))
        .unwrap();
    g
}

pub fn setting(g: &mut Graph, h: &ConditionHandle, v: u32) -> cueflow::GraphNodeId {
    g.add_kernel(
        &[],
        &set_cond(),
        one(),
        KernelArgs::new().condition(h).scalar(v),
    )
    .unwrap()
}

fn value(dev: &Device, b: &DeviceBuffer<u32>) -> u32 {
    let _ = dev;
    download(b)[0]
}

/// GR9: a while node runs its body while a kernel of the body keeps the condition set; with
/// reset-each-launch every launch starts from the default; without it the default is not
/// applied (as CUDA without cudaGraphCondAssignDefault): the condition starts at 0, and the
/// value the last launch left holds, so the body never runs here.
pub fn gr9_while_loop_and_reset(dev: &Device) {
    let s = side_stream(dev);
    for reset in [true, false] {
        let count = upload(dev, &[0u32]);
        let mut g = Graph::new(dev);
        let cond = g.condition(1, reset);
        let mut body = Graph::new(dev);
        let args = KernelArgs::new()
            .write(&count)
            .condition(&cond)
            .scalar(10u32);
        body.add_kernel(&[], &count_step(), one(), args).unwrap();
        g.add_while(&[], &cond, &body).unwrap();
        let exec = g.instantiate().unwrap();
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(
            value(dev, &count),
            if reset { 10 } else { 0 },
            "reset {reset}"
        );
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        // Reset: the loop starts again (count 11, below the limit no more: one iteration).
        let want = if reset { 11 } else { 0 };
        assert_eq!(value(dev, &count), want, "reset {reset}");
    }
}

/// GR9 (and C4 of the CUDA backend's `graph_cond.rs`): two while loops and an if/else with no
/// order between them in one graph — one condition without reset set by a kernel before its
/// loop, one reset at each launch — each run as far as their conditions say, at every launch
/// of many instantiations. On CUDA the driver failed such launches (`CUDA_ERROR_LAUNCH_FAILED`,
/// sticky) until the backend ordered a graph's conditional nodes one after another.
pub fn gr9_unordered_loops_in_one_graph(dev: &Device) {
    let s = side_stream(dev);
    let rounds = if is_host(dev) { 30 } else { 3_000 };
    let (a, b, c) = (
        upload(dev, &[0u32]),
        upload(dev, &[0u32]),
        upload(dev, &[0u32]),
    );
    for round in 0..rounds {
        let mut g = Graph::new(dev);
        let (ha, hb, hc) = (
            g.condition(1, false),
            g.condition(1, true),
            g.condition(0, true),
        );
        let mut loops = Vec::new();
        for (h, count) in [(&ha, &a), (&hb, &b)] {
            let zero = g.add_memset(&[], count, 0).unwrap();
            let set = setting(&mut g, h, 1);
            let mut body = Graph::new(dev);
            let args = KernelArgs::new().write(count).condition(h).scalar(3u32);
            body.add_kernel(&[], &count_step(), one(), args).unwrap();
            loops.push(g.add_while(&[zero, set], h, &body).unwrap());
        }
        let set = setting(&mut g, &hc, round % 2);
        g.add_if_else(&[set], &hc, &putting(dev, &c, 1), &putting(dev, &c, 2))
            .unwrap();
        let exec = g.instantiate().unwrap();
        exec.launch(&s).unwrap();
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        let got = [value(dev, &a), value(dev, &b), value(dev, &c)];
        assert_eq!(got, [3, 3, 2 - round % 2], "round {round}");
    }
}

/// A while loop counting `count` to 3 after zeroing it (after `deps` too), in `g`.
fn counting_loop(g: &mut Graph, deps: &[cueflow::GraphNodeId], count: &DeviceBuffer<u32>) {
    let dev = count.device();
    let h = g.condition(1, true);
    let zero = g.add_memset(&[], count, 0).unwrap();
    let mut body = Graph::new(dev);
    let args = KernelArgs::new().write(count).condition(&h).scalar(3u32);
    body.add_kernel(&[], &count_step(), one(), args).unwrap();
    let deps: Vec<_> = deps.iter().copied().chain([zero]).collect();
    g.add_while(&deps, &h, &body).unwrap();
}

/// GR9 (and C6 of the CUDA backend's `graph_cond.rs`): a graph with a switch node, then a
/// while loop, and beside the loop, with no order between them, kernels writing mapped memory
/// and managed memory (which the host wrote before the launch), launched twice per
/// instantiation many times: every loop counts as far as its condition says, and every
/// kernel's result is there. On CUDA the driver failed such launches now and then
/// (`CUDA_ERROR_LAUNCH_FAILED`, sticky), in raw CUDA too (`benches/cuda/switch_while_probe.cu`),
/// until the backend kept nodes that reach host memory off the conditional nodes' time.
pub fn gr9_loops_beside_kernels_on_host_memory(dev: &Device) {
    let s = side_stream(dev);
    let rounds = if is_host(dev) { 20 } else { 2_000 };
    let (count, picked) = (upload(dev, &[0u32]), upload(dev, &[0u32]));
    let mapped = PinnedFlags::default().mapped();
    let mut mapped = PinnedBuffer::<u32>::with_flags(dev, 1, mapped).unwrap();
    let mut managed = ManagedBuffer::<u32>::new(dev, 64).unwrap();
    for round in 0..rounds {
        managed.write().unwrap().fill(round);
        let mut g = Graph::new(dev);
        let hs = g.condition(1, true);
        let bodies = [&putting(dev, &picked, 10), &putting(dev, &picked, 11)];
        let switch = g.add_switch(&[], &hs, &bodies).unwrap();
        counting_loop(&mut g, &[switch], &count);
        let args = KernelArgs::new().write_mapped(&mut mapped).scalar(round);
        g.add_kernel(&[switch], &put(), one(), args).unwrap();
        let args = KernelArgs::new()
            .write_mapped(&mut managed)
            .scalar(round + 1);
        g.add_kernel(&[], &put(), one(), args).unwrap();
        let exec = g.instantiate().unwrap();
        exec.launch(&s).unwrap();
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        let host = [mapped.read().unwrap()[0], managed.read().unwrap()[0]];
        let got = [value(dev, &count), value(dev, &picked), host[0], host[1]];
        assert_eq!(got, [3, 11, round, round + 1], "round {round}");
    }
}

/// GR9 (and C7 of the CUDA backend's `graph_cond.rs`): a graph with a switch node, then a
/// while loop, launched on one stream while a kernel writing mapped memory runs on another,
/// with no order between the two streams, many times: every loop counts as far as its
/// condition says, and the kernel's result is there. On CUDA the driver failed such launches
/// now and then (`CUDA_ERROR_LAUNCH_FAILED`, sticky), in raw CUDA too (mode 11 of
/// `benches/cuda/switch_while_probe.cu`), until the backend kept the two apart.
pub fn gr9_loops_beside_kernels_on_host_memory_of_other_streams(dev: &Device) {
    let (s, other) = (side_stream(dev), side_stream(dev));
    let rounds = if is_host(dev) { 20 } else { 2_000 };
    let (count, picked) = (upload(dev, &[0u32]), upload(dev, &[0u32]));
    let mapped = PinnedFlags::default().mapped();
    let mut mapped = PinnedBuffer::<u32>::with_flags(dev, 1, mapped).unwrap();
    let put = put();
    for round in 0..rounds {
        let mut g = Graph::new(dev);
        let hs = g.condition(1, true);
        let bodies = [&putting(dev, &picked, 10), &putting(dev, &picked, 11)];
        let switch = g.add_switch(&[], &hs, &bodies).unwrap();
        counting_loop(&mut g, &[switch], &count);
        let exec = g.instantiate().unwrap();
        exec.launch(&s).unwrap();
        let args = KernelArgs::new().write_mapped(&mut mapped).scalar(round);
        other.launch(&put, one(), args).unwrap();
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        other.synchronize().unwrap();
        let got = [
            value(dev, &count),
            value(dev, &picked),
            mapped.read().unwrap()[0],
        ];
        assert_eq!(got, [3, 11, round], "round {round}");
    }
}

/// GR9 (and C5 of the CUDA backend's `graph_cond.rs`): two graphs, one while loop each and an
/// if node in the second, launched on two streams with no order between them, many times:
/// every loop counts as far as its condition says. On CUDA the driver failed such launches
/// (`CUDA_ERROR_LAUNCH_FAILED`, sticky) until the backend ran a device's graphs with
/// conditional nodes one at a time.
pub fn gr9_loops_of_two_graphs_at_once(dev: &Device) {
    let streams = [side_stream(dev), side_stream(dev)];
    let rounds = if is_host(dev) { 30 } else { 3_000 };
    let counts = [upload(dev, &[0u32]), upload(dev, &[0u32])];
    let flag = upload(dev, &[0u32]);
    for round in 0..rounds {
        let mut execs = Vec::new();
        for (k, count) in counts.iter().enumerate() {
            let mut g = Graph::new(dev);
            let h = g.condition(1, true);
            let zero = g.add_memset(&[], count, 0).unwrap();
            let mut body = Graph::new(dev);
            let args = KernelArgs::new().write(count).condition(&h).scalar(3u32);
            body.add_kernel(&[], &count_step(), one(), args).unwrap();
            let looped = g.add_while(&[zero], &h, &body).unwrap();
            if k == 1 {
                let hi = g.condition(0, true);
                let set = setting(&mut g, &hi, 1);
                g.add_if(&[set, looped], &hi, &putting(dev, &flag, round + 1))
                    .unwrap();
            }
            execs.push(g.instantiate().unwrap());
        }
        for _ in 0..2 {
            for (exec, s) in execs.iter().zip(&streams) {
                exec.launch(s).unwrap();
            }
        }
        streams.iter().for_each(|s| s.synchronize().unwrap());
        let got = [
            value(dev, &counts[0]),
            value(dev, &counts[1]),
            value(dev, &flag),
        ];
        assert_eq!(got, [3, 3, round + 1], "round {round}");
    }
}

/// GR9: if, if/else and switch nodes run the body the condition selects as a kernel before
/// them set it.
pub fn gr9_if_else_and_switch(dev: &Device) {
    let s = side_stream(dev);
    for v in [0u32, 1, 2, 5] {
        let (a, b, c) = (
            upload(dev, &[0u32]),
            upload(dev, &[0u32]),
            upload(dev, &[0u32]),
        );
        let mut g = Graph::new(dev);
        // One condition per conditional node (a CUDA handle drives one node).
        let h: Vec<ConditionHandle> = (0..3).map(|_| g.condition(0, true)).collect();
        let set: Vec<_> = h.iter().map(|h| setting(&mut g, h, v)).collect();
        g.add_if(&[set[0]], &h[0], &putting(dev, &a, 7)).unwrap();
        g.add_if_else(&[set[1]], &h[1], &putting(dev, &b, 1), &putting(dev, &b, 2))
            .unwrap();
        let bodies = [
            putting(dev, &c, 10),
            putting(dev, &c, 11),
            putting(dev, &c, 12),
        ];
        g.add_switch(&[set[2]], &h[2], &bodies.iter().collect::<Vec<_>>())
            .unwrap();
        g.instantiate().unwrap().launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(value(dev, &a), if v != 0 { 7 } else { 0 }, "if, value {v}");
        assert_eq!(
            value(dev, &b),
            if v != 0 { 1 } else { 2 },
            "if/else, value {v}"
        );
        let want = [10, 11, 12].get(v as usize).copied().unwrap_or(0);
        assert_eq!(value(dev, &c), want, "switch, value {v}");
    }
}

/// GR9: a condition drives one conditional node: a second node on it is refused at
/// instantiation with an error naming the node, on every backend (CUDA's driver refuses it).
pub fn gr9_one_node_per_condition(dev: &Device) {
    let out = upload(dev, &[0u32]);
    let mut g = Graph::new(dev);
    let h = g.condition(1, true);
    g.add_if(&[], &h, &putting(dev, &out, 1)).unwrap();
    g.add_if(&[], &h, &putting(dev, &out, 2)).unwrap();
    match g.instantiate() {
        Err(Error::Graph(why)) => assert!(why.contains("node 1"), "{why}"),
        Err(e) => panic!("expected Error::Graph, got {e}"),
        Ok(_) => panic!("a second conditional node on one condition was accepted"),
    }
}

/// GR9: conditional nodes nest: a while loop whose body holds an if node on another
/// condition, set by the loop's kernel.
pub fn gr9_nested_bodies(dev: &Device) {
    let s = side_stream(dev);
    let (count, hit) = (upload(dev, &[0u32]), upload(dev, &[0u32]));
    let mut g = Graph::new(dev);
    let outer = g.condition(1, true);
    let inner = g.condition(0, true);
    let mut body = Graph::new(dev);
    let step = body
        .add_kernel(
            &[],
            &count_step(),
            one(),
            KernelArgs::new()
                .write(&count)
                .condition(&outer)
                .scalar(4u32),
        )
        .unwrap();
    let set = body
        .add_kernel(
            &[step],
            &set_cond(),
            one(),
            KernelArgs::new().condition(&inner).scalar(1u32),
        )
        .unwrap();
    body.add_if(&[set], &inner, &putting(dev, &hit, 9)).unwrap();
    g.add_while(&[], &outer, &body).unwrap();
    g.instantiate().unwrap().launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!((value(dev, &count), value(dev, &hit)), (4, 9));
}

/// GR9 with AC3/AC4: the sanitizer sees the accesses of every body that may run — a node not
/// ordered with a conditional node whose (possibly unused) body writes the same buffer is a
/// race at instantiation, and so is a stream writing it, unordered, after the launch.
pub fn gr9_sanitizer_sees_every_body(dev: &Device) {
    dev.set_sanitize(SanitizeMode::Error);
    let (s, other) = (side_stream(dev), side_stream(dev));
    let out = upload(dev, &[0u32]);
    let mut g = Graph::new(dev);
    let h = g.condition(0, true); // the body never runs
    g.add_if(&[], &h, &putting(dev, &out, 1)).unwrap();
    let mut racy = g.clone();
    racy.add_kernel(
        &[],
        &put(),
        one(),
        KernelArgs::new().write(&out).scalar(2u32),
    )
    .unwrap();
    assert!(matches!(racy.instantiate(), Err(Error::Race(_))));
    let exec = g.instantiate().unwrap();
    exec.launch(&s).unwrap();
    assert!(matches!(
        other.launch(&put(), one(), KernelArgs::new().write(&out).scalar(3u32)),
        Err(Error::Race(_))
    ));
    dev.synchronize().unwrap();
}
