//! A stream's capture slot: the capture it takes part in, behind a lock, with a flag beside it
//! that says whether the slot holds anything. Every call on every stream asks for its capture
//! (GR1), almost always of an empty slot: the flag answers that with one atomic load, where
//! the lock took four atomic read-modify-writes a launch.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, MutexGuard};

/// A value behind a lock whose emptiness can be read without taking the lock.
pub(crate) struct Slot<T> {
    value: Mutex<Option<T>>,
    /// `value.is_some()` as of the last guard's drop (written only under the lock).
    occupied: AtomicBool,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            value: Mutex::new(None),
            occupied: AtomicBool::new(false),
        }
    }
}

impl<T> Slot<T> {
    /// Lock the slot; the flag follows what the guard leaves in it.
    pub fn lock(&self) -> SlotGuard<'_, T> {
        SlotGuard {
            value: self.value.lock(),
            occupied: &self.occupied,
        }
    }

    /// Whether the slot may hold something: false only when it held nothing at the last
    /// unlock (a guard dropped on this thread, or one that happened before by other
    /// synchronization, is seen).
    #[inline]
    pub fn maybe_occupied(&self) -> bool {
        self.occupied.load(Ordering::Acquire)
    }

    /// What the slot holds, the lock taken only when it may hold something.
    #[inline]
    pub fn get(&self) -> Option<T>
    where
        T: Clone,
    {
        if !self.maybe_occupied() {
            return None;
        }
        self.lock().clone()
    }

    /// Empty the slot, the lock taken only when it may hold something.
    #[inline]
    pub fn clear(&self) {
        if self.maybe_occupied() {
            self.lock().take();
        }
    }
}

/// The locked slot.
pub(crate) struct SlotGuard<'a, T> {
    value: MutexGuard<'a, Option<T>>,
    occupied: &'a AtomicBool,
}

impl<T> Deref for SlotGuard<'_, T> {
    type Target = Option<T>;
    fn deref(&self) -> &Option<T> {
        &self.value
    }
}

impl<T> DerefMut for SlotGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut Option<T> {
        &mut self.value
    }
}

impl<T> Drop for SlotGuard<'_, T> {
    /// Still under the lock (the guard's fields drop after this), so flag writes follow the
    /// lock's order.
    fn drop(&mut self) {
        self.occupied.store(self.value.is_some(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::Slot;

    #[test]
    fn the_flag_follows_what_each_guard_leaves() {
        let s: Slot<u32> = Slot::default();
        assert!(!s.maybe_occupied());
        *s.lock() = Some(7);
        assert!(s.maybe_occupied());
        assert_eq!(*s.lock(), Some(7));
        assert!(
            s.maybe_occupied(),
            "a guard that changed nothing keeps the flag"
        );
        s.lock().take();
        assert!(!s.maybe_occupied());
        assert_eq!(s.get(), None);
        *s.lock() = Some(8);
        assert_eq!(s.get(), Some(8));
        s.clear();
        assert!(!s.maybe_occupied());
        assert_eq!(s.get(), None);
    }
}
