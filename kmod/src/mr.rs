// SPDX-License-Identifier: GPL-2.0

//! Memory regions: pinned user buffers a context registered, found by STag (a handle of
//! [`Handles`], so a stale STag never reaches a newer region).

use crate::abi::{access, MAX_MR, MAX_MR_SIZE};
use crate::handles::Handles;
use crate::pinned::PinnedPages;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;

/// Registered regions of all contexts.
static REGIONS: AtomicU64 = AtomicU64::new(0);

/// The module-wide region count.
pub(crate) fn regions() -> u64 {
    REGIONS.load(Ordering::Relaxed)
}

/// One registered buffer.
struct MemoryRegion {
    pages: PinnedPages,
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        REGIONS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A context's regions, by STag.
pub(crate) struct MrTable {
    regions: Handles<MemoryRegion>,
}

impl MrTable {
    pub(crate) fn new() -> MrTable {
        MrTable { regions: Handles::new(MAX_MR) }
    }

    /// Pins and registers `[addr, addr + length)` with `access` rights; returns its STag.
    pub(crate) fn register(&mut self, addr: u64, length: u64, rights: u32) -> Result<u32> {
        let valid = length > 0
            && length <= MAX_MR_SIZE
            && addr.checked_add(length).is_some()
            && rights & !access::ALL == 0
            && (rights & access::REMOTE_WRITE == 0 || rights & access::LOCAL_WRITE != 0);
        if !valid {
            return Err(EINVAL);
        }
        let writable = rights & (access::LOCAL_WRITE | access::REMOTE_WRITE) != 0;
        let pages = PinnedPages::pin(addr, length, writable)?;
        REGIONS.fetch_add(1, Ordering::Relaxed);
        self.regions.insert(MemoryRegion { pages })
    }

    /// Copies `dst.len()` bytes at `offset` of region `lkey` (local reads need no right).
    pub(crate) fn copy_out(&self, lkey: u32, offset: u64, dst: &mut [u8]) -> Result {
        self.regions.get(lkey)?.pages.copy_to(offset, dst)
    }

    /// Deregisters the region `stag` names, unpinning its pages.
    pub(crate) fn deregister(&mut self, stag: u32) -> Result {
        self.regions.remove(stag).map(drop)
    }
}
