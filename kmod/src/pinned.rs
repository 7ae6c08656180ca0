// SPDX-License-Identifier: GPL-2.0

//! Pinned user pages (`shim/mem_shim.c`) behind a safe owner: pinned on creation, unpinned and
//! uncharged from RLIMIT_MEMLOCK on drop, counted module-wide so tests can see that nothing
//! stays pinned.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;

mod ffi {
    #[repr(C)]
    pub(super) struct IwarpPinned {
        _opaque: [u8; 0],
    }
    extern "C" {
        pub(super) fn iwarp_shim_pin_user(addr: u64, len: u64, writable: bool, err: *mut i32) -> *mut IwarpPinned;
        pub(super) fn iwarp_shim_unpin_user(p: *mut IwarpPinned);
        pub(super) fn iwarp_shim_pinned_npages(p: *const IwarpPinned) -> usize;
        pub(super) fn iwarp_shim_pinned_copy_from(p: *const IwarpPinned, offset: u64, dst: *mut u8, len: usize);
    }
}

/// User pages pinned by every region of every context.
static PINNED_PAGES: AtomicU64 = AtomicU64::new(0);

/// The module-wide pinned page count.
pub(crate) fn pinned_pages() -> u64 {
    PINNED_PAGES.load(Ordering::Relaxed)
}

/// The pages of one user buffer, pinned for as long as this lives.
pub(crate) struct PinnedPages {
    ptr: NonNull<ffi::IwarpPinned>,
    npages: usize,
    /// Offset of the buffer's first byte in the first page.
    first: usize,
    len: u64,
}

// SAFETY: the pinned set is owned exclusively by this value; the C object is only read for its
// page count and freed once, in `drop`, which may run on any thread.
unsafe impl Send for PinnedPages {}
// SAFETY: shared references only read the immutable page count.
unsafe impl Sync for PinnedPages {}

impl PinnedPages {
    /// Pins `[addr, addr + len)` of the calling process, charging RLIMIT_MEMLOCK.
    pub(crate) fn pin(addr: u64, len: u64, writable: bool) -> Result<PinnedPages> {
        let mut err = 0i32;
        // SAFETY: `err` is a live local the shim writes; the shim validates the user range
        // itself and touches user memory only through pin_user_pages_fast().
        let raw = unsafe { ffi::iwarp_shim_pin_user(addr, len, writable, &mut err) };
        let ptr = NonNull::new(raw).ok_or_else(|| Error::from_errno(err))?;
        // SAFETY: `ptr` is the valid set the shim just returned.
        let npages = unsafe { ffi::iwarp_shim_pinned_npages(ptr.as_ptr()) };
        PINNED_PAGES.fetch_add(npages as u64, Ordering::Relaxed);
        Ok(PinnedPages { ptr, npages, first: (addr % kernel::page::PAGE_SIZE as u64) as usize, len })
    }

    /// Copies buffer bytes `[offset, offset + dst.len())` into `dst`; EINVAL if out of range.
    /// A copy, not a view: user space may change its buffer at any time, and what is framed and
    /// checksummed must be one consistent snapshot.
    pub(crate) fn copy_to(&self, offset: u64, dst: &mut [u8]) -> Result {
        let end = offset.checked_add(dst.len() as u64).ok_or(EINVAL)?;
        if end > self.len {
            return Err(EINVAL);
        }
        // SAFETY: the set is live and the range lies inside the buffer, hence inside the pinned
        // pages; `dst` is valid for writes of its length.
        unsafe { ffi::iwarp_shim_pinned_copy_from(self.ptr.as_ptr(), self.first as u64 + offset, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

impl Drop for PinnedPages {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from iwarp_shim_pin_user() and is released exactly once, here.
        unsafe { ffi::iwarp_shim_unpin_user(self.ptr.as_ptr()) };
        PINNED_PAGES.fetch_sub(self.npages as u64, Ordering::Relaxed);
    }
}
