//! Item 8 (RL5, ER2): faults that never lie.

use super::*;

fn host_read_after_a_sticky_fault_returns_the_fault(dev: &Device) {
    let s = Stream::new(dev).unwrap();
    let d = DeviceBuffer::<f32>::new(dev, 1 << 17).unwrap();
    let mut p = PinnedBuffer::<f32>::new(dev, 1 << 17).unwrap();
    kernels::fault(&s).unwrap();
    // The copy may be refused (the fault already seen) or enqueued and discarded.
    let _ = s.copy_d2h(&mut p, &d);
    let _ = s.synchronize();
    match p.read() {
        Err(e) => assert!(e.is_sticky(), "{e:?}"),
        Ok(_) => panic!("a host read after a sticky fault returned Ok (ER2)"),
    }
    assert!(p.write().is_err());
}

#[test]
fn host_read_after_a_sticky_fault_returns_the_fault_host() {
    host_read_after_a_sticky_fault_returns_the_fault(&Device::host().unwrap());
}

/// On CUDA a fault poisons the whole process's contexts: the body runs in a child.
#[test]
fn host_read_after_a_sticky_fault_returns_the_fault_cuda() {
    const NAME: &str = "host_read_after_a_sticky_fault_returns_the_fault_cuda";
    if in_child(NAME) {
        host_read_after_a_sticky_fault_returns_the_fault(&Device::cuda(0).unwrap());
        println!("READ-OK");
        return;
    }
    hold_gpu(true); // A fault may end the other contexts' work on the device too.
    if cuda().is_some() {
        child_passed(&child(NAME, &[]).expect("the parent"), "READ-OK");
    }
}

/// CUDA: with other kernels in flight, the fault names `cf_fault` among the candidates and
/// says there are several, or names it alone — never another kernel alone; with
/// `CUEFLOW_LAUNCH_BLOCKING=1` it names exactly `cf_fault`. Each in a child process (a fault
/// poisons the process's contexts).
#[test]
fn cuda_fault_names_the_candidates_or_the_kernel() {
    const NAME: &str = "cuda_fault_names_the_candidates_or_the_kernel";
    if in_child(NAME) {
        let blocking = std::env::var("CUEFLOW_LAUNCH_BLOCKING").is_ok();
        let dev = Device::cuda(0).unwrap();
        let s = Stream::new(&dev).unwrap();
        let d = DeviceBuffer::<f32>::new(&dev, 1 << 20).unwrap();
        for _ in 0..4 {
            kernels::fill(&s, &d, 1.0).unwrap();
        }
        let e = match kernels::fault(&s) {
            Err(e) => e,
            Ok(()) => s.synchronize().unwrap_err(),
        };
        let Error::KernelFault { kernel, detail, .. } = &e else {
            panic!("expected a kernel fault, got {e:?}")
        };
        println!("{e}");
        if blocking {
            assert_eq!(kernel, "cf_fault", "{e}");
        } else if kernel != "cf_fault" {
            assert!(
                kernel.starts_with("one of:")
                    && kernel.contains("cf_fault")
                    && detail.contains("any of them"),
                "{e}"
            );
        }
        println!("FAULT-OK");
        return;
    }
    hold_gpu(true); // A fault may end the other contexts' work on the device too.
    if cuda().is_none() {
        return;
    }
    for env in [&[][..], &[("CUEFLOW_LAUNCH_BLOCKING", "1")][..]] {
        let (stdout, _) = child_passed(&child(NAME, env).expect("the parent"), "FAULT-OK");
        say(format_args!(
            "{}",
            stdout.lines().find(|l| l.contains("faulted")).unwrap_or("")
        ));
    }
}

/// CUDA (Q2 with graph launches batched): a fault after graph launches names the faulting
/// kernel (alone or among candidates), never only the graph; a fault inside a graph launched
/// after kernel launches names the graph's kernels (alone or among candidates), never only
/// the earlier kernel. Each in a child process (a fault poisons the process's contexts).
#[test]
fn cuda_fault_beside_graph_launches_names_the_right_candidates() {
    const NAME: &str = "cuda_fault_beside_graph_launches_names_the_right_candidates";
    if in_child(NAME) {
        let fault_in_graph = std::env::var("FAULT_IN_GRAPH").is_ok();
        let dev = Device::cuda(0).unwrap();
        let s = Stream::new(&dev).unwrap();
        let d = DeviceBuffer::<f32>::new(&dev, 1 << 20).unwrap();
        s.begin_capture(CaptureMode::Global).unwrap();
        if fault_in_graph {
            kernels::fault(&s).unwrap();
        } else {
            kernels::fill(&s, &d, 1.0).unwrap();
        }
        let exec = s.end_capture().unwrap().instantiate().unwrap();
        let launched = if fault_in_graph {
            for _ in 0..4 {
                kernels::fill(&s, &d, 1.0).unwrap();
            }
            exec.launch(&s)
        } else {
            for _ in 0..4 {
                exec.launch(&s).unwrap();
            }
            kernels::fault(&s)
        };
        let e = match launched {
            Err(e) => e,
            Ok(()) => s.synchronize().unwrap_err(),
        };
        let Error::KernelFault { kernel, .. } = &e else {
            panic!("expected a kernel fault, got {e:?}")
        };
        println!("{e}");
        let culprit = if fault_in_graph {
            "kernels of a graph launch"
        } else {
            "cf_fault"
        };
        assert!(
            kernel == culprit || (kernel.starts_with("one of:") && kernel.contains(culprit)),
            "{e}"
        );
        println!("FAULT-OK");
        return;
    }
    hold_gpu(true); // A fault may end the other contexts' work on the device too.
    if cuda().is_none() {
        return;
    }
    for env in [&[][..], &[("FAULT_IN_GRAPH", "1")][..]] {
        let (stdout, _) = child_passed(&child(NAME, env).expect("the parent"), "FAULT-OK");
        say(format_args!(
            "{}",
            stdout.lines().find(|l| l.contains("faulted")).unwrap_or("")
        ));
    }
}
