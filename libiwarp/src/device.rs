//! An open `/dev/iwarp`: the device context of the verbs.

use crate::abi::{DeregMr, QueryDevice, QueryStats, RegMr, IOCTL_DEREG_MR, IOCTL_QUERY_DEVICE, IOCTL_QUERY_STATS, IOCTL_REG_MR};
use crate::cq::CompletionQueue;
use crate::mr::{Access, MemoryRegion};
use crate::qp::{ConnectOptions, QpInit, QueuePair};
use crate::sys;
use std::fs::{File, OpenOptions};
use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;

/// Where the module's misc device appears.
pub const DEVICE_PATH: &str = "/dev/iwarp";

/// A device context (one open file of `/dev/iwarp`). Everything registered through it is
/// released when it closes, even if the program never deregisters.
pub struct Device {
    file: File,
}

impl Device {
    /// Opens [`DEVICE_PATH`].
    pub fn open() -> io::Result<Device> {
        let file = OpenOptions::new().read(true).write(true).open(DEVICE_PATH)?;
        Ok(Device { file })
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// A queue pair, not connected yet: post receives, then [`QueuePair::adopt`] a stream.
    pub fn create_qp<'a>(&'a self, init: &QpInit<'a>) -> io::Result<QueuePair<'a>> {
        QueuePair::create(self, init)
    }

    /// A queue pair connected over `stream` at once ([`Device::create_qp`], then
    /// [`QueuePair::adopt`]), for QPs that need no receive posted before the peer may send.
    pub fn adopt<'a>(&'a self, stream: TcpStream, opts: &ConnectOptions, init: &QpInit<'a>) -> io::Result<QueuePair<'a>> {
        let mut qp = QueuePair::create(self, init)?;
        qp.adopt(stream, opts)?;
        Ok(qp)
    }

    /// A completion queue of at least `depth` entries, mapped into this process.
    pub fn create_cq(&self, depth: u32) -> io::Result<CompletionQueue<'_>> {
        CompletionQueue::new(self, depth)
    }

    /// The device's ABI version, capabilities and limits.
    pub fn query(&self) -> io::Result<QueryDevice> {
        let mut q = QueryDevice::default();
        sys::ioctl(self.file.as_fd(), IOCTL_QUERY_DEVICE, &mut q)?;
        Ok(q)
    }

    /// Module-wide counters (pinned pages, regions, contexts).
    pub fn stats(&self) -> io::Result<QueryStats> {
        let mut s = QueryStats::default();
        sys::ioctl(self.file.as_fd(), IOCTL_QUERY_STATS, &mut s)?;
        Ok(s)
    }

    /// Registers `buf` for RDMA with `access` rights. The region borrows the buffer mutably for
    /// its whole life, so the buffer cannot be freed, moved or touched behind the region's back
    /// while the peer may write into it; dropping the region deregisters it.
    pub fn register<'a>(&'a self, buf: &'a mut [u8], access: Access) -> io::Result<MemoryRegion<'a>> {
        let mut req = RegMr { addr: buf.as_mut_ptr() as u64, length: buf.len() as u64, access: access.bits(), ..RegMr::default() };
        sys::ioctl(self.file.as_fd(), IOCTL_REG_MR, &mut req)?;
        Ok(MemoryRegion::new(self, buf, req.lkey, req.stag))
    }

    /// Deregisters by STag (what dropping a [`MemoryRegion`] does).
    pub(crate) fn deregister(&self, stag: u32) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), IOCTL_DEREG_MR, &mut DeregMr { stag, reserved: 0 })
    }

    /// Registers a raw address range, for tests of the module's argument checking. The range
    /// is not borrowed, so nothing stops it from being unmapped: the returned STag must be
    /// deregistered with [`Device::deregister_raw`].
    pub fn register_raw(&self, addr: u64, length: u64, access: u32) -> io::Result<u32> {
        let mut req = RegMr { addr, length, access, ..RegMr::default() };
        sys::ioctl(self.file.as_fd(), IOCTL_REG_MR, &mut req)?;
        Ok(req.stag)
    }

    /// Deregisters an STag from [`Device::register_raw`] (or a bogus one, for tests).
    pub fn deregister_raw(&self, stag: u32) -> io::Result<()> {
        self.deregister(stag)
    }

    /// Issues CREATE_QP with a raw argument (tests of the module's argument checking).
    pub fn create_qp_raw(&self, req: &mut crate::abi::CreateQp) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), crate::abi::IOCTL_CREATE_QP, req)
    }

    /// Issues DESTROY_QP on a raw handle (tests).
    pub fn destroy_qp_raw(&self, qp: u32) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), crate::abi::IOCTL_DESTROY_QP, &mut crate::abi::DestroyQp { qp, reserved: 0 })
    }

    /// Issues ADOPT_QP with a raw argument (tests of the module's argument checking, with
    /// descriptors that are not TCP streams).
    pub fn adopt_qp_raw(&self, req: &mut crate::abi::AdoptQp) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), crate::abi::IOCTL_ADOPT_QP, req)
    }

    /// Issues DESTROY_CQ on a raw handle (tests).
    pub fn destroy_cq_raw(&self, cq: u32) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), crate::abi::IOCTL_DESTROY_CQ, &mut crate::abi::CqOp { cq, solicited_only: 0 })
    }

    /// Issues ARM_CQ with raw arguments (tests).
    pub fn arm_cq_raw(&self, cq: u32, solicited_only: u32) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), crate::abi::IOCTL_ARM_CQ, &mut crate::abi::CqOp { cq, solicited_only })
    }

    /// Maps `len` bytes at page offset `pgoff` of the device and unmaps them again (tests of
    /// the module's mmap checks).
    pub fn map_raw(&self, pgoff: u64, len: usize) -> io::Result<()> {
        crate::ring::Mapping::new(self.file.as_fd(), pgoff << 12, len as u64).map(drop)
    }

    /// Issues an ioctl with an arbitrary command on a QueryDevice-sized buffer (tests of the
    /// module's command checking).
    pub fn raw_query(&self, cmd: u32) -> io::Result<QueryDevice> {
        let mut q = QueryDevice::default();
        sys::ioctl(self.file.as_fd(), cmd, &mut q)?;
        Ok(q)
    }
}
