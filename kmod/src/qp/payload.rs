// SPDX-License-Identifier: GPL-2.0

//! The payload of one outgoing message as page fragments. From [`ZERO_COPY_MIN`] octets on (unless
//! the QP was connected with `COPY_SEND`) it
//! references the registered pages themselves: zero copy, TCP sends straight from the
//! application's memory, so the work request completes only once TCP has the peer's
//! acknowledgement (`unacked.rs`). Smaller payloads are copied into fresh pages, which costs
//! less than referencing pages and lets their work requests complete at once.

use crate::frags::{Arena, PageFrag};
use crate::kernel_memory;
use crate::mr::{Domain, Reach};
use crate::pinned::PinnedPages;
use crate::proto::tx::Payload;
use crate::verbs::{Sge, MAX_SGE};
use core::cell::Cell;
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
}

pub(super) struct OutPayload {
    frags: KVec<PageFrag>,
    len: u64,
    by_reference: bool,
    /// Keeps referenced pages pinned until TCP holds them (a region may be deregistered while
    /// its message is still being queued).
    pinned: KVec<Arc<PinnedPages>>,
    /// Holds copied octets.
    copies: Arena,
    /// FPDUs walk the payload forward: the fragment the last walk ended in, and its offset.
    cursor: Cell<(usize, u64)>,
}

impl OutPayload {
    /// No payload (Read Requests, Terminates).
    pub(super) fn empty() -> OutPayload {
        OutPayload { frags: KVec::new(), len: 0, by_reference: false, pinned: KVec::new(), copies: Arena::new(), cursor: Cell::new((0, 0)) }
    }

    /// The octets `sources` name: referenced from [`ZERO_COPY_MIN`] octets on unless `copy`
    /// says otherwise (or some lie in kernel memory, which is always copied: its consumer may
    /// reuse it once the request completes), copied below that.
    pub(super) fn gather(sources: &Sources, mrs: &Domain<'_>, copy: bool) -> Result<OutPayload> {
        let mut p = OutPayload::empty();
        let parts = || sources.parts[..sources.n].iter().flatten();
        p.len = parts().map(|s| s.len).sum();
        let pinned = parts().all(|s| matches!(s.reach, Reach::Pinned(..)));
        p.by_reference = !copy && pinned && p.len >= ZERO_COPY_MIN;
        for s in parts() {
            match &s.reach {
                Reach::Pinned(pages, off) if p.by_reference => {
                    pages.frags(*off, s.len, |f| push(&mut p.frags, f))?;
                    p.pinned.push(pages.clone(), GFP_KERNEL_ACCOUNT)?;
                }
                Reach::Pinned(pages, off) => p.copy_in(s.len, |at, dst| pages.copy_to(off + at, dst))?,
                // SAFETY: the RDMA core's consumer named this memory through its DMA region for
                // this request, and keeps it until the request completes.
                Reach::Kernel(addr) => p.copy_in(s.len, |at, dst| unsafe { kernel_memory::copy_from(addr + at, dst) })?,
                Reach::Listed { stag, addr, need } => p.copy_in(s.len, |at, dst| mrs.copy_listed(*stag, addr + at, dst, *need).map_err(|_| EINVAL))?,
            }
        }
        Ok(p)
    }

    /// A copy of the caller's memory that `sges` name (inline data: lkeys unused); EFAULT if
    /// any of it is not readable.
    pub(super) fn from_user(sges: &[Sge]) -> Result<OutPayload> {
        let mut p = OutPayload::empty();
        for s in sges {
            p.copy_in(u64::from(s.length), |at, dst| {
                let from = s.addr.checked_add(at).ok_or(EFAULT)?;
                UserSlice::new(UserPtr::from_addr(from as usize), dst.len()).reader().read_slice(dst)
            })?;
            p.len += u64::from(s.length);
        }
        Ok(p)
    }

    /// A copy of `bytes` (a kernel consumer's inline data, copied when it posted).
    pub(super) fn from_bytes(bytes: &[u8]) -> Result<OutPayload> {
        let mut p = OutPayload::empty();
        p.copy_in(bytes.len() as u64, |at, dst| {
            let src = bytes.get(at as usize..).and_then(|b| b.get(..dst.len())).ok_or(EINVAL)?;
            dst.copy_from_slice(src);
            Ok(())
        })?;
        p.len = bytes.len() as u64;
        Ok(p)
    }

    /// Appends `len` copied octets, page by page: `fill(offset, dst)` writes those at `offset`.
    fn copy_in(&mut self, len: u64, mut fill: impl FnMut(u64, &mut [u8]) -> Result) -> Result {
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(self.copies.room() as u64) as usize;
            let (frag, dst) = self.copies.take(n)?;
            fill(done, dst)?;
            push(&mut self.frags, frag)?;
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
        self.by_reference
    }

    /// Calls `f` with the fragments covering payload octets `[off, off + len)`, in order.
    pub(super) fn frags(&self, off: u64, len: u64, mut f: impl FnMut(PageFrag) -> Result) -> Result {
        let (mut i, mut start) = self.cursor.get();
        if off < start {
            (i, start) = (0, 0);
        }
        let end = off + len;
        while i < self.frags.len() && start < end {
            let frag = self.frags[i];
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
        // The closure never fails.
        let _ = self.frags(off, u64::from(len), |frag| {
            f(frag.bytes());
            Ok(())
        });
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
