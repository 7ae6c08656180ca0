//! Queue pairs over adopted TCP connections.

use crate::abi::{conn, opcode, role, send_flags, CreateQp, DestroyQp, PostSend, IOCTL_CREATE_QP, IOCTL_DESTROY_QP, IOCTL_POST_SEND};
use crate::device::Device;
use crate::mr::MemoryRegion;
use crate::sys;
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

/// Which side of the MPA exchange to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The side that connected: sends the MPA request.
    Initiator,
    /// The side that accepted: answers it.
    Responder,
}

/// What to ask for when a connection becomes a QP.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Side of the exchange.
    pub role: Role,
    /// Ask the peer to put markers in what it sends us.
    pub markers: bool,
    /// Ask for CRCs (used if either side asks).
    pub crc: bool,
    /// Highest MPA revision to speak (1 or 2).
    pub mpa_rev: u8,
    /// Inbound RDMA Reads to offer.
    pub ird: u16,
    /// Outbound RDMA Reads wanted.
    pub ord: u16,
    /// Private data for the peer (at most 508 octets).
    pub private_data: Vec<u8>,
    /// How long to wait for the peer's frame.
    pub timeout: Duration,
}

impl ConnectOptions {
    /// Markers and CRC on, MPA revision 2, 16 Reads each way, 10 s timeout.
    pub fn new(role: Role) -> ConnectOptions {
        ConnectOptions { role, markers: true, crc: true, mpa_rev: 2, ird: 16, ord: 16, private_data: Vec::new(), timeout: Duration::from_secs(10) }
    }
}

/// What the exchange settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// MPA revision in use.
    pub mpa_rev: u8,
    /// CRCs in use.
    pub crc: bool,
    /// Markers in what we receive.
    pub rx_markers: bool,
    /// Markers in what we send.
    pub tx_markers: bool,
    /// Our inbound Read depth.
    pub ird: u16,
    /// Our outbound Read depth.
    pub ord: u16,
    /// The peer's private data.
    pub peer_private: Vec<u8>,
}

/// What to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// A Send into the peer's next receive buffer, optionally with Solicited Event.
    Send {
        /// With Solicited Event.
        solicited: bool,
    },
    /// An RDMA Write to the peer's region `stag` at tagged offset `to`.
    Write {
        /// The peer's STag.
        stag: u32,
        /// Tagged offset at the peer.
        to: u64,
    },
}

/// A queue pair. It owns the connection it was made from: the stream can no longer be read or
/// written directly. Dropping it closes the connection.
pub struct QueuePair<'a> {
    dev: &'a Device,
    handle: u32,
    negotiated: Negotiated,
    _stream: TcpStream,
}

impl<'a> QueuePair<'a> {
    pub(crate) fn adopt(dev: &'a Device, stream: TcpStream, opts: &ConnectOptions) -> io::Result<QueuePair<'a>> {
        let mut peer = vec![0u8; 512];
        let mut req = CreateQp {
            fd: stream.as_raw_fd(),
            role: if opts.role == Role::Initiator { role::INITIATOR } else { role::RESPONDER },
            flags: (if opts.markers { conn::RX_MARKERS } else { 0 }) | (if opts.crc { conn::CRC } else { 0 }),
            mpa_rev: opts.mpa_rev as u32,
            ird: opts.ird as u32,
            ord: opts.ord as u32,
            private_len: opts.private_data.len() as u32,
            peer_private_cap: peer.len() as u32,
            private_data: opts.private_data.as_ptr() as u64,
            peer_private: peer.as_mut_ptr() as u64,
            timeout_ms: opts.timeout.as_millis().clamp(1, 60_000) as u32,
            ..CreateQp::default()
        };
        sys::ioctl(dev.file().as_fd(), IOCTL_CREATE_QP, &mut req)?;
        peer.truncate(req.peer_private_len as usize);
        let negotiated = Negotiated {
            mpa_rev: req.rev as u8,
            crc: req.negotiated & conn::CRC != 0,
            rx_markers: req.negotiated & conn::RX_MARKERS != 0,
            tx_markers: req.negotiated & conn::TX_MARKERS != 0,
            ird: req.neg_ird as u16,
            ord: req.neg_ord as u16,
            peer_private: peer,
        };
        Ok(QueuePair { dev, handle: req.qp, negotiated, _stream: stream })
    }

    /// What the MPA exchange settled.
    pub fn negotiated(&self) -> &Negotiated {
        &self.negotiated
    }

    /// Sends `len` bytes at `offset` of `mr`. Synchronous for now: when it returns, the module has
    /// framed the message (markers and CRC as negotiated) from a snapshot of the buffer and
    /// queued it to TCP, so the buffer may be reused at once.
    pub fn post_send(&self, mr: &MemoryRegion<'_>, offset: u64, len: u64, op: SendOp) -> io::Result<()> {
        let mut req = PostSend { qp: self.handle, lkey: mr.lkey(), offset, length: len, ..PostSend::default() };
        match op {
            SendOp::Send { solicited } => {
                req.opcode = opcode::SEND;
                req.flags = if solicited { send_flags::SOLICITED } else { 0 };
            }
            SendOp::Write { stag, to } => {
                req.opcode = opcode::WRITE;
                req.remote_stag = stag;
                req.remote_to = to;
            }
        }
        sys::ioctl(self.dev.file().as_fd(), IOCTL_POST_SEND, &mut req)
    }

    /// The module's handle for this QP.
    pub fn handle(&self) -> u32 {
        self.handle
    }
}

impl Drop for QueuePair<'_> {
    fn drop(&mut self) {
        let mut req = DestroyQp { qp: self.handle, reserved: 0 };
        // Cannot fail for a live QP; closing the device destroys it anyway.
        let _ = sys::ioctl(self.dev.file().as_fd(), IOCTL_DESTROY_QP, &mut req);
    }
}
