//! Host access to memory device work may touch (MM3, AC1): a safe view ([`Tracking::host_view`])
//! waits for exactly the pending device accesses it conflicts with; an unchecked one
//! ([`Tracking::host_unchecked`], `as_slice_unchecked`) waits for nothing and, with the sanitizer on, is checked for races — from the program's thread,
//! or from a host function at its place in its stream (HF1) or its graph (HF1 in graphs).

use crate::backend::contract::device::Backend;
use crate::backend::contract::memory::MemRef;
use crate::backend::contract::op::Part;
use crate::core::streams::hostfn::{host_fn_order, HostFnOrder};
use crate::core::tracking::access::{Ask, Probe};
use crate::core::tracking::call::{Acc, Site, What, Who};
use crate::core::tracking::clock::{VClock, HOST};
use crate::core::tracking::history::{State, HOST_CLOCK};
use crate::core::tracking::report::{graph_host_race_report, race_report, Conflict, Later};
use crate::core::tracking::sanitizer::{RaceReport, SanitizeMode};
use crate::core::tracking::track::Tracking;
use crate::error::Result;
use crate::types::Access;

impl Tracking {
    /// A safe host view of `mem` (MM3, AC1): waits for the pending device accesses it
    /// conflicts with and observes their completion.
    pub fn host_view(&self, backend: &dyn Backend, mem: &MemRef, kind: Access) -> Result<()> {
        let clocks = self.clocks();
        let conflicts = {
            let _st = self.lock();
            // It waits for each one it finds: a query first would only repeat the wait's
            // answer (one driver call more per pending host read on CUDA).
            host_conflicts(mem, kind, Ask::Nobody)
        };
        for c in &conflicts {
            // AG4: a held call is issued before anyone waits for it.
            if let Some(d) = c
                .rec
                .done
                .as_ref()
                .and_then(crate::core::graphs::autograph::issued)
            {
                backend.wait_done(&d)?;
            }
        }
        if clocks && !conflicts.is_empty() {
            let mut st = self.lock();
            for c in &conflicts {
                if let Some(info) = &c.rec.info {
                    st.observe(&info.vc);
                }
            }
        }
        Ok(())
    }

    /// An unchecked host access to `mem` (the MM3 opt-out, AC1): does not wait, and with the
    /// sanitizer on, a pending device access it conflicts with and does not come after is a
    /// race (AC4), reported as `site`'s — from the program's thread, or from a host function
    /// at its place in its stream or its graph (HF1).
    pub fn host_unchecked(&self, mem: &MemRef, kind: Access, site: Site) {
        if !self.clocks() {
            return;
        }
        let st = self.lock();
        let conflicts = host_conflicts(mem, kind, Ask::Device);
        // Inside a host function: after the work before it, before the work after it (HF1).
        let place = host_fn_order();
        let mut races = beside_races(place.as_ref(), mem, site);
        let mut host_vc = HOST_CLOCK.lock().0.clone();
        if let Some(p) = &place {
            VClock::join_into(&mut host_vc, &p.after);
        }
        for c in &conflicts {
            let Some(info) = &c.rec.info else { continue };
            let later = place.as_ref().is_some_and(|p| p.precedes(&info.vc));
            if info.cell.retired() || later || host_vc.covers(info.actor, info.time) {
                continue;
            }
            let l = Later {
                who: &Who::host(),
                what: &What::HostUnchecked,
                site,
                vc: &host_vc,
            };
            races.push(race_report(c, &mem.alloc, info, l));
        }
        self.report_host_races(st, races);
    }

    /// Keep and print `races` of an unchecked host access as the mode says: an access has no
    /// error to return, so error mode warns too, and panic mode panics with the first.
    fn report_host_races(
        &self,
        mut st: parking_lot::MutexGuard<'_, State>,
        races: Vec<RaceReport>,
    ) {
        for r in &races {
            if st.add_report(r) && self.mode() != SanitizeMode::Panic {
                eprintln!("{r}");
            }
        }
        drop(st);
        if let (Some(r), SanitizeMode::Panic) = (races.into_iter().next(), self.mode()) {
            panic!("{r}");
        }
    }
}

/// The pending accesses of `mem`'s allocation that a host access of `kind` to `mem` conflicts
/// with (AC3).
fn host_conflicts(mem: &MemRef, kind: Access, ask: Ask) -> Vec<Conflict> {
    let acc = Acc {
        map: 0,
        range: mem.range(),
        kind,
        part: Part::Host,
    };
    let mut conflicts = Vec::new();
    crate::core::memory::alloc::state(&mem.alloc)
        .access
        .lock()
        .conflicts_asking(
            &acc.range,
            Probe {
                kind,
                actor: HOST,
                ask,
            },
            |rec, overlap| {
                conflicts.push(Conflict {
                    rec: rec.clone(),
                    overlap,
                    acc: acc.clone(),
                })
            },
        );
    conflicts
}

/// The races of a graph host node's unchecked read of `mem` with the nodes of its graph beside
/// it (none outside a graph host node): its launch's clocks order it after all of them.
fn beside_races(place: Option<&HostFnOrder>, mem: &MemRef, site: Site) -> Vec<RaceReport> {
    let Some(host) = place.and_then(|p| p.graph.as_ref()) else {
        return Vec::new();
    };
    let read = mem.range();
    host.beside
        .iter()
        .filter(|w| {
            std::sync::Arc::ptr_eq(&w.alloc, &mem.alloc)
                && w.bytes.start < read.end
                && read.start < w.bytes.end
        })
        .map(|w| graph_host_race_report(host, w, read.clone(), site))
        .collect()
}
