// SPDX-License-Identifier: GPL-2.0

//! Pinned user pages (`shim/mem_shim.c`) behind a safe owner: pinned on creation, unpinned and
//! uncharged from RLIMIT_MEMLOCK on drop, counted module-wide so tests can see that nothing
//! stays pinned.

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![deny(clippy::arithmetic_side_effects)]

use crate::accesses::Accesses;
use crate::error::made;
use crate::ffi;
use crate::frags::PageFrag;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::Arc;

/// User pages pinned by every region of every context.
static PINNED_PAGES: AtomicU64 = AtomicU64::new(0);

/// The module-wide pinned page count.
pub(crate) fn pinned_pages() -> u64 {
    PINNED_PAGES.load(Ordering::Relaxed)
}

/// The pages of one user buffer, pinned for as long as this lives.
///
/// # Invariants
///
/// `ptr` is the shim's pin record of `npages` pages pinned with `FOLL_LONGTERM` (writable if
/// `writable`), covering `len` octets from offset `first` of the first page; the pages stay
/// pinned and counted in the module-wide total until drop unpins them.
pub(crate) struct PinnedPages {
    ptr: NonNull<ffi::iwarp_pinned>,
    npages: usize,
    /// Offset of the buffer's first byte in the first page.
    first: usize,
    len: u64,
    writable: bool,
    /// The unpinning was handed to a work item ([`PinnedPages::let_go`]): drop leaves it.
    unpinned_later: bool,
    /// Placements and atomics in the pages in progress, which invalidating or deregistering
    /// their region waits out.
    accesses: Accesses,
}

// SAFETY: the pinned set is owned exclusively by this value; the C object is only read for its
// page count and freed once, in `drop`, which may run on any thread.
unsafe impl Send for PinnedPages {}
// SAFETY: shared references read the immutable fields, and copy into and out of the pages, which
// are not Rust memory: concurrent copies race only as DMA into user memory would, which is
// exactly what an RNIC does (the application owns that synchronization).
unsafe impl Sync for PinnedPages {}

/// A page's size as the offsets here count.
const PAGE: u64 = PAGE_SIZE as u64;

impl PinnedPages {
    /// Pins `[addr, addr + len)` of the calling process, charging RLIMIT_MEMLOCK.
    pub(crate) fn pin(addr: u64, len: u64, writable: bool) -> Result<PinnedPages> {
        // SAFETY: the shim validates the user range itself and touches user memory only
        // through pin_user_pages_fast().
        let ptr = made(unsafe { ffi::iwarp_shim_pin_user(addr, len, writable) })?;
        // SAFETY: `ptr` is the valid set the shim just returned.
        let npages = unsafe { ffi::iwarp_shim_pinned_npages(ptr.as_ptr()) };
        PINNED_PAGES.fetch_add(npages as u64, Ordering::Relaxed);
        Ok(PinnedPages { ptr, npages, first: (addr % PAGE) as usize, len, writable, unpinned_later: false, accesses: Accesses::new() })
    }

    /// Where buffer offset `offset` lies from the start of the first pinned page.
    fn at(&self, offset: u64) -> Result<u64> {
        (self.first as u64).checked_add(offset).ok_or(EINVAL)
    }

    /// Whether the pages were pinned writable (only then may anything be placed in them).
    pub(crate) fn writable(&self) -> bool {
        self.writable
    }

    /// Copies buffer bytes `[offset, offset + dst.len())` into `dst`; EINVAL if out of range.
    /// A copy, not a view (for small messages; larger ones are sent by reference, see
    /// [`PinnedPages::frags`]): what is framed and checksummed is one consistent snapshot.
    pub(crate) fn copy_to(&self, offset: u64, dst: &mut [u8]) -> Result {
        self.check_range(offset, dst.len() as u64)?;
        // SAFETY: the set is live and the range lies inside the buffer, hence inside the pinned
        // pages; `dst` is valid for writes of its length.
        unsafe { ffi::iwarp_shim_pinned_copy_from(self.ptr.as_ptr(), self.at(offset)?, dst.as_mut_ptr().cast(), dst.len()) };
        Ok(())
    }

    /// Places `src` at buffer offset `offset`; EINVAL if out of range, EPERM if the pages were
    /// pinned read-only.
    pub(crate) fn copy_from(&self, offset: u64, src: &[u8]) -> Result {
        self.check_range(offset, src.len() as u64)?;
        if !self.writable {
            return Err(EPERM);
        }
        // SAFETY: the set is live and writable and the range lies inside the buffer, hence
        // inside the pinned pages; `src` is valid for reads of its length.
        unsafe { ffi::iwarp_shim_pinned_copy_to(self.ptr.as_ptr(), self.at(offset)?, src.as_ptr().cast(), src.len()) };
        Ok(())
    }

    /// Replaces the 64-bit value at buffer offset `offset` with `op` of it, atomically against
    /// every other access (a locked compare-and-exchange on the page), and returns the value
    /// before; EINVAL if out of range or not 8-aligned in memory, EPERM if read-only. RFC 7306
    /// needs atomicity only against other atomics; this gives it against the CPU's too.
    pub(crate) fn update_u64(&self, offset: u64, op: impl Fn(u64) -> u64) -> Result<u64> {
        self.check_range(offset, 8)?;
        if !self.writable {
            return Err(EPERM);
        }
        let at = self.at(offset)?;
        if at % 8 != 0 {
            return Err(EINVAL);
        }
        let (idx, in_page) = ((at / PAGE) as usize, (at % PAGE) as usize);
        // SAFETY: the set is live and `idx` is below its page count (the range is inside the
        // buffer).
        let page = unsafe { ffi::iwarp_shim_pinned_page(self.ptr.as_ptr(), idx) };
        // SAFETY: `page` is pinned while `self` lives; every page has a kernel address.
        let base = unsafe { ffi::iwarp_shim_page_address(page) };
        // SAFETY: `base + in_page` is 8-aligned (checked above) with its 8 octets inside the
        // page, which stays mapped and pinned while `self` lives; it is user memory, never a
        // Rust object, so other accesses to it are the user's or other atomics (all atomic here).
        let value = unsafe { AtomicU64::from_ptr(base.cast::<u8>().add(in_page).cast::<u64>()) };
        Ok(match value.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(op(v))) {
            Ok(old) | Err(old) => old,
        })
    }

    /// Calls `f` with the page fragments covering buffer octets `[offset, offset + len)`, in
    /// order; EINVAL if out of range. The fragments are valid while `self` lives: whoever sends
    /// from them keeps it alive until TCP has taken its own page references.
    pub(crate) fn frags(&self, offset: u64, len: u64, mut f: impl FnMut(PageFrag) -> Result) -> Result {
        self.check_range(offset, len)?;
        let mut at = self.at(offset)?;
        let end = at.checked_add(len).ok_or(EINVAL)?;
        while let Some(left) = end.checked_sub(at).filter(|&n| n > 0) {
            let (idx, in_page) = (at / PAGE, at % PAGE);
            // `in_page` is below PAGE.
            let n = left.min(PAGE.saturating_sub(in_page));
            // SAFETY: the set is live and `idx` is below its page count (the range is inside
            // the buffer).
            let raw = unsafe { ffi::iwarp_shim_pinned_page(self.ptr.as_ptr(), idx as usize) };
            // SAFETY: pinned pages stay allocated while `self` lives (see above); the run ends
            // within the page.
            f(unsafe { PageFrag::new(raw, in_page as u32, n as u32) })?;
            at = at.saturating_add(n);
        }
        Ok(())
    }

    fn check_range(&self, offset: u64, len: u64) -> Result {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(EINVAL),
        }
    }

    /// The accesses in progress to the pages, which their region's invalidation waits out.
    pub(crate) fn accesses(&self) -> &Accesses {
        &self.accesses
    }

    /// Drops a reference where sleeping is not allowed (the receive side, with bottom halves
    /// off): if it was the last (the region was deregistered during the access), unpinning,
    /// which may sleep, is left to a work item.
    pub(crate) fn let_go(pages: Arc<PinnedPages>) {
        let Some(mut last) = Arc::into_unique_or_drop(pages) else { return };
        let last = last.as_mut().get_mut();
        // SAFETY: `ptr` came from iwarp_shim_pin_user() and is released exactly once: here,
        // and drop, seeing `unpinned_later`, does not again.
        unsafe { ffi::iwarp_shim_unpin_user_later(last.ptr.as_ptr()) };
        last.unpinned_later = true;
    }
}

impl Drop for PinnedPages {
    fn drop(&mut self) {
        if !self.unpinned_later {
            // SAFETY: `ptr` came from iwarp_shim_pin_user() and is released exactly once, here.
            unsafe { ffi::iwarp_shim_unpin_user(self.ptr.as_ptr()) };
        }
        PINNED_PAGES.fetch_sub(self.npages as u64, Ordering::Relaxed);
    }
}

/// Held by the module: dropping it (at unload) waits for unpinning left to the work item.
pub(crate) struct LaterUnpins(());

impl LaterUnpins {
    pub(crate) fn new() -> LaterUnpins {
        LaterUnpins(())
    }
}

impl Drop for LaterUnpins {
    fn drop(&mut self) {
        // SAFETY: no pinned set is left by now (every context has closed), so nothing queues
        // more; this waits out what was queued.
        unsafe { ffi::iwarp_shim_unpin_flush() };
    }
}
