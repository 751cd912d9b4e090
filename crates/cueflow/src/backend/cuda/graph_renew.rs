//! Nodes whose memory each launch gives anew (automatic graphs' windows that allocate their
//! temporaries, SPEC AG3): between launches the exec keeps such a node's operation only as
//! addresses ([`Op::hollow`]), so the memory goes back to the pool once the launches that used it
//! are done, and the pool can hand the same block to the next window; an update that gives the
//! node what the driver already has ([`same_for_driver`]) then makes no driver call.

use std::sync::Arc;

use crate::backend::contract::kernel::KernelArg;
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::{Op, Work};

/// True if `new` gives the driver's node exactly what `old` gave it: the same kernel,
/// configuration, argument values and addresses, or the same copy or memset. Then an update
/// needs no driver call, only the operation kept for the launches.
pub(super) fn same_for_driver(old: &Op, new: &Op) -> bool {
    let same_mem =
        |a: &MemRef, b: &MemRef| a.addr() == b.addr() && a.len == b.len && a.kind() == b.kind();
    match (&old.work, &new.work) {
        (Work::Launch(a), Work::Launch(b)) => {
            Arc::ptr_eq(&a.kernel, &b.kernel)
                && (a.grid, a.block, a.shared_bytes) == (b.grid, b.block, b.shared_bytes)
                && a.args.len() == b.args.len()
                && a.args.iter().zip(b.args.iter()).all(|pair| match pair {
                    (KernelArg::Buffer { mem: m, .. }, KernelArg::Buffer { mem: n, .. }) => {
                        same_mem(m, n)
                    }
                    (KernelArg::Scalar { bytes: p, .. }, KernelArg::Scalar { bytes: q, .. }) => {
                        p[..] == q[..]
                    }
                    _ => false,
                })
        }
        (Work::Copy { dst: a, src: b }, Work::Copy { dst: c, src: d })
        | (Work::Word { dst: a, src: b }, Work::Word { dst: c, src: d }) => {
            same_mem(a, c) && same_mem(b, d)
        }
        (Work::Memset { dst: a, value: v }, Work::Memset { dst: c, value: w }) => {
            same_mem(a, c) && v == w
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::any::TypeId;
    use std::sync::Arc;

    use super::same_for_driver;
    use crate::backend::contract::kernel::{KernelArg, Launch};
    use crate::backend::contract::memory::{Allocation, MemRef};
    use crate::backend::contract::op::{Op, Work};
    use crate::kernels;
    use crate::types::host_kernel::Split;
    use crate::types::{Access, MemKind};

    fn mem(addr: u64) -> MemRef {
        let alloc = Allocation::borrowed(addr, 256, MemKind::Device, 0);
        MemRef {
            alloc,
            offset: 16,
            len: 64,
        }
    }

    fn launch(buf: u64, scalar: f32) -> Op {
        let args = vec![
            KernelArg::Buffer {
                mem: mem(buf),
                access: Access::Write,
                elem: TypeId::of::<f32>(),
                elem_name: "f32",
                split: Split::Tile,
            },
            KernelArg::Scalar {
                bytes: scalar.to_ne_bytes().as_slice().into(),
                size: 4,
                ty: TypeId::of::<f32>(),
                ty_name: "f32",
            },
        ];
        Op::new(Work::Launch(Launch::new(
            kernels::EMPTY.inner.clone(),
            [1, 1, 1],
            [32, 1, 1],
            0,
            Arc::from(args),
        )))
    }

    /// Another allocation at the same address is the same for the driver; another address,
    /// scalar, configuration or kind of operation is not.
    #[test]
    fn the_driver_sees_addresses_and_values() {
        assert!(same_for_driver(&launch(0x1000, 2.0), &launch(0x1000, 2.0)));
        assert!(!same_for_driver(&launch(0x1000, 2.0), &launch(0x2000, 2.0)));
        assert!(!same_for_driver(&launch(0x1000, 2.0), &launch(0x1000, 3.0)));
        let mut wider = launch(0x1000, 2.0);
        if let Work::Launch(l) = &mut wider.work {
            l.grid = [2, 1, 1];
        }
        assert!(!same_for_driver(&launch(0x1000, 2.0), &wider));
        let copy = |d, s| {
            Op::new(Work::Copy {
                dst: mem(d),
                src: mem(s),
            })
        };
        assert!(same_for_driver(
            &copy(0x1000, 0x2000),
            &copy(0x1000, 0x2000)
        ));
        assert!(!same_for_driver(
            &copy(0x1000, 0x2000),
            &copy(0x1000, 0x3000)
        ));
        let set = |d, value| Op::new(Work::Memset { dst: mem(d), value });
        assert!(same_for_driver(&set(0x1000, 7), &set(0x1000, 7)));
        assert!(!same_for_driver(&set(0x1000, 7), &set(0x1000, 8)));
        assert!(!same_for_driver(&set(0x1000, 7), &copy(0x1000, 0x2000)));
    }

    /// A hollow operation holds none of the memory, and the driver sees it as the original.
    #[test]
    fn a_hollow_operation_keeps_addresses_not_memory() {
        for op in [
            launch(0x1000, 2.0),
            Op::new(Work::Memset {
                dst: mem(0x3000),
                value: 1,
            }),
        ] {
            let mut held = Vec::new();
            op.for_each_access(|m, _, _| held.push(m.alloc.clone()));
            let h = op.hollow();
            assert!(same_for_driver(&op, &h));
            h.for_each_access(|m, _, _| {
                assert!(held.iter().all(|a| !Arc::ptr_eq(a, &m.alloc)));
                assert_eq!(Arc::strong_count(&m.alloc), 1);
            });
        }
    }
}
