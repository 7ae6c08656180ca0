// SPDX-License-Identifier: GPL-2.0

//! The payload of one outgoing message as page fragments. From [`ZERO_COPY_MIN`] octets on (unless
//! the QP was connected with `COPY_SEND`) it references the registered pages themselves, an
//! application's pinned pages or a kernel consumer's: zero copy, TCP sends straight from that
//! memory, so the work request completes only once TCP has the peer's acknowledgement
//! (`unacked.rs`). Smaller payloads are copied, which costs less than
//! referencing pages and lets their work requests complete at once: the smallest into the
//! message itself, the rest into pages.

use crate::frags::{Arena, PageFrag};
use crate::kernel_memory::{self, HeldPage};
use crate::mr::{Domain, Reach};
use crate::pinned::PinnedPages;
use crate::proto::tx::Payload;
use crate::verbs::{Sge, MAX_SGE};
use core::cell::Cell;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::uaccess::{UserPtr, UserSlice};

/// Payloads this long or longer are sent from the registered pages.
pub(super) const ZERO_COPY_MIN: u64 = 4096;

/// A piece of a registered region to send from, checked: where it is (pinned pages held, so
/// the region may be deregistered meanwhile, or kernel memory) and its length.
struct Source {
    reach: Reach,
    len: u64,
}

/// Where an outgoing payload comes from: each piece's pages, held from the lookup on, and where
/// the piece lies in them.
pub(super) struct Sources {
    parts: [Option<Source>; MAX_SGE],
    n: usize,
}

impl Sources {
    /// The pieces `sges` name in regions of `mrs`, with `need` rights; EINVAL if any is not
    /// allowed. Empty entries name nothing (their keys are not looked at).
    pub(super) fn resolve(sges: &[Sge], mrs: &Domain<'_>, need: u32) -> Result<Sources> {
        let mut src = Sources { parts: core::array::from_fn(|_| None), n: 0 };
        for s in sges.iter().filter(|s| s.length != 0) {
            let slot = src.parts.get_mut(src.n).ok_or(EINVAL)?;
            let reach = mrs.reach(s.lkey, s.addr, u64::from(s.length), need).map_err(|_| EINVAL)?;
            *slot = Some(Source { reach, len: u64::from(s.length) });
            src.n += 1;
        }
        Ok(src)
    }

    /// Whether some piece lies in a fast registration's pages, which their consumer may free
    /// as soon as the region is invalidated.
    pub(super) fn names_listed(&self) -> bool {
        self.parts[..self.n].iter().flatten().any(|s| matches!(s.reach, Reach::Listed { .. }))
    }
}

/// Copied payloads up to this long are held in the message itself: a small message then costs
/// no allocation until it is framed, and its octets join its header in the send side's page, so
/// that TCP takes header and payload as one fragment.
const SMALL_MAX: usize = 64;

pub(super) struct OutPayload {
    len: u64,
    octets: Octets,
}

enum Octets {
    /// A copy of at most [`SMALL_MAX`] octets, `filled` of them written so far.
    Small {
        bytes: [u8; SMALL_MAX],
        filled: usize,
    },
    Frags(Frags),
}

/// The payload as page fragments: the registered pages themselves, or copies in pages of its own.
struct Frags {
    list: KVec<PageFrag>,
    by_reference: bool,
    /// Keeps referenced pages pinned until TCP holds them (a region may be deregistered while
    /// its message is still being queued).
    pinned: KVec<Arc<PinnedPages>>,
    /// Keeps referenced kernel pages until TCP holds them (a flushed request's consumer may
    /// free them meanwhile).
    held: KVec<HeldPage>,
    /// Holds copied octets.
    copies: Arena,
    /// FPDUs walk the payload forward: the fragment the last walk ended in, and its offset.
    cursor: Cell<(usize, u64)>,
}

impl OutPayload {
    /// No payload (Read Requests, Terminates).
    pub(super) fn empty() -> OutPayload {
        OutPayload::new(0, false)
    }

    /// A payload of `len` octets, still to be filled: referenced or copied.
    fn new(len: u64, by_reference: bool) -> OutPayload {
        let octets = if !by_reference && len <= SMALL_MAX as u64 {
            Octets::Small { bytes: [0; SMALL_MAX], filled: 0 }
        } else {
            Octets::Frags(Frags { list: KVec::new(), by_reference, pinned: KVec::new(), held: KVec::new(), copies: Arena::new(), cursor: Cell::new((0, 0)) })
        };
        OutPayload { len, octets }
    }

    /// The octets `sources` name: referenced from [`ZERO_COPY_MIN`] octets on unless `copy`
    /// says otherwise (or some lie in kernel memory that TCP may not send from: slab objects,
    /// memory outside the linear map), copied below that. Referenced, the request completes
    /// on acknowledgement, so its consumer reuses the memory only once the peer has it.
    pub(super) fn gather(sources: &Sources, mrs: &Domain<'_>, copy: bool) -> Result<OutPayload> {
        let parts = || sources.parts[..sources.n].iter().flatten();
        let len = parts().map(|s| s.len).sum();
        if !copy && len >= ZERO_COPY_MIN {
            // Failing (no memory for the list, allocated atomically while fast-registered
            // pages are held), it is copied instead.
            if let Ok(Some(p)) = OutPayload::referenced(sources, mrs, len) {
                return Ok(p);
            }
        }
        let mut p = OutPayload::new(len, false);
        for s in parts() {
            match &s.reach {
                Reach::Pinned(pages, off) => p.copy_in(s.len, |at, dst| pages.copy_to(off + at, dst))?,
                // SAFETY: the RDMA core's consumer named this memory through its DMA region for
                // this request, and keeps it until the request completes.
                Reach::Kernel(addr) => p.copy_in(s.len, |at, dst| unsafe { kernel_memory::copy_from(addr + at, dst) })?,
                Reach::Listed { stag, addr, need } => p.copy_in(s.len, |at, dst| mrs.copy_listed(*stag, addr + at, dst, *need).map_err(|_| EINVAL))?,
            }
        }
        Ok(p)
    }

    /// The `len` octets `sources` name, by reference: `None` if some kernel memory among them
    /// may not be sent so (not whole pages of the linear map that count references).
    fn referenced(sources: &Sources, mrs: &Domain<'_>, len: u64) -> Result<Option<OutPayload>> {
        let mut p = OutPayload::new(len, true);
        for s in sources.parts[..sources.n].iter().flatten() {
            let mut held = KVec::new();
            let whole = match &s.reach {
                Reach::Pinned(pages, off) => {
                    p.reference(pages, *off, s.len)?;
                    true
                }
                // SAFETY: as in `gather`.
                Reach::Kernel(addr) => unsafe { kernel_memory::hold(*addr, s.len, &mut held, GFP_KERNEL_ACCOUNT) }?,
                Reach::Listed { stag, addr, need } => {
                    // A fragment per page, about (a fast registration's pages may be smaller):
                    // while they are held, `held` can only grow atomically.
                    held.reserve((s.len / PAGE_SIZE as u64 + 2) as usize, GFP_KERNEL_ACCOUNT)?;
                    mrs.hold_listed(*stag, *addr, s.len, *need, &mut held).map_err(|_| EINVAL)?
                }
            };
            if !whole {
                return Ok(None);
            }
            let Octets::Frags(f) = &mut p.octets else { return Err(EINVAL) };
            f.held.reserve(held.len(), GFP_KERNEL_ACCOUNT)?;
            for (page, frag) in held {
                push(&mut f.list, frag)?;
                f.held.push(page, GFP_KERNEL_ACCOUNT)?;
            }
        }
        Ok(Some(p))
    }

    /// Appends `len` octets of `pages` from `off` on by reference, keeping them pinned.
    fn reference(&mut self, pages: &Arc<PinnedPages>, off: u64, len: u64) -> Result {
        let Octets::Frags(f) = &mut self.octets else { return Err(EINVAL) };
        pages.frags(off, len, |frag| push(&mut f.list, frag))?;
        f.pinned.push(pages.clone(), GFP_KERNEL_ACCOUNT)?;
        Ok(())
    }

    /// A copy of the caller's memory that `sges` name (inline data: lkeys unused); EFAULT if
    /// any of it is not readable.
    pub(super) fn from_user(sges: &[Sge]) -> Result<OutPayload> {
        let mut p = OutPayload::new(sges.iter().map(|s| u64::from(s.length)).sum(), false);
        for s in sges {
            p.copy_in(u64::from(s.length), |at, dst| {
                let from = s.addr.checked_add(at).ok_or(EFAULT)?;
                UserSlice::new(UserPtr::from_addr(from as usize), dst.len()).reader().read_slice(dst)
            })?;
        }
        Ok(p)
    }

    /// A copy of `bytes` (a kernel consumer's inline data, copied when it posted).
    pub(super) fn from_bytes(bytes: &[u8]) -> Result<OutPayload> {
        let mut p = OutPayload::new(bytes.len() as u64, false);
        p.copy_in(bytes.len() as u64, |at, dst| {
            let src = bytes.get(at as usize..).and_then(|b| b.get(..dst.len())).ok_or(EINVAL)?;
            dst.copy_from_slice(src);
            Ok(())
        })?;
        Ok(p)
    }

    /// Appends `len` copied octets (page by page unless small): `fill(offset, dst)` writes
    /// those at `offset`.
    fn copy_in(&mut self, len: u64, mut fill: impl FnMut(u64, &mut [u8]) -> Result) -> Result {
        let f = match &mut self.octets {
            Octets::Small { bytes, filled } => {
                let end = filled.checked_add(len as usize).ok_or(EINVAL)?;
                fill(0, bytes.get_mut(*filled..end).ok_or(EINVAL)?)?;
                *filled = end;
                return Ok(());
            }
            Octets::Frags(f) => f,
        };
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(f.copies.room() as u64) as usize;
            let (frag, dst) = f.copies.take(n)?;
            fill(done, dst)?;
            push(&mut f.list, frag)?;
            done += n as u64;
        }
        Ok(())
    }

    /// Octets in all.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Whether the payload is sent from the registered pages.
    pub(super) fn zero_copy(&self) -> bool {
        matches!(&self.octets, Octets::Frags(f) if f.by_reference)
    }

    /// Appends payload octets `[off, off + len)` to `frags`: the fragments holding them, or for
    /// a small payload a copy in `ctl`, where it continues the header just copied there.
    pub(super) fn append_to(&self, off: u64, len: u32, frags: &mut KVec<PageFrag>, ctl: &mut Arena) -> Result {
        match &self.octets {
            Octets::Small { bytes, .. } => push(frags, ctl.push(small_slice(bytes, off, len))?),
            Octets::Frags(f) => f.walk(off, u64::from(len), |frag| push(frags, frag)),
        }
    }
}

/// Octets `[off, off + len)` of a small payload (clamped to it).
fn small_slice(bytes: &[u8; SMALL_MAX], off: u64, len: u32) -> &[u8] {
    let from = (off as usize).min(SMALL_MAX);
    let to = from.saturating_add(len as usize).min(SMALL_MAX);
    &bytes[from..to]
}

impl Frags {
    /// Calls `f` with the fragments covering payload octets `[off, off + len)`, in order.
    fn walk(&self, off: u64, len: u64, mut f: impl FnMut(PageFrag) -> Result) -> Result {
        let (mut i, mut start) = self.cursor.get();
        if off < start {
            (i, start) = (0, 0);
        }
        let end = off + len;
        while i < self.list.len() && start < end {
            let frag = self.list[i];
            let frag_end = start + u64::from(frag.len());
            if frag_end > off {
                let from = off.max(start) - start;
                let to = end.min(frag_end) - start;
                f(frag.slice(from as u32, (to - from) as u32))?;
            }
            if frag_end > end {
                break;
            }
            i += 1;
            start = frag_end;
        }
        self.cursor.set((i, start));
        Ok(())
    }
}

impl Payload for OutPayload {
    fn for_each(&self, off: u64, len: u32, f: &mut dyn FnMut(&[u8])) {
        match &self.octets {
            Octets::Small { bytes, .. } => f(small_slice(bytes, off, len)),
            // The closure never fails.
            Octets::Frags(frags) => {
                let _ = frags.walk(off, u64::from(len), |frag| {
                    f(frag.bytes());
                    Ok(())
                });
            }
        }
    }
}

/// Appends `f` to `frags`, merged into the last fragment when it continues it.
pub(super) fn push(frags: &mut KVec<PageFrag>, f: PageFrag) -> Result {
    if let Some(last) = frags.last_mut() {
        if last.absorb(&f) {
            return Ok(());
        }
    }
    frags.push(f, GFP_KERNEL_ACCOUNT)?;
    Ok(())
}
