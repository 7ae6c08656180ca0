// SPDX-License-Identifier: GPL-2.0

//! Memory regions: pinned user buffers a context registered (or, for the RDMA core's kernel
//! consumers, kernel memory: all of it, or pages a fast registration lists), found by STag (a handle of [`Handles`], so a stale STag never
//! reaches a newer region), each in a protection domain.
//! A QP reaches regions only through the [`Domain`] of its own PD: a region of another PD is
//! "not associated" with it, whoever names it. Addresses are the application's virtual
//! addresses, as in verbs (and as siw uses them for tagged offsets).

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![deny(clippy::arithmetic_side_effects)]

use crate::accesses::Accesses;
use crate::frags::PageFrag;
use crate::handles::Handles;
use crate::kernel_memory::{self, HeldPage, PageList};
use crate::pinned::PinnedPages;
use crate::sync::{BottomHalvesOff, SpinLockBh};
use crate::verbs::{access, MAX_MR, MAX_MR_SIZE, MAX_PD};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};

/// Registered regions of all contexts.
static REGIONS: AtomicU64 = AtomicU64::new(0);

/// The module-wide region count.
pub(crate) fn regions() -> u64 {
    REGIONS.load(Ordering::Relaxed)
}

/// Why a region refused an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No such region, or it was invalidated.
    InvalidStag,
    /// The range is not inside the region.
    Bounds,
    /// The region lacks the right.
    Access,
    /// The region belongs to another protection domain.
    OtherPd,
}

/// What a region's addresses name.
enum Memory {
    /// A user buffer's pages, pinned; shared with sends in progress from it, which keep it
    /// pinned past deregistration.
    Pinned(Arc<PinnedPages>),
    /// All kernel memory by kernel virtual address: the RDMA core's DMA region (`get_dma_mr`),
    /// with which a kernel consumer names its own buffers (under virtual DMA a DMA address is a
    /// kernel virtual one). The consumer owns the memory and keeps it while it is in use, as
    /// with any RNIC's DMA; the region is never invalidated.
    KernelVirtual,
    /// Kernel pages of a fast registration (`alloc_mr`): those the region covers now, and
    /// those `map_mr_sg` gave for its next Fast Register (which a consumer may map while the
    /// region is still valid, before invalidating it). Every copy into or out of them is a
    /// counted access (a segment's payload, or a page of a message being built), which an
    /// invalidation or deregistration waits out: the consumer may free the pages as soon as
    /// it completes.
    Listed { now: Option<Arc<PageList>>, next: Option<Arc<PageList>> },
}

impl Memory {
    /// The pages whose accesses are counted, held (all kernel memory is never invalidated).
    fn counted(&self) -> Option<Counted> {
        match self {
            Memory::Pinned(pages) => Some(Counted::Pinned(pages.clone())),
            Memory::Listed { now: Some(list), .. } => Some(Counted::Listed(list.clone())),
            Memory::KernelVirtual | Memory::Listed { now: None, .. } => None,
        }
    }

    /// The accesses in progress to the pages the region covers now.
    fn accesses(&self) -> Option<&Accesses> {
        match self {
            Memory::Pinned(pages) => Some(pages.accesses()),
            Memory::Listed { now: Some(list), .. } => Some(list.accesses()),
            Memory::KernelVirtual | Memory::Listed { now: None, .. } => None,
        }
    }
}

/// Pages an access or an invalidation holds while their region may change under it.
enum Counted {
    Pinned(Arc<PinnedPages>),
    Listed(Arc<PageList>),
}

impl Counted {
    fn accesses(&self) -> &Accesses {
        match self {
            Counted::Pinned(pages) => pages.accesses(),
            Counted::Listed(list) => list.accesses(),
        }
    }

    /// Drops the hold where sleeping is not allowed: see [`PinnedPages::let_go`].
    fn let_go(self) {
        if let Counted::Pinned(pages) = self {
            PinnedPages::let_go(pages);
        }
    }
}

/// Where an access in progress lands ([`Domain::accessing`]).
enum Access {
    /// All kernel memory (the DMA region), at this kernel virtual address.
    Kernel(u64),
    /// Counted pages, this many octets into them.
    Counted(Counted, u64),
}

/// What an access reaches, checked: pinned pages (held) and the offset in them, kernel memory
/// at a kernel virtual address, or a fast registration's kernel pages, each copy from them
/// checked and counted again by STag, address and rights ([`Domain::copy_listed`]).
pub(crate) enum Reach {
    Pinned(Arc<PinnedPages>, u64),
    Kernel(u64),
    Listed { stag: u32, addr: u64, need: u32 },
}

/// One registered buffer.
struct MemoryRegion {
    pd: u32,
    memory: Memory,
    /// Where the buffer starts.
    base: u64,
    /// The buffer's length.
    pinned: u64,
    /// The range the region covers now: all of the buffer when registered, any part of it
    /// after a Fast Register.
    va: u64,
    len: u64,
    rights: u32,
    /// Cleared by a Local Invalidate, a Read with Invalidate or a peer's Send with
    /// Invalidate; set again by a Fast Register.
    valid: bool,
}

impl MemoryRegion {
    /// Offset in the pinned buffer of `[addr, addr + len)`, if `need` rights are granted.
    fn offset(&self, addr: u64, len: u64, need: u32) -> Result<u64, Fault> {
        if !self.valid {
            return Err(Fault::InvalidStag);
        }
        let off = addr.checked_sub(self.va).ok_or(Fault::Bounds)?;
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Fault::Bounds);
        }
        if self.rights & need != need {
            return Err(Fault::Access);
        }
        // `addr` is at least `va`, which lies in the pinned buffer from `base` on.
        addr.checked_sub(self.base).ok_or(Fault::Bounds)
    }
}

/// Whether `[addr, addr + len)` is a range in `[base, base + size)` (a range a Fast Register
/// may give).
fn within(base: u64, size: u64, addr: u64, len: u64) -> bool {
    addr >= base && len > 0 && addr.checked_add(len).zip(base.checked_add(size)).is_some_and(|(end, limit)| end <= limit)
}

/// Whether `rights` are access bits a region may have (remote writes need local ones, as in
/// verbs).
fn rights_allowed(rights: u32) -> bool {
    rights & !access::ALL == 0 && (rights & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) == 0 || rights & access::LOCAL_WRITE != 0)
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        REGIONS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A context's protection domains and regions, by handle and STag.
pub(crate) struct MrTable {
    pds: Handles<()>,
    regions: Handles<MemoryRegion>,
}

impl MrTable {
    pub(crate) fn new() -> MrTable {
        MrTable { pds: Handles::new(MAX_PD), regions: Handles::new(MAX_MR) }
    }

    /// A new protection domain.
    pub(crate) fn alloc_pd(&mut self) -> Result<u32> {
        self.pds.insert(())
    }

    /// Whether `pd` names a protection domain.
    pub(crate) fn has_pd(&self, pd: u32) -> bool {
        self.pds.get(pd).is_ok()
    }

    /// Frees `pd`: EINVAL if unknown, EBUSY while a region is in it (the caller checks QPs).
    pub(crate) fn dealloc_pd(&mut self, pd: u32) -> Result {
        self.pds.get(pd)?;
        if self.regions.values().any(|r| r.pd == pd) {
            return Err(EBUSY);
        }
        self.pds.remove(pd)
    }

    /// Whether `[addr, addr + length)` may be registered in `pd` with `rights` (EINVAL if not;
    /// ENOSPC if the table is full, found before anything is pinned: pages pinned for nothing
    /// would be let go under the table's lock, where unpinning must not sleep).
    pub(crate) fn check_register(&self, pd: u32, addr: u64, length: u64, rights: u32) -> Result {
        if self.regions.is_full() {
            return Err(ENOSPC);
        }
        let valid = self.has_pd(pd) && length > 0 && length <= MAX_MR_SIZE && addr.checked_add(length).is_some() && rights_allowed(rights);
        if valid {
            Ok(())
        } else {
            Err(EINVAL)
        }
    }

    /// Registers `pages` (pinned for `[addr, addr + length)`, which [`MrTable::check_register`]
    /// allowed) in `pd` with `rights`; returns its STag. Allocates nothing if the table has room
    /// ([`MrTable::reserve`]).
    pub(crate) fn register(&mut self, pd: u32, pages: Arc<PinnedPages>, addr: u64, length: u64, rights: u32) -> Result<u32> {
        if !self.has_pd(pd) {
            return Err(EINVAL);
        }
        REGIONS.fetch_add(1, Ordering::Relaxed);
        self.regions.insert(MemoryRegion { pd, memory: Memory::Pinned(pages), base: addr, pinned: length, va: addr, len: length, rights, valid: true })
    }

    /// Registers the calling process's buffer `[start, start + length)` in `pd` with `rights`,
    /// its octets named from `iova` on (verbs' address of the region; the buffer's own address
    /// unless the caller chose another); returns its STag. Checks, then pins outside every
    /// lock: faulting the pages in may take as long as their file system (a FUSE daemon that
    /// never answers), and `lifecycle` (the front door's lock that keeps domains from going)
    /// is taken by every QP's creation. Then checks again and inserts under `lifecycle`; pages
    /// pinned for nothing are let go here, outside the table's lock.
    pub(crate) fn register_user(table: &SpinLockBh<MrTable>, lifecycle: &Mutex<()>, pd: u32, start: u64, iova: u64, length: u64, rights: u32) -> Result<u32> {
        table.lock().check_register(pd, iova, length, rights)?;
        let writable = rights & (access::LOCAL_WRITE | access::REMOTE_WRITE) != 0;
        let pages = Arc::new(PinnedPages::pin(start, length, writable)?, GFP_KERNEL_ACCOUNT)?;
        let _lifecycle = lifecycle.lock();
        table.lock().check_register(pd, iova, length, rights)?;
        MrTable::reserve(table)?;
        table.lock().register(pd, pages, iova, length, rights)
    }

    /// Registers all kernel memory in `pd` with `rights` (the RDMA core's DMA region); returns
    /// its STag. EINVAL for an unknown domain or rights a region may not have. Allocates
    /// nothing if the table has room ([`MrTable::reserve`]).
    pub(crate) fn register_kernel(&mut self, pd: u32, rights: u32) -> Result<u32> {
        if !self.has_pd(pd) || !rights_allowed(rights) {
            return Err(EINVAL);
        }
        REGIONS.fetch_add(1, Ordering::Relaxed);
        self.regions.insert(MemoryRegion { pd, memory: Memory::KernelVirtual, base: 0, pinned: u64::MAX, va: 0, len: u64::MAX, rights, valid: true })
    }

    /// A region for fast registrations of kernel pages (`alloc_mr`) in `pd`, invalid until
    /// pages are mapped ([`MrTable::map_pages`]) and registered; returns its STag. Allocates
    /// nothing if the table has room ([`MrTable::reserve`]).
    pub(crate) fn register_listed(&mut self, pd: u32) -> Result<u32> {
        if !self.has_pd(pd) {
            return Err(EINVAL);
        }
        REGIONS.fetch_add(1, Ordering::Relaxed);
        let memory = Memory::Listed { now: None, next: None };
        self.regions.insert(MemoryRegion { pd, memory, base: 0, pinned: 0, va: 0, len: 0, rights: 0, valid: false })
    }

    /// `map_mr_sg`: `list` is what the next Fast Register of the region in `stag`'s slot (a
    /// region of [`MrTable::register_listed`]) covers. Returns the list it replaces, to be
    /// dropped outside the table's lock.
    pub(crate) fn map_pages(&mut self, stag: u32, list: Arc<PageList>) -> Result<Option<Arc<PageList>>> {
        match &mut self.regions.in_slot_mut(stag)?.memory {
            Memory::Listed { next, .. } => Ok(next.replace(list)),
            _ => Err(EINVAL),
        }
    }

    /// The STag that names the region in `stag`'s slot now, whatever `stag`'s key.
    pub(crate) fn current_stag(&self, stag: u32) -> Result<u32> {
        self.regions.current(stag)
    }

    /// Removes the region `stag` names (the RDMA core's consumers: [`MrTable::current_stag`]
    /// first); dropping what this returns unpins its pages (done by the caller, outside the
    /// table's lock).
    pub(crate) fn deregister(&mut self, stag: u32) -> Result<Deregistered> {
        self.regions.remove(stag).map(Deregistered)
    }

    /// Makes room for one more domain and one more region, allocating outside `table`'s lock
    /// (which its users take in softirq context). The caller serializes registrations, so the
    /// room is still there when it inserts.
    pub(crate) fn reserve(table: &SpinLockBh<MrTable>) -> Result {
        let wanted = {
            let t = table.lock();
            (t.pds.room_wanted(), t.regions.room_wanted())
        };
        if let Some(n) = wanted.0 {
            let room = Handles::room(n)?;
            table.lock().pds.grow(room);
        }
        if let Some(n) = wanted.1 {
            let room = Handles::room(n)?;
            table.lock().regions.grow(room);
        }
        Ok(())
    }
}

/// A region taken out of its table: dropping it waits for accesses to it in progress, then
/// unpins its pages (unless sends in progress still hold them).
pub(crate) struct Deregistered(MemoryRegion);

impl Drop for Deregistered {
    fn drop(&mut self) {
        if let Some(accesses) = self.0.memory.accesses() {
            accesses.wait_none();
        }
    }
}

/// The regions one protection domain reaches. Each access holds the context's table only to
/// look its region up: copies run outside it, on pages the access holds and counts (a region
/// deregistered meanwhile is unpinned when its last access ends, by a work item: accesses run
/// with bottom halves off, and unpinning may sleep), so the QPs of one context place in
/// parallel.
pub(crate) struct Domain<'a> {
    table: &'a SpinLockBh<MrTable>,
    pd: u32,
}

impl<'a> Domain<'a> {
    /// The regions of `table` in protection domain `pd`.
    pub(crate) fn new(table: &'a SpinLockBh<MrTable>, pd: u32) -> Self {
        Domain { table, pd }
    }

    /// Runs `f` on the region `stag` names, if it is in this domain, holding the table.
    fn with<R>(&self, stag: u32, f: impl FnOnce(&mut MemoryRegion) -> Result<R, Fault>) -> Result<R, Fault> {
        let mut table = self.table.lock();
        let mr = table.regions.get_mut(stag).map_err(|_| Fault::InvalidStag)?;
        if mr.pd != self.pd {
            return Err(Fault::OtherPd);
        }
        f(mr)
    }

    /// Whether `len` octets at `addr` of region `stag` may be accessed with `need` rights.
    pub(crate) fn check(&self, stag: u32, addr: u64, len: u64, need: u32) -> Result<(), Fault> {
        self.with(stag, |mr| mr.offset(addr, len, need).map(drop))
    }

    /// What `[addr, addr + len)` of region `stag` is (`need` rights required): to send from.
    pub(crate) fn reach(&self, stag: u32, addr: u64, len: u64, need: u32) -> Result<Reach, Fault> {
        self.with(stag, |mr| {
            let off = mr.offset(addr, len, need)?;
            Ok(match &mr.memory {
                Memory::Pinned(pages) => Reach::Pinned(pages.clone(), off),
                Memory::KernelVirtual => Reach::Kernel(off),
                Memory::Listed { .. } => Reach::Listed { stag, addr, need },
            })
        })
    }

    /// Copies `dst.len()` octets at `addr` of region `stag` (fast-registered kernel pages,
    /// `need` rights required) into `dst`: see [`Memory::Listed`].
    pub(crate) fn copy_listed(&self, stag: u32, addr: u64, dst: &mut [u8], need: u32) -> Result<(), Fault> {
        // The send side runs in process context: the receive side's softirq, which may
        // invalidate the region and wait for this, must not interrupt it on this CPU.
        let _bh = BottomHalvesOff::new();
        self.accessing(stag, addr, dst.len() as u64, need, |access| match access {
            Access::Counted(Counted::Listed(list), at) => list.copy_to(*at, dst),
            _ => Err(EINVAL),
        })
    }

    /// Holds the pages of `len` octets at `addr` of region `stag` (fast-registered kernel
    /// pages, `need` rights required) into `out`, to send from by reference: false if some
    /// may not be ([`kernel_memory::hold`]).
    pub(crate) fn hold_listed(&self, stag: u32, addr: u64, len: u64, need: u32, out: &mut KVec<(HeldPage, PageFrag)>) -> Result<bool, Fault> {
        // As in `copy_listed`; so `out` only grows atomically.
        let _bh = BottomHalvesOff::new();
        self.accessing(stag, addr, len, need, |access| match access {
            Access::Counted(Counted::Listed(list), at) => list.hold(*at, len, out, GFP_ATOMIC),
            _ => Err(EINVAL),
        })
    }

    /// Runs `f` on where `len` octets at `addr` of region `stag` lie (`need` rights required),
    /// outside the table's lock: the access is counted until `f` returns, and invalidating or
    /// deregistering the region waits for that (spinning: `f` must not sleep, and runs with
    /// bottom halves off).
    fn accessing<R>(&self, stag: u32, addr: u64, len: u64, need: u32, f: impl FnOnce(&Access) -> Result<R>) -> Result<R, Fault> {
        let access = self.with(stag, |mr| {
            let at = mr.offset(addr, len, need)?;
            if let Memory::KernelVirtual = mr.memory {
                return Ok(Access::Kernel(at));
            }
            // A fast registration without pages is never valid.
            let pages = mr.memory.counted().ok_or(Fault::InvalidStag)?;
            pages.accesses().begin();
            Ok(Access::Counted(pages, at))
        })?;
        let r = f(&access).map_err(|_| Fault::Access);
        if let Access::Counted(pages, _) = access {
            pages.accesses().end();
            // A deregistration meanwhile leaves the unpinning to a work item.
            pages.let_go();
        }
        r
    }

    /// Places `src` into region `stag` at `addr` (`need` rights required, which must include a
    /// write right).
    pub(crate) fn write(&self, stag: u32, addr: u64, src: &[u8], need: u32) -> Result<(), Fault> {
        self.accessing(stag, addr, src.len() as u64, need, |access| match access {
            // SAFETY: `at` is what the RDMA core's consumer named through its DMA region,
            // which it keeps valid while a work request or an STag it gave the peer names it.
            Access::Kernel(at) => unsafe { kernel_memory::copy_to(*at, src) },
            Access::Counted(Counted::Pinned(pages), at) => pages.copy_from(*at, src),
            Access::Counted(Counted::Listed(list), at) => list.copy_from(*at, src),
        })
    }

    /// Runs atomic operation `op` on the 64-bit value at `addr` (8-aligned) of region `stag`
    /// (`need` rights required, which must include a write right) and returns the value before.
    pub(crate) fn atomic(&self, stag: u32, addr: u64, need: u32, op: impl Fn(u64) -> u64) -> Result<u64, Fault> {
        self.accessing(stag, addr, 8, need, |access| match access {
            // SAFETY: as in `write`.
            Access::Kernel(at) => unsafe { kernel_memory::update_u64(*at, &op) },
            Access::Counted(Counted::Pinned(pages), at) => pages.update_u64(*at, &op),
            Access::Counted(Counted::Listed(list), at) => list.update_u64(*at, &op),
        })
    }

    /// Whether `stag` names a valid region of this domain.
    pub(crate) fn check_valid(&self, stag: u32) -> Result<(), Fault> {
        self.with(stag, |mr| if mr.valid { Ok(()) } else { Err(Fault::InvalidStag) })
    }

    /// Invalidates `stag` (a Read with Invalidate, a peer's Send with Invalidate): later
    /// accesses fail until a Fast Register. Fails for unknown or already invalid STags.
    pub(crate) fn invalidate(&self, stag: u32) -> Result<(), Fault> {
        self.invalidate_unless(stag, false)
    }

    /// A Local Invalidate of `stag`: [`Self::invalidate`], but an STag already invalid is done
    /// already, as verbs allow (and siw, which checks no state): a consumer may invalidate a
    /// region the peer's Send with Invalidate has invalidated.
    pub(crate) fn invalidate_local(&self, stag: u32) -> Result<(), Fault> {
        self.invalidate_unless(stag, true)
    }

    fn invalidate_unless(&self, stag: u32, invalid_is_done: bool) -> Result<(), Fault> {
        let found = self.with(stag, |mr| {
            if !mr.valid {
                return if invalid_is_done { Ok(None) } else { Err(Fault::InvalidStag) };
            }
            // The DMA region is never invalidated.
            let pages = mr.memory.counted().ok_or(Fault::Access)?;
            mr.valid = false;
            let generation = pages.accesses().generation();
            Ok(Some((pages, generation)))
        })?;
        let Some((pages, generation)) = found else { return Ok(()) };
        // No access begins any more; those begun end before the invalidation does.
        pages.accesses().wait_none_in(Some(generation));
        pages.let_go();
        Ok(())
    }

    /// Fast Register: makes the invalid region in `stag`'s slot valid again as `stag` (the
    /// slot's index with a new key), covering `[addr, addr + len)` with `rights`: of its
    /// pinned buffer, or of the kernel pages last mapped for it. EINVAL for a region of
    /// another domain, a valid one, STag 0, a range outside the buffer or pages, rights a
    /// region may not have, write rights on pages registered (so pinned) read-only, or all
    /// kernel memory.
    pub(crate) fn fast_register(&self, stag: u32, addr: u64, len: u64, rights: u32) -> Result {
        let mut table = self.table.lock();
        let mr = table.regions.in_slot_mut(stag)?;
        if mr.pd != self.pd || mr.valid || !rights_allowed(rights) {
            return Err(EINVAL);
        }
        if let Some(accesses) = mr.memory.accesses() {
            // Accesses begun under the registration an invalidation ended finish first (they
            // need no lock to); none begins while the table is held.
            accesses.wait_none();
        }
        let writes = rights & access::LOCAL_WRITE != 0;
        match &mut mr.memory {
            Memory::Pinned(pages) if within(mr.base, mr.pinned, addr, len) && (!writes || pages.writable()) => {}
            Memory::Listed { now, next } => {
                let list = next.as_ref().or(now.as_ref()).ok_or(EINVAL)?;
                if !within(list.iova, list.len, addr, len) {
                    return Err(EINVAL);
                }
                if let Some(list) = next.take() {
                    // The list it replaces is freed here, under the lock (a kfree), or by
                    // an invalidation of the ended registration still waiting.
                    (mr.base, mr.pinned, *now) = (list.iova, list.len, Some(list));
                }
            }
            _ => return Err(EINVAL),
        }
        if let Some(accesses) = mr.memory.accesses() {
            accesses.next_generation();
        }
        let mr = table.regions.rekey(stag)?;
        (mr.va, mr.len, mr.rights, mr.valid) = (addr, len, rights, true);
        Ok(())
    }
}
