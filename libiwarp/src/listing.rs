//! Every QP of every process on this host ([`crate::Device::list_qps`], `LIST_QPS`): what the
//! `iwarp` tool shows, like `rdma statistic` for an RNIC.

use crate::abi::{ListQps, QpInfo, IOCTL_LIST_QPS, MAX_LIST_QPS};
use crate::endpoint::socket_addr;
use crate::qp::{Placement, QpState};
use crate::sys;
use std::io;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;

/// One QP as `LIST_QPS` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpListing {
    /// The process that created it.
    pub pid: u32,
    /// Its handle in that process's device context.
    pub handle: u32,
    /// Our end of the connection (None before it connects).
    pub local: Option<SocketAddr>,
    /// The peer's end.
    pub remote: Option<SocketAddr>,
    /// Where it is in its life.
    pub state: QpState,
    /// Payload octets sent: (zero copy, copied first).
    pub sent: (u64, u64),
    /// Where what it received was placed.
    pub placement: Placement,
}

impl From<&QpInfo> for QpListing {
    fn from(i: &QpInfo) -> QpListing {
        QpListing {
            pid: i.pid,
            handle: i.query.qp,
            local: socket_addr(&i.local),
            remote: socket_addr(&i.remote),
            state: QpState::from(&i.query),
            sent: (i.query.sent_zero_copy, i.query.sent_copied),
            placement: Placement::from(&i.query),
        }
    }
}

/// Asks with room for what was there last time (and some), until everything fit (or the first
/// [`MAX_LIST_QPS`], if there are more).
pub(crate) fn list(fd: BorrowedFd<'_>) -> io::Result<Vec<QpListing>> {
    let mut room = 0u32;
    loop {
        let mut entries = vec![QpInfo::default(); room as usize];
        let mut req = ListQps { entries: entries.as_mut_ptr() as u64, capacity: room, count: 0 };
        sys::ioctl(fd, IOCTL_LIST_QPS, &mut req)?;
        if req.count <= room || room == MAX_LIST_QPS {
            return Ok(entries[..req.count.min(room) as usize].iter().map(QpListing::from).collect());
        }
        room = (req.count + 16).min(MAX_LIST_QPS);
    }
}
