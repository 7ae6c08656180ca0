// SPDX-License-Identifier: GPL-2.0

//! Asynchronous events for the RDMA core's consumers: a QP that a Terminate ended tells the
//! consumer's QP event handler at once, where it ended (softirq too: handlers may not sleep),
//! once the QP's locks are released (a handler may post to it); a CQ that overflowed tells its
//! event handler soon after, from the work that runs its completion handler. The types are
//! those the in-tree iWARP drivers (cxgb4, irdma) report. A QP its owner ended reports
//! nothing, nor one whose connection closed without a Terminate: iw_cm hears of that as CLOSE.

use crate::ffi;
use crate::verbs::QpEventKind;

/// The RDMA core's event for a QP that `kind` ended, if any.
fn qp_event(kind: QpEventKind) -> Option<u32> {
    let QpEventKind::Terminated { terminate, sent } = kind else {
        return None;
    };
    if !sent {
        // The peer's Terminate: ours is in error for what the peer found wrong.
        return Some(ffi::IWARP_IB_EVENT_QP_FATAL);
    }
    let (layer, etype) = (terminate >> 16 & 0xff, terminate >> 8 & 0xff);
    Some(match (layer, etype) {
        // RDMAP's remote protection errors, DDP's tagged buffer errors: the peer reached for
        // memory it may not.
        (0 | 1, 1) => ffi::IWARP_IB_EVENT_QP_ACCESS_ERR,
        // The others: a request we cannot take (no receive posted, a bad MSN or offset, an
        // unexpected opcode), local catastrophic errors, MPA's (the stream itself).
        _ => ffi::IWARP_IB_EVENT_QP_FATAL,
    })
}

/// Tells the RDMA core's QP `ibqp`'s consumer why it ended, if it should hear of it.
///
/// # Safety
///
/// `ibqp` is alive: its destroy has not ended the engine QP yet.
pub(super) unsafe fn qp_ended(ibqp: usize, kind: QpEventKind) {
    if let Some(event) = qp_event(kind) {
        // SAFETY: the caller guarantees `ibqp` is alive.
        unsafe { ffi::iwarp_shim_ib_qp_event(ibqp as *mut ffi::ib_qp, event) };
    }
}

/// Tells the RDMA core's CQ `ibcq`'s consumer it overflowed (completions were lost), soon.
///
/// # Safety
///
/// `ibcq` is alive, and its destroy waits out the work this queues: a QP of its is pushing a
/// completion (the RDMA core destroys a CQ only once its QPs are gone, and their destroy waits
/// out every run that completes).
pub(super) unsafe fn cq_overflowed(ibcq: usize) {
    // SAFETY: the caller guarantees `ibcq` is alive; the shim's destroy_cq cancels the work.
    unsafe { ffi::iwarp_shim_ib_cq_overflowed(ibcq as *mut ffi::ib_cq) };
}
