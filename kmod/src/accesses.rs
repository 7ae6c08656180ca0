// SPDX-License-Identifier: GPL-2.0

//! Accesses in progress to a region's memory, counted so that invalidating or deregistering
//! the region can wait them out: the table's lock is held only to look a region up and begin
//! an access, never across the copy, so the QPs of one context place in parallel.

use core::sync::atomic::{AtomicU32, Ordering};

/// The accesses to one set of pages (a pinned user buffer, a fast registration's page list).
pub(crate) struct Accesses {
    /// Accesses in progress.
    active: AtomicU32,
    /// Fast Registers of the region so far: an invalidation waits only for the accesses of the
    /// registration it ended (one begun under a later one does not hold it).
    generation: AtomicU32,
}

impl Accesses {
    pub(crate) const fn new() -> Accesses {
        Accesses { active: AtomicU32::new(0), generation: AtomicU32::new(0) }
    }

    /// Counts an access until [`Accesses::end`]. Called under the lock that
    /// [`Accesses::wait_none`]'s caller took to stop further accesses.
    pub(crate) fn begin(&self) {
        self.active.fetch_add(1, Ordering::Relaxed);
    }

    /// Ends an access begun with [`Accesses::begin`] (its reads and writes happen before).
    pub(crate) fn end(&self) {
        self.active.fetch_sub(1, Ordering::Release);
    }

    /// Waits until no access is in progress (each is one copy or hold of a segment or a
    /// request's piece, on a CPU with bottom halves off: a short spin), so nothing touches the
    /// pages after the caller returns. The caller has stopped new accesses: their region is
    /// invalid or gone.
    pub(crate) fn wait_none(&self) {
        self.wait_none_in(None);
    }

    /// As [`Accesses::wait_none`] for an invalidation of registration `generation`: done as
    /// well once a Fast Register made a later one (which waited for the rest first).
    pub(crate) fn wait_none_in(&self, generation: Option<u32>) {
        while self.active.load(Ordering::Acquire) != 0 && generation.is_none_or(|g| g == self.generation.load(Ordering::Acquire)) {
            core::hint::spin_loop();
        }
    }

    /// The registration the pages serve now.
    pub(crate) fn generation(&self) -> u32 {
        self.generation.load(Ordering::Relaxed)
    }

    /// A Fast Register made a new registration of the pages: call once no access is in
    /// progress (the caller waited, holding off new ones).
    pub(crate) fn next_generation(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }
}
