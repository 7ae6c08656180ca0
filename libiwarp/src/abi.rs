//! The user/kernel ABI of `/dev/iwarp`: ioctl numbers and argument structs.
//!
//! One definition, compiled into both `iwarp.ko` (by path) and `libiwarp`, so the two sides
//! cannot drift; `tests/abi_layout.rs` pins sizes and offsets, and the module asserts the same
//! sizes at compile time. No dependencies: the kernel build compiles this file as is.
//! Bump [`ABI_VERSION`] on every incompatible change.

/// Version of this ABI; QUERY_DEVICE reports the module's.
pub const ABI_VERSION: u32 = 8;

/// The ioctl type byte of `/dev/iwarp`.
pub const IOCTL_TYPE: u32 = 0xa7;

const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// The Linux `_IOC` encoding (direction, size, type, number) on x86 and arm.
const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    dir << 30 | (size as u32) << 16 | IOCTL_TYPE << 8 | nr
}

/// The argument size an ioctl command encodes (the Linux `_IOC_SIZE`).
pub const fn ioc_size(cmd: u32) -> usize {
    (cmd >> 16 & 0x3fff) as usize
}

/// Capability bits of [`QueryDevice::caps`].
pub mod caps {
    /// MPA markers (RFC 5044), any interval.
    pub const MARKERS: u64 = 1 << 0;
    /// MPA CRC32c.
    pub const CRC: u64 = 1 << 1;
    /// MPA revision 2 (RFC 6581): IRD/ORD negotiation, peer-to-peer RTR.
    pub const MPA_V2: u64 = 1 << 2;
    /// Direct placement of out-of-order segments found through markers.
    pub const OOO_PLACEMENT: u64 = 1 << 3;
    /// Queue pairs with work requests and completion queues (the data path).
    pub const QUEUE_PAIRS: u64 = 1 << 4;
    /// RFC 7306: Immediate Data and Atomic Operations, on connections that agree to them.
    pub const EXTENSIONS: u64 = 1 << 5;
}

/// Answer of [`IOCTL_QUERY_DEVICE`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryDevice {
    /// The module's [`ABI_VERSION`].
    pub abi_version: u32,
    /// Default MPA marker interval in octets (RFC 5044: 512).
    pub marker_interval: u32,
    /// [`caps`] bits.
    pub caps: u64,
    /// Most queue pairs per device.
    pub max_qp: u32,
    /// Most work requests per queue.
    pub max_qp_wr: u32,
    /// Most completion queues.
    pub max_cq: u32,
    /// Most entries per completion queue.
    pub max_cqe: u32,
    /// Most memory regions.
    pub max_mr: u32,
    /// Most scatter/gather entries per work request.
    pub max_sge: u32,
    /// Most inbound RDMA Reads outstanding per QP.
    pub max_ird: u32,
    /// Most outbound RDMA Reads outstanding per QP.
    pub max_ord: u32,
    /// Largest memory region in octets.
    pub max_mr_size: u64,
    /// Most inline data per send work request.
    pub max_inline: u32,
    /// Most protection domains.
    pub max_pd: u32,
    /// Zero; room to grow without a version bump.
    pub reserved: [u64; 3],
}

/// Size of [`QueryDevice`], pinned by the layout test and asserted in the module.
pub const QUERY_DEVICE_SIZE: usize = 88;

/// `_IOR(0xa7, 0x00, struct QueryDevice)`: the device's version, capabilities and limits.
pub const IOCTL_QUERY_DEVICE: u32 = ioc(IOC_READ, 0x00, QUERY_DEVICE_SIZE);

/// Access rights of a memory region ([`RegMr::access`]), as in verbs.
pub mod access {
    /// The local side may write (receives, RDMA Read responses land here).
    pub const LOCAL_WRITE: u32 = 1 << 0;
    /// The peer may RDMA Write into it (requires LOCAL_WRITE).
    pub const REMOTE_WRITE: u32 = 1 << 1;
    /// The peer may RDMA Read from it.
    pub const REMOTE_READ: u32 = 1 << 2;
    /// The peer may run atomic operations on it (RFC 7306; requires LOCAL_WRITE).
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    /// Every defined bit.
    pub const ALL: u32 = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC;
}

/// Argument of [`IOCTL_REG_MR`]: the caller fills `addr`, `length` and `access`; the module
/// fills `lkey` and `stag` (equal today: one key per region).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegMr {
    /// Start of the user buffer.
    pub addr: u64,
    /// Its length in octets (at least 1, at most `max_mr_size`).
    pub length: u64,
    /// [`access`] bits.
    pub access: u32,
    /// Out: local key.
    pub lkey: u32,
    /// Out: steering tag the peer uses (index << 8 | key; the key changes on every
    /// registration that reuses an index).
    pub stag: u32,
    /// The protection domain ([`IOCTL_ALLOC_PD`]): only QPs of the same one may use the region.
    pub pd: u32,
}

/// Size of [`RegMr`].
pub const REG_MR_SIZE: usize = 32;

/// `_IOWR(0xa7, 0x01, struct RegMr)`: pin and register a user buffer.
pub const IOCTL_REG_MR: u32 = ioc(IOC_READ | IOC_WRITE, 0x01, REG_MR_SIZE);

/// Argument of [`IOCTL_ALLOC_PD`] and [`IOCTL_DEALLOC_PD`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PdOp {
    /// The protection domain (out for ALLOC_PD, zero going in).
    pub pd: u32,
    /// Zero.
    pub reserved: u32,
}

/// Size of [`PdOp`].
pub const PD_OP_SIZE: usize = 8;

/// `_IOWR(0xa7, 0x0e, struct PdOp)`: a new protection domain.
pub const IOCTL_ALLOC_PD: u32 = ioc(IOC_READ | IOC_WRITE, 0x0e, PD_OP_SIZE);

/// `_IOW(0xa7, 0x0f, struct PdOp)`: frees a protection domain; EBUSY while a region or QP is in it.
pub const IOCTL_DEALLOC_PD: u32 = ioc(IOC_WRITE, 0x0f, PD_OP_SIZE);

/// Argument of [`IOCTL_DEREG_MR`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeregMr {
    /// The region's STag.
    pub stag: u32,
    /// Zero.
    pub reserved: u32,
}

/// Size of [`DeregMr`].
pub const DEREG_MR_SIZE: usize = 8;

/// `_IOW(0xa7, 0x02, struct DeregMr)`: deregister and unpin.
pub const IOCTL_DEREG_MR: u32 = ioc(IOC_WRITE, 0x02, DEREG_MR_SIZE);

/// Answer of [`IOCTL_QUERY_STATS`]: module-wide counters, for tests and monitoring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryStats {
    /// User pages pinned by all regions of all contexts.
    pub pinned_pages: u64,
    /// Registered memory regions.
    pub memory_regions: u64,
    /// Open device contexts.
    pub contexts: u64,
    /// Queue pairs (with their adopted sockets).
    pub queue_pairs: u64,
    /// Zero.
    pub reserved: [u64; 4],
}

/// Size of [`QueryStats`].
pub const QUERY_STATS_SIZE: usize = 64;

/// `_IOR(0xa7, 0x03, struct QueryStats)`.
pub const IOCTL_QUERY_STATS: u32 = ioc(IOC_READ, 0x03, QUERY_STATS_SIZE);

/// Which side of the MPA exchange a QP takes ([`AdoptQp::role`]).
pub mod role {
    /// Sends the MPA request (the side that connected).
    pub const INITIATOR: u32 = 0;
    /// Answers it (the side that accepted).
    pub const RESPONDER: u32 = 1;
}

/// Connection option bits: what is asked in [`AdoptQp::flags`], what was negotiated in
/// [`AdoptQp::negotiated`].
pub mod conn {
    /// Ask the peer to put markers in what it sends us (our M flag) / markers in what we receive.
    pub const RX_MARKERS: u32 = 1 << 0;
    /// Ask for CRCs (our C flag) / CRCs in use.
    pub const CRC: u32 = 1 << 1;
    /// Negotiated only: the peer asked for markers, so ours carry them.
    pub const TX_MARKERS: u32 = 1 << 2;
    /// Local only, not negotiated: copy every payload before sending it, also those of a page
    /// or more that are otherwise sent straight from the registered pages (zero copy).
    pub const COPY_SEND: u32 = 1 << 3;
    /// Out only, with ECONNREFUSED: the peer's MPA reject refused us (not TCP); its private
    /// data length is in `peer_private_len`.
    pub const REJECTED: u32 = 1 << 4;
    /// Local only, not negotiated: place what arrives only at the in-order point (no
    /// out-of-order placement), e.g. to compare the two.
    pub const IN_ORDER: u32 = 1 << 5;
    /// Local only, not negotiated: start each FPDU at a TCP segment (each is a record that
    /// ends its skb), so the peer can place out-of-order segments without markers (with CRCs).
    /// It costs bandwidth: one skb per FPDU, where FPDUs otherwise go to TCP as one stream that
    /// it cuts into large GSO packets (docs/ooo-placement.md has the figures).
    pub const ALIGNED: u32 = 1 << 6;
    /// Offer (initiator) or accept (responder) the RFC 7306 extensions / both sides agreed.
    /// The offer is a token opening the MPA private data (8 octets of the application's 508);
    /// a peer without them does not answer it, and is never sent their messages.
    pub const EXTENSIONS: u32 = 1 << 7;
    /// Peer-to-peer mode (RFC 6581, MPA revision 2): a zero-length Send may serve as the
    /// ready-to-receive (RTR) message: offered (initiator) or accepted (responder) / the RTR in
    /// use. The initiator sends the RTR before anything posted; the responder sends nothing
    /// until it arrived. No RTR bit asks for no peer-to-peer mode.
    pub const RTR_SEND: u32 = 1 << 8;
    /// A zero-length RDMA Write may serve as the RTR (see [`RTR_SEND`]).
    pub const RTR_WRITE: u32 = 1 << 9;
    /// A zero-length RDMA Read may serve as the RTR, answered by a zero-length Read Response
    /// (see [`RTR_SEND`]).
    pub const RTR_READ: u32 = 1 << 10;
    /// Every RTR bit.
    pub const RTR: u32 = RTR_SEND | RTR_WRITE | RTR_READ;
    /// Every bit a caller may ask for.
    pub const ASKABLE: u32 = RX_MARKERS | CRC | COPY_SEND | IN_ORDER | ALIGNED | EXTENSIONS | RTR;
}

/// Argument of [`IOCTL_CREATE_QP`]: a queue pair not connected yet, with its send and receive
/// rings (mapped like the CQ ring, at `sq_offset` and `rq_offset`). Receives may be posted at
/// once, so they are there before the peer's first Send; [`IOCTL_ADOPT_QP`] connects it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateQp {
    /// Completion queue of send work requests.
    pub send_cq: u32,
    /// Completion queue of receive work requests (may be `send_cq`).
    pub recv_cq: u32,
    /// Receive ring entries, and most receives posted at once (1..=[`MAX_QP_WR`]).
    pub max_recv_wr: u32,
    /// Send ring entries, and most RDMA Reads outstanding (1..=[`MAX_QP_WR`]; Reads are also
    /// capped by the ORD).
    pub max_send_wr: u32,
    /// Out: the QP handle.
    pub qp: u32,
    /// The protection domain: the QP reaches only regions registered in it, locally and from
    /// the peer.
    pub pd: u32,
    /// Out: `mmap` offset of the send ring ([`PostSend`] entries, `max_send_wr` of them).
    pub sq_offset: u64,
    /// Out: `mmap` offset of the receive ring ([`PostRecv`] entries, `max_recv_wr` of them).
    pub rq_offset: u64,
    /// Out: length of the send ring mapping.
    pub sq_len: u64,
    /// Out: length of the receive ring mapping.
    pub rq_len: u64,
    /// Scatter/gather entries per work request, send and receive (1..=[`MAX_SGE`]).
    pub max_sge: u32,
    /// Inline data per send work request ([`send_flags::INLINE`]), at most [`MAX_INLINE`].
    pub max_inline: u32,
}

/// Size of [`CreateQp`].
pub const CREATE_QP_SIZE: usize = 64;

/// `_IOWR(0xa7, 0x04, struct CreateQp)`.
pub const IOCTL_CREATE_QP: u32 = ioc(IOC_READ | IOC_WRITE, 0x04, CREATE_QP_SIZE);

/// Where rings are mapped: the `mmap` page offset is `kind << RING_KIND_SHIFT | handle`.
pub mod ring_kind {
    /// Shift of the kind in the page offset.
    pub const SHIFT: u32 = 20;
    /// A completion queue's ring (handle = the CQ's).
    pub const CQ: u64 = 0;
    /// A QP's send ring (handle = the QP's).
    pub const SQ: u64 = 1;
    /// A QP's receive ring.
    pub const RQ: u64 = 2;
}

/// Argument of [`IOCTL_ADOPT_QP`]: adopt an already connected TCP socket into QP `qp` and run
/// the MPA exchange on it (driven by the socket's callbacks; the call waits up to `timeout_ms`
/// for all of it, ETIMEDOUT after that). From then on the
/// socket belongs to the QP; the caller must not read or write its own descriptor any more.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdoptQp {
    /// The connected TCP socket.
    pub fd: i32,
    /// [`role`].
    pub role: u32,
    /// [`conn`] bits asked for.
    pub flags: u32,
    /// Highest MPA revision to speak: 1 or 2.
    pub mpa_rev: u32,
    /// Inbound RDMA Reads to offer (revision 2).
    pub ird: u32,
    /// Outbound RDMA Reads wanted (revision 2).
    pub ord: u32,
    /// Length of our private data (at most [`MAX_PRIVATE_DATA`]).
    pub private_len: u32,
    /// Room at `peer_private` for the peer's private data.
    pub peer_private_cap: u32,
    /// User pointer to our private data.
    pub private_data: u64,
    /// User pointer where the peer's private data goes.
    pub peer_private: u64,
    /// How long to wait for the peer's frame (1..=60000 ms).
    pub timeout_ms: u32,
    /// The QP (from [`IOCTL_CREATE_QP`], not connected yet).
    pub qp: u32,
    /// Out: length of the peer's private data (copied up to `peer_private_cap`).
    pub peer_private_len: u32,
    /// Out: negotiated [`conn`] bits.
    pub negotiated: u32,
    /// Out: MPA revision in use.
    pub rev: u32,
    /// Out: negotiated IRD (revision 2, else as asked).
    pub neg_ird: u32,
    /// Out: negotiated ORD (revision 2, else as asked).
    pub neg_ord: u32,
    /// Octets from one marker to the next, in each direction that negotiates markers: 0 for
    /// RFC 5044's 512. Anything else (a multiple of 4, 8..=65532) is for experiments only: MPA
    /// does not carry it, so both ends must ask for the same, and a real peer uses 512.
    pub marker_interval: u32,
}

/// Size of [`AdoptQp`].
pub const ADOPT_QP_SIZE: usize = 80;
/// Most private data a caller may send (MPA allows 512, of which revision 2 uses 4).
pub const MAX_PRIVATE_DATA: u32 = 508;

/// `_IOWR(0xa7, 0x0c, struct AdoptQp)`.
pub const IOCTL_ADOPT_QP: u32 = ioc(IOC_READ | IOC_WRITE, 0x0c, ADOPT_QP_SIZE);

/// Argument of [`IOCTL_CONNECT_QP`]: like [`IOCTL_ADOPT_QP`] (whose `fd` is unused), but the
/// module makes the TCP connection itself: a kernel socket in the caller's network namespace,
/// connecting to `addr:port`, then the MPA exchange as initiator, all within `adopt.timeout_ms`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectQp {
    /// The QP, the MPA options and what was negotiated (`role` must be initiator).
    pub adopt: AdoptQp,
    /// The peer: `AF_INET` or `AF_INET6` (EAFNOSUPPORT otherwise), its TCP port (not 0).
    pub peer: Endpoint,
    /// Zero.
    pub reserved: u32,
}

/// Size of [`ConnectQp`].
pub const CONNECT_QP_SIZE: usize = 104;

/// `_IOWR(0xa7, 0x0d, struct ConnectQp)`: ECONNREFUSED or ETIMEDOUT when TCP cannot connect.
pub const IOCTL_CONNECT_QP: u32 = ioc(IOC_READ | IOC_WRITE, 0x0d, CONNECT_QP_SIZE);

/// Argument of [`IOCTL_LISTEN`]: a kernel TCP socket listening in the caller's network
/// namespace, for [`IOCTL_GET_REQUEST`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Listen {
    /// Where to listen: `AF_INET` or `AF_INET6` (EAFNOSUPPORT otherwise; the unspecified IPv6
    /// address takes IPv4 connections too), port 0 for any free one; out: the port bound.
    pub at: Endpoint,
    /// Connections TCP completes before they are asked for (1..=1024).
    pub backlog: u32,
    /// Out: the listener.
    pub listener: u32,
    /// Zero.
    pub reserved: u32,
}

/// Size of [`Listen`].
pub const LISTEN_SIZE: usize = 32;

/// `_IOWR(0xa7, 0x10, struct Listen)`: EADDRINUSE when the port is taken.
pub const IOCTL_LISTEN: u32 = ioc(IOC_READ | IOC_WRITE, 0x10, LISTEN_SIZE);

/// Argument of [`IOCTL_CLOSE_LISTENER`], [`IOCTL_DISCONNECT`]: one handle.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandleOp {
    /// The listener or QP.
    pub handle: u32,
    /// Zero.
    pub reserved: u32,
}

/// Size of [`HandleOp`].
pub const HANDLE_OP_SIZE: usize = 8;

/// `_IOW(0xa7, 0x11, struct HandleOp)`: stops listening (a GET_REQUEST waiting on it returns).
pub const IOCTL_CLOSE_LISTENER: u32 = ioc(IOC_WRITE, 0x11, HANDLE_OP_SIZE);

/// Argument of [`IOCTL_GET_REQUEST`]: waits for the next connection on a listener and reads its
/// MPA request, so the application sees the initiator's private data and options before it
/// accepts ([`IOCTL_ACCEPT`]) or rejects ([`IOCTL_REJECT`]) it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetRequest {
    /// The listener.
    pub listener: u32,
    /// How long to wait for a connection whose request is whole (1..=60000 ms); ETIMEDOUT
    /// after that. Requests arrive while nobody waits too; a malformed one, or one not whole
    /// within 10 s of its connection, is dropped (the connection closed).
    pub timeout_ms: u32,
    /// User pointer where the initiator's private data goes.
    pub peer_private: u64,
    /// Room at `peer_private`.
    pub peer_private_cap: u32,
    /// Out: length of the initiator's private data (copied up to `peer_private_cap`).
    pub peer_private_len: u32,
    /// Out: the pending connection, for ACCEPT or REJECT.
    pub request: u32,
    /// Out: the request's MPA revision.
    pub rev: u32,
    /// Out: what the initiator asked for, from its side: [`conn::RX_MARKERS`] (markers in what
    /// it receives) and [`conn::CRC`].
    pub flags: u32,
    /// Out: the initiator's IRD (revision 2), else 0.
    pub ird: u32,
    /// Out: the initiator's ORD (revision 2), else 0.
    pub ord: u32,
    /// Out: the initiator's address and port (an IPv4 one taken by an IPv6 listener as an
    /// IPv4-mapped IPv6 address).
    pub peer: Endpoint,
}

/// Size of [`GetRequest`].
pub const GET_REQUEST_SIZE: usize = 64;

/// `_IOWR(0xa7, 0x12, struct GetRequest)`.
pub const IOCTL_GET_REQUEST: u32 = ioc(IOC_READ | IOC_WRITE, 0x12, GET_REQUEST_SIZE);

/// Argument of [`IOCTL_ACCEPT`]: like [`IOCTL_ADOPT_QP`] (`fd` unused, `role` responder), for
/// the connection of a pending request: the module answers it with an MPA reply.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accept {
    /// The QP, the MPA options and what was negotiated.
    pub adopt: AdoptQp,
    /// The pending request (from [`IOCTL_GET_REQUEST`]); used up either way.
    pub request: u32,
    /// Zero.
    pub reserved: u32,
}

/// Size of [`Accept`].
pub const ACCEPT_SIZE: usize = 88;

/// `_IOWR(0xa7, 0x13, struct Accept)`.
pub const IOCTL_ACCEPT: u32 = ioc(IOC_READ | IOC_WRITE, 0x13, ACCEPT_SIZE);

/// Argument of [`IOCTL_REJECT`]: answers a pending request with an MPA reject frame carrying
/// private data (the initiator's connect fails with ECONNREFUSED and gets it), then closes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reject {
    /// The pending request.
    pub request: u32,
    /// Length of the private data (at most [`MAX_PRIVATE_DATA`]).
    pub private_len: u32,
    /// User pointer to it.
    pub private_data: u64,
}

/// Size of [`Reject`].
pub const REJECT_SIZE: usize = 16;

/// `_IOW(0xa7, 0x14, struct Reject)`.
pub const IOCTL_REJECT: u32 = ioc(IOC_WRITE, 0x14, REJECT_SIZE);

/// `_IOW(0xa7, 0x15, struct HandleOp)`: ends a connected QP without destroying it: the peer
/// sees the connection close, posted work is flushed, and the QP stays for its completions.
pub const IOCTL_DISCONNECT: u32 = ioc(IOC_WRITE, 0x15, HANDLE_OP_SIZE);

/// Argument of [`IOCTL_SET_EVENT_FD`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetEventFd {
    /// An eventfd the module signals on every new asynchronous event; -1 to stop.
    pub eventfd: i32,
    /// Zero.
    pub reserved: u32,
}

/// Size of [`SetEventFd`].
pub const SET_EVENT_FD_SIZE: usize = 8;

/// `_IOW(0xa7, 0x16, struct SetEventFd)`.
pub const IOCTL_SET_EVENT_FD: u32 = ioc(IOC_WRITE, 0x16, SET_EVENT_FD_SIZE);

/// An asynchronous event ([`IOCTL_GET_ASYNC_EVENT`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AsyncEvent {
    /// [`event_kind`].
    pub kind: u32,
    /// The QP it concerns.
    pub qp: u32,
    /// The Terminate's layer << 16 | type << 8 | code (RFC 5040 section 4.8), for
    /// [`event_kind::QP_TERMINATED`].
    pub terminate: u32,
    /// [`event_flags`].
    pub flags: u32,
}

/// Size of [`AsyncEvent`].
pub const ASYNC_EVENT_SIZE: usize = 16;

/// `_IOR(0xa7, 0x17, struct AsyncEvent)`: the oldest event not fetched yet; EAGAIN if none.
pub const IOCTL_GET_ASYNC_EVENT: u32 = ioc(IOC_READ, 0x17, ASYNC_EVENT_SIZE);

/// Most asynchronous events a context keeps unfetched (more are dropped, see
/// [`event_flags::LOST`]).
pub const MAX_ASYNC_EVENTS: usize = 256;

/// Kinds of asynchronous events ([`AsyncEvent::kind`]).
pub mod event_kind {
    /// A Terminate ended the QP (we sent it, or the peer did: [`super::event_flags::SENT`]);
    /// its posted work was flushed.
    pub const QP_TERMINATED: u32 = 1;
    /// The connection closed or broke without a Terminate; posted work was flushed.
    pub const QP_CONNECTION_LOST: u32 = 2;
}

/// Flags of an asynchronous event ([`AsyncEvent::flags`]).
pub mod event_flags {
    /// We sent the Terminate.
    pub const SENT: u32 = 1 << 0;
    /// Events before this one were dropped (the queue was full).
    pub const LOST: u32 = 1 << 1;
}

/// Most listeners and pending requests one context may hold, each.
pub const MAX_LISTEN: u32 = 64;

/// Argument of [`IOCTL_DESTROY_QP`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestroyQp {
    /// The QP handle.
    pub qp: u32,
    /// Zero.
    pub reserved: u32,
}

/// Size of [`DestroyQp`].
pub const DESTROY_QP_SIZE: usize = 8;

/// `_IOW(0xa7, 0x05, struct DestroyQp)`: close the QP's connection and free it.
pub const IOCTL_DESTROY_QP: u32 = ioc(IOC_WRITE, 0x05, DESTROY_QP_SIZE);

/// Operations of [`PostSend::opcode`].
pub mod opcode {
    /// Send into the peer's next receive buffer.
    pub const SEND: u32 = 0;
    /// RDMA Write to the peer's region `rkey` at `remote_addr`.
    pub const WRITE: u32 = 1;
    /// RDMA Read of the peer's region `rkey` at `remote_addr` into the local SGEs.
    pub const READ: u32 = 2;
    /// Send, and have the peer invalidate its STag `invalidate` on arrival.
    pub const SEND_WITH_INVALIDATE: u32 = 3;
    /// RDMA Write followed by Immediate Data `imm_data`, which completes the peer's next
    /// receive once the Write is placed (RFC 7306 section 6).
    pub const WRITE_WITH_IMM: u32 = 4;
    /// Immediate Data `imm_data` alone: completes the peer's next receive.
    pub const IMMEDIATE: u32 = 5;
    /// Fetch-and-Add of `compare_add` to the 64-bit value at the peer's `remote_addr`
    /// (8-aligned, region with REMOTE_ATOMIC); the value before lands in the one 8-octet SGE.
    pub const FETCH_ADD: u32 = 6;
    /// Compare-and-Swap: `swap` replaces the peer's value if it equals `compare_add`; the
    /// value before lands in the one 8-octet SGE.
    pub const COMPARE_SWAP: u32 = 7;
    /// Local Invalidate of our own STag `invalidate` (no entries): from when it is posted, no
    /// work request and no peer reaches the region through it until a Fast Register; the
    /// request completes behind the Sends and Writes posted before it (Reads and atomics
    /// complete when answered; a Read still outstanding into the region fails the QP: wait for
    /// it first).
    pub const LOCAL_INVALIDATE: u32 = 8;
    /// RDMA Read with Invalidate: a Read that, once its data is in place, invalidates our own
    /// STag `invalidate` (usually the sink's region), as a Local Invalidate would.
    pub const READ_WITH_INVALIDATE: u32 = 9;
    /// Fast Register (no entries): makes an invalid region of this QP's protection domain valid
    /// again as STag `rkey` (its index with a new, non-zero key), covering `compare_add` octets
    /// from address `remote_addr` (inside the buffer it pinned) with the [`super::access`] bits
    /// in `swap`. Takes effect when posted and completes like a Local Invalidate (if the QP
    /// ends before its turn, both are reported flushed although they took effect).
    pub const FAST_REGISTER: u32 = 10;
}

/// Flags of [`PostSend::flags`].
pub mod send_flags {
    /// Send with Solicited Event.
    pub const SOLICITED: u32 = 1 << 0;
    /// Report a completion when done (unsignaled work requests complete silently).
    pub const SIGNALED: u32 = 1 << 1;
    /// Inline data (Sends and Writes): the SGEs name plain user memory (lkeys unused), copied
    /// when the doorbell takes the request, at most the QP's `max_inline` octets in all.
    pub const INLINE: u32 = 1 << 2;
    /// Every defined bit.
    pub const ALL: u32 = SOLICITED | SIGNALED | INLINE;
}

/// Most scatter/gather entries per work request.
pub const MAX_SGE: usize = 4;
/// Most inline data per work request.
pub const MAX_INLINE: u32 = 1024;

/// One piece of a work request's local buffer: `length` octets at virtual address `addr`,
/// inside the region `lkey`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address in the region.
    pub addr: u64,
    /// Octets.
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// A send work request: an entry of a QP's send ring. The module copies each entry out of the
/// ring when the doorbell rings and checks it; the message is queued and goes to TCP as the
/// socket buffer takes it (DOORBELL never waits for the network). Sends and Writes complete
/// once TCP took them whole (payloads under a page and inline data, copied at doorbell time) or
/// acknowledged them (payloads of a page or more, sent from the registered pages), Reads when
/// the response has been placed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PostSend {
    /// Unused in rings (zero).
    pub qp: u32,
    /// [`opcode`].
    pub opcode: u32,
    /// [`send_flags`].
    pub flags: u32,
    /// Entries used in `sge` (0..=[`MAX_SGE`]; a Read takes exactly 1).
    pub num_sge: u32,
    /// Returned in the completion.
    pub wr_id: u64,
    /// Write/Read: tagged offset (the peer's virtual address).
    pub remote_addr: u64,
    /// Write/Read: the peer's STag.
    pub rkey: u32,
    /// Send with Invalidate: the peer STag to invalidate; Local Invalidate, Read with
    /// Invalidate: our own.
    pub invalidate: u32,
    /// The local buffer (Read: where the data goes; needs LOCAL_WRITE).
    pub sge: [Sge; MAX_SGE],
    /// Write with Immediate, Immediate: the 8 octets the peer's completion carries.
    pub imm_data: u64,
    /// Fetch-and-Add: what to add; Compare-and-Swap: what to compare with.
    pub compare_add: u64,
    /// Compare-and-Swap: the new value.
    pub swap: u64,
}

/// Size of [`PostSend`].
pub const POST_SEND_SIZE: usize = 128;
/// Largest message (total of a work request's SGEs).
pub const MAX_MESSAGE: u64 = 16 << 20;

/// A receive work request: an entry of a QP's receive ring, a buffer for the next Send the
/// peer makes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PostRecv {
    /// Unused in rings (zero).
    pub qp: u32,
    /// Entries used in `sge` (0..=[`MAX_SGE`]).
    pub num_sge: u32,
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where the message goes (regions need LOCAL_WRITE).
    pub sge: [Sge; MAX_SGE],
}

/// Size of [`PostRecv`].
pub const POST_RECV_SIZE: usize = 80;

/// Argument of [`IOCTL_DOORBELL`]: the application wrote ring entries up to (not including)
/// `sq_tail` / `rq_tail` (free-running counts; entry `n` is in slot `n % ring entries`). The
/// module keeps its own head of each ring, copies the new entries out, checks them and
/// executes them in order (receives first). An entry that fails its check is dropped with the
/// entries after it; `*_done` counts those taken, `*_error` is the errno of the one that failed
/// (0 if none). A tail more than a ring's size ahead of the module's head is EINVAL for the
/// whole call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Doorbell {
    /// The QP handle.
    pub qp: u32,
    /// The application's send ring tail.
    pub sq_tail: u32,
    /// The application's receive ring tail.
    pub rq_tail: u32,
    /// Out: send entries taken.
    pub sq_done: u32,
    /// Out: receive entries taken.
    pub rq_done: u32,
    /// Out: errno of the send entry that failed, or 0.
    pub sq_error: u32,
    /// Out: errno of the receive entry that failed, or 0.
    pub rq_error: u32,
    /// Zero.
    pub reserved: u32,
}

/// Size of [`Doorbell`].
pub const DOORBELL_SIZE: usize = 32;

/// `_IOWR(0xa7, 0x06, struct Doorbell)`.
pub const IOCTL_DOORBELL: u32 = ioc(IOC_READ | IOC_WRITE, 0x06, DOORBELL_SIZE);

/// Argument of [`IOCTL_CREATE_CQ`]. The ring is mapped with
/// `mmap(NULL, mmap_len, PROT_READ | PROT_WRITE, MAP_SHARED, device_fd, mmap_offset)`; its layout
/// is [`cq_ring`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateCq {
    /// In: entries wanted (1..=[`MAX_CQE`]); out: entries made (the next power of two).
    pub depth: u32,
    /// In: an eventfd the module signals when an armed CQ gets an entry, or -1.
    pub eventfd: i32,
    /// Out: the CQ handle.
    pub cq: u32,
    /// Zero.
    pub reserved: u32,
    /// Out: the `mmap` offset of the ring.
    pub mmap_offset: u64,
    /// Out: the ring's length in octets.
    pub mmap_len: u64,
}

/// Size of [`CreateCq`].
pub const CREATE_CQ_SIZE: usize = 32;

/// `_IOWR(0xa7, 0x08, struct CreateCq)`.
pub const IOCTL_CREATE_CQ: u32 = ioc(IOC_READ | IOC_WRITE, 0x08, CREATE_CQ_SIZE);

/// Argument of [`IOCTL_DESTROY_CQ`] and [`IOCTL_ARM_CQ`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqOp {
    /// The CQ handle.
    pub cq: u32,
    /// ARM_CQ: 1 = wake only for solicited receives (and errors), 0 = for any entry. Else zero.
    pub solicited_only: u32,
}

/// Size of [`CqOp`].
pub const CQ_OP_SIZE: usize = 8;

/// `_IOW(0xa7, 0x09, struct CqOp)`: destroy a CQ no QP uses any more (EBUSY otherwise).
pub const IOCTL_DESTROY_CQ: u32 = ioc(IOC_WRITE, 0x09, CQ_OP_SIZE);
/// `_IOW(0xa7, 0x0a, struct CqOp)`: signal the CQ's eventfd once, for the next entry.
pub const IOCTL_ARM_CQ: u32 = ioc(IOC_WRITE, 0x0a, CQ_OP_SIZE);

/// The completion ring shared by module and application: a header, then `depth` [`Cqe`]s.
/// The module writes entry `producer % depth`, then publishes `producer + 1` (release); the
/// application reads entries below `producer` (acquire) and publishes its `consumer`. The module
/// reads `consumer` only to detect overrun: a full ring is a CQ overrun error on the QP, never
/// an overwritten entry.
pub mod cq_ring {
    /// Offset of the module's `producer` (u32).
    pub const PRODUCER: usize = 0;
    /// Offset of the ring's depth (u32, written once by the module).
    pub const DEPTH: usize = 4;
    /// Offset of the application's `consumer` (u32), on its own cache line.
    pub const CONSUMER: usize = 64;
    /// Offset of entry 0.
    pub const ENTRIES: usize = 128;
}

/// Completion status ([`Cqe::status`]), as verbs names them.
pub mod wc_status {
    /// Done.
    pub const SUCCESS: u32 = 0;
    /// Local length error (message larger than the receive buffer).
    pub const LOC_LEN_ERR: u32 = 1;
    /// Local protection error (an SGE outside its region or without the right).
    pub const LOC_PROT_ERR: u32 = 2;
    /// Flushed: the QP left the connected state before this request completed.
    pub const WR_FLUSH_ERR: u32 = 3;
    /// The peer refused access (its STag, bounds or rights).
    pub const REM_ACCESS_ERR: u32 = 4;
    /// The peer reported an operation error (Terminate).
    pub const REM_OP_ERR: u32 = 5;
    /// A protocol error on the stream ended the connection (we sent a Terminate).
    pub const FATAL_ERR: u32 = 6;
}

/// What completed ([`Cqe::opcode`]).
pub mod wc_opcode {
    /// A Send (with or without Invalidate).
    pub const SEND: u32 = 0;
    /// An RDMA Write.
    pub const RDMA_WRITE: u32 = 1;
    /// An RDMA Read.
    pub const RDMA_READ: u32 = 2;
    /// A receive.
    pub const RECV: u32 = 3;
    /// A Fetch-and-Add (RFC 7306).
    pub const FETCH_ADD: u32 = 4;
    /// A Compare-and-Swap (RFC 7306).
    pub const COMPARE_SWAP: u32 = 5;
    /// A Local Invalidate of ours.
    pub const LOCAL_INVALIDATE: u32 = 6;
    /// A Fast Register of ours.
    pub const FAST_REGISTER: u32 = 7;
}

/// Flags of [`Cqe::flags`].
pub mod wc_flags {
    /// The received Send carried Solicited Event.
    pub const SOLICITED: u32 = 1 << 0;
    /// The received Send invalidated the local STag [`super::Cqe::invalidated`].
    pub const WITH_INVALIDATE: u32 = 1 << 1;
    /// The receive was completed by Immediate Data (alone or after a Write), in
    /// [`super::Cqe::imm_data`]; nothing was placed in its buffer.
    pub const WITH_IMM: u32 = 1 << 2;
}

/// One completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// [`wc_status`].
    pub status: u32,
    /// [`wc_opcode`].
    pub opcode: u32,
    /// Receives and Reads: octets placed.
    pub byte_len: u32,
    /// The QP handle.
    pub qp: u32,
    /// [`wc_flags`].
    pub flags: u32,
    /// With [`wc_flags::WITH_INVALIDATE`]: the STag invalidated.
    pub invalidated: u32,
    /// With [`wc_flags::WITH_IMM`]: the Immediate Data.
    pub imm_data: u64,
}

/// Size of [`Cqe`].
pub const CQE_SIZE: usize = 40;

/// Argument of [`IOCTL_QUERY_QP`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryQp {
    /// The QP handle.
    pub qp: u32,
    /// Out: [`qp_state`].
    pub state: u32,
    /// Out: the Terminate that ended the stream (sent or received): layer << 16 | type << 8 |
    /// code as in RFC 5040 section 4.8, or 0.
    pub terminate: u32,
    /// Out: whether we sent it (1) or the peer did (0).
    pub terminate_sent: u32,
    /// Out: payload octets this QP queued to TCP straight from registered pages (zero copy).
    pub sent_zero_copy: u64,
    /// Out: payload octets it copied before queueing them (small messages).
    pub sent_copied: u64,
    /// Out: received payload octets placed at the in-order point.
    pub placed_in_order: u64,
    /// Out: received payload octets placed out of order, from TCP's out-of-order queue, ahead of
    /// the in-order point (never placed again).
    pub placed_out_of_order: u64,
    /// Out: FPDUs placed out of order.
    pub fpdus_out_of_order: u64,
    /// Out: walks of TCP's out-of-order queue (each after it queued something new).
    pub ooo_walks: u64,
    /// Out: segments of the connection the out-of-order doorbell saw arrive out of order.
    pub doorbells: u64,
    /// Out: of `fpdus_out_of_order`, those whose start a marker revealed (the others start right
    /// after one placed out of order).
    pub fpdus_by_marker: u64,
    /// Out: whole FPDUs found out of order but not placed then (their target was not there yet,
    /// or the record of early placements was full): placed in order instead.
    pub fpdus_held_back: u64,
    /// Out: whole FPDUs found out of order whose markers or CRC did not check then.
    pub fpdus_bad: u64,
    /// Out: of `fpdus_out_of_order`, those found at the start of an out-of-order segment (the
    /// sender aligns FPDUs to segments), confirmed by their CRC.
    pub fpdus_by_alignment: u64,
    /// Out: octets between markers in what we receive, 0 without markers.
    pub rx_marker_interval: u32,
    /// Out: octets between markers in what we send, 0 without markers.
    pub tx_marker_interval: u32,
    /// Out: received octets that came in segments so small that the socket buffers holding one
    /// FPDU were too many to gather: copied once into a bounce buffer, then checked and placed
    /// as usual.
    pub received_copied: u64,
}

/// Size of [`QueryQp`].
pub const QUERY_QP_SIZE: usize = 120;

/// `_IOWR(0xa7, 0x0b, struct QueryQp)`: a QP's state, why it ended (the async event), what it
/// sent, and where what it received was placed.
pub const IOCTL_QUERY_QP: u32 = ioc(IOC_READ | IOC_WRITE, 0x0b, QUERY_QP_SIZE);

/// One end of a connection ([`QpInfo`], [`ConnectQp`], [`Listen`], [`GetRequest`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Endpoint {
    /// `AF_INET` or `AF_INET6`; 0 when not connected.
    pub family: u16,
    /// The TCP port.
    pub port: u16,
    /// The address in network order: IPv4 in the first 4 octets, IPv6 in all 16.
    pub addr: [u8; 16],
}

/// Size of [`Endpoint`].
pub const ENDPOINT_SIZE: usize = 20;

/// One QP of any context, as [`IOCTL_LIST_QPS`] reports it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpInfo {
    /// The process that created it (its thread group id in the creator's pid namespace).
    pub pid: u32,
    /// Zero.
    pub reserved: u32,
    /// Our end of the connection.
    pub local: Endpoint,
    /// The peer's end.
    pub remote: Endpoint,
    /// What [`IOCTL_QUERY_QP`] tells its owner (`qp` is the handle in the owner's context).
    pub query: QueryQp,
}

/// Size of [`QpInfo`].
pub const QP_INFO_SIZE: usize = 48 + QUERY_QP_SIZE;

/// Argument of [`IOCTL_LIST_QPS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListQps {
    /// In: user address of an array of `capacity` [`QpInfo`].
    pub entries: u64,
    /// In: room in `entries` (at most [`MAX_LIST_QPS`]).
    pub capacity: u32,
    /// Out: QPs in the module; the first `min(count, capacity)` of them were written.
    pub count: u32,
}

/// Size of [`ListQps`].
pub const LIST_QPS_SIZE: usize = 16;

/// Most entries one [`IOCTL_LIST_QPS`] writes.
pub const MAX_LIST_QPS: u32 = 1 << 16;

/// `_IOWR(0xa7, 0x18, struct ListQps)`: every QP of every context with its counters, for
/// monitoring (the `iwarp` tool); EINVAL if `capacity` is above [`MAX_LIST_QPS`].
pub const IOCTL_LIST_QPS: u32 = ioc(IOC_READ | IOC_WRITE, 0x18, LIST_QPS_SIZE);

/// QP states ([`QueryQp::state`]).
pub mod qp_state {
    /// Connected: work requests flow.
    pub const RTS: u32 = 0;
    /// Ended (Terminate, peer close, CQ overrun): posted work was flushed.
    pub const ERROR: u32 = 1;
    /// Made, not connected yet: receives may be posted.
    pub const INIT: u32 = 2;
}

/// Most queue pairs one context may hold.
pub const MAX_QP: u32 = 1024;
/// Most completion queues one context may hold.
pub const MAX_CQ: u32 = 1024;
/// Most entries per completion queue.
pub const MAX_CQE: u32 = 1 << 16;
/// Most receive work requests (and outstanding Reads) per QP.
pub const MAX_QP_WR: u32 = 1 << 14;
/// Most inbound/outbound RDMA Reads (MPA v2's 14-bit IRD/ORD).
pub const MAX_IRD_ORD: u32 = 0x3fff;

/// Most protection domains one context may hold.
pub const MAX_PD: u32 = 1024;
/// Most memory regions one context may hold.
pub const MAX_MR: u32 = 4096;
/// Largest memory region (4 GiB).
pub const MAX_MR_SIZE: u64 = 1 << 32;

/// What the module answers: markers, CRC and MPA v2; memory regions, completion queues and
/// queue pairs over adopted TCP connections or its own (IPv4 and IPv6); out-of-order placement.
pub const fn device_attributes() -> QueryDevice {
    QueryDevice {
        abi_version: ABI_VERSION,
        marker_interval: 512,
        caps: caps::MARKERS | caps::CRC | caps::MPA_V2 | caps::QUEUE_PAIRS | caps::OOO_PLACEMENT | caps::EXTENSIONS,
        max_qp: MAX_QP,
        max_qp_wr: MAX_QP_WR,
        max_cq: MAX_CQ,
        max_cqe: MAX_CQE,
        max_mr: MAX_MR,
        max_sge: MAX_SGE as u32,
        max_ird: MAX_IRD_ORD,
        max_ord: MAX_IRD_ORD,
        max_mr_size: MAX_MR_SIZE,
        max_inline: MAX_INLINE,
        max_pd: MAX_PD,
        reserved: [0; 3],
    }
}
