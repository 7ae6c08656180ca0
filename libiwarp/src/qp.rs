//! Queue pairs over adopted TCP connections: work requests in, completions out through the
//! CQs. Posting is safe: the module copies what a work request names, checks every entry
//! against the registered regions, and only ever places into registered memory.

use crate::abi::{
    conn, opcode, qp_state, role, send_flags, Accept, AdoptQp, ConnectQp, CreateQp, DestroyQp, Doorbell, HandleOp, PostRecv, PostSend, QueryQp, Sge,
    IOCTL_ACCEPT, IOCTL_ADOPT_QP, IOCTL_CONNECT_QP, IOCTL_CREATE_QP, IOCTL_DESTROY_QP, IOCTL_DISCONNECT, IOCTL_DOORBELL, IOCTL_QUERY_QP, MAX_SGE,
};
use crate::cq::CompletionQueue;
use crate::device::Device;
use crate::endpoint::endpoint;
use crate::mr::{Access, MemoryRegion};
use crate::pd::ProtectionDomain;
use crate::ring::Mapping;
use crate::sys;
use std::cell::Cell;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::ops::Range;
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
    /// Copy every payload before sending (no zero copy), e.g. to compare the two.
    pub copy_send: bool,
    /// Place what arrives only in order (no out-of-order placement), e.g. to compare the two.
    pub in_order_only: bool,
    /// Start each FPDU at a TCP segment, so the peer can place out-of-order segments without
    /// markers; costs bandwidth ([`crate::abi::conn::ALIGNED`]).
    pub aligned: bool,
    /// Octets between markers, 0 for RFC 5044's 512; see [`crate::abi::AdoptQp::marker_interval`]
    /// (experiments only: both ends must ask for the same).
    pub marker_interval: u32,
    /// Offer (or accept) the RFC 7306 extensions: Immediate Data and atomic operations. They
    /// are used only if the peer agrees ([`Negotiated::extensions`]); the offer takes 8 octets
    /// of the private data's room ([`crate::abi::conn::EXTENSIONS`]).
    pub extensions: bool,
    /// Peer-to-peer mode (RFC 6581, revision 2): the ready-to-receive messages offered
    /// (initiator) or accepted (responder); none, no peer-to-peer mode. The initiator's module
    /// sends the one the responder picks before anything posted, and the responder's sends
    /// nothing until it arrived ([`crate::abi::conn::RTR_SEND`]): that is how a server that
    /// speaks first can, since without it a responder waits for the initiator's first message
    /// anyway (RFC 5044 7.1.2). With no type in common the responder offers one of its own, and
    /// the initiator's connect fails with EPROTO after sending a TERM.
    pub rtr: RtrTypes,
}

/// Which zero-length messages may serve as the ready-to-receive (RTR) message of peer-to-peer
/// mode (RFC 6581).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtrTypes {
    /// A zero-length Send (it takes no receive).
    pub send: bool,
    /// A zero-length RDMA Write.
    pub write: bool,
    /// A zero-length RDMA Read, answered by a zero-length Read Response.
    pub read: bool,
}

impl RtrTypes {
    /// No peer-to-peer mode.
    pub const NONE: RtrTypes = RtrTypes { send: false, write: false, read: false };
    /// Any RTR.
    pub const ALL: RtrTypes = RtrTypes { send: true, write: true, read: true };

    fn bits(self) -> u32 {
        (if self.send { conn::RTR_SEND } else { 0 }) | (if self.write { conn::RTR_WRITE } else { 0 }) | (if self.read { conn::RTR_READ } else { 0 })
    }

    fn from_bits(b: u32) -> RtrTypes {
        RtrTypes { send: b & conn::RTR_SEND != 0, write: b & conn::RTR_WRITE != 0, read: b & conn::RTR_READ != 0 }
    }
}

impl ConnectOptions {
    /// Markers and CRC on, MPA revision 2, 16 Reads each way, 10 s timeout; an initiator asks
    /// for no peer-to-peer mode, a responder accepts it with any RTR.
    pub fn new(role: Role) -> ConnectOptions {
        ConnectOptions {
            role,
            markers: true,
            crc: true,
            mpa_rev: 2,
            ird: 16,
            ord: 16,
            private_data: Vec::new(),
            timeout: Duration::from_secs(10),
            copy_send: false,
            in_order_only: false,
            aligned: false,
            marker_interval: 0,
            extensions: false,
            rtr: if role == Role::Responder { RtrTypes::ALL } else { RtrTypes::NONE },
        }
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
    /// Both sides agreed to the RFC 7306 extensions; without, posting their operations fails
    /// with EOPNOTSUPP.
    pub extensions: bool,
    /// Peer-to-peer mode: the RTR in use (at most one set), none without.
    pub rtr: RtrTypes,
    /// The peer's private data.
    pub peer_private: Vec<u8>,
}

/// Protection domain, queue sizes and completion queues of a new QP.
pub struct QpInit<'a> {
    /// The only regions the QP reaches, locally and from the peer.
    pub pd: &'a ProtectionDomain<'a>,
    /// Where send work requests complete.
    pub send_cq: &'a CompletionQueue<'a>,
    /// Where receives complete (may be `send_cq`).
    pub recv_cq: &'a CompletionQueue<'a>,
    /// Receives posted at once.
    pub max_recv_wr: u32,
    /// Send ring entries; also the most RDMA Reads outstanding (further capped by the
    /// negotiated ORD) and the most signaled Sends and Writes not completed yet.
    pub max_send_wr: u32,
    /// Scatter/gather entries per work request, send and receive (1..=4).
    pub max_sge: u32,
    /// Inline data per send ([`QueuePair::post_send_inline`]), at most 1024 octets.
    pub max_inline: u32,
}

/// A region of the peer: its STag and an address in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Remote {
    /// Virtual address at the peer (the tagged offset).
    pub addr: u64,
    /// The peer region's STag.
    pub rkey: u32,
}

impl Remote {
    /// Octets of [`Remote::to_bytes`].
    pub const LEN: usize = 12;

    /// A wire form to hand to the peer (e.g. in MPA private data): address, then STag, little
    /// endian.
    pub fn to_bytes(&self) -> [u8; Remote::LEN] {
        let mut b = [0u8; Remote::LEN];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }

    /// Reads [`Remote::to_bytes`]' form from the start of `b`.
    pub fn from_bytes(b: &[u8]) -> Option<Remote> {
        let b: &[u8; Remote::LEN] = b.get(..Remote::LEN)?.try_into().ok()?;
        Some(Remote { addr: u64::from_le_bytes(b[..8].try_into().ok()?), rkey: u32::from_le_bytes(b[8..].try_into().ok()?) })
    }
}

/// What a send work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// A Send into the peer's next posted receive.
    Send {
        /// With Solicited Event.
        solicited: bool,
    },
    /// A Send that also invalidates the peer's STag `stag`.
    SendInvalidate {
        /// With Solicited Event.
        solicited: bool,
        /// The peer's STag to invalidate.
        stag: u32,
    },
    /// An RDMA Write of the local entries to `Remote`.
    Write(Remote),
    /// An RDMA Read from `Remote` into the single local entry.
    Read(Remote),
    /// An RDMA Read that, once its data is in place, invalidates our own STag `stag`
    /// (usually the sink region's): nothing reaches that region through it any more until a
    /// Fast Register ([`QueuePair::post_fast_register`]).
    ReadInvalidate {
        /// Where to read from.
        remote: Remote,
        /// Our STag to invalidate.
        stag: u32,
    },
    /// Local Invalidate of our own STag `stag` (no local entries): from when it is posted, no
    /// work request and no peer reaches the region through it until a Fast Register. It
    /// completes behind the Sends and Writes posted before it (Reads and atomics complete when
    /// answered: wait for a Read into the region before invalidating it, or its response fails
    /// the QP).
    LocalInvalidate {
        /// Our STag to invalidate.
        stag: u32,
    },
    /// An RDMA Write, then Immediate Data `imm`, which completes the peer's next receive once
    /// the Write is placed (RFC 7306; the payload is copied, so the request completes when
    /// TCP took it).
    WriteImm {
        /// Where to write.
        remote: Remote,
        /// The 8 octets the peer's completion carries.
        imm: u64,
        /// With Solicited Event.
        solicited: bool,
    },
    /// Immediate Data alone (no local entries): completes the peer's next receive with `imm`.
    Immediate {
        /// The 8 octets.
        imm: u64,
        /// With Solicited Event.
        solicited: bool,
    },
    /// Fetch-and-Add of `add` to the peer's 64-bit value at `Remote` (8-aligned, registered
    /// with [`crate::Access::REMOTE_ATOMIC`]); the value before lands in the single local
    /// entry of 8 octets, in this host's byte order.
    FetchAdd {
        /// The peer's value.
        remote: Remote,
        /// What to add.
        add: u64,
    },
    /// Compare-and-Swap: `swap` replaces the peer's value if it equals `compare`; the value
    /// before lands in the single local entry of 8 octets.
    CompareSwap {
        /// The peer's value.
        remote: Remote,
        /// The value expected.
        compare: u64,
        /// The new value.
        swap: u64,
    },
}

/// A send work request.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'s> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// The local buffer (from [`crate::MemoryRegion::sge`]); Reads take exactly one entry.
    pub sge: &'s [Sge],
    /// Report a completion (errors are always reported).
    pub signaled: bool,
}

/// Where a QP's received payload was placed ([`QueuePair::placement`]): `QUERY_QP`'s counters,
/// each explained on [`crate::abi::QueryQp`] (`in_order` and `out_of_order` are its
/// `placed_in_order` and `placed_out_of_order`; the others have the same names there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Placement {
    pub in_order: u64,
    pub out_of_order: u64,
    pub fpdus_out_of_order: u64,
    pub fpdus_by_marker: u64,
    pub fpdus_by_alignment: u64,
    pub fpdus_held_back: u64,
    pub fpdus_bad: u64,
    pub ooo_walks: u64,
    pub doorbells: u64,
    pub rx_marker_interval: u32,
    pub tx_marker_interval: u32,
    pub received_copied: u64,
}

/// Where a QP is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// Made, not connected yet: receives may be posted.
    Init,
    /// Connected: work requests flow.
    Connected,
    /// Ended; posted work was flushed. `terminate` is the RDMAP Terminate's (layer, type,
    /// code), if one was exchanged, and `sent` says whether we sent it.
    Error {
        /// (layer, error type, error code).
        terminate: Option<(u8, u8, u8)>,
        /// We sent the Terminate (else the peer did).
        sent: bool,
    },
}

impl From<&QueryQp> for QpState {
    fn from(q: &QueryQp) -> QpState {
        match q.state {
            qp_state::RTS => QpState::Connected,
            qp_state::INIT => QpState::Init,
            _ => {
                let t = q.terminate;
                let terminate = (t != 0).then_some(((t >> 16) as u8, (t >> 8) as u8, t as u8));
                QpState::Error { terminate, sent: q.terminate_sent != 0 }
            }
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "placed {} octets in order, {} out of order ({} FPDUs: {} found through a marker, {} at a segment start; {} held back, {} bad; \
             {} walks of TCP's out-of-order queue, {} doorbells; markers every {}/{} octets in/out; {} octets through the bounce buffer)",
            self.in_order,
            self.out_of_order,
            self.fpdus_out_of_order,
            self.fpdus_by_marker,
            self.fpdus_by_alignment,
            self.fpdus_held_back,
            self.fpdus_bad,
            self.ooo_walks,
            self.doorbells,
            self.rx_marker_interval,
            self.tx_marker_interval,
            self.received_copied
        )
    }
}

impl From<&QueryQp> for Placement {
    fn from(q: &QueryQp) -> Placement {
        Placement {
            in_order: q.placed_in_order,
            out_of_order: q.placed_out_of_order,
            fpdus_out_of_order: q.fpdus_out_of_order,
            ooo_walks: q.ooo_walks,
            doorbells: q.doorbells,
            fpdus_by_marker: q.fpdus_by_marker,
            fpdus_by_alignment: q.fpdus_by_alignment,
            fpdus_held_back: q.fpdus_held_back,
            fpdus_bad: q.fpdus_bad,
            rx_marker_interval: q.rx_marker_interval,
            tx_marker_interval: q.tx_marker_interval,
            received_copied: q.received_copied,
        }
    }
}

/// A receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'s> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where the message goes (regions need LOCAL_WRITE).
    pub sge: &'s [Sge],
}

/// Our side of a work request ring: entries are written at the tail; the module takes every
/// entry up to the tail at each doorbell, so the whole ring is free again after it.
struct WorkRing<T> {
    map: Mapping,
    entries: u32,
    tail: Cell<u32>,
    _entry: std::marker::PhantomData<T>,
}

impl<T: Copy> WorkRing<T> {
    fn new(map: Mapping, entries: u32) -> WorkRing<T> {
        WorkRing { map, entries, tail: Cell::new(0), _entry: std::marker::PhantomData }
    }

    fn push(&self, e: T) {
        let t = self.tail.get();
        self.map.write((t % self.entries) as usize * std::mem::size_of::<T>(), e);
        self.tail.set(t.wrapping_add(1));
    }
}

fn entries(sge: &[Sge]) -> io::Result<([Sge; MAX_SGE], u32)> {
    if sge.len() > MAX_SGE {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut a = [Sge::default(); MAX_SGE];
    a[..sge.len()].copy_from_slice(sge);
    Ok((a, sge.len() as u32))
}

/// The send ring entry of `wr`.
fn send_entry(wr: &SendWr<'_>) -> io::Result<PostSend> {
    let (sge, num_sge) = entries(wr.sge)?;
    let mut req = PostSend { wr_id: wr.wr_id, num_sge, sge, flags: if wr.signaled { send_flags::SIGNALED } else { 0 }, ..PostSend::default() };
    match wr.op {
        SendOp::Send { solicited } => {
            req.opcode = opcode::SEND;
            req.flags |= if solicited { send_flags::SOLICITED } else { 0 };
        }
        SendOp::SendInvalidate { solicited, stag } => {
            req.opcode = opcode::SEND_WITH_INVALIDATE;
            req.flags |= if solicited { send_flags::SOLICITED } else { 0 };
            req.invalidate = stag;
        }
        SendOp::Write(r) | SendOp::Read(r) => {
            req.opcode = if matches!(wr.op, SendOp::Write(_)) { opcode::WRITE } else { opcode::READ };
            req.remote_addr = r.addr;
            req.rkey = r.rkey;
        }
        SendOp::WriteImm { remote, imm, solicited } => {
            (req.opcode, req.remote_addr, req.rkey, req.imm_data) = (opcode::WRITE_WITH_IMM, remote.addr, remote.rkey, imm);
            req.flags |= if solicited { send_flags::SOLICITED } else { 0 };
        }
        SendOp::Immediate { imm, solicited } => {
            (req.opcode, req.imm_data) = (opcode::IMMEDIATE, imm);
            req.flags |= if solicited { send_flags::SOLICITED } else { 0 };
        }
        SendOp::ReadInvalidate { remote, stag } => {
            (req.opcode, req.remote_addr, req.rkey, req.invalidate) = (opcode::READ_WITH_INVALIDATE, remote.addr, remote.rkey, stag);
        }
        SendOp::LocalInvalidate { stag } => (req.opcode, req.invalidate) = (opcode::LOCAL_INVALIDATE, stag),
        SendOp::FetchAdd { remote, add } => {
            (req.opcode, req.remote_addr, req.rkey, req.compare_add) = (opcode::FETCH_ADD, remote.addr, remote.rkey, add);
        }
        SendOp::CompareSwap { remote, compare, swap } => {
            (req.opcode, req.remote_addr, req.rkey, req.compare_add, req.swap) = (opcode::COMPARE_SWAP, remote.addr, remote.rkey, compare, swap);
        }
    }
    Ok(req)
}
/// A queue pair. Made unconnected ([`crate::Device::create_qp`]) so receives can be posted
/// before the peer can send; [`QueuePair::adopt`] then connects it over a TCP stream, which it
/// owns from then on (the stream can no longer be read or written directly). Dropping it closes
/// the connection (posted work is flushed).
pub struct QueuePair<'a> {
    dev: &'a Device,
    handle: u32,
    sq: WorkRing<PostSend>,
    rq: WorkRing<PostRecv>,
    negotiated: Option<Negotiated>,
    /// The private data of the reject that refused our last connect.
    rejected: Option<Vec<u8>>,
    stream: Option<TcpStream>,
    _cqs: std::marker::PhantomData<&'a CompletionQueue<'a>>,
}

impl<'a> QueuePair<'a> {
    pub(crate) fn create(dev: &'a Device, init: &QpInit<'a>) -> io::Result<QueuePair<'a>> {
        if !std::ptr::eq(init.pd.device(), dev) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut req = CreateQp {
            pd: init.pd.handle(),
            send_cq: init.send_cq.handle(),
            recv_cq: init.recv_cq.handle(),
            max_recv_wr: init.max_recv_wr,
            max_send_wr: init.max_send_wr,
            max_sge: init.max_sge,
            max_inline: init.max_inline,
            ..CreateQp::default()
        };
        sys::ioctl(dev.file().as_fd(), IOCTL_CREATE_QP, &mut req)?;
        let rings = (|| {
            let sq = WorkRing::new(Mapping::new(dev.file().as_fd(), req.sq_offset, req.sq_len)?, init.max_send_wr);
            let rq = WorkRing::new(Mapping::new(dev.file().as_fd(), req.rq_offset, req.rq_len)?, init.max_recv_wr);
            Ok::<_, io::Error>((sq, rq))
        })();
        let (sq, rq) = rings.inspect_err(|_| {
            let _ = sys::ioctl(dev.file().as_fd(), IOCTL_DESTROY_QP, &mut DestroyQp { qp: req.qp, reserved: 0 });
        })?;
        Ok(QueuePair { dev, handle: req.qp, sq, rq, negotiated: None, rejected: None, stream: None, _cqs: std::marker::PhantomData })
    }

    /// Connects the QP over `stream`: the module adopts the socket and runs the MPA exchange on
    /// it (blocking, up to `opts.timeout`). ECONNREFUSED if the responder rejected us, EPROTO
    /// if the peer broke the protocol, ETIMEDOUT if it said nothing; EINVAL if already
    /// connected. On failure the QP may be adopted again with another stream.
    pub fn adopt(&mut self, stream: TcpStream, opts: &ConnectOptions) -> io::Result<&Negotiated> {
        let mut peer = vec![0u8; 512];
        let mut req = self.mpa_request(opts, &mut peer);
        req.fd = stream.as_raw_fd();
        let done = sys::ioctl(self.dev.file().as_fd(), IOCTL_ADOPT_QP, &mut req);
        self.settle(done, &req, peer)?;
        self.stream = Some(stream);
        Ok(self.negotiated.as_ref().expect("settled"))
    }

    /// Connects the QP to `to` (IPv4 or IPv6) through a TCP connection the module makes itself, then runs the
    /// MPA exchange as initiator (`opts.role` must be [`Role::Initiator`]), all within
    /// `opts.timeout`. ECONNREFUSED or ETIMEDOUT if TCP cannot connect, otherwise as
    /// [`QueuePair::adopt`].
    pub fn connect(&mut self, to: impl Into<SocketAddr>, opts: &ConnectOptions) -> io::Result<&Negotiated> {
        let mut peer = vec![0u8; 512];
        let mut req = ConnectQp { adopt: self.mpa_request(opts, &mut peer), peer: endpoint(to.into()), reserved: 0 };
        let done = sys::ioctl(self.dev.file().as_fd(), IOCTL_CONNECT_QP, &mut req);
        self.settle(done, &req.adopt, peer)
    }

    /// Accepts a connection request from a [`crate::Listener`] on this QP (`opts.role` must be
    /// [`Role::Responder`]): the module answers the request with its MPA reply.
    pub(crate) fn accept(&mut self, request: u32, opts: &ConnectOptions) -> io::Result<&Negotiated> {
        let mut peer = vec![0u8; 512];
        let mut req = Accept { adopt: self.mpa_request(opts, &mut peer), request, reserved: 0 };
        let done = sys::ioctl(self.dev.file().as_fd(), IOCTL_ACCEPT, &mut req);
        self.settle(done, &req.adopt, peer)
    }

    /// Ends the connection (the peer sees it close) without destroying the QP: posted work is
    /// flushed with error completions, which stay to be polled. ENOTCONN unless connected.
    pub fn disconnect(&self) -> io::Result<()> {
        sys::ioctl(self.dev.file().as_fd(), IOCTL_DISCONNECT, &mut HandleOp { handle: self.handle, reserved: 0 })
    }

    /// The private data of the reject that refused our last [`QueuePair::connect`] or
    /// [`QueuePair::adopt`] (which failed with ECONNREFUSED).
    pub fn reject_private_data(&self) -> Option<&[u8]> {
        self.rejected.as_deref()
    }

    /// The MPA part of ADOPT_QP/CONNECT_QP; `peer` receives the peer's private data.
    fn mpa_request(&self, opts: &ConnectOptions, peer: &mut [u8]) -> AdoptQp {
        AdoptQp {
            role: if opts.role == Role::Initiator { role::INITIATOR } else { role::RESPONDER },
            flags: (if opts.markers { conn::RX_MARKERS } else { 0 })
                | (if opts.crc { conn::CRC } else { 0 })
                | (if opts.copy_send { conn::COPY_SEND } else { 0 })
                | (if opts.in_order_only { conn::IN_ORDER } else { 0 })
                | (if opts.aligned { conn::ALIGNED } else { 0 })
                | (if opts.extensions { conn::EXTENSIONS } else { 0 })
                | opts.rtr.bits(),
            marker_interval: opts.marker_interval,
            mpa_rev: opts.mpa_rev as u32,
            ird: opts.ird as u32,
            ord: opts.ord as u32,
            private_len: opts.private_data.len() as u32,
            peer_private_cap: peer.len() as u32,
            private_data: opts.private_data.as_ptr() as u64,
            peer_private: peer.as_mut_ptr() as u64,
            timeout_ms: opts.timeout.as_millis().clamp(1, 60_000) as u32,
            qp: self.handle,
            ..AdoptQp::default()
        }
    }

    /// Records what the module's answer to a connect (`done`) says was settled, or the
    /// private data of a reject.
    fn settle(&mut self, done: io::Result<()>, req: &AdoptQp, mut peer: Vec<u8>) -> io::Result<&Negotiated> {
        peer.truncate((req.peer_private_len as usize).min(peer.len()));
        if let Err(e) = done {
            let rejected = e.raw_os_error() == Some(libc::ECONNREFUSED) && req.negotiated & conn::REJECTED != 0;
            self.rejected = rejected.then_some(peer);
            return Err(e);
        }
        self.rejected = None;
        Ok(self.negotiated.insert(Negotiated {
            mpa_rev: req.rev as u8,
            crc: req.negotiated & conn::CRC != 0,
            rx_markers: req.negotiated & conn::RX_MARKERS != 0,
            tx_markers: req.negotiated & conn::TX_MARKERS != 0,
            ird: req.neg_ird as u16,
            ord: req.neg_ord as u16,
            extensions: req.negotiated & conn::EXTENSIONS != 0,
            rtr: RtrTypes::from_bits(req.negotiated),
            peer_private: peer,
        }))
    }

    /// What the MPA exchange settled (None before [`QueuePair::adopt`]).
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// Where the next send and receive entries go. Processes that share this QP after a fork,
    /// taking turns under a lock of their own, hand these on: each resumes where the one before
    /// left ([`QueuePair::resume_at`]).
    pub fn tails(&self) -> (u32, u32) {
        (self.sq.tail.get(), self.rq.tail.get())
    }

    /// Resumes at the tails another process's copy of this QP left ([`QueuePair::tails`]).
    pub fn resume_at(&self, (sq, rq): (u32, u32)) {
        self.sq.tail.set(sq);
        self.rq.tail.set(rq);
    }

    /// The module's handle for this QP (as in completions).
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Posts a receive buffer for the peer's next Send (also before the QP is connected).
    /// ENOMEM when the receive queue is full, ENOTCONN once the QP ended.
    pub fn post_recv(&self, wr_id: u64, sge: &[Sge]) -> io::Result<()> {
        self.post_recvs(&[RecvWr { wr_id, sge }])
    }

    /// Posts several receives with one system call (one doorbell). On error, the receives
    /// before the failing one were posted and the rest were not.
    pub fn post_recvs(&self, wrs: &[RecvWr<'_>]) -> io::Result<()> {
        for chunk in wrs.chunks(self.rq.entries as usize) {
            for w in chunk {
                let (sge, num_sge) = entries(w.sge)?;
                self.rq.push(PostRecv { qp: 0, num_sge, wr_id: w.wr_id, sge });
            }
            self.ring_doorbell()?;
        }
        Ok(())
    }

    /// Posts a send work request; it never waits for the network: the module queues the
    /// message and hands it to TCP as the socket buffer allows (ENOMEM when as many requests as
    /// the send queue holds are outstanding). Its buffer is the application's again when the
    /// request completes (or a later one does): messages of a page or more are sent straight
    /// from the registered memory (zero copy) and complete once the peer has acknowledged
    /// them; smaller ones are copied and complete once TCP took them. A Read completes when its
    /// data is in place. Keep the QP until what matters has completed: destroying it flushes
    /// what was not sent yet. A responder's QP sends nothing before the initiator's first
    /// message arrived (RFC 5044 7.1.2; in peer-to-peer mode, its RTR): what it posts earlier
    /// waits in the send queue.
    pub fn post_send(&self, wr: &SendWr<'_>) -> io::Result<()> {
        self.post_entry(send_entry(wr)?)
    }

    /// Posts a Send or RDMA Write whose payload is `data` itself, copied by the module when it
    /// takes the request (inline data: no registered memory; at most the QP's `max_inline`
    /// octets, EINVAL beyond). The request completes like a copied one.
    pub fn post_send_inline(&self, wr_id: u64, op: SendOp, data: &[u8], signaled: bool) -> io::Result<()> {
        if matches!(op, SendOp::Read(_) | SendOp::ReadInvalidate { .. }) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let sge = [Sge { addr: data.as_ptr() as u64, length: data.len() as u32, lkey: 0 }];
        let mut req = send_entry(&SendWr { wr_id, op, sge: &sge, signaled })?;
        req.flags |= send_flags::INLINE;
        // The doorbell copies `data` before this returns, while it is borrowed.
        self.post_entry(req)
    }

    /// Fast Register: makes `mr`, invalidated (by a Local Invalidate, a Read with Invalidate or
    /// the peer's Send with Invalidate), valid again with `access` over bytes `range` of its
    /// buffer, under a new STag: its index with key byte `key` (not 0). Returns the new STag,
    /// which `mr` reports from then on; the old one reaches nothing. Like a Local Invalidate,
    /// it takes effect when posted and completes behind the Sends and Writes posted before it.
    /// Panics if `range` is outside the buffer or longer than 4 GiB - 1.
    pub fn post_fast_register(&self, wr_id: u64, mr: &MemoryRegion<'_>, key: u8, range: Range<usize>, access: Access, signaled: bool) -> io::Result<u32> {
        let sge = mr.sge(range);
        let stag = (mr.stag() & !0xff) | key as u32;
        let req = PostSend {
            wr_id,
            opcode: opcode::FAST_REGISTER,
            flags: if signaled { send_flags::SIGNALED } else { 0 },
            rkey: stag,
            remote_addr: sge.addr,
            compare_add: sge.length as u64,
            swap: access.bits() as u64,
            ..PostSend::default()
        };
        self.sq.push(req);
        // The doorbell also takes receives pushed before and not rung yet: the region's STag
        // follows what the module did with the Fast Register, whatever became of those.
        let (rq_error, sq_error) = self.doorbell_errors()?;
        if sq_error != 0 {
            return Err(io::Error::from_raw_os_error(sq_error as i32));
        }
        mr.set_stag(stag);
        match rq_error {
            0 => Ok(stag),
            e => Err(io::Error::from_raw_os_error(e as i32)),
        }
    }

    /// Puts a raw entry on the send ring and rings the doorbell (tests of the module's checks).
    #[cfg(feature = "test-hooks")]
    pub fn post_send_raw(&self, entry: PostSend) -> io::Result<()> {
        self.post_entry(entry)
    }

    fn post_entry(&self, entry: PostSend) -> io::Result<()> {
        self.sq.push(entry);
        self.ring_doorbell()
    }

    /// Tells the module about everything written to the rings; the first error of either ring.
    fn ring_doorbell(&self) -> io::Result<()> {
        match self.doorbell_errors()? {
            (0, 0) => Ok(()),
            (0, e) | (e, _) => Err(io::Error::from_raw_os_error(e as i32)),
        }
    }

    /// Tells the module about everything written to the rings: each ring's error (an errno, or
    /// 0).
    fn doorbell_errors(&self) -> io::Result<(u32, u32)> {
        let mut db = Doorbell { qp: self.handle, sq_tail: self.sq.tail.get(), rq_tail: self.rq.tail.get(), ..Doorbell::default() };
        sys::ioctl(self.dev.file().as_fd(), IOCTL_DOORBELL, &mut db)?;
        Ok((db.rq_error, db.sq_error))
    }

    /// Rings the doorbell with raw tails (tests of the module's checks).
    #[cfg(feature = "test-hooks")]
    pub fn doorbell_raw(&self, sq_tail: u32, rq_tail: u32) -> io::Result<()> {
        sys::ioctl(self.dev.file().as_fd(), IOCTL_DOORBELL, &mut Doorbell { qp: self.handle, sq_tail, rq_tail, ..Doorbell::default() })
    }

    /// Whether the QP is still connected, and if not, why.
    pub fn state(&self) -> io::Result<QpState> {
        Ok(QpState::from(&self.query()?))
    }

    /// Payload octets sent so far: (from the registered pages, zero copy; copied first). The
    /// module copies messages shorter than a page, where that is cheaper than referencing
    /// pages; longer ones go to TCP straight from the registered memory.
    pub fn sent_octets(&self) -> io::Result<(u64, u64)> {
        let q = self.query()?;
        Ok((q.sent_zero_copy, q.sent_copied))
    }

    /// Where the payload this QP received was placed: in order, or out of order straight from
    /// TCP's out-of-order queue (ahead of the holes before it), with the doorbell's count.
    pub fn placement(&self) -> io::Result<Placement> {
        Ok(Placement::from(&self.query()?))
    }

    fn query(&self) -> io::Result<QueryQp> {
        let mut q = QueryQp { qp: self.handle, ..QueryQp::default() };
        sys::ioctl(self.dev.file().as_fd(), IOCTL_QUERY_QP, &mut q)?;
        Ok(q)
    }
}

impl Drop for QueuePair<'_> {
    fn drop(&mut self) {
        let mut req = DestroyQp { qp: self.handle, reserved: 0 };
        // Cannot fail for a live QP; closing the device destroys it anyway.
        let _ = sys::ioctl(self.dev.file().as_fd(), IOCTL_DESTROY_QP, &mut req);
    }
}
