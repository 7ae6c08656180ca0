// SPDX-License-Identifier: GPL-2.0

//! Memory a process makes the module allocate is charged to its memory cgroup, and the
//! cgroup's limit shows as ENOMEM, never as its OOM killer (`shim/mem_shim.c` says how: memory
//! in amounts the caller chooses is refused softly, and calls that make fixed-size objects
//! first check that there is room for them).

use crate::ffi;
use core::alloc::Layout;
use core::ptr::NonNull;
use kernel::alloc::allocator::KVmalloc;
use kernel::alloc::{AllocError, Allocator, Flags, NumaNode};
use kernel::error::to_result;
use kernel::prelude::*;

/// ENOMEM unless the caller's memory cgroup has room for the fixed-size objects of one call.
pub(crate) fn room() -> Result {
    // SAFETY: a plain allocation and free in process context.
    to_result(unsafe { ffi::iwarp_shim_charged_room() })
}

/// The allocator of such memory: `kvrealloc` with `GFP_KERNEL_ACCOUNT | __GFP_RETRY_MAYFAIL`
/// (the caller's flags are not used: these are the only right ones here).
pub(crate) struct Charged;

/// A vector of such memory.
pub(crate) type ChargedVec<T> = kernel::alloc::Vec<T, Charged>;

// SAFETY: `realloc` is `kvrealloc_node_align`, as for the kernel crate's `KVmalloc`: the memory
// stays valid until it is passed back, a size of 0 frees it, and the alignment asked is kept.
unsafe impl Allocator for Charged {
    const MIN_ALIGN: usize = KVmalloc::MIN_ALIGN;

    unsafe fn realloc(ptr: Option<NonNull<u8>>, layout: Layout, old_layout: Layout, _flags: Flags, _nid: NumaNode) -> Result<NonNull<[u8]>, AllocError> {
        // kvrealloc may use kmalloc, which needs the size to be a multiple of the alignment.
        let layout = layout.pad_to_align();
        let old = match ptr {
            Some(p) if old_layout.size() != 0 => p.as_ptr(),
            _ => core::ptr::null_mut(),
        };
        // SAFETY: `old` is NULL or memory this allocator returned and has not freed (the
        // caller's contract).
        let raw = unsafe { ffi::iwarp_shim_kvrealloc_charged(old.cast(), layout.size(), layout.align()) }.cast::<u8>();
        let ptr = if layout.size() == 0 {
            // Nothing allocated: a dangling pointer of the right alignment, as Allocator asks.
            NonNull::new(layout.align() as *mut u8).ok_or(AllocError)?
        } else {
            NonNull::new(raw).ok_or(AllocError)?
        };
        Ok(NonNull::slice_from_raw_parts(ptr, layout.size()))
    }
}
