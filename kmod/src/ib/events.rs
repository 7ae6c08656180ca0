// SPDX-License-Identifier: GPL-2.0

//! Asynchronous events for the RDMA core's consumers, as siw reports them: a QP that an error
//! ended tells the consumer's QP event handler, a CQ that overflowed its CQ event handler, at
//! once and where it happened (softirq too; handlers may not sleep or call into the QP). A QP
//! its owner ended reports nothing, nor one whose connection closed without a Terminate: iw_cm
//! hears of that as CLOSE.

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
        // RDMAP's remote operation errors, DDP's untagged buffer errors: a request we cannot take.
        (0 | 1, 2) => ffi::IWARP_IB_EVENT_QP_REQ_ERR,
        // Local catastrophic errors, and MPA's (the stream itself).
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

/// Tells the RDMA core's CQ `ibcq`'s consumer it overflowed: completions were lost.
///
/// # Safety
///
/// `ibcq` is alive: its destroy has not returned yet.
pub(super) unsafe fn cq_overflowed(ibcq: usize) {
    // SAFETY: the caller guarantees `ibcq` is alive.
    unsafe { ffi::iwarp_shim_ib_cq_event(ibcq as *mut ffi::ib_cq, ffi::IWARP_IB_EVENT_CQ_ERR) };
}
