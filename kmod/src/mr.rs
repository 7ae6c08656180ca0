// SPDX-License-Identifier: GPL-2.0

//! Memory regions: pinned user buffers a context registered, found by STag.
//!
//! STag = slot index << 8 | key. The key of a slot changes every time the slot is reused, so a
//! stale STag from an earlier registration never reaches a new region.

use crate::abi::{access, MAX_MR, MAX_MR_SIZE};
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
    _pages: PinnedPages,
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        REGIONS.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Slot {
    key: u8,
    mr: Option<MemoryRegion>,
}

/// A context's regions.
pub(crate) struct MrTable {
    slots: KVec<Slot>,
    live: u32,
}

impl MrTable {
    pub(crate) fn new() -> MrTable {
        MrTable { slots: KVec::new(), live: 0 }
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
        if self.live >= MAX_MR {
            return Err(ENOSPC);
        }
        let writable = rights & (access::LOCAL_WRITE | access::REMOTE_WRITE) != 0;
        let pages = PinnedPages::pin(addr, length, writable)?;
        let index = match self.slots.iter().position(|s| s.mr.is_none()) {
            Some(i) => i,
            None => {
                self.slots.push(Slot { key: 0, mr: None }, GFP_KERNEL)?;
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        // Key 0 is skipped so no STag is ever 0.
        slot.key = match slot.key.wrapping_add(1) {
            0 => 1,
            k => k,
        };
        slot.mr = Some(MemoryRegion { _pages: pages });
        self.live += 1;
        REGIONS.fetch_add(1, Ordering::Relaxed);
        Ok((index as u32) << 8 | slot.key as u32)
    }

    /// Deregisters the region `stag` names, unpinning its pages.
    pub(crate) fn deregister(&mut self, stag: u32) -> Result {
        let slot = self.slots.get_mut((stag >> 8) as usize).ok_or(EINVAL)?;
        if slot.key as u32 != stag & 0xff || slot.mr.is_none() {
            return Err(EINVAL);
        }
        slot.mr = None;
        self.live -= 1;
        Ok(())
    }
}
