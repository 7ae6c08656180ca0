// SPDX-License-Identifier: GPL-2.0

//! The work request rings of a QP: the application writes entries into the mapped send and
//! receive rings and rings the doorbell with its tails; the module copies each new entry into
//! private memory before looking at it, and keeps its own heads (as in CLAN, the shared copy is
//! never trusted). What an entry means is the front door's business: it names the entry type
//! and runs each one.

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![deny(clippy::arithmetic_side_effects)]

use super::QueuePair;
use crate::ring::SharedRing;
use kernel::mm::virt::VmaNew;
use kernel::prelude::*;
use kernel::transmute::FromBytes;

/// A ring of `entries` work requests of `entry_size` octets each.
pub(crate) struct WorkRing {
    ring: SharedRing,
    entries: u32,
    entry_size: usize,
}

/// Entries taken from a ring by one doorbell, and the errno of the one that failed (0 if none).
#[derive(Clone, Copy, Default)]
pub(crate) struct Taken {
    pub(crate) done: u32,
    pub(crate) error: u32,
}

impl WorkRing {
    /// Most octets one entry may have (it is copied through the stack).
    const MAX_ENTRY: usize = 256;

    pub(crate) fn new(entries: u32, entry_size: usize) -> Result<WorkRing> {
        if entry_size == 0 || entry_size > Self::MAX_ENTRY {
            return Err(EINVAL);
        }
        Ok(WorkRing { ring: SharedRing::new((entries as usize).checked_mul(entry_size).ok_or(EINVAL)?)?, entries, entry_size })
    }

    pub(crate) fn len(&self) -> usize {
        self.ring.len()
    }

    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        self.ring.mmap(vma)
    }

    /// A private copy of entry `n` (`T` of the ring's entry size: [`WorkRing::take`] checks).
    fn entry<T: FromBytes>(&self, n: u32) -> Option<T> {
        let mut raw = [0u8; Self::MAX_ENTRY];
        let raw = raw.get_mut(..self.entry_size)?;
        let at = (n.checked_rem(self.entries)? as usize).checked_mul(self.entry_size)?;
        self.ring.read(at, raw);
        T::from_bytes_copy(raw)
    }

    /// Takes entries `head..tail`, passing private copies to `run` in order; stops at the first
    /// that fails (the rest are dropped). EINVAL if `tail` is more than a ring ahead, or `T` is
    /// not the ring's entry.
    fn take<T: FromBytes>(&self, head: &mut u32, tail: u32, mut run: impl FnMut(&T) -> Result) -> Result<Taken> {
        let n = tail.wrapping_sub(*head);
        if n > self.entries || core::mem::size_of::<T>() != self.entry_size {
            return Err(EINVAL);
        }
        let mut taken = Taken::default();
        for _ in 0..n {
            let e: T = self.entry(*head).ok_or(EINVAL)?;
            *head = head.wrapping_add(1);
            if let Err(err) = run(&e) {
                *head = tail;
                taken.error = err.to_errno().unsigned_abs();
                return Ok(taken);
            }
            // At most `n`, a u32.
            taken.done = taken.done.saturating_add(1);
        }
        Ok(taken)
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

impl QueuePair {
    /// Runs what the application wrote to the rings up to the tails: receives first (so they
    /// are in place before anything we send can be answered), then sends. Both tails are
    /// checked (EINVAL if one is more than its ring ahead) before anything runs.
    pub(crate) fn take_posted<R: FromBytes, S: FromBytes>(
        &self,
        rq_tail: u32,
        sq_tail: u32,
        recv: impl FnMut(&R) -> Result,
        send: impl FnMut(&S) -> Result,
    ) -> Result<(Taken, Taken)> {
        let (sq_ring, rq_ring) = self.rings.as_ref().ok_or(EINVAL)?;
        let mut heads = self.heads.lock();
        let behind = |ring: &WorkRing, head: u32, tail: u32| tail.wrapping_sub(head) <= ring.entries;
        if !behind(rq_ring, heads.rq, rq_tail) || !behind(sq_ring, heads.sq, sq_tail) {
            return Err(EINVAL);
        }
        let rq = rq_ring.take(&mut heads.rq, rq_tail, recv)?;
        let sq = sq_ring.take(&mut heads.sq, sq_tail, send)?;
        Ok((rq, sq))
    }

    /// The send ring, for mmap (EINVAL for a QP without rings).
    pub(crate) fn send_ring(&self) -> Result<&WorkRing> {
        self.rings.as_ref().map(|r| &r.0).ok_or(EINVAL)
    }

    /// The receive ring, for mmap (EINVAL for a QP without rings).
    pub(crate) fn recv_ring(&self) -> Result<&WorkRing> {
        self.rings.as_ref().map(|r| &r.1).ok_or(EINVAL)
    }
}
