//! The device's commands as the fuzzer sees them: each argument's fields, what they hold, and
//! the object a success makes or ends.

use libiwarp::abi::{
    self, access, conn, Accept, AdoptQp, ConnectQp, CqOp, CreateCq, CreateQp, DeregMr, DestroyQp, Doorbell, GetRequest, HandleOp, ListQps, Listen, PdOp,
    QueryQp, RegMr, Reject, SetEventFd,
};
use std::mem::offset_of;

/// The kinds of object an argument names by handle.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Obj {
    Pd,
    Mr,
    Cq,
    Qp,
    Listener,
    Request,
}

pub(super) const OBJS: usize = 6;

/// What a field holds, which decides how its value is drawn. Every 4-octet word an argument's
/// table does not describe is a 32-bit integer.
#[derive(Clone, Copy)]
pub(super) enum Field {
    /// A 64-bit integer (a length, an offset, an identifier).
    U64,
    /// A handle of one kind of object.
    Handle(Obj),
    /// Option bits, of which these are defined.
    Flags(u32),
    /// An address the module reads, writes or pins through (64 bits).
    Pointer,
    /// A timeout in milliseconds: short, or not valid; never a long wait.
    Timeout,
    /// An endpoint ([`abi::Endpoint`], 20 octets): any family and port, a loopback address
    /// always (127.0.0.1, or ::1 for IPv6), however the rest of the argument is drawn.
    Endpoint,
    /// A file descriptor.
    Fd,
}

/// A command, its argument's fields, and the object a success makes or ends.
pub(super) struct Cmd {
    pub(super) name: &'static str,
    pub(super) cmd: u32,
    pub(super) fields: &'static [(usize, Field)],
    pub(super) makes: Option<(Obj, usize)>,
    pub(super) ends: Option<(Obj, usize)>,
}

use Field::*;

const fn adopt_at(at: usize) -> [(usize, Field); 6] {
    [
        (at + offset_of!(AdoptQp, fd), Fd),
        (at + offset_of!(AdoptQp, flags), Flags(conn::ASKABLE)),
        (at + offset_of!(AdoptQp, private_data), Pointer),
        (at + offset_of!(AdoptQp, peer_private), Pointer),
        (at + offset_of!(AdoptQp, timeout_ms), Timeout),
        (at + offset_of!(AdoptQp, qp), Handle(Obj::Qp)),
    ]
}

const ADOPT: [(usize, Field); 6] = adopt_at(0);
const CONNECT: [(usize, Field); 7] = {
    let a = adopt_at(offset_of!(ConnectQp, adopt));
    [a[0], a[1], a[2], a[3], a[4], a[5], (offset_of!(ConnectQp, peer), Endpoint)]
};
const ACCEPT: [(usize, Field); 7] = {
    let a = adopt_at(offset_of!(Accept, adopt));
    [a[0], a[1], a[2], a[3], a[4], a[5], (offset_of!(Accept, request), Handle(Obj::Request))]
};

pub(super) const COMMANDS: &[Cmd] = &[
    Cmd { name: "QUERY_DEVICE", cmd: abi::IOCTL_QUERY_DEVICE, fields: &[], makes: None, ends: None },
    Cmd { name: "QUERY_STATS", cmd: abi::IOCTL_QUERY_STATS, fields: &[], makes: None, ends: None },
    Cmd { name: "ALLOC_PD", cmd: abi::IOCTL_ALLOC_PD, fields: &[(0, Handle(Obj::Pd))], makes: Some((Obj::Pd, offset_of!(PdOp, pd))), ends: None },
    Cmd { name: "DEALLOC_PD", cmd: abi::IOCTL_DEALLOC_PD, fields: &[(0, Handle(Obj::Pd))], makes: None, ends: Some((Obj::Pd, offset_of!(PdOp, pd))) },
    Cmd {
        name: "REG_MR",
        cmd: abi::IOCTL_REG_MR,
        fields: &[
            (offset_of!(RegMr, addr), Pointer),
            (offset_of!(RegMr, length), U64),
            (offset_of!(RegMr, access), Flags(access::ALL)),
            (offset_of!(RegMr, stag), Handle(Obj::Mr)),
            (offset_of!(RegMr, pd), Handle(Obj::Pd)),
        ],
        makes: Some((Obj::Mr, offset_of!(RegMr, stag))),
        ends: None,
    },
    Cmd {
        name: "DEREG_MR",
        cmd: abi::IOCTL_DEREG_MR,
        fields: &[(offset_of!(DeregMr, stag), Handle(Obj::Mr))],
        makes: None,
        ends: Some((Obj::Mr, offset_of!(DeregMr, stag))),
    },
    Cmd {
        name: "CREATE_CQ",
        cmd: abi::IOCTL_CREATE_CQ,
        fields: &[
            (offset_of!(CreateCq, eventfd), Fd),
            (offset_of!(CreateCq, cq), Handle(Obj::Cq)),
            (offset_of!(CreateCq, mmap_offset), U64),
            (offset_of!(CreateCq, mmap_len), U64),
        ],
        makes: Some((Obj::Cq, offset_of!(CreateCq, cq))),
        ends: None,
    },
    Cmd {
        name: "DESTROY_CQ",
        cmd: abi::IOCTL_DESTROY_CQ,
        fields: &[(offset_of!(CqOp, cq), Handle(Obj::Cq))],
        makes: None,
        ends: Some((Obj::Cq, offset_of!(CqOp, cq))),
    },
    Cmd { name: "ARM_CQ", cmd: abi::IOCTL_ARM_CQ, fields: &[(offset_of!(CqOp, cq), Handle(Obj::Cq))], makes: None, ends: None },
    Cmd {
        name: "CREATE_QP",
        cmd: abi::IOCTL_CREATE_QP,
        fields: &[
            (offset_of!(CreateQp, send_cq), Handle(Obj::Cq)),
            (offset_of!(CreateQp, recv_cq), Handle(Obj::Cq)),
            (offset_of!(CreateQp, qp), Handle(Obj::Qp)),
            (offset_of!(CreateQp, pd), Handle(Obj::Pd)),
            (offset_of!(CreateQp, sq_offset), U64),
            (offset_of!(CreateQp, rq_offset), U64),
            (offset_of!(CreateQp, sq_len), U64),
            (offset_of!(CreateQp, rq_len), U64),
        ],
        makes: Some((Obj::Qp, offset_of!(CreateQp, qp))),
        ends: None,
    },
    Cmd {
        name: "DESTROY_QP",
        cmd: abi::IOCTL_DESTROY_QP,
        fields: &[(offset_of!(DestroyQp, qp), Handle(Obj::Qp))],
        makes: None,
        ends: Some((Obj::Qp, offset_of!(DestroyQp, qp))),
    },
    Cmd {
        name: "QUERY_QP",
        cmd: abi::IOCTL_QUERY_QP,
        fields: &[
            (offset_of!(QueryQp, qp), Handle(Obj::Qp)),
            (offset_of!(QueryQp, sent_zero_copy), U64),
            (offset_of!(QueryQp, placed_in_order), U64),
            (offset_of!(QueryQp, received_copied), U64),
        ],
        makes: None,
        ends: None,
    },
    Cmd { name: "DOORBELL", cmd: abi::IOCTL_DOORBELL, fields: &[(offset_of!(Doorbell, qp), Handle(Obj::Qp))], makes: None, ends: None },
    Cmd { name: "ADOPT_QP", cmd: abi::IOCTL_ADOPT_QP, fields: &ADOPT, makes: None, ends: None },
    Cmd { name: "CONNECT_QP", cmd: abi::IOCTL_CONNECT_QP, fields: &CONNECT, makes: None, ends: None },
    Cmd {
        name: "LISTEN",
        cmd: abi::IOCTL_LISTEN,
        fields: &[(offset_of!(Listen, at), Endpoint), (offset_of!(Listen, listener), Handle(Obj::Listener))],
        makes: Some((Obj::Listener, offset_of!(Listen, listener))),
        ends: None,
    },
    Cmd {
        name: "CLOSE_LISTENER",
        cmd: abi::IOCTL_CLOSE_LISTENER,
        fields: &[(offset_of!(HandleOp, handle), Handle(Obj::Listener))],
        makes: None,
        ends: Some((Obj::Listener, offset_of!(HandleOp, handle))),
    },
    Cmd {
        name: "GET_REQUEST",
        cmd: abi::IOCTL_GET_REQUEST,
        fields: &[
            (offset_of!(GetRequest, listener), Handle(Obj::Listener)),
            (offset_of!(GetRequest, timeout_ms), Timeout),
            (offset_of!(GetRequest, peer_private), Pointer),
            (offset_of!(GetRequest, request), Handle(Obj::Request)),
        ],
        makes: Some((Obj::Request, offset_of!(GetRequest, request))),
        ends: None,
    },
    Cmd { name: "ACCEPT", cmd: abi::IOCTL_ACCEPT, fields: &ACCEPT, makes: None, ends: Some((Obj::Request, offset_of!(Accept, request))) },
    Cmd {
        name: "REJECT",
        cmd: abi::IOCTL_REJECT,
        fields: &[(offset_of!(Reject, request), Handle(Obj::Request)), (offset_of!(Reject, private_data), Pointer)],
        makes: None,
        ends: Some((Obj::Request, offset_of!(Reject, request))),
    },
    Cmd { name: "DISCONNECT", cmd: abi::IOCTL_DISCONNECT, fields: &[(offset_of!(HandleOp, handle), Handle(Obj::Qp))], makes: None, ends: None },
    Cmd { name: "SET_EVENT_FD", cmd: abi::IOCTL_SET_EVENT_FD, fields: &[(offset_of!(SetEventFd, eventfd), Fd)], makes: None, ends: None },
    Cmd { name: "GET_ASYNC_EVENT", cmd: abi::IOCTL_GET_ASYNC_EVENT, fields: &[], makes: None, ends: None },
    Cmd { name: "LIST_QPS", cmd: abi::IOCTL_LIST_QPS, fields: &[(offset_of!(ListQps, entries), Pointer)], makes: None, ends: None },
];

/// The command that ends an object of each kind (to keep at most [`LIVE`] of them).
pub(super) fn ender(obj: Obj) -> &'static Cmd {
    COMMANDS.iter().find(|c| c.ends.is_some_and(|(o, _)| o == obj)).expect("every kind of object has a command that ends it")
}
