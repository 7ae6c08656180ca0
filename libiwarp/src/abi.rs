//! The user/kernel ABI of `/dev/iwarp`: ioctl numbers and argument structs.
//!
//! One definition, compiled into both `iwarp.ko` (by path) and `libiwarp`, so the two sides
//! cannot drift; `tests/abi_layout.rs` pins sizes and offsets, and the module asserts the same
//! sizes at compile time. No dependencies: the kernel build compiles this file as is.
//! Bump [`ABI_VERSION`] on every incompatible change.

/// Version of this ABI; QUERY_DEVICE reports the module's.
pub const ABI_VERSION: u32 = 1;

/// The ioctl type byte of `/dev/iwarp`.
pub const IOCTL_TYPE: u32 = 0xa7;

const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// The Linux `_IOC` encoding (direction, size, type, number) on x86 and arm.
const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    dir << 30 | (size as u32) << 16 | IOCTL_TYPE << 8 | nr
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
    /// Queue pairs (the data path). Not yet built: the module does not set it.
    pub const QUEUE_PAIRS: u64 = 1 << 4;
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
    /// Zero; room to grow without a version bump.
    pub reserved: [u64; 4],
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
    /// Every defined bit.
    pub const ALL: u32 = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ;
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
    /// Zero.
    pub reserved: u32,
}

/// Size of [`RegMr`].
pub const REG_MR_SIZE: usize = 32;

/// `_IOWR(0xa7, 0x01, struct RegMr)`: pin and register a user buffer.
pub const IOCTL_REG_MR: u32 = ioc(IOC_READ | IOC_WRITE, 0x01, REG_MR_SIZE);

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

/// Which side of the MPA exchange a QP takes ([`CreateQp::role`]).
pub mod role {
    /// Sends the MPA request (the side that connected).
    pub const INITIATOR: u32 = 0;
    /// Answers it (the side that accepted).
    pub const RESPONDER: u32 = 1;
}

/// Connection option bits: what is asked in [`CreateQp::flags`], what was negotiated in
/// [`CreateQp::negotiated`].
pub mod conn {
    /// Ask the peer to put markers in what it sends us (our M flag) / markers in what we receive.
    pub const RX_MARKERS: u32 = 1 << 0;
    /// Ask for CRCs (our C flag) / CRCs in use.
    pub const CRC: u32 = 1 << 1;
    /// Negotiated only: the peer asked for markers, so ours carry them.
    pub const TX_MARKERS: u32 = 1 << 2;
    /// Every bit a caller may ask for.
    pub const ASKABLE: u32 = RX_MARKERS | CRC;
}

/// Argument of [`IOCTL_CREATE_QP`]: adopt an already connected TCP socket into a queue pair and
/// run the MPA exchange on it (in the caller's context, up to `timeout_ms`). From then on the
/// socket belongs to the QP; the caller must not read or write its own descriptor any more.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateQp {
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
    /// Out: the QP handle.
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
    /// Zero.
    pub reserved: u32,
}

/// Size of [`CreateQp`].
pub const CREATE_QP_SIZE: usize = 80;
/// Most private data a caller may send (MPA allows 512, of which revision 2 uses 4).
pub const MAX_PRIVATE_DATA: u32 = 508;

/// `_IOWR(0xa7, 0x04, struct CreateQp)`.
pub const IOCTL_CREATE_QP: u32 = ioc(IOC_READ | IOC_WRITE, 0x04, CREATE_QP_SIZE);

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
    /// RDMA Write to the peer's `remote_stag` at `remote_to`.
    pub const WRITE: u32 = 1;
}

/// Flags of [`PostSend::flags`].
pub mod send_flags {
    /// Send with Solicited Event.
    pub const SOLICITED: u32 = 1 << 0;
}

/// Argument of [`IOCTL_POST_SEND`]: send `length` bytes at `offset` of the local region `lkey`
/// over QP `qp`. Synchronous for now: returns once every FPDU is queued to TCP.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PostSend {
    /// The QP handle.
    pub qp: u32,
    /// [`opcode`].
    pub opcode: u32,
    /// Local region (its lkey).
    pub lkey: u32,
    /// [`send_flags`].
    pub flags: u32,
    /// Offset in the local region.
    pub offset: u64,
    /// Bytes to send (at most [`MAX_MESSAGE`]).
    pub length: u64,
    /// RDMA Write: tagged offset at the peer.
    pub remote_to: u64,
    /// RDMA Write: the peer's STag.
    pub remote_stag: u32,
    /// Zero.
    pub reserved: u32,
}

/// Size of [`PostSend`].
pub const POST_SEND_SIZE: usize = 48;
/// Largest message [`IOCTL_POST_SEND`] takes.
pub const MAX_MESSAGE: u64 = 16 << 20;

/// `_IOW(0xa7, 0x06, struct PostSend)`.
pub const IOCTL_POST_SEND: u32 = ioc(IOC_WRITE, 0x06, POST_SEND_SIZE);

/// Most queue pairs one context may hold.
pub const MAX_QP: u32 = 1024;

/// Most memory regions one context may hold.
pub const MAX_MR: u32 = 4096;
/// Largest memory region (4 GiB).
pub const MAX_MR_SIZE: u64 = 1 << 32;

/// What the module answers today: the protocol core compiled into it handles markers, CRC,
/// MPA v2 and early placement; memory can be registered and connected sockets adopted into queue
/// pairs (MPA exchange only: work requests and completion queues come with the rest of the data
/// path, so those limits are zero and the QUEUE_PAIRS capability is not set).
pub const fn device_attributes() -> QueryDevice {
    QueryDevice {
        abi_version: ABI_VERSION,
        marker_interval: 512,
        caps: caps::MARKERS | caps::CRC | caps::MPA_V2 | caps::OOO_PLACEMENT,
        max_qp: MAX_QP,
        max_qp_wr: 0,
        max_cq: 0,
        max_cqe: 0,
        max_mr: MAX_MR,
        max_sge: 0,
        max_ird: 0,
        max_ord: 0,
        max_mr_size: MAX_MR_SIZE,
        reserved: [0; 4],
    }
}
