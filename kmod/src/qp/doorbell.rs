// SPDX-License-Identifier: GPL-2.0

//! The work request rings of a QP: the application writes entries into the mapped send and
//! receive rings and rings the doorbell with its tails; the module copies each new entry into
//! private memory before looking at it, and keeps its own heads (as in CLAN, the shared copy is
//! never trusted).

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![deny(clippy::arithmetic_side_effects)]

use super::QueuePair;
use crate::abi::{Doorbell, PostRecv, PostSend, POST_RECV_SIZE, POST_SEND_SIZE};
use crate::ring::SharedRing;
use kernel::mm::virt::VmaNew;
use kernel::prelude::*;
use kernel::transmute::FromBytes;

/// A ring of `entries` work requests of `SIZE` octets each, and the module's head.
pub(crate) struct WorkRing<const SIZE: usize> {
    ring: SharedRing,
    entries: u32,
}

impl<const SIZE: usize> WorkRing<SIZE> {
    pub(crate) fn new(entries: u32) -> Result<WorkRing<SIZE>> {
        Ok(WorkRing { ring: SharedRing::new((entries as usize).checked_mul(SIZE).ok_or(EINVAL)?)?, entries })
    }

    /// Entries the ring holds.
    pub(crate) fn entries(&self) -> u32 {
        self.entries
    }

    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }

    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        self.ring.mmap(vma)
    }

    /// A private copy of entry `n`.
    fn entry<T: FromBytes>(&self, n: u32) -> Option<T> {
        let mut raw = [0u8; SIZE];
        let at = (n.checked_rem(self.entries)? as usize).checked_mul(SIZE)?;
        self.ring.read(at, &mut raw);
        T::from_bytes_copy(&raw)
    }

    /// Takes entries `head..tail`, passing private copies to `run` in order; stops at the first
    /// that fails (the rest are dropped). Returns (taken, errno or 0). EINVAL if `tail` is more
    /// than a ring ahead.
    fn take<T: FromBytes>(&self, head: &mut u32, tail: u32, mut run: impl FnMut(&T) -> Result) -> Result<(u32, u32)> {
        let n = tail.wrapping_sub(*head);
        if n > self.entries {
            return Err(EINVAL);
        }
        let mut done = 0;
        for _ in 0..n {
            let e: T = self.entry(*head).ok_or(EINVAL)?;
            *head = head.wrapping_add(1);
            if let Err(err) = run(&e) {
                *head = tail;
                return Ok((done, err.to_errno().unsigned_abs()));
            }
            // At most `n`, a u32.
            done = done.saturating_add(1);
        }
        Ok((done, 0))
    }
}

/// The module's heads of the two rings.
pub(crate) struct Heads {
    sq: u32,
    rq: u32,
}

impl Heads {
    pub(crate) fn new() -> Heads {
        Heads { sq: 0, rq: 0 }
    }
}

/// The send ring.
pub(crate) type SendRing = WorkRing<POST_SEND_SIZE>;
/// The receive ring.
pub(crate) type RecvRing = WorkRing<POST_RECV_SIZE>;

impl QueuePair {
    /// DOORBELL: receives first (so they are in place before anything we send can be answered),
    /// then sends.
    pub(crate) fn doorbell(&self, db: &mut Doorbell) -> Result {
        if db.sq_done != 0 || db.rq_done != 0 || db.sq_error != 0 || db.rq_error != 0 || db.reserved != 0 {
            return Err(EINVAL);
        }
        let mut heads = self.heads.lock();
        // Both tails are checked before anything runs.
        let behind = |ring_entries: u32, head: u32, tail: u32| tail.wrapping_sub(head) <= ring_entries;
        if !behind(self.rq_ring.entries, heads.rq, db.rq_tail) || !behind(self.sq_ring.entries, heads.sq, db.sq_tail) {
            return Err(EINVAL);
        }
        (db.rq_done, db.rq_error) = self.rq_ring.take(&mut heads.rq, db.rq_tail, |e: &PostRecv| self.post_recv(e))?;
        (db.sq_done, db.sq_error) = self.sq_ring.take(&mut heads.sq, db.sq_tail, |e: &PostSend| self.post_send(e))?;
        Ok(())
    }

    /// The send ring, for mmap.
    pub(crate) fn send_ring(&self) -> &SendRing {
        &self.sq_ring
    }

    /// The receive ring, for mmap.
    pub(crate) fn recv_ring(&self) -> &RecvRing {
        &self.rq_ring
    }
}
