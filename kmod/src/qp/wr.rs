// SPDX-License-Identifier: GPL-2.0

//! Work requests as the module keeps them: copied in from the caller, checked against the
//! context's regions, then held in kernel-private queues (the caller's copy is never read
//! again).

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![deny(clippy::arithmetic_side_effects)]

use crate::mr::{Domain, Fault};
use crate::proto::atomic;
use crate::proto::rdmap::ReadRequest;
use crate::verbs::{access, CompletionOp, Sge, MAX_MESSAGE, MAX_SGE};
use kernel::prelude::*;

/// A validated scatter/gather list.
#[derive(Clone, Copy, Default)]
pub(crate) struct Sgl {
    sge: [Sge; MAX_SGE],
    n: usize,
    total: u32,
}

impl Sgl {
    /// Checks the first `n` of `sge` against `mrs` with `need` rights: EINVAL for a bad count,
    /// an unknown lkey or a range outside its region, EACCES for a missing right.
    pub(crate) fn new(sge: &[Sge; MAX_SGE], n: u32, mrs: &Domain<'_>, need: u32) -> Result<Sgl> {
        let n = n as usize;
        if n > MAX_SGE {
            return Err(EINVAL);
        }
        let mut total = 0u64;
        for s in &sge[..n] {
            mrs.check(s.lkey, s.addr, u64::from(s.length), need).map_err(|f| match f {
                Fault::Access => EACCES,
                _ => EINVAL,
            })?;
            // At most MAX_SGE lengths of 32 bits.
            total = total.saturating_add(u64::from(s.length));
        }
        if total > MAX_MESSAGE {
            return Err(EMSGSIZE);
        }
        Ok(Sgl { sge: *sge, n, total: total as u32 })
    }

    /// The single entry (RDMA Read sinks have exactly one).
    pub(crate) fn single(&self) -> Option<Sge> {
        (self.n == 1).then_some(self.sge[0])
    }

    /// The entries.
    pub(crate) fn entries(&self) -> &[Sge] {
        &self.sge[..self.n]
    }

    /// Calls `f(entry, offset in entry, octets)` for the pieces covering message range
    /// `[mo, mo + len)`; `Fault::Bounds` if the list is shorter.
    fn walk(&self, mo: u32, len: u32, mut f: impl FnMut(&Sge, u64, usize) -> Result<(), Fault>) -> Result<(), Fault> {
        if mo.checked_add(len).is_none_or(|end| end > self.total) {
            return Err(Fault::Bounds);
        }
        let (mut skip, mut left) = (u64::from(mo), u64::from(len));
        for s in &self.sge[..self.n] {
            if left == 0 {
                break;
            }
            let slen = u64::from(s.length);
            let Some(here) = slen.checked_sub(skip).filter(|&n| n > 0) else {
                skip = skip.saturating_sub(slen);
                continue;
            };
            let take = here.min(left);
            f(s, skip, take as usize)?;
            skip = 0;
            left = left.saturating_sub(take);
        }
        Ok(())
    }

    /// Whether message range `[mo, mo + len)` can be placed (regions still there and writable).
    pub(crate) fn check_place(&self, mrs: &Domain<'_>, mo: u32, len: u32) -> Result<(), Fault> {
        self.walk(mo, len, |s, off, n| mrs.check(s.lkey, s.addr.checked_add(off).ok_or(Fault::Bounds)?, n as u64, access::LOCAL_WRITE))
    }

    /// Places `src` at message offset `mo`.
    pub(crate) fn scatter(&self, mrs: &Domain<'_>, mo: u32, src: &[u8]) -> Result<(), Fault> {
        let mut rest = src;
        self.walk(mo, src.len() as u32, |s, off, n| {
            // The walk's pieces add up to `src.len()`.
            let (piece, after) = rest.split_at_checked(n).ok_or(Fault::Bounds)?;
            rest = after;
            mrs.write(s.lkey, s.addr.checked_add(off).ok_or(Fault::Bounds)?, piece, access::LOCAL_WRITE)
        })
    }
}

/// A posted receive.
#[derive(Clone, Copy, Default)]
pub(crate) struct PostedRecv {
    pub(crate) wr_id: u64,
    pub(crate) sgl: Sgl,
    /// Its entries failed their check when taken from a [`super::RecvSource`]: a message that
    /// needs it ends the QP, and it completes with a local protection error.
    pub(crate) bad: bool,
}

impl PostedRecv {
    /// A receive a [`super::RecvSource`] held: its first `num_sge` entries checked against
    /// `mrs` for local write access (at most `max_sge` of them), or marked `bad`.
    pub(crate) fn checked(wr_id: u64, sge: &[Sge; MAX_SGE], num_sge: u32, max_sge: u32, mrs: &Domain<'_>) -> PostedRecv {
        match (num_sge <= max_sge).then(|| Sgl::new(sge, num_sge, mrs, access::LOCAL_WRITE).ok()).flatten() {
            Some(sgl) => PostedRecv { wr_id, sgl, bad: false },
            None => PostedRecv { wr_id, sgl: Sgl::default(), bad: true },
        }
    }
}

/// An RDMA Read of ours the peer has not answered yet.
#[derive(Clone, Copy, Default)]
pub(crate) struct PendingRead {
    pub(crate) wr_id: u64,
    pub(crate) signaled: bool,
    /// Where the response goes.
    pub(crate) sink: Sge,
    /// A Read with Invalidate's STag of ours to invalidate once the data is in place (else 0).
    pub(crate) invalidate: u32,
}

/// An Atomic Request of ours the peer has not answered yet.
#[derive(Clone, Copy, Default)]
pub(crate) struct PendingAtomic {
    pub(crate) wr_id: u64,
    pub(crate) signaled: bool,
    /// The completion's opcode (Fetch-and-Add or Compare-and-Swap).
    pub(crate) opcode: CompletionOp,
    /// The request's identifier, which its response echoes.
    pub(crate) id: u32,
    /// Where the value before the operation goes (8 octets).
    pub(crate) sink: Sge,
}

/// What the peer asked of us on its Read Request queue (RFC 7306 puts Atomic Requests there
/// too), answered in the order asked.
#[derive(Clone, Copy)]
pub(crate) enum PeerRequest {
    /// A Read to serve from our memory.
    Read(ReadRequest),
    /// An atomic operation, carried out on arrival: its response.
    Atomic(atomic::Response),
}

impl Default for PeerRequest {
    fn default() -> Self {
        PeerRequest::Read(ReadRequest::default())
    }
}
