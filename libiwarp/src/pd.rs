//! Protection domains: a queue pair reaches only the memory regions of its own domain, both
//! through its work requests and from the peer (the module refuses the rest).

use crate::abi::{PdOp, RegMr, IOCTL_ALLOC_PD, IOCTL_REG_MR};
use crate::device::Device;
use crate::mr::{Access, MemoryRegion, SourceRegion};
use crate::sys;
use std::io;
use std::os::fd::AsFd;

/// A protection domain. Regions and QPs made in it borrow it, so it outlives them.
pub struct ProtectionDomain<'a> {
    dev: &'a Device,
    handle: u32,
}

impl<'a> ProtectionDomain<'a> {
    pub(crate) fn alloc(dev: &'a Device) -> io::Result<Self> {
        let mut req = PdOp::default();
        sys::ioctl(dev.file().as_fd(), IOCTL_ALLOC_PD, &mut req)?;
        Ok(ProtectionDomain { dev, handle: req.pd })
    }

    /// The module's handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The device the domain belongs to.
    pub fn device(&self) -> &'a Device {
        self.dev
    }

    /// Registers `buf` in this domain for RDMA with `access` rights. The region borrows the
    /// buffer mutably for its whole life, so the buffer cannot be freed, moved or touched
    /// behind the region's back while the peer may write into it; dropping the region
    /// deregisters it. The region borrows the domain too, which therefore outlives it.
    pub fn register<'p>(&'p self, buf: &'p mut [u8], access: Access) -> io::Result<MemoryRegion<'p>> {
        let stag = self.register_range(buf.as_mut_ptr() as u64, buf.len() as u64, access.bits())?;
        Ok(MemoryRegion::new(self.dev, buf, stag))
    }

    /// Registers `buf` as a source only (the device reads it for Sends and Writes; no access for
    /// the peer, no local writes): a shared borrow is enough, so a caller can send from memory
    /// it was lent, with zero copy. Dropping the region deregisters it; the caller must not
    /// drop it before the requests reading it have completed.
    pub fn register_source<'p>(&'p self, buf: &'p [u8]) -> io::Result<SourceRegion<'p>> {
        let stag = self.register_range(buf.as_ptr() as u64, buf.len() as u64, Access::NONE.bits())?;
        Ok(SourceRegion::new(self.dev, buf, stag))
    }

    /// Registers a raw address range, for tests of the module's argument checking. The range
    /// is not borrowed, so nothing stops it from being unmapped: the returned STag must be
    /// deregistered with [`Device::deregister_raw`].
    #[cfg(feature = "test-hooks")]
    pub fn register_raw(&self, addr: u64, length: u64, access: u32) -> io::Result<u32> {
        self.register_range(addr, length, access)
    }

    fn register_range(&self, addr: u64, length: u64, access: u32) -> io::Result<u32> {
        let mut req = RegMr { addr, length, access, pd: self.handle, ..RegMr::default() };
        sys::ioctl(self.dev.file().as_fd(), IOCTL_REG_MR, &mut req)?;
        Ok(req.stag)
    }
}

impl Drop for ProtectionDomain<'_> {
    fn drop(&mut self) {
        // Cannot fail: everything made in the domain borrowed it and is gone.
        let _ = self.dev.dealloc_pd(self.handle);
    }
}
