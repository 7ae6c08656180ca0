//! RFC 7306 Atomic Operations: the Atomic Request and Response headers that form those messages'
//! whole payload, and what each operation does to the 64-bit value it targets. Parsing follows
//! [`crate::ddp`]'s contract; operands are big-endian on the wire and applied to the value as the
//! responder's memory holds it.

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

use crate::ddp::{be32, be64};
use crate::rdmap::Error;

/// Length of the Atomic Request header.
pub const REQUEST_LEN: usize = 52;
/// Length of the Atomic Response header.
pub const RESPONSE_LEN: usize = 12;
/// Octets an atomic operation reads and writes (at a 64-bit aligned address).
pub const OPERAND_LEN: u32 = 8;
/// The alignment of an operand in the target's memory: its length.
const OPERAND_ALIGN: u64 = OPERAND_LEN as u64;

/// The operations (RFC 7306 section 5.1, AOpCode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Adds the add data to the value, field by field as the add mask cuts it.
    FetchAdd = 0,
    /// Replaces the masked bits of the value with the swap data if its compared bits match.
    CompareSwap = 2,
}

/// An Atomic Request header (RFC 7306 section 5.2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The operation.
    pub op: Op,
    /// Chosen by the requester, echoed in the response.
    pub id: u32,
    /// The responder's STag ...
    pub stag: u32,
    /// ... and tagged offset of the 64-bit value.
    pub to: u64,
    /// Add data (Fetch-and-Add) or swap data (Compare-and-Swap).
    pub data: u64,
    /// Fetch-and-Add: the most significant bit of each field (0: one 64-bit field).
    /// Compare-and-Swap: the bits to replace.
    pub data_mask: u64,
    /// Compare-and-Swap: the value to compare with (0 for Fetch-and-Add).
    pub compare: u64,
    /// Compare-and-Swap: the bits to compare (all ones for Fetch-and-Add).
    pub compare_mask: u64,
}

impl Request {
    /// A plain 64-bit Fetch-and-Add of `add`.
    pub fn fetch_add(id: u32, stag: u32, to: u64, add: u64) -> Request {
        Request { op: Op::FetchAdd, id, stag, to, data: add, data_mask: 0, compare: 0, compare_mask: !0 }
    }

    /// A plain Compare-and-Swap: `swap` replaces the value if it equals `compare`.
    pub fn compare_swap(id: u32, stag: u32, to: u64, compare: u64, swap: u64) -> Request {
        Request { op: Op::CompareSwap, id, stag, to, data: swap, data_mask: !0, compare, compare_mask: !0 }
    }

    /// Whether the target is 64-bit aligned (tagged offsets are virtual addresses here), as
    /// RFC 7306 section 5.1 requires.
    pub fn aligned(&self) -> bool {
        self.to % OPERAND_ALIGN == 0
    }

    /// The value the target holds after the operation, given the one it held.
    pub fn apply(&self, old: u64) -> u64 {
        match self.op {
            // Each field adds on its own: the bits at field tops are left out of the sum (no
            // carry leaves a field then) and put back as the sum of their two bits and the carry
            // into them, whose carry out is dropped.
            Op::FetchAdd => {
                let top = self.data_mask;
                ((old & !top).wrapping_add(self.data & !top)) ^ ((old ^ self.data) & top)
            }
            Op::CompareSwap if (old ^ self.compare) & self.compare_mask == 0 => (old & !self.data_mask) | (self.data & self.data_mask),
            Op::CompareSwap => old,
        }
    }

    /// Parses the 52-octet header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Request, Error> {
        if b.len() < REQUEST_LEN {
            return Err(Error::Truncated);
        }
        // The 28 bits before the operation code are reserved: ignored on receipt.
        let op = match b[3] & 0x0f {
            0 => Op::FetchAdd,
            2 => Op::CompareSwap,
            other => return Err(Error::AtomicOpcode(other)),
        };
        Ok(Request {
            op,
            id: be32(b, 4),
            stag: be32(b, 8),
            to: be64(b, 12),
            data: be64(b, 20),
            data_mask: be64(b, 28),
            compare: be64(b, 36),
            compare_mask: be64(b, 44),
        })
    }

    /// The 52-octet header.
    pub fn emit(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[3] = self.op as u8;
        b[4..8].copy_from_slice(&self.id.to_be_bytes());
        b[8..12].copy_from_slice(&self.stag.to_be_bytes());
        b[12..20].copy_from_slice(&self.to.to_be_bytes());
        b[20..28].copy_from_slice(&self.data.to_be_bytes());
        b[28..36].copy_from_slice(&self.data_mask.to_be_bytes());
        b[36..44].copy_from_slice(&self.compare.to_be_bytes());
        b[44..52].copy_from_slice(&self.compare_mask.to_be_bytes());
        b
    }
}

/// An Atomic Response header (RFC 7306 section 5.2.2): the value the target held before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    /// The request's identifier.
    pub id: u32,
    /// The value before the operation.
    pub original: u64,
}

impl Response {
    /// Parses the 12-octet header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Response, Error> {
        if b.len() < RESPONSE_LEN {
            return Err(Error::Truncated);
        }
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[4..12]);
        Ok(Response { id: u32::from_be_bytes([b[0], b[1], b[2], b[3]]), original: u64::from_be_bytes(v) })
    }

    /// The 12-octet header.
    pub fn emit(&self) -> [u8; RESPONSE_LEN] {
        let mut b = [0u8; RESPONSE_LEN];
        b[..4].copy_from_slice(&self.id.to_be_bytes());
        b[4..].copy_from_slice(&self.original.to_be_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout_and_round_trip() {
        let r = Request { op: Op::CompareSwap, id: 0x0102_0304, stag: 0x1122_3344, to: 0x8, data: 5, data_mask: 6, compare: 7, compare_mask: 9 };
        let b = r.emit();
        assert_eq!(&b[..4], &[0, 0, 0, 2]);
        assert_eq!(&b[4..12], &[1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44]);
        assert_eq!(&b[12..20], &8u64.to_be_bytes());
        assert_eq!(&b[44..52], &9u64.to_be_bytes());
        assert_eq!(Request::parse(&b), Ok(r));
        assert_eq!(Request::parse(&b[..51]), Err(Error::Truncated));
        // Reserved bits are ignored; the reserved and unassigned operation codes are refused.
        let mut x = b;
        x[0] = 0xff;
        x[3] |= 0xf0;
        assert_eq!(Request::parse(&x), Ok(r));
        for code in [1u8, 3, 15] {
            x[3] = code;
            assert_eq!(Request::parse(&x), Err(Error::AtomicOpcode(code)));
        }
    }

    #[test]
    fn response_layout_and_round_trip() {
        let r = Response { id: 7, original: 0x0102_0304_0506_0708 };
        let b = r.emit();
        assert_eq!(b, [0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Response::parse(&b), Ok(r));
        assert_eq!(Response::parse(&b[..11]), Err(Error::Truncated));
    }

    #[test]
    fn fetch_add_adds_each_field_alone() {
        let plain = Request::fetch_add(1, 2, 0, 5);
        assert_eq!(plain.apply(u64::MAX), 4, "one 64-bit field wraps");
        // Two 32-bit fields (tops at bits 31 and 63): the low field's carry is dropped.
        let halves = Request { data_mask: 1 << 31 | 1 << 63, data: 1 << 32 | 1, ..plain };
        assert_eq!(halves.apply(0x0000_0001_ffff_ffff), 0x0000_0002_0000_0000);
        // Eight 8-bit fields, checked against adding octet by octet.
        let bytes = Request { data_mask: 0x8080_8080_8080_8080, data: 0x01ff_7f80_0102_0304, ..plain };
        let old = 0xff01_8181_feff_7f00u64;
        let want = u64::from_be_bytes(core::array::from_fn(|i| old.to_be_bytes()[i].wrapping_add(bytes.data.to_be_bytes()[i])));
        assert_eq!(bytes.apply(old), want);
    }

    #[test]
    fn compare_swap_swaps_masked_bits_on_a_masked_match() {
        let cs = Request::compare_swap(1, 2, 0, 10, 20);
        assert_eq!((cs.apply(10), cs.apply(11)), (20, 11));
        // Compare only the low octet, swap only the high half.
        let masked = Request { compare: 0xaa, compare_mask: 0xff, data: 0x1234_5678_0000_0000, data_mask: 0xffff_ffff_0000_0000, ..cs };
        assert_eq!(masked.apply(0x9999_9999_0000_00aa), 0x1234_5678_0000_00aa);
        assert_eq!(masked.apply(0x9999_9999_0000_00ab), 0x9999_9999_0000_00ab);
        assert!(cs.aligned() && !Request { to: 12, ..cs }.aligned());
    }
}
