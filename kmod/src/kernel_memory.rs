// SPDX-License-Identifier: GPL-2.0

//! Kernel memory a kernel consumer of the RDMA core names by address through its DMA region
//! (`get_dma_mr`: under virtual DMA a DMA address is a kernel virtual one, as
//! `ib_virt_dma_to_ptr` says). Nothing here can check such an address: the consumer promises
//! it, as it promises a real RNIC the memory it may DMA to. Fast registrations name kernel
//! pages the same way, through a page list ([`PageList`]). Sent by reference, its pages are
//! held ([`HeldPage`]) until TCP has its own references.

use crate::accesses::Accesses;
use crate::ffi;
use crate::frags::PageFrag;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::alloc::Flags;
use kernel::bindings::page;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;

/// Copies `src` to kernel address `at`.
///
/// # Safety
///
/// `[at, at + src.len())` is kernel memory the consumer gave for this access, mapped and not
/// Rust-owned.
pub(crate) unsafe fn copy_to(at: u64, src: &[u8]) -> Result {
    // SAFETY: the function's contract; `src` is a Rust slice, so the two do not overlap.
    unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), at as usize as *mut u8, src.len()) };
    Ok(())
}

/// Copies `dst.len()` octets from kernel address `at` into `dst`.
///
/// # Safety
///
/// As [`copy_to`], for reading.
pub(crate) unsafe fn copy_from(at: u64, dst: &mut [u8]) -> Result {
    // SAFETY: the function's contract; `dst` is a Rust slice, so the two do not overlap.
    unsafe { core::ptr::copy_nonoverlapping(at as usize as *const u8, dst.as_mut_ptr(), dst.len()) };
    Ok(())
}

/// A reference on a page of kernel memory, held while TCP may still be handed fragments of it:
/// sent by reference, a consumer's page stays allocated even if the consumer lets go of it
/// early (a flushed request).
pub(crate) struct HeldPage(NonNull<page>);

// SAFETY: a page reference may be dropped on any thread.
unsafe impl Send for HeldPage {}

impl Drop for HeldPage {
    fn drop(&mut self) {
        // SAFETY: the reference `hold` took, dropped once.
        unsafe { ffi::iwarp_shim_kernel_page_put(self.0.as_ptr()) };
    }
}

/// Appends to `out` the fragments of the `len` octets at kernel address `at`, page by page,
/// each with its page held, so that TCP sends them by reference; false if some page may not be
/// sent so (outside the linear map, a slab's, or one that counts no references of its own, as
/// the later pages of an allocation that is not compound: the caller copies instead). `gfp`
/// for `out`.
///
/// # Safety
///
/// As [`copy_from`].
pub(crate) unsafe fn hold(at: u64, len: u64, out: &mut KVec<(HeldPage, PageFrag)>, gfp: Flags) -> Result<bool> {
    let end = at.checked_add(len).ok_or(EINVAL)?;
    let mut at = at;
    while at < end {
        let in_page = at % PAGE_SIZE as u64;
        let n = (end - at).min(PAGE_SIZE as u64 - in_page);
        // SAFETY: `at` is kernel memory the consumer gave (the function's contract).
        let Some(raw) = NonNull::new(unsafe { ffi::iwarp_shim_kernel_page_get(at) }) else { return Ok(false) };
        let held = HeldPage(raw);
        // SAFETY: the page stays allocated while `held` is (a reference), which the caller
        // keeps beside the fragment; the run ends within the page.
        let frag = unsafe { PageFrag::new(raw.as_ptr(), in_page as u32, n as u32) };
        out.push((held, frag), gfp)?;
        at += n;
    }
    Ok(true)
}

/// Replaces the 64-bit value at kernel address `at` with `op` of it, atomically, and returns
/// the value before; EINVAL if `at` is not 8-aligned.
///
/// # Safety
///
/// As [`copy_to`], for 8 octets.
pub(crate) unsafe fn update_u64(at: u64, op: impl Fn(u64) -> u64) -> Result<u64> {
    if at % 8 != 0 {
        return Err(EINVAL);
    }
    // SAFETY: the function's contract; `at` is 8-aligned, and only atomics of ours or the
    // consumer's own accesses reach it.
    let value = unsafe { AtomicU64::from_ptr(at as usize as *mut u64) };
    Ok(match value.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(op(v))) {
        Ok(old) | Err(old) => old,
    })
}

/// The most pages one fast registration may name (`alloc_mr`'s `max_num_sg`): 1 MiB of 4 KiB
/// pages.
pub(crate) const MAX_PAGE_LIST: u32 = 256;

/// Kernel pages a fast registration names (`map_mr_sg`, then `IB_WR_REG_MR`): each page by its
/// kernel virtual address (under virtual DMA, its DMA address), `1 << shift` octets from it;
/// the region's first octet lies `first` octets into the first page, and it is `len` long.
/// The consumer keeps the pages until it has invalidated or deregistered the region, which
/// waits out the accesses in progress: the copies and holds below are for an access counted
/// on the list while its region was valid, as [`Domain`](crate::mr::Domain) makes every one.
pub(crate) struct PageList {
    pages: KVec<u64>,
    shift: u32,
    first: u64,
    /// The address the region's first octet has (`mr->iova`).
    pub(crate) iova: u64,
    pub(crate) len: u64,
    accesses: Accesses,
}

impl PageList {
    /// The list `map_mr_sg` made: `pages` of `page_size` octets (a power of two, at least 512,
    /// each page aligned to it) holding `len` octets from `iova` on. EINVAL if they do not;
    /// may run in atomic context.
    pub(crate) fn new(iova: u64, len: u64, page_size: u64, pages: &[u64]) -> Result<PageList> {
        let aligned = |a: &u64| a & (page_size - 1) == 0 && *a != 0;
        if !page_size.is_power_of_two() || page_size < 512 || pages.len() > MAX_PAGE_LIST as usize || !pages.iter().all(aligned) {
            return Err(EINVAL);
        }
        let first = iova & (page_size - 1);
        let room = (pages.len() as u64) << page_size.trailing_zeros();
        if len == 0 || first.checked_add(len).is_none_or(|end| end > room) {
            return Err(EINVAL);
        }
        let mut list = KVec::with_capacity(pages.len(), GFP_ATOMIC)?;
        list.extend_from_slice(pages, GFP_ATOMIC)?;
        Ok(PageList { pages: list, shift: page_size.trailing_zeros(), first, iova, len, accesses: Accesses::new() })
    }

    /// The accesses in progress to the pages, which their region's invalidation waits out.
    pub(crate) fn accesses(&self) -> &Accesses {
        &self.accesses
    }

    /// Calls `f` with the kernel address and length of each run of `[off, off + len)` (region
    /// offsets) that lies in one page, in order; EINVAL past the region's end.
    fn runs(&self, off: u64, len: u64, mut f: impl FnMut(u64, usize) -> Result) -> Result {
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(EINVAL);
        }
        let page = 1u64 << self.shift;
        // Below `first + self.len`, which `new` checked fits the pages.
        let (mut at, end) = (self.first + off, self.first + off + len);
        while at < end {
            let (idx, in_page) = ((at >> self.shift) as usize, at & (page - 1));
            let n = (end - at).min(page - in_page);
            f(self.pages[idx] + in_page, n as usize)?;
            at += n;
        }
        Ok(())
    }

    /// Copies `dst.len()` octets from region offset `off` into `dst` (as
    /// [`PinnedPages::copy_to`](crate::pinned::PinnedPages::copy_to)).
    pub(crate) fn copy_to(&self, off: u64, dst: &mut [u8]) -> Result {
        let mut done = 0;
        self.runs(off, dst.len() as u64, |at, n| {
            // SAFETY: `at` is in a page the consumer registered and keeps (see the type), and
            // the run ends within it.
            unsafe { copy_from(at, &mut dst[done..done + n]) }?;
            done += n;
            Ok(())
        })
    }

    /// [`hold`] of `len` octets from region offset `off`: the pages the consumer listed are
    /// kernel memory it keeps, as [`copy_to`](PageList::copy_to) assumes.
    pub(crate) fn hold(&self, off: u64, len: u64, out: &mut KVec<(HeldPage, PageFrag)>, gfp: Flags) -> Result<bool> {
        let mut whole = true;
        self.runs(off, len, |at, n| {
            // SAFETY: as in `copy_to`, for the run at `at`.
            whole = whole && unsafe { hold(at, n as u64, out, gfp) }?;
            Ok(())
        })?;
        Ok(whole)
    }

    /// Places `src` at region offset `off`.
    pub(crate) fn copy_from(&self, off: u64, src: &[u8]) -> Result {
        let mut done = 0;
        self.runs(off, src.len() as u64, |at, n| {
            // SAFETY: as in `copy_to`.
            unsafe { copy_to(at, &src[done..done + n]) }?;
            done += n;
            Ok(())
        })
    }

    /// [`update_u64`] at region offset `off` (which must not cross a page: EINVAL).
    pub(crate) fn update_u64(&self, off: u64, op: impl Fn(u64) -> u64) -> Result<u64> {
        let mut at = None;
        self.runs(off, 8, |a, n| {
            at = (n == 8).then_some(a);
            Ok(())
        })?;
        // SAFETY: as in `copy_to`, for the 8 octets at `at`, which lie in one page.
        unsafe { update_u64(at.ok_or(EINVAL)?, op) }
    }
}
