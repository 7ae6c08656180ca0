//! Memory regions: user buffers pinned and registered with the device.

use crate::abi::{access, Sge};
use crate::device::Device;
use crate::qp::Remote;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

/// Access rights of a region; combine with `|`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Access(u32);

impl Access {
    /// Only local reads (e.g. a send buffer).
    pub const NONE: Access = Access(0);
    /// Local writes (receive buffers, RDMA Read sinks).
    pub const LOCAL_WRITE: Access = Access(access::LOCAL_WRITE);
    /// Peer RDMA Writes (needs LOCAL_WRITE too, as in verbs).
    pub const REMOTE_WRITE: Access = Access(access::REMOTE_WRITE);
    /// Peer RDMA Reads.
    pub const REMOTE_READ: Access = Access(access::REMOTE_READ);
    /// Peer atomic operations (RFC 7306; needs LOCAL_WRITE too).
    pub const REMOTE_ATOMIC: Access = Access(access::REMOTE_ATOMIC);

    /// The ABI bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// A registered buffer. It holds the buffer's only borrow, so while the region lives the
/// buffer can be neither freed nor moved; reach it through [`MemoryRegion::as_slice`] and
/// [`MemoryRegion::as_mut_slice`].
///
/// Its STag (which is also its local key) changes with each Fast Register
/// ([`crate::QueuePair::post_fast_register`]), which gives it a new key byte.
pub struct MemoryRegion<'a> {
    dev: &'a Device,
    buf: &'a mut [u8],
    stag: AtomicU32,
}

impl<'a> MemoryRegion<'a> {
    pub(crate) fn new(dev: &'a Device, buf: &'a mut [u8], stag: u32) -> Self {
        MemoryRegion { dev, buf, stag: AtomicU32::new(stag) }
    }

    /// The steering tag a peer uses to reach this region.
    pub fn stag(&self) -> u32 {
        self.stag.load(Ordering::Relaxed)
    }

    /// The local key (the STag: one key per region).
    pub fn lkey(&self) -> u32 {
        self.stag()
    }

    /// Records the STag a Fast Register gave the region.
    pub(crate) fn set_stag(&self, stag: u32) {
        self.stag.store(stag, Ordering::Relaxed)
    }

    /// The virtual address of the buffer's first byte (what the peer uses as tagged offset).
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// A work request entry for bytes `range` of the buffer. Panics if out of range.
    pub fn sge(&self, range: Range<usize>) -> Sge {
        entry(self.buf, self.lkey(), range)
    }

    /// What a peer needs to reach byte `offset` of this region (tell it over a Send or private
    /// data).
    pub fn remote(&self, offset: usize) -> Remote {
        assert!(offset <= self.buf.len(), "offset out of the region");
        Remote { addr: self.addr() + offset as u64, rkey: self.stag() }
    }

    /// The buffer. What the module places into it (the peer's RDMA Writes, received Sends,
    /// Read Responses) lands while the program runs, as DMA would: read those bytes after the
    /// completion (or the message from the peer) that says they are there.
    pub fn as_slice(&self) -> &[u8] {
        self.buf
    }

    /// The buffer, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf
    }

    /// Deregisters now, reporting failure (dropping deregisters too, silently).
    pub fn deregister(self) -> std::io::Result<()> {
        let r = self.dev.deregister(self.stag());
        std::mem::forget(self);
        r
    }
}

impl Drop for MemoryRegion<'_> {
    fn drop(&mut self) {
        // Cannot fail for a live region; if the device is gone, closing it unpins anyway.
        let _ = self.dev.deregister(self.stag());
    }
}

/// A buffer registered only as a source ([`crate::ProtectionDomain::register_source`]): the
/// device reads it, nobody writes through it, so it holds a shared borrow.
pub struct SourceRegion<'a> {
    dev: &'a Device,
    buf: &'a [u8],
    stag: u32,
}

impl<'a> SourceRegion<'a> {
    pub(crate) fn new(dev: &'a Device, buf: &'a [u8], stag: u32) -> Self {
        SourceRegion { dev, buf, stag }
    }

    /// A work request entry for bytes `range` of the buffer. Panics if out of range.
    pub fn sge(&self, range: Range<usize>) -> Sge {
        entry(self.buf, self.stag, range)
    }
}

impl Drop for SourceRegion<'_> {
    fn drop(&mut self) {
        // As `MemoryRegion`'s.
        let _ = self.dev.deregister(self.stag);
    }
}

/// A work request entry for bytes `range` of the registered `buf`. Panics if out of range.
fn entry(buf: &[u8], lkey: u32, range: Range<usize>) -> Sge {
    assert!(range.start <= range.end && range.end <= buf.len() && range.len() <= u32::MAX as usize, "SGE range out of the region");
    Sge { addr: buf.as_ptr() as u64 + range.start as u64, length: range.len() as u32, lkey }
}
