// SPDX-License-Identifier: GPL-2.0

//! A bounded first-in first-out queue whose slots are allocated (and charged) once, so pushing
//! and popping never allocate: queues the receive side and completion queues fill in softirq
//! context.

// Indices stay below the capacity: no unchecked arithmetic.
#![deny(clippy::arithmetic_side_effects)]

use crate::charged::ChargedVec;
use kernel::prelude::*;

/// A bounded first-in first-out queue in kernel memory, allocated once.
pub(crate) struct Fifo<T: Default> {
    slots: ChargedVec<T>,
    head: usize,
    len: usize,
}

impl<T: Default> Fifo<T> {
    pub(crate) fn new(cap: usize) -> Result<Fifo<T>> {
        let mut slots = ChargedVec::with_capacity(cap, GFP_KERNEL_ACCOUNT)?;
        for _ in 0..cap {
            slots.push(T::default(), GFP_KERNEL_ACCOUNT)?;
        }
        Ok(Fifo { slots, head: 0, len: 0 })
    }

    /// The slot of the `i`-th oldest entry (`i` at most the capacity), without a division:
    /// `head` is below the capacity, so `head + i` is below twice it.
    fn slot(&self, i: usize) -> usize {
        let at = self.head.saturating_add(i);
        at.checked_sub(self.slots.len()).unwrap_or(at)
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends; ENOMEM when full (as verbs reports a full work queue).
    pub(crate) fn push(&mut self, v: T) -> Result {
        if self.len == self.slots.len() {
            return Err(ENOMEM);
        }
        let i = self.slot(self.len);
        self.slots[i] = v;
        self.len = self.len.saturating_add(1);
        Ok(())
    }

    /// The `i`-th oldest entry.
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        (i < self.len).then(|| &self.slots[self.slot(i)])
    }

    /// The newest entry.
    pub(crate) fn last_mut(&mut self) -> Option<&mut T> {
        let i = self.slot(self.len.checked_sub(1)?);
        Some(&mut self.slots[i])
    }

    /// The oldest entry, mutably.
    pub(crate) fn front_mut(&mut self) -> Option<&mut T> {
        (self.len > 0).then(|| &mut self.slots[self.head])
    }

    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = core::mem::take(&mut self.slots[self.head]);
        self.head = self.slot(1);
        self.len = self.len.saturating_sub(1);
        Some(v)
    }
}
