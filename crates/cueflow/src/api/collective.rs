//! Communicator and its helpers (documented on the type, which the crate root exports).

use std::fmt;
use std::panic::Location;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytemuck::Pod;
use parking_lot::Mutex;

use crate::api::device::Device;
use crate::api::memory::DeviceBuffer;
use crate::api::stream::Stream;
use crate::backend::contract::comm::BackendComm;
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::{CollectiveWork, Op, Work};
use crate::core::devices::device::DeviceCore;
use crate::core::devices::group::{submit_group, GroupMember};
use crate::error::{Error, Result};
use crate::types::CollectiveDesc;
use crate::types::{CollectiveKind, ElemType};

use crate::types::ReduceOp;

/// How long the host backend's ranks wait for each other before faulting (C4).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

mod sealed {
    pub trait Sealed {}
}

/// An element type collectives move: `i8`, `u8`, `i32`, `u32`, `i64`, `u64`, `f32`, `f64`
/// (NCCL's types).
pub trait Element: Pod + sealed::Sealed {
    #[doc(hidden)]
    const TYPE: ElemType;
}

macro_rules! element {
    ($($t:ty => $e:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const TYPE: ElemType = ElemType::$e;
        }
    )*};
}
element!(i8 => I8, u8 => U8, i32 => I32, u32 => U32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);

/// One rank's part of a call: the stream it runs on, what it sends and where it receives.
pub type Part<'a, T> = (&'a Stream, &'a DeviceBuffer<T>, &'a DeviceBuffer<T>);

/// Names a communicator whose ranks are in several processes: made by one rank with
/// [`Communicator::unique_id`], passed to the others as text (`Display` / `FromStr`), and given
/// to [`Communicator::join`] by every rank.
#[derive(Clone, PartialEq, Eq)]
pub struct UniqueId {
    backend: String,
    bytes: Vec<u8>,
}

impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.backend)?;
        self.bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UniqueId({self})")
    }
}

impl FromStr for UniqueId {
    type Err = Error;

    fn from_str(s: &str) -> Result<UniqueId> {
        let bad = || Error::InvalidHandle(format!("`{s}` is not a communicator id"));
        let (backend, hex) = s.trim().split_once(':').ok_or_else(bad)?;
        if hex.is_empty() || hex.len() % 2 != 0 || backend.is_empty() {
            return Err(bad());
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| bad()))
            .collect::<Result<Vec<u8>>>()?;
        Ok(UniqueId {
            backend: backend.to_string(),
            bytes,
        })
    }
}

/// Collectives over several devices (SPEC MD4): all-reduce, broadcast, reduce, all-gather and
/// reduce-scatter, each member's part a stream operation of its stream.
///
/// A [`Communicator`] is a group of ranks, one device each. [`Communicator::new`] makes one over
/// devices of this process; [`Communicator::join`] makes one rank of a communicator whose ranks
/// live in several processes, meeting under a [`UniqueId`] that one rank made and passed to the
/// others (as text). A call names, for every rank of this process, the stream it runs on and its
/// send and receive buffers; each part then runs in its stream's order like any other operation
/// (ST1/ST2), takes part in tracking and the sanitizer (AC1–AC6), and shows in traces.
///
/// CUDA runs collectives with NCCL (`libnccl.so.2`, loaded at run time); the host backend runs
/// them on its engines, reducing in rank order.
///
/// ```
/// use cueflow::{Communicator, Device, DeviceBuffer, ReduceOp, Stream};
///
/// let devs = Device::open_list("host:2x")?;
/// let comm = Communicator::new(&devs)?;
/// let streams: Vec<Stream> = devs.iter().map(Stream::new).collect::<Result<_, _>>()?;
/// let bufs: Vec<DeviceBuffer<f32>> = devs
///     .iter()
///     .zip(&streams)
///     .enumerate()
///     .map(|(r, (d, s))| {
///         let b = DeviceBuffer::new(d, 4)?;
///         s.write_pageable(&b, &[r as f32 + 1.0; 4])?;
///         Ok(b)
///     })
///     .collect::<cueflow::Result<_>>()?;
/// // In place on every rank: 1 + 2 = 3 everywhere.
/// let parts: Vec<_> = streams.iter().zip(&bufs).map(|(s, b)| (s, b, b)).collect();
/// comm.all_reduce(&parts, ReduceOp::Sum)?;
/// let mut out = [0.0f32; 4];
/// streams[1].read_pageable(&mut out, &bufs[1])?;
/// assert_eq!(out, [3.0; 4]);
/// # Ok::<(), cueflow::Error>(())
/// ```
///
/// A group of ranks, one device each, that run collectives together (MD4). Cheap to clone.
#[derive(Clone)]
pub struct Communicator {
    inner: Arc<Inner>,
}

struct Inner {
    ranks: usize,
    /// This process's ranks, in rank order.
    members: Vec<Member>,
    /// Number of the next call; held while a call is enqueued, so that every rank sees the
    /// calls of one communicator in one order.
    next_call: Mutex<u64>,
}

struct Member {
    device: Device,
    comm: Arc<dyn BackendComm>,
}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("ranks", &self.inner.ranks)
            .field("local_ranks", &self.local_ranks())
            .finish()
    }
}

impl Communicator {
    /// A communicator over `devices` of this process, rank `r` on `devices[r]`. The devices
    /// must be distinct and of one backend. On CUDA this is `ncclCommInitAll`.
    pub fn new(devices: &[Device]) -> Result<Communicator> {
        Self::with_timeout(devices, DEFAULT_TIMEOUT)
    }

    /// As [`new`](Self::new); on the host backend a rank that waits longer than `timeout` for
    /// the others faults its device with an error naming the call and the missing ranks
    /// instead of waiting for ever. (NCCL has no such limit: a rank that never comes hangs
    /// the others, as in NCCL.)
    pub fn with_timeout(devices: &[Device], timeout: Duration) -> Result<Communicator> {
        let first = devices
            .first()
            .ok_or_else(|| Error::Collective("a communicator needs at least one device".into()))?;
        let backend = first.properties().backend;
        for (i, d) in devices.iter().enumerate() {
            if d.properties().backend != backend {
                return Err(Error::InvalidHandle(format!(
                    "Communicator::new: device {i} is a {} device, device 0 a {backend} one",
                    d.properties().backend
                )));
            }
            if devices[..i]
                .iter()
                .any(|e| e.same(d) || e.spec() == d.spec() && d.inner.opens_are_shared())
            {
                return Err(Error::Collective(format!(
                    "Communicator::new: device {i} ({}) appears twice; each rank needs a device \
                     of its own",
                    d.properties().name
                )));
            }
        }
        let cores: Vec<&DeviceCore> = devices.iter().map(|d| &*d.inner.core).collect();
        let comms = DeviceCore::comm_group(&cores, timeout)?;
        Ok(Communicator {
            inner: Arc::new(Inner {
                ranks: devices.len(),
                members: devices
                    .iter()
                    .zip(comms)
                    .map(|(d, comm)| Member {
                        device: d.clone(),
                        comm,
                    })
                    .collect(),
                next_call: Mutex::new(0),
            }),
        })
    }

    /// A fresh id for a communicator whose ranks are in several processes, on `device`'s
    /// backend (CUDA: `ncclGetUniqueId`).
    pub fn unique_id(device: &Device) -> Result<UniqueId> {
        Ok(UniqueId {
            backend: device.properties().backend.to_string(),
            bytes: device.inner.comm_unique_id()?,
        })
    }

    /// Rank `rank` of `ranks`, on `device`, of the communicator named `id`. On CUDA this is
    /// `ncclCommInitRank` and blocks until every rank joined; on the host backend the ranks
    /// meet at their first call.
    pub fn join(device: &Device, id: &UniqueId, ranks: usize, rank: usize) -> Result<Communicator> {
        Self::join_with_timeout(device, id, ranks, rank, DEFAULT_TIMEOUT)
    }

    /// [`join`](Self::join) with the host backend's wait limit of
    /// [`with_timeout`](Self::with_timeout).
    pub fn join_with_timeout(
        device: &Device,
        id: &UniqueId,
        ranks: usize,
        rank: usize,
        timeout: Duration,
    ) -> Result<Communicator> {
        let backend = device.properties().backend;
        if id.backend != backend {
            return Err(Error::InvalidHandle(format!(
                "Communicator::join: the id is for the {} backend, the device is a {backend} one",
                id.backend
            )));
        }
        if rank >= ranks {
            return Err(Error::Collective(format!(
                "Communicator::join: rank {rank} of {ranks} ranks (ranks are 0..{ranks})"
            )));
        }
        let comm = device.inner.comm_join(&id.bytes, ranks, rank, timeout)?;
        Ok(Communicator {
            inner: Arc::new(Inner {
                ranks,
                members: vec![Member {
                    device: device.clone(),
                    comm,
                }],
                next_call: Mutex::new(0),
            }),
        })
    }

    /// Ranks in the communicator, in every process.
    pub fn ranks(&self) -> usize {
        self.inner.ranks
    }

    /// The ranks of this process, in the order calls take their parts.
    pub fn local_ranks(&self) -> Vec<usize> {
        self.inner.members.iter().map(|m| m.comm.rank()).collect()
    }

    /// Every rank gets the reduction of every rank's `send` (`ncclAllReduce`). `send` and
    /// `recv` have one length on every rank; they may be the same buffer (in place).
    #[track_caller]
    pub fn all_reduce<T: Element>(&self, parts: &[Part<'_, T>], op: ReduceOp) -> Result<()> {
        self.call(parts, CollectiveKind::AllReduce(op), Location::caller())
    }

    /// Every rank gets rank `root`'s `send` (`ncclBroadcast`); only the root's `send` is
    /// read, every rank's `recv` is written.
    #[track_caller]
    pub fn broadcast<T: Element>(&self, parts: &[Part<'_, T>], root: usize) -> Result<()> {
        self.call(
            parts,
            CollectiveKind::Broadcast { root },
            Location::caller(),
        )
    }

    /// Rank `root`'s `recv` gets the reduction of every rank's `send` (`ncclReduce`); the
    /// other ranks' `recv` is left alone.
    #[track_caller]
    pub fn reduce<T: Element>(
        &self,
        parts: &[Part<'_, T>],
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        self.call(
            parts,
            CollectiveKind::Reduce { root, op },
            Location::caller(),
        )
    }

    /// Every rank's `recv` (`ranks` times as long as `send`) gets every rank's `send`,
    /// concatenated in rank order (`ncclAllGather`). In place: `send` is part `rank` of
    /// `recv`.
    #[track_caller]
    pub fn all_gather<T: Element>(&self, parts: &[Part<'_, T>]) -> Result<()> {
        self.call(parts, CollectiveKind::AllGather, Location::caller())
    }

    /// Rank `r`'s `recv` gets part `r` of the reduction of every rank's `send` (`send` is
    /// `ranks` times as long as `recv`; `ncclReduceScatter`). In place: `recv` is part `rank`
    /// of `send`.
    #[track_caller]
    pub fn reduce_scatter<T: Element>(&self, parts: &[Part<'_, T>], op: ReduceOp) -> Result<()> {
        self.call(parts, CollectiveKind::ReduceScatter(op), Location::caller())
    }

    /// Check a call (ER3, MD4) and enqueue every local part as one group.
    fn call<T: Element>(
        &self,
        parts: &[Part<'_, T>],
        kind: CollectiveKind,
        site: &'static Location<'static>,
    ) -> Result<()> {
        let name = kind.name();
        let ranks = self.inner.ranks;
        let members = &self.inner.members;
        if parts.len() != members.len() {
            return Err(Error::Collective(format!(
                "{name}: {} part(s) for the {} rank(s) of this process (one per rank, in rank \
                 order {:?})",
                parts.len(),
                members.len(),
                self.local_ranks()
            )));
        }
        if let CollectiveKind::Broadcast { root } | CollectiveKind::Reduce { root, .. } = kind {
            if root >= ranks {
                return Err(Error::Collective(format!(
                    "{name}: root {root} of {ranks} ranks"
                )));
            }
        }
        let mut count = None;
        for (m, part) in members.iter().zip(parts) {
            let n = check_part(name, kind, ranks, m, part)?;
            match count {
                None => count = Some(n),
                Some(c) if c != n => {
                    return Err(Error::Collective(format!(
                        "{name}: members disagree: rank {} sends {c} elements, rank {} \
                         sends {n}",
                        members[0].comm.rank(),
                        m.comm.rank()
                    )));
                }
                Some(_) => {}
            }
        }
        let count = count.unwrap_or(0);
        let mut next = self.inner.next_call.lock();
        let desc = CollectiveDesc {
            kind,
            elem: T::TYPE,
            count,
            seq: *next,
        };
        let group: Vec<GroupMember<'_>> = members
            .iter()
            .zip(parts)
            .map(|(m, (s, send, recv))| GroupMember {
                dev: &s.device.inner,
                stream: &s.core,
                op: Op::new(Work::Collective(Arc::new(CollectiveWork {
                    comm: m.comm.clone(),
                    desc,
                    send: send.mem(),
                    recv: recv.mem(),
                }))),
            })
            .collect();
        let first = members[0].device.inner.clone();
        submit_group(group, site, |parts| first.submit_group(parts))?;
        *next += 1;
        Ok(())
    }
}

/// Check one rank's part of a collective (ER3, MD4): its stream's device, its memory, the
/// lengths `kind` needs, the in-place layouts; the number of elements it sends.
fn check_part<T: Element>(
    name: &str,
    kind: CollectiveKind,
    ranks: usize,
    m: &Member,
    (s, send, recv): &Part<'_, T>,
) -> Result<usize> {
    let rank = m.comm.rank();
    if !s.device.same(&m.device) {
        return Err(Error::InvalidHandle(format!(
            "{name}: the stream of rank {rank}'s part belongs to another device than rank {rank}"
        )));
    }
    let (sm, rm) = (send.mem(), recv.mem());
    s.check_mem(&sm, name)?;
    s.check_mem(&rm, name)?;
    for m in [&sm, &rm] {
        // GR11: a capture's own memory is checked by the capture.
        if m.alloc.graph_slot.is_some() && !s.is_capturing() {
            return Err(Error::InvalidHandle(format!(
                "{name}: memory allocated inside a capture is usable only by the graph's own \
                 nodes (GR7)"
            )));
        }
    }
    let (n, out) = (send.len(), recv.len());
    let want_out = match kind {
        CollectiveKind::AllGather => n.checked_mul(ranks),
        CollectiveKind::ReduceScatter(_) => {
            if n % ranks != 0 {
                return Err(Error::Collective(format!(
                    "{name}: rank {rank} sends {n} elements, not a multiple of the {ranks} ranks"
                )));
            }
            Some(n / ranks)
        }
        _ => Some(n),
    };
    if want_out != Some(out) {
        return Err(Error::Collective(format!(
            "{name}: rank {rank} sends {n} elements and receives {out}; {name} over {ranks} \
             ranks needs {} to receive",
            want_out.map_or("more than usize".into(), |w| w.to_string())
        )));
    }
    check_overlap(name, kind, rank, &sm, &rm)?;
    Ok(n)
}

/// `send` and `recv` may share bytes only in NCCL's in-place layouts: the same range
/// (all-reduce, broadcast, reduce), `send` as part `rank` of `recv` (all-gather), `recv` as
/// part `rank` of `send` (reduce-scatter).
fn check_overlap(
    name: &str,
    kind: CollectiveKind,
    rank: usize,
    send: &MemRef,
    recv: &MemRef,
) -> Result<()> {
    if !Arc::ptr_eq(&send.alloc, &recv.alloc) {
        return Ok(());
    }
    let (s, r) = (send.range(), recv.range());
    if s.start >= r.end || r.start >= s.end || s.is_empty() || r.is_empty() {
        return Ok(());
    }
    let in_place = match kind {
        CollectiveKind::AllGather => s.start == r.start + rank * s.len(),
        CollectiveKind::ReduceScatter(_) => r.start == s.start + rank * r.len(),
        _ => s == r,
    };
    if in_place {
        Ok(())
    } else {
        Err(Error::Collective(format!(
            "{name}: rank {rank}'s send and receive buffers overlap without being in place"
        )))
    }
}
