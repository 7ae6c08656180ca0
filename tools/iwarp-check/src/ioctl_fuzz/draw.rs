//! The values of each kind of field: boundaries where arithmetic breaks, random ones, live and
//! dead handles, addresses the module must refuse or may only scribble on.

use super::commands::{Field, Obj, OBJS};
use crate::rng::Rng;
use libiwarp::abi::{self, send_flags, PostRecv, PostSend, Sge, ENDPOINT_SIZE};
use std::os::fd::{AsRawFd, OwnedFd};
use Field::*;

pub(super) const PAGE: usize = 4096;

/// The loopback address of `family` as an endpoint holds it: ::1 for IPv6, else 127.0.0.1.
pub(super) fn loopback_addr(family: u16) -> [u8; 16] {
    if family == libc::AF_INET6 as u16 {
        return std::net::Ipv6Addr::LOCALHOST.octets();
    }
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&std::net::Ipv4Addr::LOCALHOST.octets());
    a
}

/// The address of every endpoint among `fields` of `buf` made loopback again, whatever was
/// drawn over it. Nothing is ever sent elsewhere.
pub(super) fn loopback(buf: &mut [u8], fields: &[(usize, Field)]) {
    for &(at, f) in fields {
        if let Endpoint = f {
            let e = &mut buf[at..at + ENDPOINT_SIZE];
            let addr = loopback_addr(u16::from_ne_bytes([e[0], e[1]]));
            e[4..].copy_from_slice(&addr);
        }
    }
}
/// An address in the kernel's direct map.
const KERNEL: u64 = 0xffff_8880_0000_0000;
/// The ABI's limits: each, and one on either side, is a boundary value of every integer field.
const LIMITS: &[u64] = &[
    abi::MAX_PRIVATE_DATA as u64,
    abi::MAX_IRD_ORD as u64,
    abi::MAX_QP_WR as u64,
    abi::MAX_SGE as u64,
    abi::MAX_INLINE as u64,
    abi::MAX_CQE as u64,
    abi::MAX_QP as u64,
    abi::MAX_LISTEN as u64,
    abi::MAX_MR as u64,
    abi::MAX_LIST_QPS as u64,
    abi::MAX_ASYNC_EVENTS as u64,
    abi::MAX_MR_SIZE,
    abi::MAX_MESSAGE,
    512,    // MPA's most private data, RFC 5044's marker separation
    65_532, // the widest marker separation
    60_000, // the longest timeout
    65_535, // the highest port
];

/// Anonymous memory: `len` octets readable and writable, followed by one page without access.
pub(super) struct Arena {
    base: *mut u8,
    pub(super) len: usize,
}

impl Arena {
    pub(super) fn new(len: usize) -> Result<Arena, String> {
        // SAFETY: a fresh private anonymous mapping; checked below.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len + PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        if base == libc::MAP_FAILED {
            return Err("mmap scratch".into());
        }
        // SAFETY: the last page of the mapping just made.
        if unsafe { libc::mprotect(base.cast::<u8>().add(len).cast(), PAGE, libc::PROT_NONE) } != 0 {
            return Err("mprotect guard".into());
        }
        Ok(Arena { base: base.cast(), len })
    }

    pub(super) fn start(&self) -> u64 {
        self.base as u64
    }

    /// The page without access right after the arena.
    pub(super) fn guard(&self) -> u64 {
        self.start() + self.len as u64
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new(), unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len + PAGE) };
    }
}

/// One draw: a value and the class it came from (what an argument's shape is made of).
pub(super) type Drawn = (u64, u8);

/// The values of each kind of field, and the state they depend on.
pub(super) struct Draw {
    pub(super) r: Rng,
    pub(super) scratch: Arena,
    /// Live handles of each kind, oldest first, and handles that were ended.
    pub(super) live: [Vec<u32>; OBJS],
    pub(super) dead: [Vec<u32>; OBJS],
    /// The device's own descriptor and an eventfd of ours, for descriptor fields.
    pub(super) device_fd: i32,
    pub(super) eventfd: OwnedFd,
    /// The families and ports our listeners bound, for CONNECT_QP to reach.
    pub(super) ports: Vec<(u16, u16)>,
}

impl Draw {
    /// An integer of `bits` bits from a boundary or at random; the class says which.
    pub(super) fn int(&mut self, bits: u32) -> Drawn {
        let max = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let k = self.r.below(bits as usize) as u32;
        let (v, class) = match self.r.below(12) {
            0 => (0, 0),
            1 => (1, 1),
            2 => (2 + self.r.below(63) as u64, 2),
            3 => {
                let l = LIMITS[self.r.below(LIMITS.len())];
                (l.wrapping_add(self.r.below(3) as u64).wrapping_sub(1), 3)
            }
            4 => ((1u64 << k).wrapping_sub(1), 4),
            5 => (1u64 << k, 5),
            6 => ((1u64 << k).wrapping_add(1), 6),
            7 => (max - self.r.below(16) as u64, 7),
            // A 64-bit field at the 32-bit boundaries, where a truncating cast breaks.
            8 if bits == 64 => ((u32::MAX as u64).wrapping_add(self.r.below(3) as u64).wrapping_sub(1), 8),
            _ => (self.r.next(), 9),
        };
        (v & max, class)
    }

    pub(super) fn handle(&mut self, obj: Obj) -> Drawn {
        let (live, dead) = (&self.live[obj as usize], &self.dead[obj as usize]);
        match self.r.below(4) {
            0 | 1 if !live.is_empty() => (live[self.r.below(live.len())] as u64, 10),
            2 if !dead.is_empty() => (dead[self.r.below(dead.len())] as u64, 11),
            _ => self.int(32),
        }
    }

    pub(super) fn flags(&mut self, defined: u32) -> Drawn {
        let subset = self.r.next() as u32 & defined;
        match self.r.below(6) {
            0 => (0, 0),
            1 => (defined as u64, 12),
            2 => ((subset | 1 << self.r.below(32)) as u64, 13),
            3 => self.int(32),
            _ => (subset as u64, 14),
        }
    }

    pub(super) fn pointer(&mut self) -> Drawn {
        let s = &self.scratch;
        let (v, class) = match self.r.below(7) {
            0 => (0, 0),
            1 => (s.start() + self.r.below(s.len) as u64, 15),
            2 => (s.guard(), 16),
            3 => (s.guard() - 1 - self.r.below(64) as u64, 17),
            4 => (KERNEL + self.r.below(1 << 30) as u64, 18),
            5 => (0x8000_0000_0000_0000 | self.r.next(), 19),
            _ => (s.start(), 20),
        };
        (v, class)
    }

    pub(super) fn timeout(&mut self) -> Drawn {
        match self.r.below(4) {
            0 => (0, 0),
            1 => ([60_001, u32::MAX as u64, 1 << 31][self.r.below(3)], 21),
            _ => (1 + self.r.below(20) as u64, 22),
        }
    }

    pub(super) fn fd(&mut self) -> Drawn {
        let class = self.r.below(7);
        let v = match class {
            0 => self.device_fd,
            1 => self.eventfd.as_raw_fd(),
            // The child's standard input is /dev/null (see fuzz()).
            2 => 0,
            3 => -1,
            4 => i32::MIN,
            // Numbers no descriptor of ours has.
            5 => 1 << 20,
            _ => 1000 + self.r.below(1 << 20) as i32,
        };
        (v as u32 as u64, 30 + class as u8)
    }

    /// A value for `field` (not an [`Endpoint`], which [`Draw::endpoint`] draws).
    pub(super) fn field(&mut self, field: Field) -> Drawn {
        match field {
            U64 => self.int(64),
            Handle(obj) => self.handle(obj),
            Flags(defined) => self.flags(defined),
            Pointer => self.pointer(),
            Timeout => self.timeout(),
            Fd => self.fd(),
            Endpoint => unreachable!("endpoints are drawn whole"),
        }
    }

    /// An endpoint's octets: IPv4, IPv6 or any other family, any port, a loopback address.
    pub(super) fn endpoint(&mut self) -> ([u8; ENDPOINT_SIZE], u8) {
        let class = self.r.below(3);
        let family = match class {
            0 => libc::AF_INET as u16,
            1 => libc::AF_INET6 as u16,
            _ => self.int(16).0 as u16,
        };
        let mut e = [0u8; ENDPOINT_SIZE];
        e[..2].copy_from_slice(&family.to_ne_bytes());
        e[2..4].copy_from_slice(&(self.int(16).0 as u16).to_ne_bytes());
        (e, 40 + class as u8)
    }

    /// Writes a field at `at` of `buf` as `f` says; its width.
    fn write_field(&mut self, buf: &mut [u8], at: usize, f: Field, shape: &mut Vec<u8>) -> usize {
        if let Endpoint = f {
            let (e, class) = self.endpoint();
            buf[at..at + ENDPOINT_SIZE].copy_from_slice(&e);
            shape.push(class);
            return ENDPOINT_SIZE;
        }
        let (v, class) = self.field(f);
        let n = if matches!(f, U64 | Pointer) { 8 } else { 4 };
        buf[at..at + n].copy_from_slice(&v.to_ne_bytes()[..n]);
        shape.push(class);
        n
    }

    /// `len` octets of argument with `fields` drawn as they say and every other word as a 32-bit
    /// integer; the classes drawn are added to `shape`.
    pub(super) fn argument(&mut self, len: usize, fields: &[(usize, Field)], shape: &mut Vec<u8>) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        let mut at = 0;
        while at + 4 <= len {
            match fields.iter().find(|(o, _)| *o == at) {
                Some(&(_, f)) => at += self.write_field(&mut buf, at, f, shape),
                None => {
                    let (v, class) = self.int(32);
                    buf[at..at + 4].copy_from_slice(&(v as u32).to_ne_bytes());
                    shape.push(class);
                    at += 4;
                }
            }
        }
        loopback(&mut buf, fields);
        buf
    }

    /// Up to two fields of `buf` (described in `fields`, or any 4-octet word) drawn again.
    pub(super) fn mutate(&mut self, buf: &mut [u8], fields: &[(usize, Field)], shape: &mut Vec<u8>) {
        for _ in 0..self.r.below(3) {
            let (at, field) = match fields.len() {
                n if n > 0 && self.r.below(2) == 0 => fields[self.r.below(n)],
                _ => (self.r.below(buf.len() / 4) * 4, Flags(u32::MAX)),
            };
            shape.push(at as u8);
            if let Flags(u32::MAX) = field {
                let (v, class) = self.int(32);
                buf[at..at + 4].copy_from_slice(&(v as u32).to_ne_bytes());
                shape.push(class);
            } else {
                self.write_field(buf, at, field, shape);
            }
        }
        loopback(buf, fields);
    }

    /// A scatter/gather entry.
    pub(super) fn sge(&mut self, shape: &mut Vec<u8>) -> Sge {
        let (addr, a) = self.pointer();
        let (length, l) = self.int(32);
        let (lkey, k) = self.handle(Obj::Mr);
        shape.extend([a, l, k]);
        Sge { addr, length: length as u32, lkey: lkey as u32 }
    }

    /// A send work request, each field drawn.
    pub(super) fn post_send(&mut self, shape: &mut Vec<u8>) -> PostSend {
        let mut w = |d: &mut Draw, f: Field| {
            let (v, c) = d.field(f);
            shape.push(c);
            v
        };
        let opcode = w(self, Flags(0xf)) as u32;
        let flags = w(self, Flags(send_flags::ALL)) as u32;
        let num_sge = w(self, Flags(0x7)) as u32;
        let (wr_id, remote_addr, rkey, invalidate) = (w(self, U64), w(self, U64), w(self, Handle(Obj::Mr)) as u32, w(self, Handle(Obj::Mr)) as u32);
        let (imm_data, compare_add, swap) = (w(self, U64), w(self, U64), w(self, U64));
        let sge = [self.sge(shape), self.sge(shape), self.sge(shape), self.sge(shape)];
        PostSend { qp: 0, opcode, flags, num_sge, wr_id, remote_addr, rkey, invalidate, sge, imm_data, compare_add, swap }
    }

    pub(super) fn post_recv(&mut self, shape: &mut Vec<u8>) -> PostRecv {
        let (num_sge, n) = self.flags(0x7);
        let (wr_id, w) = self.int(64);
        shape.extend([n, w]);
        PostRecv { qp: 0, num_sge: num_sge as u32, wr_id, sge: [self.sge(shape), self.sge(shape), self.sge(shape), self.sge(shape)] }
    }
}
