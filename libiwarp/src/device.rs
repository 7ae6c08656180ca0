//! An open `/dev/iwarp`: the device context of the verbs.

use crate::abi::{DeregMr, PdOp, QueryDevice, QueryStats, IOCTL_DEALLOC_PD, IOCTL_DEREG_MR, IOCTL_QUERY_DEVICE, IOCTL_QUERY_STATS};
use crate::cq::CompletionQueue;
use crate::events::AsyncEvents;
use crate::listen::Listener;
use crate::listing::{self, QpListing};
use crate::pd::ProtectionDomain;
use crate::qp::{ConnectOptions, QpInit, QueuePair};
use crate::sys;
use std::fs::{File, OpenOptions};
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd};

/// Where the module's misc device appears.
pub const DEVICE_PATH: &str = "/dev/iwarp";

/// A device context (one open file of `/dev/iwarp`). Everything registered through it is
/// released when it closes, even if the program never deregisters.
pub struct Device {
    file: File,
}

/// The device's descriptor (what a program that closes descriptors wholesale must leave open).
impl AsFd for Device {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }
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

    /// Leaves the context to the other processes that share it through `fork`, destroying
    /// nothing in it: `/dev/null` takes the place of the device under the same descriptor, so
    /// dropping the objects made through it afterwards unmaps their rings while their destroy
    /// calls fail quietly. The context lives until the last process holding it closes it.
    pub fn detach(&self) -> io::Result<()> {
        let null = File::open("/dev/null")?;
        // SAFETY: both descriptors are live and ours; dup2 replaces the device in one step, so
        // no other file can take its number in between.
        if unsafe { libc::dup2(null.as_raw_fd(), self.file.as_raw_fd()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
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

    /// Listens for connections at `at` (IPv4 or IPv6; port 0: any free one; the unspecified
    /// IPv6 address takes IPv4 connections too) in the caller's network namespace; accept or
    /// reject each through [`Listener::get_request`].
    pub fn listen(&self, at: impl Into<SocketAddr>, backlog: u32) -> io::Result<Listener<'_>> {
        Listener::new(self, at.into(), backlog)
    }

    /// The asynchronous events of this context: which QP a Terminate or a broken connection
    /// ended. Events that came before are kept (up to 256) and delivered too.
    pub fn async_events(&self) -> io::Result<AsyncEvents<'_>> {
        AsyncEvents::new(self)
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

    /// Every QP of every process on this host, with its counters (`LIST_QPS`).
    pub fn list_qps(&self) -> io::Result<Vec<QpListing>> {
        listing::list(self.file.as_fd())
    }

    /// A protection domain: register memory and make queue pairs in it.
    pub fn alloc_pd(&self) -> io::Result<ProtectionDomain<'_>> {
        ProtectionDomain::alloc(self)
    }

    /// Deregisters by STag (what dropping a [`MemoryRegion`] does).
    pub(crate) fn deregister(&self, stag: u32) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), IOCTL_DEREG_MR, &mut DeregMr { stag, reserved: 0 })
    }

    /// Deregisters an STag from [`ProtectionDomain::register_raw`] (or a bogus one, for tests).
    #[cfg(feature = "test-hooks")]
    pub fn deregister_raw(&self, stag: u32) -> io::Result<()> {
        self.deregister(stag)
    }

    /// Frees a protection domain (what dropping a [`ProtectionDomain`] does).
    pub(crate) fn dealloc_pd(&self, pd: u32) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), IOCTL_DEALLOC_PD, &mut PdOp { pd, reserved: 0 })
    }

    /// Issues DEALLOC_PD on a raw handle (tests).
    #[cfg(feature = "test-hooks")]
    pub fn dealloc_pd_raw(&self, pd: u32) -> io::Result<()> {
        self.dealloc_pd(pd)
    }

    /// Issues CREATE_QP with a raw argument (tests of the module's argument checking).
    #[cfg(feature = "test-hooks")]
    pub fn create_qp_raw(&self, req: &mut crate::abi::CreateQp) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), crate::abi::IOCTL_CREATE_QP, req)
    }

    /// Issues DESTROY_QP on a raw handle (tests).
    #[cfg(feature = "test-hooks")]
    pub fn destroy_qp_raw(&self, qp: u32) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), crate::abi::IOCTL_DESTROY_QP, &mut crate::abi::DestroyQp { qp, reserved: 0 })
    }

    /// Issues LIST_QPS with a raw argument (tests of the module's argument checking).
    #[cfg(feature = "test-hooks")]
    pub fn list_qps_raw(&self, req: &mut crate::abi::ListQps) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), crate::abi::IOCTL_LIST_QPS, req)
    }

    /// Issues ADOPT_QP with a raw argument (tests of the module's argument checking, with
    /// descriptors that are not TCP streams).
    #[cfg(feature = "test-hooks")]
    pub fn adopt_qp_raw(&self, req: &mut crate::abi::AdoptQp) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), crate::abi::IOCTL_ADOPT_QP, req)
    }

    /// Issues DESTROY_CQ on a raw handle (tests).
    #[cfg(feature = "test-hooks")]
    pub fn destroy_cq_raw(&self, cq: u32) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), crate::abi::IOCTL_DESTROY_CQ, &mut crate::abi::CqOp { cq, solicited_only: 0 })
    }

    /// Issues ARM_CQ with raw arguments (tests).
    #[cfg(feature = "test-hooks")]
    pub fn arm_cq_raw(&self, cq: u32, solicited_only: u32) -> io::Result<()> {
        sys::ioctl(self.file.as_fd(), crate::abi::IOCTL_ARM_CQ, &mut crate::abi::CqOp { cq, solicited_only })
    }

    /// Maps `len` bytes at page offset `pgoff` of the device and unmaps them again (tests of
    /// the module's mmap checks).
    #[cfg(feature = "test-hooks")]
    pub fn map_raw(&self, pgoff: u64, len: usize) -> io::Result<()> {
        crate::ring::Mapping::new(self.file.as_fd(), pgoff << 12, len as u64).map(drop)
    }

    /// Issues an ioctl with an arbitrary command on a buffer of the size it encodes (tests of
    /// the module's command checking); what the module wrote back.
    #[cfg(feature = "test-hooks")]
    pub fn raw_ioctl(&self, cmd: u32) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; crate::abi::ioc_size(cmd)];
        sys::ioctl_bytes(self.file.as_fd(), cmd, &mut buf)?;
        Ok(buf)
    }
}
