//! DDP segment headers (RFC 5041 section 4): tagged (STag, tagged offset) and untagged
//! (queue number, message sequence number, message offset). Parsing only reads the bytes;
//! what they mean is checked in [`crate::rx`]. As in smoltcp's `wire`: `parse` checks the length
//! first and cannot panic after; `emit` checks its buffer and never panics.

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

/// Length of a tagged DDP header (including the RDMAP control byte).
pub const TAGGED_LEN: usize = 14;
/// Length of an untagged DDP header (including the RDMAP control byte and the 32-bit ULP field).
pub const UNTAGGED_LEN: usize = 18;
/// The only DDP version (DV) defined.
pub const VERSION: u8 = 1;

const T_FLAG: u8 = 0x80;
const L_FLAG: u8 = 0x40;
const DV_MASK: u8 = 0x03;

/// Why octets are not a DDP header, or a buffer cannot take one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Fewer octets than the header needs.
    Truncated,
}

/// Where a segment's payload goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffer {
    /// Tagged buffer model: a steering tag and tagged offset chosen by the data sink.
    Tagged {
        /// Steering tag of the sink buffer.
        stag: u32,
        /// Tagged offset of the first payload octet.
        to: u64,
    },
    /// Untagged buffer model: the next buffer of queue `qn` for message `msn`, at offset `mo`.
    /// `ulp` is the 32-bit field DDP reserves for its upper layer (RDMAP's Invalidate STag).
    Untagged {
        /// The upper layer's 32 bits.
        ulp: u32,
        /// Queue number.
        qn: u32,
        /// Message sequence number (from 1, per queue).
        msn: u32,
        /// Message offset of the first payload octet.
        mo: u32,
    },
}

/// A DDP header as it appears on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Last segment of the message.
    pub last: bool,
    /// DDP version (DV).
    pub version: u8,
    /// The 8 bits DDP reserves for its upper layer: RDMAP's version and opcode.
    pub ulp_ctrl: u8,
    /// Buffer model and its fields.
    pub buf: Buffer,
}

impl Header {
    /// Header length on the wire.
    pub fn wire_len(&self) -> usize {
        match self.buf {
            Buffer::Tagged { .. } => TAGGED_LEN,
            Buffer::Untagged { .. } => UNTAGGED_LEN,
        }
    }

    /// Length on the wire of the header that starts `bytes` (only its first octet is needed).
    pub fn wire_len_from_first(first: u8) -> usize {
        if first & T_FLAG != 0 {
            TAGGED_LEN
        } else {
            UNTAGGED_LEN
        }
    }

    /// Parses the header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Header, Error> {
        let first = *b.first().ok_or(Error::Truncated)?;
        if b.len() < Self::wire_len_from_first(first) {
            return Err(Error::Truncated);
        }
        let buf = if first & T_FLAG != 0 {
            Buffer::Tagged { stag: be32(b, 2), to: be64(b, 6) }
        } else {
            Buffer::Untagged { ulp: be32(b, 2), qn: be32(b, 6), msn: be32(b, 10), mo: be32(b, 14) }
        };
        Ok(Header { last: first & L_FLAG != 0, version: first & DV_MASK, ulp_ctrl: b[1], buf })
    }

    /// Writes the header to the start of `out` and returns its length.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, Error> {
        if out.len() < self.wire_len() {
            return Err(Error::Truncated);
        }
        let tagged = matches!(self.buf, Buffer::Tagged { .. });
        out[0] = (if tagged { T_FLAG } else { 0 }) | (if self.last { L_FLAG } else { 0 }) | (self.version & DV_MASK);
        out[1] = self.ulp_ctrl;
        match self.buf {
            Buffer::Tagged { stag, to } => {
                out[2..6].copy_from_slice(&stag.to_be_bytes());
                out[6..14].copy_from_slice(&to.to_be_bytes());
            }
            Buffer::Untagged { ulp, qn, msn, mo } => {
                out[2..6].copy_from_slice(&ulp.to_be_bytes());
                out[6..10].copy_from_slice(&qn.to_be_bytes());
                out[10..14].copy_from_slice(&msn.to_be_bytes());
                out[14..18].copy_from_slice(&mo.to_be_bytes());
            }
        }
        Ok(self.wire_len())
    }
}

/// The big-endian 32-bit value at `at` in `b` (whose length the caller checked): header fields
/// at fixed offsets, read without arithmetic on them.
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[at..][..4]);
    u32::from_be_bytes(v)
}

/// The big-endian 64-bit value at `at` in `b` (see [`be32`]).
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..][..8]);
    u64::from_be_bytes(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_round_trip_and_layout() {
        let h = Header { last: true, version: 1, ulp_ctrl: 0x40, buf: Buffer::Tagged { stag: 0x1122_3344, to: 0x0102_0304_0506_0708 } };
        let mut b = [0u8; 14];
        assert_eq!(h.emit(&mut b), Ok(14));
        assert_eq!(h.emit(&mut b[..13]), Err(Error::Truncated));
        assert_eq!(b, [0xc1, 0x40, 0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Header::parse(&b), Ok(h));
    }

    #[test]
    fn untagged_round_trip_and_layout() {
        let h = Header { last: false, version: 1, ulp_ctrl: 0x43, buf: Buffer::Untagged { ulp: 7, qn: 0, msn: 1, mo: 0x100 } };
        let mut b = [0u8; 18];
        assert_eq!(h.emit(&mut b), Ok(18));
        assert_eq!(h.emit(&mut b[..17]), Err(Error::Truncated));
        assert_eq!(b, [0x01, 0x43, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0]);
        assert_eq!(Header::parse(&b), Ok(h));
    }

    #[test]
    fn short_input_is_not_a_header() {
        assert_eq!(Header::parse(&[]), Err(Error::Truncated));
        assert_eq!(Header::parse(&[0x81; 13]), Err(Error::Truncated));
        assert_eq!(Header::parse(&[0x01; 17]), Err(Error::Truncated));
    }
}
