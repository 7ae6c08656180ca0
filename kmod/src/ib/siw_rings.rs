// SPDX-License-Identifier: GPL-2.0

//! User processes' queues in siw's ABI (`include/uapi/rdma/siw-abi.h`), which rdma-core's siw
//! provider maps and fills without system calls: a CQ ring of `siw_cqe` followed by the arming
//! word, a send ring of `siw_sqe` (its doorbell: `post_send` with no requests) and a receive
//! ring of `siw_rqe` (no doorbell: the receive side takes entries when a message needs one).
//! An entry belongs to whoever its VALID flag says: set, the module's to read, and cleared
//! once taken; clear, user space's to write. Each entry is copied out before anything in it is
//! looked at, and the module's own indices are the only ones it follows (as CLAN's queue
//! discipline says: the shared segment is never trusted).

// Values from user space are computed on here: no unchecked arithmetic (docs/security.md,
// "Arithmetic").
#![deny(clippy::arithmetic_side_effects)]

use crate::cq::Overrun;
use crate::ffi;
use crate::mr::Domain;
use crate::qp::{PostedRecv, RecvSource};
use crate::ring::SharedRing;
use crate::sync::{new_spinlock_bh, SpinLockBh};
use crate::verbs::{Completion, CompletionOp, Inline, InlineBytes, SendOp, SendWr, Sge, Status, MAX_SGE};
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::types::ForeignOwnable;

const SQE: usize = ffi::IWARP_SIW_SQE_SIZE as usize;
const RQE: usize = ffi::IWARP_SIW_RQE_SIZE as usize;
const CQE: usize = ffi::IWARP_SIW_CQE_SIZE as usize;
/// Where an entry's `flags` word lies (flags in its low octets, then `num_sge` and `opcode`
/// in a work request; `opcode` and `status` in a completion).
const FLAGS: usize = 8;
/// Where a work request's entries begin (send: after `rkey` and `raddr`).
const SQE_SGES: usize = 24;
const RQE_SGES: usize = 16;
/// Inline data of a send request: from its second entry on, its length in the first's.
const SQE_INLINE: usize = SQE_SGES + 16;

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..).and_then(|b| b.first_chunk::<4>()).map_or(0, |b| u32::from_le_bytes(*b))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..).and_then(|b| b.first_chunk::<8>()).map_or(0, |b| u64::from_le_bytes(*b))
}

/// The first `n` entries of a work request whose entries begin at `at`.
fn sges(b: &[u8], at: usize, n: usize) -> [Sge; MAX_SGE] {
    let mut sge = [Sge::default(); MAX_SGE];
    for (i, s) in sge.iter_mut().enumerate().take(n) {
        let e = at.saturating_add(i.saturating_mul(16));
        *s = Sge { addr: u64_at(b, e), length: u32_at(b, e.saturating_add(8)), lkey: u32_at(b, e.saturating_add(12)) };
    }
    sge
}

/// A ring of `entries` entries of `size` octets, and the module's index into it.
struct Ring {
    ring: Arc<SharedRing>,
    entries: u32,
    size: usize,
    next: u32,
}

impl Ring {
    fn new(entries: u32, size: usize, extra: usize) -> Result<Ring> {
        let bytes = (entries as usize).checked_mul(size).and_then(|b| b.checked_add(extra)).ok_or(EINVAL)?;
        Ok(Ring { ring: Arc::new(SharedRing::new(bytes)?, GFP_KERNEL_ACCOUNT)?, entries, size, next: 0 })
    }

    /// Where the next entry lies.
    fn at(&self) -> usize {
        (self.next.checked_rem(self.entries).unwrap_or(0) as usize).saturating_mul(self.size)
    }

    /// The next entry, copied into `copy`, if user space made it valid; it is user space's
    /// again, and the index moves on.
    fn take<'a>(&mut self, copy: &'a mut [u8; SQE]) -> Option<&'a [u8]> {
        let at = self.at();
        let word = self.ring.load(at.checked_add(FLAGS)?);
        if word & ffi::IWARP_SIW_WQE_VALID == 0 {
            return None;
        }
        let copy = copy.get_mut(..self.size)?;
        self.ring.read(at, copy);
        self.ring.store(at.checked_add(FLAGS)?, word & !0xffff);
        self.next = self.next.wrapping_add(1);
        Some(copy)
    }
}

/// A ring for the RDMA core to map: a reference to it, handed over only once the object that
/// has the ring is made (until then, dropping it is all that failing takes).
pub(super) struct Mapping(Arc<SharedRing>);

impl Mapping {
    /// What the shim maps; its `rust` reference is dropped through `ring_put`.
    pub(super) fn into_ffi(self) -> ffi::iwarp_mapped_ring {
        let (addr, bytes) = (self.0.as_ptr().cast(), self.0.len());
        ffi::iwarp_mapped_ring { rust: self.0.into_foreign().cast(), addr, bytes }
    }
}

fn mapped(ring: &Arc<SharedRing>) -> Mapping {
    Mapping(ring.clone())
}

/// A user CQ's ring.
pub(super) struct MappedCq {
    ring: Ring,
}

impl MappedCq {
    pub(super) fn new(entries: u32) -> Result<MappedCq> {
        Ok(MappedCq { ring: Ring::new(entries, CQE, ffi::IWARP_SIW_CQ_CTRL_SIZE as usize)? })
    }

    /// The ring for the RDMA core to map (it holds a reference until unmapped and removed).
    pub(super) fn mapping(&self) -> Mapping {
        mapped(&self.ring.ring)
    }

    /// Writes `c` of QP `qpn` where user space polls next; whether user space armed the CQ
    /// for it (its arming is used up). Overrun if user space has not polled that slot yet.
    pub(super) fn push(&mut self, c: &Completion, qpn: u32) -> Result<bool, Overrun> {
        let r = &mut self.ring;
        let at = r.at();
        let flags_at = at.checked_add(FLAGS).ok_or(Overrun)?;
        if r.ring.load(flags_at) & 0xff != 0 {
            return Err(Overrun);
        }
        let (opcode, status) = (cqe_opcode(c.op), cqe_status(c.status));
        let mut tail = [0u8; CQE - FLAGS - 4];
        tail[..4].copy_from_slice(&c.byte_len.to_le_bytes());
        tail[4..12].copy_from_slice(&u64::from(c.invalidated.unwrap_or(0)).to_le_bytes());
        tail[12..20].copy_from_slice(&u64::from(qpn).to_le_bytes());
        r.ring.write(at, &c.wr_id.to_le_bytes());
        r.ring.write(flags_at.checked_add(4).ok_or(Overrun)?, &tail);
        // Last, with release: the entry is whole before user space sees it valid.
        r.ring.store(flags_at, ffi::IWARP_SIW_WQE_VALID | opcode << 8 | status << 16);
        r.next = r.next.wrapping_add(1);
        let ctrl = (r.entries as usize).saturating_mul(CQE);
        let armed = r.ring.load(ctrl);
        let wanted = armed & ffi::IWARP_SIW_NOTIFY_NEXT_COMPLETION != 0
            || (armed & ffi::IWARP_SIW_NOTIFY_SOLICITED != 0 && (c.solicited || c.status != Status::Success));
        // Only if user space did not arm it anew meanwhile: then its new arming stands.
        Ok(wanted && r.ring.replace(ctrl, armed, ffi::IWARP_SIW_NOTIFY_NOT))
    }
}

fn cqe_opcode(op: CompletionOp) -> u32 {
    match op {
        CompletionOp::Send => ffi::IWARP_SIW_OP_SEND,
        CompletionOp::RdmaWrite => ffi::IWARP_SIW_OP_WRITE,
        CompletionOp::RdmaRead => ffi::IWARP_SIW_OP_READ,
        CompletionOp::Recv => ffi::IWARP_SIW_OP_RECEIVE,
        CompletionOp::FetchAdd => ffi::IWARP_SIW_OP_FETCH_AND_ADD,
        CompletionOp::CompareSwap => ffi::IWARP_SIW_OP_COMP_AND_SWAP,
        CompletionOp::LocalInvalidate => ffi::IWARP_SIW_OP_INVAL_STAG,
        CompletionOp::FastRegister => ffi::IWARP_SIW_OP_REG_MR,
    }
}

fn cqe_status(s: Status) -> u32 {
    match s {
        Status::Success => ffi::IWARP_SIW_WC_SUCCESS,
        Status::LocalProtection => ffi::IWARP_SIW_WC_LOC_PROT_ERR,
        Status::Flushed => ffi::IWARP_SIW_WC_WR_FLUSH_ERR,
        Status::Fatal => ffi::IWARP_SIW_WC_GENERAL_ERR,
    }
}

/// A send request taken from the ring: the engine's, or one it may not run (an opcode user
/// space may not ask for, too many entries or inline octets), which completes in error with
/// the op it names.
pub(super) enum TakenSend {
    Run { wr: SendWr, fence: bool },
    Refused { wr_id: u64, op: CompletionOp },
}

/// A user QP's send ring.
pub(super) struct SendRing {
    ring: Ring,
}

impl SendRing {
    pub(super) fn new(entries: u32) -> Result<SendRing> {
        Ok(SendRing { ring: Ring::new(entries, SQE, 0)? })
    }

    pub(super) fn mapping(&self) -> Mapping {
        mapped(&self.ring.ring)
    }

    /// The next request user space posted, if any. Every request completes when `sig_all`.
    pub(super) fn take(&mut self, sig_all: bool, max_sge: u32, max_inline: u32) -> Option<TakenSend> {
        let mut copy = [0u8; SQE];
        let e = self.ring.take(&mut copy)?;
        let wr_id = u64_at(e, 0);
        let word = u32_at(e, FLAGS);
        let (flags, num_sge, opcode) = (word & 0xffff, (word >> 16) & 0xff, word >> 24);
        let (rkey, remote_addr) = (u32_at(e, 12), u64_at(e, 16));
        let (op, done) = match opcode {
            ffi::IWARP_SIW_OP_WRITE => (Some(SendOp::Write { rkey, remote_addr, imm: None }), CompletionOp::RdmaWrite),
            ffi::IWARP_SIW_OP_READ => (Some(SendOp::Read { rkey, remote_addr, invalidate: 0 }), CompletionOp::RdmaRead),
            ffi::IWARP_SIW_OP_SEND => (Some(SendOp::Send { invalidate: None }), CompletionOp::Send),
            ffi::IWARP_SIW_OP_SEND_REMOTE_INV => (Some(SendOp::Send { invalidate: Some(rkey) }), CompletionOp::Send),
            _ => (None, CompletionOp::Send),
        };
        let refused = TakenSend::Refused { wr_id, op: done };
        let Some(op) = op else { return Some(refused) };
        let (inline, sge, num_sge) = if flags & ffi::IWARP_SIW_WQE_INLINE != 0 {
            let len = u32_at(e, SQE_SGES + 8) as usize;
            let data = match e.get(SQE_INLINE..).and_then(|d| d.get(..len)) {
                Some(d) => d,
                None => return Some(refused),
            };
            let Ok(bytes) = InlineBytes::gather(core::iter::once(len), max_inline as usize, |_, dst| {
                dst.copy_from_slice(data);
                Ok(())
            }) else {
                return Some(refused);
            };
            (Inline::Kernel(bytes), [Sge::default(); MAX_SGE], 0)
        } else {
            if num_sge > max_sge || num_sge as usize > MAX_SGE {
                return Some(refused);
            }
            (Inline::No, sges(e, SQE_SGES, num_sge as usize), num_sge)
        };
        let wr = SendWr {
            wr_id,
            op,
            sge,
            num_sge,
            signaled: sig_all || flags & ffi::IWARP_SIW_WQE_SIGNALLED != 0,
            solicited: flags & ffi::IWARP_SIW_WQE_SOLICITED != 0,
            inline,
        };
        Some(TakenSend::Run { wr, fence: flags & ffi::IWARP_SIW_WQE_READ_FENCE != 0 })
    }
}

/// A user QP's receive ring: the receive side takes its entries (under the QP's receive lock).
#[pin_data]
pub(super) struct RecvRing {
    #[pin]
    ring: SpinLockBh<Ring>,
}

impl RecvRing {
    pub(super) fn new(entries: u32) -> Result<Arc<RecvRing>> {
        let ring = Ring::new(entries, RQE, 0)?;
        Arc::pin_init(pin_init!(RecvRing { ring <- new_spinlock_bh!(ring, "RecvRing::ring") }), GFP_KERNEL)
    }

    pub(super) fn mapping(&self) -> Mapping {
        mapped(&self.ring.lock().ring)
    }
}

impl RecvSource for RecvRing {
    fn take(&self, mrs: &Domain<'_>, max_sge: u32) -> Option<PostedRecv> {
        let mut copy = [0u8; SQE];
        let e = self.ring.lock().take(&mut copy)?;
        let wr_id = u64_at(e, 0);
        let num_sge = (u32_at(e, FLAGS) >> 16) & 0xff;
        Some(PostedRecv::checked(wr_id, &sges(e, RQE_SGES, num_sge as usize), num_sge, max_sge, mrs))
    }

    fn take_rest(&self, flush: &mut dyn FnMut(u64)) {
        let mut ring = self.ring.lock();
        let mut copy = [0u8; SQE];
        for _ in 0..ring.entries {
            let Some(e) = ring.take(&mut copy) else { return };
            flush(u64_at(e, 0));
        }
    }
}
