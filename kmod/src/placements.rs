// SPDX-License-Identifier: GPL-2.0

//! Placements in progress into the memory of one registration, so that invalidating or
//! deregistering its region can wait until nothing lands there any more. Pinned user pages
//! and fast-registered kernel pages each count theirs.

use core::sync::atomic::{AtomicU32, Ordering};

pub(crate) struct Placements {
    /// Placements in progress.
    placing: AtomicU32,
    /// Fast Registers of the memory so far: an invalidation waits only for the placements of
    /// the registration it ended (one begun under a later one does not hold it).
    generation: AtomicU32,
}

impl Placements {
    pub(crate) fn new() -> Placements {
        Placements { placing: AtomicU32::new(0), generation: AtomicU32::new(0) }
    }

    /// Counts a placement until [`Placements::end`]. Called under the lock that
    /// [`Placements::wait`]'s caller took to stop further placements.
    pub(crate) fn begin(&self) {
        self.placing.fetch_add(1, Ordering::Relaxed);
    }

    /// Ends a placement begun with [`Placements::begin`] (its writes happen before).
    pub(crate) fn end(&self) {
        self.placing.fetch_sub(1, Ordering::Release);
    }

    /// Waits until no placement is in progress (each is one segment's copy, on a CPU with
    /// bottom halves off: a short spin), so nothing lands after the caller returns. The
    /// caller has stopped new placements: their region is invalid or gone.
    pub(crate) fn wait(&self) {
        self.wait_in(None);
    }

    /// As [`Placements::wait`] for an invalidation of registration `generation`: done as well
    /// once a Fast Register made a later one (which waited for the rest first).
    pub(crate) fn wait_in(&self, generation: Option<u32>) {
        while self.placing.load(Ordering::Acquire) != 0 && generation.is_none_or(|g| g == self.generation.load(Ordering::Acquire)) {
            core::hint::spin_loop();
        }
    }

    /// The registration the memory serves now.
    pub(crate) fn generation(&self) -> u32 {
        self.generation.load(Ordering::Relaxed)
    }

    /// A Fast Register made a new registration of the memory: call once no placement is in
    /// progress (the caller waited, holding off new ones).
    pub(crate) fn next_generation(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }
}
