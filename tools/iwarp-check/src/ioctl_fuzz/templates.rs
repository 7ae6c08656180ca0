//! Valid arguments, made from live objects: a drawn argument is mostly refused at its first
//! check, so half of the calls start from one of these, with a field or two then drawn as
//! usual, to reach the checks (and the arithmetic) behind the first.

use super::commands::Obj;
use super::draw::{loopback_addr, Draw};
use libiwarp::abi::{
    self, access, conn, Accept, AdoptQp, ConnectQp, CqOp, CreateCq, CreateQp, DeregMr, DestroyQp, Doorbell, GetRequest, HandleOp, ListQps, Listen, PdOp,
    QueryQp, RegMr, Reject, SetEventFd,
};

/// The octets of an ABI argument.
fn bytes<T: Copy>(v: T) -> Vec<u8> {
    // SAFETY: T is one of the ABI's plain-data structs (repr(C), no padding: abi_layout's tests),
    // so all of its octets are initialised.
    unsafe { std::slice::from_raw_parts((&v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }.to_vec()
}

/// A loopback endpoint of `family` at `port`.
fn loopback_at(family: u16, port: u16) -> abi::Endpoint {
    abi::Endpoint { family, port, addr: loopback_addr(family) }
}

impl Draw {
    /// A live handle of `obj`, or 0 (no such object yet: the template is still worth a call).
    fn live(&mut self, obj: Obj) -> u32 {
        let live = &self.live[obj as usize];
        if live.is_empty() {
            0
        } else {
            live[self.r.below(live.len())]
        }
    }

    /// Up to `most`, at least `least`.
    fn within(&mut self, least: u32, most: u32) -> u32 {
        least + self.r.below((most - least + 1) as usize) as u32
    }

    /// A place in scratch memory with `len` octets after it.
    fn scratch_at(&mut self, len: usize) -> u64 {
        self.scratch.start() + self.r.below(self.scratch.len - len) as u64
    }

    /// Connection options as a caller asks for them (role and descriptor set by the caller).
    fn adopt(&mut self, role: u32) -> AdoptQp {
        AdoptQp {
            fd: 0,
            role,
            flags: self.r.next() as u32 & conn::ASKABLE,
            mpa_rev: self.within(1, 2),
            ird: self.within(0, 16),
            ord: self.within(0, 16),
            private_len: self.within(0, 64),
            peer_private_cap: self.within(0, 512),
            private_data: self.scratch_at(512),
            peer_private: self.scratch_at(512),
            timeout_ms: self.within(1, 20),
            qp: self.live(Obj::Qp),
            ..AdoptQp::default()
        }
    }

    /// A valid argument of the command `name`, if it has one worth making.
    pub(super) fn template(&mut self, name: &str) -> Option<Vec<u8>> {
        Some(match name {
            "ALLOC_PD" => bytes(PdOp::default()),
            "DEALLOC_PD" => bytes(PdOp { pd: self.live(Obj::Pd), reserved: 0 }),
            "REG_MR" => {
                let length = self.within(1, 64 << 10) as u64;
                let access = self.r.next() as u32 & access::ALL;
                bytes(RegMr { addr: self.scratch_at(length as usize), length, access, pd: self.live(Obj::Pd), ..RegMr::default() })
            }
            "DEREG_MR" => bytes(DeregMr { stag: self.live(Obj::Mr), reserved: 0 }),
            "CREATE_CQ" => {
                let eventfd = if self.r.below(2) == 0 { -1 } else { std::os::fd::AsRawFd::as_raw_fd(&self.eventfd) };
                bytes(CreateCq { depth: self.within(1, 1024), eventfd, ..CreateCq::default() })
            }
            "DESTROY_CQ" | "ARM_CQ" => bytes(CqOp { cq: self.live(Obj::Cq), solicited_only: self.within(0, 1) }),
            "CREATE_QP" => bytes(CreateQp {
                send_cq: self.live(Obj::Cq),
                recv_cq: self.live(Obj::Cq),
                max_recv_wr: self.within(1, 64),
                max_send_wr: self.within(1, 64),
                pd: self.live(Obj::Pd),
                max_sge: self.within(1, abi::MAX_SGE as u32),
                max_inline: self.within(0, 256),
                ..CreateQp::default()
            }),
            "DESTROY_QP" => bytes(DestroyQp { qp: self.live(Obj::Qp), reserved: 0 }),
            "QUERY_QP" => bytes(QueryQp { qp: self.live(Obj::Qp), ..QueryQp::default() }),
            "DISCONNECT" => bytes(HandleOp { handle: self.live(Obj::Qp), reserved: 0 }),
            "DOORBELL" => bytes(Doorbell { qp: self.live(Obj::Qp), sq_tail: self.within(0, 128), rq_tail: self.within(0, 128), ..Doorbell::default() }),
            "ADOPT_QP" => {
                let role = self.within(abi::role::INITIATOR, abi::role::RESPONDER);
                bytes(self.adopt(role))
            }
            "CONNECT_QP" => {
                // Toward a listener of ours, mostly: the MPA exchange then starts for real.
                let (family, port) = match self.ports.len() {
                    0 => (libc::AF_INET as u16, self.within(1, 65535) as u16),
                    n => self.ports[self.r.below(n)],
                };
                bytes(ConnectQp { adopt: self.adopt(abi::role::INITIATOR), peer: loopback_at(family, port), reserved: 0 })
            }
            "LISTEN" => {
                let family = if self.r.below(2) == 0 { libc::AF_INET } else { libc::AF_INET6 };
                bytes(Listen { at: loopback_at(family as u16, 0), backlog: self.within(1, 16), ..Listen::default() })
            }
            "CLOSE_LISTENER" => bytes(HandleOp { handle: self.live(Obj::Listener), reserved: 0 }),
            "GET_REQUEST" => bytes(GetRequest {
                listener: self.live(Obj::Listener),
                timeout_ms: self.within(1, 5),
                peer_private: self.scratch_at(512),
                peer_private_cap: self.within(0, 512),
                ..GetRequest::default()
            }),
            "ACCEPT" => bytes(Accept { adopt: self.adopt(abi::role::RESPONDER), request: self.live(Obj::Request), reserved: 0 }),
            "REJECT" => bytes(Reject { request: self.live(Obj::Request), private_len: self.within(0, 64), private_data: self.scratch_at(512) }),
            "SET_EVENT_FD" => {
                let eventfd = if self.r.below(2) == 0 { -1 } else { std::os::fd::AsRawFd::as_raw_fd(&self.eventfd) };
                bytes(SetEventFd { eventfd, reserved: 0 })
            }
            "LIST_QPS" => bytes(ListQps { entries: self.scratch_at(16 * abi::QP_INFO_SIZE), capacity: self.within(0, 16), count: 0 }),
            _ => return None,
        })
    }
}
