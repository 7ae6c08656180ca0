// SPDX-License-Identifier: GPL-2.0

//! Memory regions: pinned user buffers a context registered, found by STag (a handle of
//! [`Handles`], so a stale STag never reaches a newer region). Addresses are the application's
//! virtual addresses, as in verbs (and as siw uses them for tagged offsets).

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

/// Why a region refused an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No such region, or it was invalidated.
    InvalidStag,
    /// The range is not inside the region.
    Bounds,
    /// The region lacks the right.
    Access,
}

/// One registered buffer.
struct MemoryRegion {
    pages: PinnedPages,
    va: u64,
    len: u64,
    rights: u32,
    /// Cleared by a peer's Send with Invalidate.
    valid: bool,
}

impl MemoryRegion {
    /// Offset in the buffer of `[addr, addr + len)`, if `need` rights are granted.
    fn offset(&self, addr: u64, len: u64, need: u32) -> Result<u64, Fault> {
        if !self.valid {
            return Err(Fault::InvalidStag);
        }
        let off = addr.checked_sub(self.va).ok_or(Fault::Bounds)?;
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Fault::Bounds);
        }
        if self.rights & need != need {
            return Err(Fault::Access);
        }
        Ok(off)
    }
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
        self.regions.insert(MemoryRegion { pages, va: addr, len: length, rights, valid: true })
    }

    /// Whether `len` octets at `addr` of region `stag` may be accessed with `need` rights.
    pub(crate) fn check(&self, stag: u32, addr: u64, len: u64, need: u32) -> Result<(), Fault> {
        self.regions.get(stag).map_err(|_| Fault::InvalidStag)?.offset(addr, len, need).map(drop)
    }

    /// Copies out of region `stag` at `addr` (a snapshot; `need` rights required).
    pub(crate) fn read(&self, stag: u32, addr: u64, dst: &mut [u8], need: u32) -> Result<(), Fault> {
        let mr = self.regions.get(stag).map_err(|_| Fault::InvalidStag)?;
        let off = mr.offset(addr, dst.len() as u64, need)?;
        mr.pages.copy_to(off, dst).map_err(|_| Fault::Bounds)
    }

    /// Places `src` into region `stag` at `addr` (`need` rights required, which must include a
    /// write right).
    pub(crate) fn write(&self, stag: u32, addr: u64, src: &[u8], need: u32) -> Result<(), Fault> {
        let mr = self.regions.get(stag).map_err(|_| Fault::InvalidStag)?;
        let off = mr.offset(addr, src.len() as u64, need)?;
        mr.pages.copy_from(off, src).map_err(|_| Fault::Access)
    }

    /// Invalidates `stag` (a peer's Send with Invalidate): later accesses fail until it is
    /// deregistered. Fails for unknown or already invalid STags.
    pub(crate) fn invalidate(&mut self, stag: u32) -> Result<(), Fault> {
        let mr = self.regions.get_mut(stag).map_err(|_| Fault::InvalidStag)?;
        if !core::mem::replace(&mut mr.valid, false) {
            return Err(Fault::InvalidStag);
        }
        Ok(())
    }

    /// Deregisters the region `stag` names, unpinning its pages.
    pub(crate) fn deregister(&mut self, stag: u32) -> Result {
        self.regions.remove(stag).map(drop)
    }
}
