// SPDX-License-Identifier: GPL-2.0

//! Kernel memory the application maps (`shim/mem_shim.c`: vmalloc_user, remap_vmalloc_range):
//! completion rings and work request rings. The application may write any byte at any time, so
//! the module reads only the words it must (with atomics) and treats them as untrusted hints
//! (as CLAN's queue discipline says: the kernel never trusts the shared segment).

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![deny(clippy::arithmetic_side_effects)]

use crate::ffi;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::error::to_result;
use kernel::mm::virt::VmaNew;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;

/// Zeroed, page-aligned memory shared with user space through `mmap`.
///
/// # Invariants
///
/// `ptr` is the start of `bytes` octets from `vmalloc_user` (a whole number of pages), owned by
/// this value and freed on drop; user space may write any of them at any time, so the module
/// reads them only as untrusted values.
pub(crate) struct SharedRing {
    ptr: NonNull<u8>,
    bytes: usize,
}

// SAFETY: the allocation is owned by this value and freed once; all access goes through raw
// pointers with atomic or volatile operations, valid from any thread.
unsafe impl Send for SharedRing {}
// SAFETY: see above; `&self` methods never form Rust references into the shared memory.
unsafe impl Sync for SharedRing {}

impl SharedRing {
    /// `bytes` rounded up to whole pages.
    pub(crate) fn new(bytes: usize) -> Result<SharedRing> {
        let bytes = bytes.checked_next_multiple_of(PAGE_SIZE).ok_or(EINVAL)?;
        // SAFETY: a plain allocation call.
        let raw = unsafe { ffi::iwarp_shim_ring_alloc(bytes) }.cast::<u8>();
        Ok(SharedRing { ptr: NonNull::new(raw).ok_or(ENOMEM)?, bytes })
    }

    /// Length in octets (what `mmap` must ask for).
    pub(crate) fn len(&self) -> usize {
        self.bytes
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        assert!(off % 4 == 0 && off.checked_add(4).is_some_and(|end| end <= self.bytes));
        // SAFETY: in bounds and aligned (checked above; the allocation is page aligned), and the
        // memory lives as long as `self`. User space maps it too and may store anything of any
        // width there at any moment (libsiw stores single octets into a CQE's flags word): the
        // Rust memory model does not cover such a writer, but on every architecture the kernel
        // builds for, an aligned 32-bit load, store or compare-and-swap is one access that sees
        // each octet either before or after such a store, and any value is a valid u32. Nothing
        // here trusts a value loaded: callers check it.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }

    /// Where the ring starts, for the RDMA core's mapping of it (`shim/ib_shim.c`).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Replaces the u32 at `off` with `new` if it still is `old`; whether it was.
    pub(crate) fn replace(&self, off: usize, old: u32, new: u32) -> bool {
        self.word(off).compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Reads the u32 at `off` (acquire): a value user space may have written.
    pub(crate) fn load(&self, off: usize) -> u32 {
        self.word(off).load(Ordering::Acquire)
    }

    /// Publishes `v` at `off` (release: what was written before is visible first).
    pub(crate) fn store(&self, off: usize, v: u32) {
        self.word(off).store(v, Ordering::Release)
    }

    /// Copies `src` to `off` (volatile: user space may be reading it).
    pub(crate) fn write(&self, off: usize, src: &[u8]) {
        assert!(off.checked_add(src.len()).is_some_and(|end| end <= self.bytes));
        for (i, b) in src.iter().enumerate() {
            // SAFETY: in bounds (checked above) of memory owned by `self`.
            unsafe { self.ptr.as_ptr().add(off).add(i).write_volatile(*b) };
        }
    }

    /// Copies `dst.len()` octets at `off` out (volatile: user space may be writing them; the
    /// copy is what gets checked and used).
    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) {
        assert!(off.checked_add(dst.len()).is_some_and(|end| end <= self.bytes));
        for (i, b) in dst.iter_mut().enumerate() {
            // SAFETY: in bounds (checked above) of memory owned by `self`.
            *b = unsafe { self.ptr.as_ptr().add(off).add(i).read_volatile() };
        }
    }

    /// Maps the ring into `vma`, which must span exactly [`SharedRing::len`] octets.
    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        // SAFETY: `vma` is a live vma being set up by mmap; the ring is live and `bytes` long.
        to_result(unsafe { ffi::iwarp_shim_ring_mmap(vma.as_ptr(), self.ptr.as_ptr().cast(), self.bytes) })
    }
}

/// The page offset `mmap` was called with.
pub(crate) fn mmap_pgoff(vma: &VmaNew) -> usize {
    // SAFETY: `vma` is live; the shim reads one field.
    unsafe { ffi::iwarp_shim_vma_pgoff(vma.as_ptr()) }
}

impl Drop for SharedRing {
    fn drop(&mut self) {
        // SAFETY: allocated by iwarp_shim_ring_alloc() and freed once; pages still mapped by a
        // process keep their own references.
        unsafe { ffi::iwarp_shim_ring_free(self.ptr.as_ptr().cast()) };
    }
}
