//! The access maps a call holds locked (SPEC AC1, MD4): which allocations' maps
//! ([`map_of`]), locked in the one order every caller uses ([`lock_maps`]: by address, after
//! the device's protocol lock), and a group call's locks, taken for all its members before any
//! member's call runs ([`Tracking::lock_group`]).

use std::sync::Arc;

use parking_lot::MutexGuard;
use smallvec::SmallVec;

use crate::backend::contract::memory::{Allocation, MemRef};
use crate::backend::contract::op::Op;
use crate::core::tracking::history::State;
use crate::core::tracking::track::Tracking;

/// An allocation whose access map a ticket holds locked.
pub(crate) struct Locked {
    pub(crate) alloc: Arc<Allocation>,
    pub(crate) guard: Option<MapGuard>,
}

/// Where each allocation is in a call's maps, by its address, once they are more than
/// [`SEARCHED`] ([`map_of`]).
pub(crate) type MapIndex = Option<std::collections::HashMap<usize, usize>>;

/// Maps a call searches one by one; past this many (a graph launch over thousands of
/// buffers, whose search per access made each launch quadratic in them), through its
/// [`MapIndex`].
const SEARCHED: usize = 16;

/// The index of `m`'s allocation in `maps`, added (not yet locked) if new; `index` is
/// `maps`'s (`None` until they are many).
#[inline]
pub(crate) fn map_of(maps: &mut SmallVec<[Locked; 2]>, index: &mut MapIndex, m: &MemRef) -> usize {
    let key = |a: &Arc<Allocation>| Arc::as_ptr(a) as usize;
    let found = match index {
        Some(ix) => ix.get(&key(&m.alloc)).copied(),
        None => maps.iter().position(|l| Arc::ptr_eq(&l.alloc, &m.alloc)),
    };
    if let Some(i) = found {
        return i;
    }
    maps.push(Locked {
        alloc: m.alloc.clone(),
        guard: None,
    });
    let i = maps.len() - 1;
    match index {
        Some(ix) => {
            ix.insert(key(&m.alloc), i);
        }
        None if maps.len() > SEARCHED => {
            *index = Some(
                maps.iter()
                    .enumerate()
                    .map(|(i, l)| (key(&l.alloc), i))
                    .collect(),
            );
        }
        None => {}
    }
    i
}

/// Lock every map of `maps` not yet locked, in the one order every caller uses (addresses).
#[inline]
pub(crate) fn lock_maps(maps: &mut [Locked]) {
    if maps.len() == 1 {
        if maps[0].guard.is_none() {
            maps[0].guard = Some(
                crate::core::memory::alloc::state(&maps[0].alloc)
                    .access
                    .lock_arc(),
            );
        }
        return;
    }
    let mut order: SmallVec<[usize; 4]> = (0..maps.len()).collect();
    order.sort_by_key(|&i| maps[i].alloc.addr);
    for i in order {
        if maps[i].guard.is_none() {
            maps[i].guard = Some(
                crate::core::memory::alloc::state(&maps[i].alloc)
                    .access
                    .lock_arc(),
            );
        }
    }
}

/// The locks of one member of a group call, taken before any member's call runs (MD4).
pub(crate) struct Held<'a> {
    pub(crate) state: Option<MutexGuard<'a, State>>,
    pub(crate) maps: SmallVec<[Locked; 2]>,
}

impl Tracking {
    /// Lock what the members of a group call need, in the order every caller uses: first the
    /// devices' tracking states (`members` come in device order), then every allocation the
    /// members' ops touch, by address. A member's own call takes its state and then its
    /// allocations; locking member by member instead could deadlock with a peer copy that
    /// takes its device's state and then memory of two devices.
    pub fn lock_group<'a>(members: &[(&'a Tracking, &Op)]) -> Vec<Held<'a>> {
        let mut held: Vec<Held<'a>> = members
            .iter()
            .map(|(t, _)| Held {
                state: t.clocks().then(|| t.lock()),
                maps: SmallVec::new(),
            })
            .collect();
        let mut all: Vec<(usize, Arc<Allocation>)> = Vec::new();
        for (i, (_, op)) in members.iter().enumerate() {
            op.for_each_access(|m, _, _| {
                if !all.iter().any(|(_, a)| Arc::ptr_eq(a, &m.alloc)) {
                    all.push((i, m.alloc.clone()));
                }
            });
        }
        all.sort_by_key(|(_, a)| a.addr);
        for (i, alloc) in all {
            let guard = Some(crate::core::memory::alloc::state(&alloc).access.lock_arc());
            held[i].maps.push(Locked { alloc, guard });
        }
        held
    }
}

pub(crate) type MapGuard =
    parking_lot::ArcMutexGuard<parking_lot::RawMutex, crate::core::tracking::access::AccessMap>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::MemKind;

    /// Past `SEARCHED` maps the index finds each allocation where the search would: one map
    /// per allocation, in first-touch order, however the touches interleave.
    #[test]
    fn map_of_finds_each_allocation_once_however_many() {
        let allocs: Vec<_> = (0..(3 * SEARCHED as u64))
            .map(|i| Allocation::borrowed(0x1000 * (i + 1), 64, MemKind::Device, 0))
            .collect();
        let touch = |a: &Arc<Allocation>| MemRef {
            alloc: a.clone(),
            offset: 0,
            len: 64,
        };
        let (mut maps, mut index): (SmallVec<[Locked; 2]>, MapIndex) = (SmallVec::new(), None);
        for round in 0..3 {
            for (i, a) in allocs.iter().enumerate() {
                assert_eq!(map_of(&mut maps, &mut index, &touch(a)), i, "round {round}");
            }
        }
        assert_eq!(maps.len(), allocs.len());
        assert!(index.is_some(), "many maps are indexed");
        for (l, a) in maps.iter().zip(&allocs) {
            assert!(Arc::ptr_eq(&l.alloc, a));
        }
    }
}
