//! Memory as core sees it: what core keeps of each allocation, registered host memory and
//! pools, managed memory, and pageable memory as a copy's source or destination.
//!
//! Owns: core's state attached to a backend allocation ([`alloc`]); the process-wide registry
//! of page-locked ranges and the device calls that register memory and make pools
//! ([`host_mem`], HM1, HM5, ER3 for overlapping registrations); managed memory's allocation,
//! prefetch, advice and attachment ([`managed`], HM4, HM6); pageable host memory reached by
//! graph copy nodes and captured copies ([`pageable`]).
//!
//! Rules kept here: HM1, HM4–HM6, MM3 (host views are counted here, ordered by `tracking`),
//! ER3.
//!
//! # Fields
//!
//! [`alloc::AllocState`], one per allocation, made on first use and shared by every handle and
//! operation that holds the allocation:
//! - `access`: the byte-range access map. Only `tracking` locks it, after the device's protocol
//!   lock, several maps in address order.
//! - `host_views`: the count of live host views; the API's `HostRead`/`HostWrite` raise and
//!   lower it ([`alloc::HostView`]), a graph launch holds the lock while it enqueues.
//! - `graph`: graph memory's binding of a placeholder (`graphs::mem` alone reads or writes it).
//! - `extra`: managed memory's attachment ([`managed`] alone).
//!
//! [`host_mem`]'s registry is one process-wide mutex, locked only inside that file.

pub(crate) mod alloc;
pub(crate) mod host_mem;
pub(crate) mod managed;
pub(crate) mod pageable;
pub(crate) mod pool;
