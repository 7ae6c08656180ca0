// SPDX-License-Identifier: GPL-2.0

//! The engine's own vocabulary: work requests, completions, access rights, events and limits.
//! The QP, CQ and region engine speaks only these; each front door translates its callers'
//! structs into and out of them (`device/translate.rs` for `/dev/iwarp`'s ABI), so a second
//! door (the kernel's RDMA core) adds a translation, not a second engine.

use kernel::prelude::*;

/// Access rights of a region, as verbs defines them.
pub(crate) mod access {
    /// The local side may write (receives and Read responses land there).
    pub(crate) const LOCAL_WRITE: u32 = 1 << 0;
    /// The peer may RDMA Write into it (requires LOCAL_WRITE).
    pub(crate) const REMOTE_WRITE: u32 = 1 << 1;
    /// The peer may RDMA Read from it.
    pub(crate) const REMOTE_READ: u32 = 1 << 2;
    /// The peer may run atomic operations on it (RFC 7306; requires LOCAL_WRITE).
    pub(crate) const REMOTE_ATOMIC: u32 = 1 << 3;
    /// Every right.
    pub(crate) const ALL: u32 = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC;
}

/// Most scatter/gather entries per work request.
pub(crate) const MAX_SGE: usize = 4;
/// Largest message (the total of a work request's entries).
pub(crate) const MAX_MESSAGE: u64 = 16 << 20;
/// Most queue pairs one context may hold.
pub(crate) const MAX_QP: u32 = 1024;
/// Most completion queues one context may hold.
pub(crate) const MAX_CQ: u32 = 1024;
/// Most work requests of each kind per QP.
pub(crate) const MAX_QP_WR: u32 = 1 << 14;
/// Most inbound or outbound RDMA Reads per QP (MPA v2's 14-bit IRD/ORD).
pub(crate) const MAX_IRD_ORD: u32 = 0x3fff;
/// Most protection domains one context may hold.
pub(crate) const MAX_PD: u32 = 1024;
/// Most regions one context may hold.
pub(crate) const MAX_MR: u32 = 4096;
/// Largest region (4 GiB).
pub(crate) const MAX_MR_SIZE: u64 = 1 << 32;
/// Most entries of a completion queue.
pub(crate) const MAX_CQE: u32 = 1 << 16;
/// Most asynchronous events a context keeps unfetched.
pub(crate) const MAX_ASYNC_EVENTS: usize = 256;

/// `length` octets at virtual address `addr` inside the region `lkey`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sge {
    pub(crate) addr: u64,
    pub(crate) length: u32,
    pub(crate) lkey: u32,
}

/// What a send work request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendOp {
    /// A Send into the peer's next receive, optionally invalidating the peer's STag.
    Send { invalidate: Option<u32> },
    /// An RDMA Write to the peer's `rkey` at `remote_addr`, followed by Immediate Data if any
    /// (RFC 7306), which completes the peer's next receive.
    Write { rkey: u32, remote_addr: u64, imm: Option<u64> },
    /// Immediate Data alone (RFC 7306).
    Immediate { imm: u64 },
    /// An RDMA Read of the peer's `rkey` at `remote_addr` into the one local entry; with
    /// `invalidate` (not 0), our STag to invalidate once the data is in place.
    Read { rkey: u32, remote_addr: u64, invalidate: u32 },
    /// Fetch-and-Add on the peer's 64-bit value (RFC 7306).
    FetchAdd { rkey: u32, remote_addr: u64, add: u64 },
    /// Compare-and-Swap on the peer's 64-bit value (RFC 7306).
    CompareSwap { rkey: u32, remote_addr: u64, compare: u64, swap: u64 },
    /// Local Invalidate of our STag.
    LocalInvalidate { stag: u32 },
    /// Fast Register: region `stag` valid again over `length` octets from `addr` with
    /// [`access`] `rights`.
    FastRegister { stag: u32, addr: u64, length: u64, rights: u32 },
}

/// A send work request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendWr {
    /// Returned in the completion.
    pub(crate) wr_id: u64,
    pub(crate) op: SendOp,
    /// The local buffer (the first `num_sge` entries).
    pub(crate) sge: [Sge; MAX_SGE],
    pub(crate) num_sge: u32,
    /// Report a completion when done.
    pub(crate) signaled: bool,
    /// Send with Solicited Event.
    pub(crate) solicited: bool,
    /// Where the payload is, if not in registered memory.
    pub(crate) inline: Inline,
}

/// Octets of inline data a kernel consumer's send request may carry: copied into the request
/// when posted, as siw copies them into its send queue entry (its most, `SIW_MAX_INLINE`, as
/// user processes' requests in siw's ABI carry up to that many).
pub(crate) const MAX_KERNEL_INLINE: usize = 80;

/// A send request's payload that is not in registered memory (inline data: lkeys unused).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Inline {
    /// In the registered memory the entries name.
    #[default]
    No,
    /// In plain memory of the calling process's, which the entries name, copied at the post
    /// (`/dev/iwarp`'s post runs in the caller's context).
    User,
    /// Here: a kernel consumer's octets, copied when it posted (its post returns before the
    /// request's turn, and it may reuse the buffer at once).
    Kernel(InlineBytes),
}

/// Up to [`MAX_KERNEL_INLINE`] octets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InlineBytes {
    data: [u8; MAX_KERNEL_INLINE],
    len: usize,
}

impl InlineBytes {
    /// Gathers the pieces `fill(i, piece)` writes for the `i`-th of `lengths` in turn; EINVAL
    /// past `most` octets in all (at most [`MAX_KERNEL_INLINE`]).
    pub(crate) fn gather(lengths: impl Iterator<Item = usize>, most: usize, mut fill: impl FnMut(usize, &mut [u8]) -> Result) -> Result<InlineBytes> {
        let mut b = InlineBytes { data: [0; MAX_KERNEL_INLINE], len: 0 };
        for (i, n) in lengths.enumerate() {
            let end = b.len.checked_add(n).filter(|&e| e <= most.min(MAX_KERNEL_INLINE)).ok_or(EINVAL)?;
            fill(i, &mut b.data[b.len..end])?;
            b.len = end;
        }
        Ok(b)
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.data[..self.len]
    }
}

/// A receive work request.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RecvWr {
    /// Returned in the completion.
    pub(crate) wr_id: u64,
    /// Where the message goes (the first `num_sge` entries).
    pub(crate) sge: [Sge; MAX_SGE],
    pub(crate) num_sge: u32,
}

/// How a work request ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Status {
    #[default]
    Success,
    /// A local region refused (a Read with Invalidate whose STag had gone).
    LocalProtection,
    /// The QP left the connected state first.
    Flushed,
    /// A protocol error ended the connection.
    Fatal,
}

/// What completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum CompletionOp {
    #[default]
    Send,
    RdmaWrite,
    RdmaRead,
    Recv,
    FetchAdd,
    CompareSwap,
    LocalInvalidate,
    FastRegister,
}

/// One completion.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Completion {
    pub(crate) wr_id: u64,
    pub(crate) status: Status,
    pub(crate) op: CompletionOp,
    /// Receives, Reads, atomics: octets placed.
    pub(crate) byte_len: u32,
    /// The QP's handle in its context.
    pub(crate) qp: u32,
    /// The received message carried Solicited Event.
    pub(crate) solicited: bool,
    /// The received Send invalidated this STag of ours.
    pub(crate) invalidated: Option<u32>,
    /// The receive was completed by this Immediate Data (nothing placed in its buffer).
    pub(crate) imm: Option<u64>,
}

/// Where a QP is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpState {
    /// Made, not connected yet: receives may be posted.
    Init,
    /// Connected: work requests flow.
    Rts,
    /// Ended: posted work was flushed.
    Error,
}

/// A QP's state, why it ended, and where its octets went.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpReport {
    pub(crate) state: QpState,
    /// The Terminate that ended the stream (layer << 16 | type << 8 | code), or 0.
    pub(crate) terminate: u32,
    /// Whether we sent it.
    pub(crate) terminate_sent: bool,
    pub(crate) sent_zero_copy: u64,
    pub(crate) sent_copied: u64,
    pub(crate) placed_in_order: u64,
    pub(crate) placed_out_of_order: u64,
    pub(crate) fpdus_out_of_order: u64,
    pub(crate) ooo_walks: u64,
    pub(crate) doorbells: u64,
    pub(crate) fpdus_by_marker: u64,
    pub(crate) fpdus_held_back: u64,
    pub(crate) fpdus_bad: u64,
    pub(crate) fpdus_by_alignment: u64,
    pub(crate) rx_marker_interval: u32,
    pub(crate) tx_marker_interval: u32,
    pub(crate) received_copied: u64,
}

/// Why a QP ended, as its context is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpEventKind {
    /// A Terminate ended it (code as in [`QpReport::terminate`]; `sent` if ours).
    Terminated { terminate: u32, sent: bool },
    /// The connection closed or broke without one.
    ConnectionLost,
}

/// An asynchronous event of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QpEvent {
    /// The QP's handle in its context.
    pub(crate) qp: u32,
    pub(crate) kind: QpEventKind,
}
