// SPDX-License-Identifier: GPL-2.0

//! What TCP sends by reference: runs of octets in pages ([`PageFrag`], the kernel's
//! `struct bio_vec`), and an [`Arena`] of kernel pages for the octets the module makes itself
//! (headers, markers, pad, CRCs, payloads copied out of memory). TCP takes its own page
//! references when it queues a fragment (MSG_SPLICE_PAGES), so the arena lets go of a filled page
//! once the send call returns, and the page lives on exactly as long as TCP needs it.

use crate::ffi;
use kernel::bindings::{bio_vec, page};
use kernel::page::{Page, PAGE_SIZE};
use kernel::prelude::*;

/// Octets `[offset, offset + len)` of one page: a `struct bio_vec`, which TCP takes as it is.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub(crate) struct PageFrag(bio_vec);

// SAFETY: a fragment only names a page; the page may be read from any thread.
unsafe impl Send for PageFrag {}

impl PageFrag {
    /// A fragment of `page`.
    ///
    /// # Safety
    ///
    /// `page` must be a valid `struct page` that stays allocated for as long as the fragment (or
    /// any copy of it) is used, and `offset + len` must not exceed `PAGE_SIZE`.
    pub(crate) unsafe fn new(page: *mut page, offset: u32, len: u32) -> PageFrag {
        PageFrag(bio_vec { bv_page: page, bv_len: len, bv_offset: offset })
    }

    /// Octets in the fragment.
    pub(crate) fn len(&self) -> u32 {
        self.0.bv_len
    }

    /// The fragments as the kernel's array of `struct bio_vec` (same layout: transparent).
    pub(crate) fn as_bio_vecs(frags: &mut [PageFrag]) -> *mut bio_vec {
        frags.as_mut_ptr().cast()
    }

    /// The octets, to compute CRCs over. For pinned user pages they are what the application's
    /// buffer holds now: one that changes them before its work request completes breaks only
    /// its own message (the CRC no longer matches), as with an RNIC's DMA.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: by the constructor's contract the page is allocated while the fragment is
        // used and the range lies inside it; every page has a kernel address (no HIGHMEM, which
        // the shim refuses at build time).
        unsafe { core::slice::from_raw_parts(ffi::iwarp_shim_page_address(self.0.bv_page).cast::<u8>().add(self.0.bv_offset as usize), self.len() as usize) }
    }

    /// Octets `[from, from + len)` of this fragment (clamped to it).
    pub(crate) fn slice(&self, from: u32, len: u32) -> PageFrag {
        let from = from.min(self.len());
        PageFrag(bio_vec { bv_page: self.0.bv_page, bv_offset: self.0.bv_offset + from, bv_len: len.min(self.len() - from) })
    }

    /// Grows this fragment by `next` if `next` continues it in the same page.
    pub(crate) fn absorb(&mut self, next: &PageFrag) -> bool {
        let joins = next.0.bv_page == self.0.bv_page && next.0.bv_offset == self.0.bv_offset + self.0.bv_len;
        if joins {
            self.0.bv_len += next.0.bv_len;
        }
        joins
    }
}

/// Kernel pages, filled front to back, as the kernel's own `page_frag` caches: the octets handed
/// out are never written again, so the page being filled is kept across [`Arena::clear`] and the
/// next octets go behind what TCP may still be sending from it. A stream of small messages then
/// takes a new page only every few dozen messages, not one each.
pub(crate) struct Arena {
    /// Filled pages still held (until [`Arena::clear`]).
    full: KVec<Page>,
    /// The page being filled.
    current: Option<Page>,
    /// Octets used in `current`.
    used: usize,
}

impl Arena {
    pub(crate) fn new() -> Arena {
        Arena { full: KVec::new(), current: None, used: PAGE_SIZE }
    }

    /// Octets left in the current page (a whole page when a new one would be started).
    pub(crate) fn room(&self) -> usize {
        match PAGE_SIZE - self.used {
            0 => PAGE_SIZE,
            n => n,
        }
    }

    /// `len` octets (at most a page) of fresh space: its fragment and the octets to fill in.
    /// The fragment stays valid until [`Arena::clear`] or drop.
    pub(crate) fn take(&mut self, len: usize) -> Result<(PageFrag, &mut [u8])> {
        if len > PAGE_SIZE {
            return Err(EINVAL);
        }
        if self.current.is_none() || self.used + len > PAGE_SIZE {
            // Room for the filled page before anything else: failing once it left `current`
            // would free a page that unsent fragments of the batch may still name.
            self.full.reserve(1, GFP_KERNEL_ACCOUNT)?;
            let page = Page::alloc_page(GFP_KERNEL_ACCOUNT)?;
            if let Some(filled) = self.current.replace(page) {
                // Cannot fail: room was reserved above.
                let _ = self.full.push_within_capacity(filled);
            }
            self.used = 0;
        }
        let page = self.current.as_ref().ok_or(EINVAL)?.as_ptr();
        let at = self.used;
        self.used += len;
        // SAFETY: the page is owned by the arena until clear()/drop (or, once it is `current`,
        // until it is filled and a later clear()), and `at + len` is within it.
        let frag = unsafe { PageFrag::new(page, at as u32, len as u32) };
        // SAFETY: the page has a kernel address (no HIGHMEM); the range lies inside it and was
        // handed out to nobody else (the fill point only moves forward, across clear() too);
        // TCP reads it only after it is filled, because it is queued later.
        let bytes = unsafe { core::slice::from_raw_parts_mut(ffi::iwarp_shim_page_address(page).cast::<u8>().add(at), len) };
        Ok((frag, bytes))
    }

    /// A copy of `src` (at most a page).
    pub(crate) fn push(&mut self, src: &[u8]) -> Result<PageFrag> {
        let (frag, dst) = self.take(src.len())?;
        dst.copy_from_slice(src);
        Ok(frag)
    }

    /// Drops the arena's references to its filled pages (TCP keeps its own to what it queued);
    /// the page being filled stays, its fill point where it was.
    pub(crate) fn clear(&mut self) {
        self.full.clear();
    }
}
