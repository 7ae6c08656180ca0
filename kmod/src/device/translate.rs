// SPDX-License-Identifier: GPL-2.0

//! `/dev/iwarp`'s ABI to and from the engine's own types (`verbs.rs`): the only place that
//! knows both. Bits or codes the ABI does not define are EINVAL here, before the engine sees
//! anything.

use crate::abi::{self, event_flags, event_kind, opcode, qp_state, send_flags, wc_flags, wc_opcode, wc_status};
use crate::verbs::{self, Completion, CompletionOp, Inline, QpEvent, QpEventKind, QpReport, QpState, RecvWr, SendOp, SendWr, Sge, Status};
use kernel::prelude::*;

/// Region access rights; EINVAL for bits the ABI does not define.
pub(super) fn access(bits: u32) -> Result<u32> {
    if bits & !abi::access::ALL != 0 {
        return Err(EINVAL);
    }
    let pairs = [
        (abi::access::LOCAL_WRITE, verbs::access::LOCAL_WRITE),
        (abi::access::REMOTE_WRITE, verbs::access::REMOTE_WRITE),
        (abi::access::REMOTE_READ, verbs::access::REMOTE_READ),
        (abi::access::REMOTE_ATOMIC, verbs::access::REMOTE_ATOMIC),
    ];
    Ok(pairs.iter().filter(|(from, _)| bits & from != 0).fold(0, |acc, (_, to)| acc | to))
}

fn sge(s: &[abi::Sge; abi::MAX_SGE]) -> [Sge; verbs::MAX_SGE] {
    s.map(|e| Sge { addr: e.addr, length: e.length, lkey: e.lkey })
}

/// A send ring entry; EINVAL for an unknown opcode or flag.
pub(super) fn send_wr(req: &abi::PostSend) -> Result<SendWr> {
    if req.flags & !send_flags::ALL != 0 {
        return Err(EINVAL);
    }
    let (rkey, remote_addr) = (req.rkey, req.remote_addr);
    let op = match req.opcode {
        opcode::SEND => SendOp::Send { invalidate: None },
        opcode::SEND_WITH_INVALIDATE => SendOp::Send { invalidate: Some(req.invalidate) },
        opcode::WRITE => SendOp::Write { rkey, remote_addr, imm: None },
        opcode::WRITE_WITH_IMM => SendOp::Write { rkey, remote_addr, imm: Some(req.imm_data) },
        opcode::IMMEDIATE => SendOp::Immediate { imm: req.imm_data },
        opcode::READ => SendOp::Read { rkey, remote_addr, invalidate: 0 },
        opcode::READ_WITH_INVALIDATE => SendOp::Read { rkey, remote_addr, invalidate: req.invalidate },
        opcode::FETCH_ADD => SendOp::FetchAdd { rkey, remote_addr, add: req.compare_add },
        opcode::COMPARE_SWAP => SendOp::CompareSwap { rkey, remote_addr, compare: req.compare_add, swap: req.swap },
        opcode::LOCAL_INVALIDATE => SendOp::LocalInvalidate { stag: req.invalidate },
        opcode::FAST_REGISTER => {
            let rights = access(u32::try_from(req.swap).map_err(|_| EINVAL)?)?;
            SendOp::FastRegister { stag: rkey, addr: remote_addr, length: req.compare_add, rights }
        }
        _ => return Err(EINVAL),
    };
    Ok(SendWr {
        wr_id: req.wr_id,
        op,
        sge: sge(&req.sge),
        num_sge: req.num_sge,
        signaled: req.flags & send_flags::SIGNALED != 0,
        solicited: req.flags & send_flags::SOLICITED != 0,
        inline: if req.flags & send_flags::INLINE != 0 { Inline::User } else { Inline::No },
    })
}

/// A receive ring entry.
pub(super) fn recv_wr(req: &abi::PostRecv) -> RecvWr {
    RecvWr { wr_id: req.wr_id, sge: sge(&req.sge), num_sge: req.num_sge }
}

/// A completion as the CQ ring holds it.
pub(crate) fn cqe(c: &Completion) -> abi::Cqe {
    let status = match c.status {
        Status::Success => wc_status::SUCCESS,
        Status::LocalProtection => wc_status::LOC_PROT_ERR,
        Status::Flushed => wc_status::WR_FLUSH_ERR,
        Status::Fatal => wc_status::FATAL_ERR,
    };
    let opcode = match c.op {
        CompletionOp::Send => wc_opcode::SEND,
        CompletionOp::RdmaWrite => wc_opcode::RDMA_WRITE,
        CompletionOp::RdmaRead => wc_opcode::RDMA_READ,
        CompletionOp::Recv => wc_opcode::RECV,
        CompletionOp::FetchAdd => wc_opcode::FETCH_ADD,
        CompletionOp::CompareSwap => wc_opcode::COMPARE_SWAP,
        CompletionOp::LocalInvalidate => wc_opcode::LOCAL_INVALIDATE,
        CompletionOp::FastRegister => wc_opcode::FAST_REGISTER,
    };
    let mut flags = if c.solicited { wc_flags::SOLICITED } else { 0 };
    if c.invalidated.is_some() {
        flags |= wc_flags::WITH_INVALIDATE;
    }
    if c.imm.is_some() {
        flags |= wc_flags::WITH_IMM;
    }
    abi::Cqe { wr_id: c.wr_id, status, opcode, byte_len: c.byte_len, qp: c.qp, flags, invalidated: c.invalidated.unwrap_or(0), imm_data: c.imm.unwrap_or(0) }
}

/// An asynchronous event; `lost` if events before it were dropped.
pub(super) fn async_event(ev: &QpEvent, lost: bool) -> abi::AsyncEvent {
    let (kind, terminate, sent) = match ev.kind {
        QpEventKind::Terminated { terminate, sent } => (event_kind::QP_TERMINATED, terminate, sent),
        QpEventKind::ConnectionLost => (event_kind::QP_CONNECTION_LOST, 0, false),
    };
    let mut flags = if sent { event_flags::SENT } else { 0 };
    if lost {
        flags |= event_flags::LOST;
    }
    abi::AsyncEvent { kind, qp: ev.qp, terminate, flags }
}

/// QUERY_QP's answer for QP `qp`.
pub(super) fn query_qp(qp: u32, r: &QpReport) -> abi::QueryQp {
    let state = match r.state {
        QpState::Init => qp_state::INIT,
        QpState::Rts => qp_state::RTS,
        QpState::Error => qp_state::ERROR,
    };
    abi::QueryQp {
        qp,
        state,
        terminate: r.terminate,
        terminate_sent: u32::from(r.terminate_sent),
        sent_zero_copy: r.sent_zero_copy,
        sent_copied: r.sent_copied,
        placed_in_order: r.placed_in_order,
        placed_out_of_order: r.placed_out_of_order,
        fpdus_out_of_order: r.fpdus_out_of_order,
        ooo_walks: r.ooo_walks,
        doorbells: r.doorbells,
        fpdus_by_marker: r.fpdus_by_marker,
        fpdus_held_back: r.fpdus_held_back,
        fpdus_bad: r.fpdus_bad,
        fpdus_by_alignment: r.fpdus_by_alignment,
        rx_marker_interval: r.rx_marker_interval,
        tx_marker_interval: r.tx_marker_interval,
        received_copied: r.received_copied,
    }
}

/// One end of a connection.
pub(super) fn endpoint(e: &crate::socket::Endpoint) -> abi::Endpoint {
    abi::Endpoint { family: e.family, port: e.port, addr: e.addr }
}

/// The end `e` names: IPv4 or IPv6 (EAFNOSUPPORT otherwise; EINVAL for an IPv4 address with
/// octets past its four). No scope: a link-local IPv6 address does not reach its peer.
pub(super) fn socket_endpoint(e: &abi::Endpoint) -> Result<crate::socket::Endpoint> {
    let (v4, v6) = (kernel::bindings::AF_INET as u16, kernel::bindings::AF_INET6 as u16);
    if e.family == v4 && e.addr[4..].iter().any(|&b| b != 0) {
        return Err(EINVAL);
    }
    if e.family != v4 && e.family != v6 {
        return Err(crate::error::eafnosupport());
    }
    Ok(crate::socket::Endpoint { family: e.family, port: e.port, addr: e.addr, scope_id: 0 })
}

/// The engine's limits are what the ABI advertises (QUERY_DEVICE) and sizes its arrays by.
const _: () = {
    assert!(verbs::MAX_SGE == abi::MAX_SGE);
    assert!(verbs::MAX_MESSAGE == abi::MAX_MESSAGE);
    assert!(verbs::MAX_QP == abi::MAX_QP);
    assert!(verbs::MAX_CQ == abi::MAX_CQ);
    assert!(verbs::MAX_QP_WR == abi::MAX_QP_WR);
    assert!(verbs::MAX_IRD_ORD == abi::MAX_IRD_ORD);
    assert!(verbs::MAX_PD == abi::MAX_PD);
    assert!(verbs::MAX_MR == abi::MAX_MR);
    assert!(verbs::MAX_MR_SIZE == abi::MAX_MR_SIZE);
    assert!(verbs::MAX_CQE == abi::MAX_CQE);
    assert!(verbs::MAX_ASYNC_EVENTS == abi::MAX_ASYNC_EVENTS);
};
