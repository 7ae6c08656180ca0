// SPDX-License-Identifier: GPL-2.0

//! Objects of a context found by handle: handle = slot index << 8 | key. The key of a slot
//! changes every time the slot is reused, so a stale handle never reaches a newer object (for
//! 255 reuses). Memory regions use the handle as their STag; a Fast Register gives a live
//! region a key of the caller's choosing, which does not change the keys reuse gives. Slot 0
//! holds nothing, so no handle is ever 0, whatever key a Fast Register gives.

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![deny(clippy::arithmetic_side_effects)]

use kernel::prelude::*;

struct Slot<T> {
    /// The key that names the object now (or named the last one, in an empty slot).
    key: u8,
    /// The key the slot's last insert gave: the next insert gives the one after it.
    issued: u8,
    obj: Option<T>,
}

/// At most `max` live objects of type `T`.
pub(crate) struct Handles<T> {
    slots: KVec<Slot<T>>,
    live: u32,
    max: u32,
}

impl<T> Handles<T> {
    pub(crate) fn new(max: u32) -> Self {
        Handles { slots: KVec::new(), live: 0, max }
    }

    /// Whether `max` objects live: inserting fails (ENOSPC).
    pub(crate) fn is_full(&self) -> bool {
        self.live >= self.max
    }

    /// Stores `obj`; returns its handle (never 0). ENOSPC when `max` objects live.
    pub(crate) fn insert(&mut self, obj: T) -> Result<u32> {
        let handle = self.next_handle()?;
        self.insert_as(handle, obj)?;
        Ok(handle)
    }

    /// Stores `obj` as `handle`, which [`Handles::next_handle`] returned while no insert ran
    /// since (objects removed meanwhile do not matter: the slot stays empty). EINVAL if the
    /// slot is taken or not there, ENOSPC when `max` objects live.
    pub(crate) fn insert_as(&mut self, handle: u32, obj: T) -> Result {
        if self.is_full() {
            return Err(ENOSPC);
        }
        let index = (handle >> 8) as usize;
        let slot = self.slots.get_mut(index).filter(|s| index != 0 && s.obj.is_none()).ok_or(EINVAL)?;
        (slot.key, slot.issued) = (handle as u8, handle as u8);
        slot.obj = Some(obj);
        // Below `max` (checked above), so no overflow.
        self.live = self.live.saturating_add(1);
        Ok(())
    }

    /// The handle the next [`Handles::insert`] will return (making room for it).
    pub(crate) fn next_handle(&mut self) -> Result<u32> {
        if self.is_full() {
            return Err(ENOSPC);
        }
        if self.slots.is_empty() {
            self.slots.push(Slot { key: 0, issued: 0, obj: None }, GFP_KERNEL_ACCOUNT)?;
        }
        let index = match self.slots.iter().skip(1).position(|s| s.obj.is_none()) {
            Some(i) => i.saturating_add(1),
            None => {
                self.slots.push(Slot { key: 0, issued: 0, obj: None }, GFP_KERNEL_ACCOUNT)?;
                self.slots.len().saturating_sub(1)
            }
        };
        // Inserts give keys 1 to 255 in turn, but never the key the slot's last object had at
        // its end: a Fast Register may have stepped it to the one next in turn (the RDMA
        // core's ib_inc_rkey does), and a peer may still hold it.
        let after = |k: u8| match k.wrapping_add(1) {
            0 => 1,
            k => k,
        };
        let slot = &self.slots[index];
        let key = match after(slot.issued) {
            k if k == slot.key => after(k),
            k => k,
        };
        Ok((index as u32) << 8 | u32::from(key))
    }

    /// The object `handle` names; EINVAL if none does.
    pub(crate) fn get(&self, handle: u32) -> Result<&T> {
        let slot = self.slots.get((handle >> 8) as usize).ok_or(EINVAL)?;
        slot.obj.as_ref().filter(|_| u32::from(slot.key) == handle & 0xff).ok_or(EINVAL)
    }

    /// The object `handle` names, mutably; EINVAL if none does.
    pub(crate) fn get_mut(&mut self, handle: u32) -> Result<&mut T> {
        let slot = self.slots.get_mut((handle >> 8) as usize).ok_or(EINVAL)?;
        let key = slot.key;
        slot.obj.as_mut().filter(|_| u32::from(key) == handle & 0xff).ok_or(EINVAL)
    }

    /// Gives the live object in `handle`'s slot the key of `handle`, whatever its key was:
    /// `handle` names it from then on, its old handle no longer does. Key 0 is a key like any
    /// other here (the RDMA core's consumers step keys through it; slot 0 holds nothing).
    pub(crate) fn rekey(&mut self, handle: u32) -> Result<&mut T> {
        let slot = self.slots.get_mut((handle >> 8) as usize).ok_or(EINVAL)?;
        if slot.obj.is_none() {
            return Err(EINVAL);
        }
        slot.key = handle as u8;
        slot.obj.as_mut().ok_or(EINVAL)
    }

    /// The handle that names the live object in `handle`'s slot now, whatever `handle`'s key;
    /// EINVAL if the slot is empty.
    pub(crate) fn current(&self, handle: u32) -> Result<u32> {
        let slot = self.slots.get((handle >> 8) as usize).filter(|s| s.obj.is_some()).ok_or(EINVAL)?;
        Ok(handle & !0xff | u32::from(slot.key))
    }

    /// The live object in `handle`'s slot, whatever its key; EINVAL if the slot is empty.
    pub(crate) fn in_slot_mut(&mut self, handle: u32) -> Result<&mut T> {
        self.slots.get_mut((handle >> 8) as usize).and_then(|s| s.obj.as_mut()).ok_or(EINVAL)
    }

    /// Every live object.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|s| s.obj.as_ref())
    }

    /// Removes and returns the object `handle` names; EINVAL if none does.
    pub(crate) fn remove(&mut self, handle: u32) -> Result<T> {
        let slot = self.slots.get_mut((handle >> 8) as usize).ok_or(EINVAL)?;
        if u32::from(slot.key) != handle & 0xff {
            return Err(EINVAL);
        }
        let obj = slot.obj.take().ok_or(EINVAL)?;
        self.live = self.live.saturating_sub(1);
        Ok(obj)
    }

    /// The slot capacity the next [`Handles::insert`] needs if it would have to allocate
    /// (every slot taken, the array full). A table used under a spinlock grows first, outside
    /// the lock, with [`Handles::room`] and [`Handles::grow`].
    pub(crate) fn room_wanted(&self) -> Option<usize> {
        // Slot 0 and the new one.
        let needed = if self.slots.is_empty() { 2 } else { 1 };
        let full =
            self.live < self.max && self.slots.iter().skip(1).all(|s| s.obj.is_some()) && self.slots.len().saturating_add(needed) > self.slots.capacity();
        full.then(|| self.slots.len().saturating_mul(2).clamp(16, (self.max as usize).saturating_add(1)))
    }

    /// Room for `capacity` slots, allocated where sleeping is allowed.
    pub(crate) fn room(capacity: usize) -> Result<Room<T>> {
        Ok(Room(KVec::with_capacity(capacity, GFP_KERNEL_ACCOUNT)?))
    }

    /// Moves the slots into `room` if it is larger (no allocation: usable under a spinlock).
    pub(crate) fn grow(&mut self, mut room: Room<T>) {
        if room.0.capacity() <= self.slots.len() {
            return;
        }
        for slot in self.slots.drain_all() {
            // Cannot fail: `room` has more capacity than there are slots.
            let _ = room.0.push_within_capacity(slot);
        }
        self.slots = room.0;
    }
}

/// Slot memory for a [`Handles`] to grow into.
pub(crate) struct Room<T>(KVec<Slot<T>>);
