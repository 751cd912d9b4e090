//! Q2's policy, without a GPU: which items seal at once, which wait for the batch's age or
//! length.
use super::*;
use crate::backend::contract::kernel::{KernelArg, Launch};
use crate::backend::contract::memory::{Allocation, MemRef};
use crate::kernels;
use crate::types::Access;
use crate::types::MemKind;

/// The queue depth the seal tests assume (the default, RL1).
const DEPTH: usize = crate::types::DEFAULT_QUEUE_DEPTH;

fn mem(alloc: &Arc<Allocation>) -> MemRef {
    MemRef {
        alloc: alloc.clone(),
        offset: 0,
        len: alloc.bytes,
    }
}

fn launch(args: Vec<KernelArg>) -> Op {
    launch_with(&kernels::EMPTY.inner, args)
}

fn launch_of(k: &Arc<KernelInner>) -> Op {
    launch_with(k, Vec::new())
}

fn launch_with(k: &Arc<KernelInner>, args: Vec<KernelArg>) -> Op {
    Op::new(Work::Launch(Launch::new(
        k.clone(),
        [1, 1, 1],
        [1, 1, 1],
        0,
        Arc::from(args),
    )))
}

#[test]
fn q2_what_seals_at_once() {
    let a = Allocation::borrowed(0x1000, 64, MemKind::Device, 0);
    let b = Allocation::borrowed(0x2000, 64, MemKind::Device, 0);
    // The caller still holds both buffers: the batch may stay open.
    let copy = Op::new(Work::Copy {
        dst: mem(&a),
        src: mem(&b),
    });
    assert_eq!(seal_after(&copy), SealAfter::Soon);
    // Staging memory only the op holds is given back as soon as the device is past it.
    let staging = mem(&Allocation::borrowed(0x3000, 64, MemKind::Pinned, 0));
    let upload = Op::new(Work::Copy {
        dst: mem(&a),
        src: staging,
    });
    assert_eq!(seal_after(&upload), SealAfter::Now);
    // The caller let go after building the op: the same.
    let c = Allocation::borrowed(0x4000, 64, MemKind::Device, 0);
    let set = Op::new(Work::Memset {
        dst: mem(&c),
        value: 0,
    });
    assert_eq!(seal_after(&set), SealAfter::Soon);
    drop(c);
    assert_eq!(seal_after(&set), SealAfter::Now);
    assert_eq!(
        seal_after(&Op::new(Work::HostFn(Box::new(
            crate::backend::contract::op::HostCall::new(Arc::new(|| {}))
        )))),
        SealAfter::Now
    );
    assert_eq!(seal_after(&launch(Vec::new())), SealAfter::Later);
    let with_buffer = launch(vec![KernelArg::Buffer {
        mem: mem(&a),
        access: Access::Write,
        elem: std::any::TypeId::of::<u8>(),
        elem_name: "u8",
        split: crate::types::host_kernel::Split::Tile,
    }]);
    assert_eq!(seal_after(&with_buffer), SealAfter::Soon);
}

#[test]
fn q2_a_batch_holds_graph_launches_and_launches_of_a_few_kernels() {
    let keep = || -> GraphKeep { [Arc::new(()), Arc::new(())] };
    let kernel = |name: &str| {
        Arc::new(KernelInner {
            name: name.to_string(),
            host: None,
            cuda: None,
            loaded: Default::default(),
        })
    };
    // Graph launches and kernel launches share a batch: no seal between them.
    let mut q = Queue::default();
    let k = kernels::EMPTY.inner.clone();
    q.push_graph(keep());
    assert!(!q.needs_boundary(&k));
    q.push_op(launch_of(&k), Some(1));
    q.push_graph(keep());
    // Up to BATCH_KERNELS distinct kernels share it; one more needs a seal, a repeat does not.
    let ks: Vec<_> = (1..BATCH_KERNELS)
        .map(|i| kernel(&format!("k{i}")))
        .collect();
    for (i, k) in ks.iter().enumerate() {
        assert!(!q.needs_boundary(k));
        q.push_op(launch_of(k), Some(2 + i as u64));
        q.push_op(launch_of(k), Some(100 + i as u64));
    }
    let extra = kernel("extra");
    assert!(
        q.needs_boundary(&extra),
        "a {}th kernel seals",
        BATCH_KERNELS + 1
    );
    assert!(!q.needs_boundary(&k) && !q.needs_boundary(&ks[0]));
    // The fault candidates name each kernel once, with its oldest launch, and the graph
    // launches (RL5).
    let mut candidates = Vec::new();
    q.pending_launches(&mut candidates);
    let mut want = vec![(1, "cf_empty".to_string())];
    want.extend((1..BATCH_KERNELS).map(|i| (1 + i as u64, format!("k{i}"))));
    want.push((u64::MAX, GRAPH_CANDIDATE.to_string()));
    assert_eq!(candidates, want);
}

#[test]
fn q5_held_items_until_retired_and_fault_candidates() {
    let mut q = Queue::default();
    for n in 0..5 {
        q.push_op(launch(Vec::new()), Some(10 + n));
    }
    assert_eq!(q.held(), 5);
    let mut c = Vec::new();
    q.pending_launches(&mut c);
    assert_eq!(
        c,
        vec![(10, "cf_empty".to_string())],
        "one batch, one kernel"
    );
    let mut out = Vec::new();
    q.retire_upto(3, &mut out);
    assert_eq!(q.held(), 5, "the open batch goes as a whole");
    q.retire_upto(5, &mut out);
    assert_eq!((q.held(), out.len()), (0, 1));
    c.clear();
    q.pending_launches(&mut c);
    assert!(c.is_empty(), "retired launches are no candidates");
}

#[test]
fn q2_open_batches_seal_by_age_and_length() {
    let mut q = Queue::default();
    assert!(q.seal_due(SealAfter::Now, DEPTH));
    let a = Allocation::borrowed(0x1000, 64, MemKind::Device, 0);
    q.push_op(
        Op::new(Work::Memset {
            dst: mem(&a),
            value: 0,
        }),
        None,
    );
    assert!(
        !q.seal_due(SealAfter::Soon, DEPTH),
        "a young batch stays open"
    );
    assert!(!q.seal_due(SealAfter::Later, DEPTH));
    std::thread::sleep(SEAL_AFTER + Duration::from_millis(1));
    q.push_op(
        Op::new(Work::Memset {
            dst: mem(&a),
            value: 0,
        }),
        None,
    );
    assert!(
        q.seal_due(SealAfter::Soon, DEPTH),
        "an old batch with memory seals (its age read at the 2nd item)"
    );
    assert!(
        !q.seal_due(SealAfter::Later, DEPTH),
        "age alone does not seal launches"
    );
    for _ in 1..SEAL_EVERY {
        q.push_op(launch(Vec::new()), None);
    }
    assert!(q.seal_due(SealAfter::Later, DEPTH), "a long batch seals");
    // The age is read at each power of two from the 2nd item only (a clock read each).
    let mut q = Queue::default();
    let memset = || {
        Op::new(Work::Memset {
            dst: mem(&a),
            value: 0,
        })
    };
    q.push_op(memset(), None);
    std::thread::sleep(SEAL_AFTER + Duration::from_millis(1));
    assert!(
        !q.seal_due(SealAfter::Soon, DEPTH),
        "the 1st item does not read it (its own call opened the batch)"
    );
    for _ in 0..2 {
        q.push_op(memset(), None);
    }
    std::thread::sleep(SEAL_AFTER + Duration::from_millis(1));
    assert!(
        !q.seal_due(SealAfter::Soon, DEPTH),
        "the 3rd item does not read it"
    );
    q.push_op(memset(), None);
    assert!(q.seal_due(SealAfter::Soon, DEPTH), "the 4th does");
    // A batch of launches over no memory seals later (fewer markers, RL1).
    let mut q = Queue::default();
    for _ in 0..SEAL_EVERY {
        q.push_op(launch(Vec::new()), None);
    }
    assert!(!q.seal_due(SealAfter::Later, DEPTH));
    for _ in SEAL_EVERY..SEAL_EVERY_BARE {
        q.push_op(launch(Vec::new()), None);
    }
    assert!(q.seal_due(SealAfter::Later, DEPTH));
}

#[test]
fn q3_markers_retired_during_a_synchronize_walk_are_held_back() {
    // Stand-in handles: nothing here reaches the driver (the spare list has room).
    let (a, b) = (
        Ev(0x1000 as cudarc::driver::sys::CUevent),
        Ev(0x2000 as cudarc::driver::sys::CUevent),
    );
    let mut q = Queue::default();
    q.begin_walk();
    q.begin_walk();
    q.recycle(a);
    assert!(
        q.spare.is_empty(),
        "a marker a walk may wait on was handed to the next seal"
    );
    q.end_walk();
    q.recycle(b);
    assert!(q.spare.is_empty(), "one walk is still waiting");
    q.end_walk();
    assert_eq!(q.spare, vec![a, b]);
}

/// Q2 and Q5: on a shallow queue a batch seals at half its depth, whatever it holds, so a
/// submission at the bound waits for the older half, not for the whole queue. (Depth 14: the
/// 7th item is no power of two, where a batch's age is read.)
#[test]
fn a_shallow_queue_seals_at_half_its_depth() {
    let a = Allocation::borrowed(0x1000, 64, MemKind::Device, 0);
    let memset = || {
        Op::new(Work::Memset {
            dst: mem(&a),
            value: 0,
        })
    };
    let depth = 14;
    // Memory its caller holds (Soon).
    let mut q = Queue::default();
    for _ in 0..6 {
        q.push_op(memset(), None);
    }
    assert!(!q.seal_due(SealAfter::Soon, depth), "6 of a depth of 14");
    q.push_op(memset(), None);
    assert!(q.seal_due(SealAfter::Soon, depth), "7 of a depth of 14");
    // A launch over no memory joining a batch that holds memory (Later).
    assert!(
        q.seal_due(SealAfter::Later, depth),
        "a batch with memory, 7 of 14"
    );
    assert!(
        !q.seal_due(SealAfter::Later, DEPTH),
        "7 of the default depth"
    );
    // Launches over no memory alone.
    let mut q = Queue::default();
    for _ in 0..6 {
        q.push_op(launch(Vec::new()), None);
    }
    assert!(!q.seal_due(SealAfter::Later, depth));
    q.push_op(launch(Vec::new()), None);
    assert!(q.seal_due(SealAfter::Later, depth), "bare launches too");
    assert!(!q.seal_due(SealAfter::Later, DEPTH));
    // A depth of 1 (the least `set_queue_depth` takes) seals after every item.
    let mut q = Queue::default();
    q.push_op(launch(Vec::new()), None);
    assert!(q.seal_due(SealAfter::Later, 1));
}
