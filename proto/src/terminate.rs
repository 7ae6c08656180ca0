//! RDMAP Terminate (RFC 5040 section 4.8): which layer failed, how, and the offending headers.
//! Error codes are from RFC 5040 section 7 (RDMAP), RFC 5041 section 7 (DDP) and RFC 5044
//! section 8 / RFC 6581 (MPA).

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

use crate::ddp;
use crate::rdmap::{Error, READ_REQUEST_LEN};

/// Defines [`Cause`] and its wire codes from one table (layer, error type, error code).
macro_rules! causes {
    ($($(#[$doc:meta])* $name:ident = $code:expr,)*) => {
        /// Why a stream is terminated.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Cause {
            $($(#[$doc])* $name,)*
        }

        impl Cause {
            /// (layer, error type, error code) as carried in the Terminate control field.
            pub fn code(self) -> (u8, u8, u8) {
                match self {
                    $(Cause::$name => $code,)*
                }
            }
        }

        /// Every cause, in table order.
        const ALL: &[Cause] = &[$(Cause::$name,)*];
    };
}

causes! {
    /// RDMAP: local catastrophic error.
    RdmapCatastrophic = (0, 0, 0),
    /// RDMAP remote protection: invalid STag.
    RdmapInvalidStag = (0, 1, 0x00),
    /// RDMAP remote protection: base or bounds violation.
    RdmapBaseBounds = (0, 1, 0x01),
    /// RDMAP remote protection: access rights violation.
    RdmapAccessRights = (0, 1, 0x02),
    /// RDMAP remote protection: STag not associated with this stream.
    RdmapStagNotAssociated = (0, 1, 0x03),
    /// RDMAP remote protection: tagged offset wrap.
    RdmapToWrap = (0, 1, 0x04),
    /// RDMAP remote operation: invalid RDMAP version.
    RdmapVersion = (0, 2, 0x05),
    /// RDMAP remote operation: unexpected opcode.
    RdmapOpcode = (0, 2, 0x06),
    /// RDMAP remote operation: catastrophic error localized to this stream.
    RdmapStreamCatastrophic = (0, 2, 0x07),
    /// RDMAP remote operation: STag cannot be invalidated.
    RdmapCannotInvalidate = (0, 2, 0x09),
    /// DDP: local catastrophic error (e.g. a segment too short for its header).
    DdpCatastrophic = (1, 0, 0),
    /// DDP tagged buffer: invalid STag.
    DdpInvalidStag = (1, 1, 0x00),
    /// DDP tagged buffer: base or bounds violation.
    DdpBaseBounds = (1, 1, 0x01),
    /// DDP tagged buffer: STag not associated with this stream.
    DdpStagNotAssociated = (1, 1, 0x02),
    /// DDP tagged buffer: tagged offset wrap.
    DdpToWrap = (1, 1, 0x03),
    /// DDP tagged buffer: invalid DDP version.
    DdpTaggedVersion = (1, 1, 0x04),
    /// DDP untagged buffer: invalid queue number.
    DdpInvalidQn = (1, 2, 0x01),
    /// DDP untagged buffer: invalid MSN, no buffer available.
    DdpNoBuffer = (1, 2, 0x02),
    /// DDP untagged buffer: invalid MSN, MSN range not valid.
    DdpMsnRange = (1, 2, 0x03),
    /// DDP untagged buffer: invalid message offset.
    DdpInvalidMo = (1, 2, 0x04),
    /// DDP untagged buffer: message too long for the available buffer.
    DdpTooLong = (1, 2, 0x05),
    /// DDP untagged buffer: invalid DDP version.
    DdpUntaggedVersion = (1, 2, 0x06),
    /// MPA: TCP connection closed, terminated or lost.
    MpaStreamLost = (2, 0, 0x01),
    /// MPA: CRC error.
    MpaCrc = (2, 0, 0x02),
    /// MPA: marker and ULPDU length field mismatch (FPDU not where the marker says).
    MpaMarker = (2, 0, 0x03),
    /// MPA: invalid request or reply frame.
    MpaInvalidFrame = (2, 0, 0x04),
    /// MPA v2: local catastrophic error.
    MpaCatastrophic = (2, 0, 0x05),
    /// MPA v2: insufficient IRD resources.
    MpaInsufficientIrd = (2, 0, 0x06),
    /// MPA v2: no matching ready-to-receive message type.
    MpaNoMatchingRtr = (2, 0, 0x07),
}

impl Cause {
    /// The cause with this code, if it is one we know.
    pub fn from_code(code: (u8, u8, u8)) -> Option<Cause> {
        ALL.iter().copied().find(|c| c.code() == code)
    }
}

const HDRCT_M: u8 = 0x80;
const HDRCT_D: u8 = 0x40;
const HDRCT_R: u8 = 0x20;

/// Most octets a Terminate payload carries: control, segment length, DDP and RDMA headers.
pub const MAX_LEN: usize = 4 + 2 + ddp::UNTAGGED_LEN + READ_REQUEST_LEN;

/// A Terminate message's payload: the cause and, when known, the offending headers echoed back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terminate {
    /// (layer, error type, error code) as on the wire.
    pub code: (u8, u8, u8),
    /// ULPDU length of the offending segment, if echoed.
    pub segment_len: Option<u16>,
    /// Offending DDP header (14 or 18 octets), if echoed.
    ddp_hdr: [u8; ddp::UNTAGGED_LEN],
    ddp_len: u8,
    /// Offending RDMA Read Request header, if echoed.
    pub rdma_hdr: Option<[u8; READ_REQUEST_LEN]>,
}

impl Terminate {
    /// A Terminate for `cause` with no headers echoed.
    pub fn new(cause: Cause) -> Terminate {
        Terminate { code: cause.code(), segment_len: None, ddp_hdr: [0; ddp::UNTAGGED_LEN], ddp_len: 0, rdma_hdr: None }
    }

    /// Echoes the offending segment: its ULPDU length and DDP header (truncated to 18 octets).
    pub fn with_segment(mut self, ulpdu_len: u16, ddp_hdr: &[u8]) -> Terminate {
        let n = core::cmp::min(ddp_hdr.len(), ddp::UNTAGGED_LEN);
        self.segment_len = Some(ulpdu_len);
        self.ddp_hdr[..n].copy_from_slice(&ddp_hdr[..n]);
        self.ddp_len = n as u8;
        self
    }

    /// Echoes an offending RDMA Read Request header.
    pub fn with_read_request(mut self, hdr: [u8; READ_REQUEST_LEN]) -> Terminate {
        self.rdma_hdr = Some(hdr);
        self
    }

    /// The cause, if the code is one we know.
    pub fn cause(&self) -> Option<Cause> {
        Cause::from_code(self.code)
    }

    /// The echoed DDP header (empty if none).
    pub fn ddp_header(&self) -> &[u8] {
        &self.ddp_hdr[..self.ddp_len as usize]
    }

    /// Length of the payload on the wire (at most [`MAX_LEN`]).
    // Sums of constants and the echoed header's length (at most the longest DDP header).
    #[allow(clippy::arithmetic_side_effects)]
    pub fn wire_len(&self) -> usize {
        let echo = if self.ddp_len > 0 || self.segment_len.is_some() { 2 + self.ddp_len as usize } else { 0 };
        4 + echo + self.rdma_hdr.map_or(0, |_| READ_REQUEST_LEN)
    }

    /// Writes the payload into `out` and returns its length.
    // Offsets within `wire_len()`, checked against `out` first.
    #[allow(clippy::arithmetic_side_effects)]
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, Error> {
        if out.len() < self.wire_len() {
            return Err(Error::Truncated);
        }
        let (layer, etype, code) = self.code;
        out[0] = layer << 4 | (etype & 0x0f);
        out[1] = code;
        let hdrct = (if self.segment_len.is_some() { HDRCT_M } else { 0 })
            | (if self.ddp_len > 0 { HDRCT_D } else { 0 })
            | (if self.rdma_hdr.is_some() { HDRCT_R } else { 0 });
        out[2] = hdrct;
        out[3] = 0;
        let mut n = 4;
        if self.ddp_len > 0 || self.segment_len.is_some() {
            out[n..n + 2].copy_from_slice(&self.segment_len.unwrap_or(0).to_be_bytes());
            n += 2;
            out[n..n + self.ddp_len as usize].copy_from_slice(self.ddp_header());
            n += self.ddp_len as usize;
        }
        if let Some(r) = &self.rdma_hdr {
            out[n..n + READ_REQUEST_LEN].copy_from_slice(r);
            n += READ_REQUEST_LEN;
        }
        Ok(n)
    }

    /// Parses a received Terminate payload (one whose echoed headers are cut short is
    /// [`Error::Truncated`]).
    pub fn parse(b: &[u8]) -> Result<Terminate, Error> {
        // What is left of `b`, taken from the front.
        let mut rest = b;
        let fixed = take(&mut rest, 4)?;
        let hdrct = fixed[2];
        let mut t = Terminate { code: (fixed[0] >> 4, fixed[0] & 0x0f, fixed[1]), ..Terminate::new(Cause::RdmapCatastrophic) };
        if hdrct & (HDRCT_M | HDRCT_D) != 0 {
            let len = take(&mut rest, 2)?;
            if hdrct & HDRCT_M != 0 {
                t.segment_len = Some(u16::from_be_bytes([len[0], len[1]]));
            }
        }
        if hdrct & HDRCT_D != 0 {
            let first = *rest.first().ok_or(Error::Truncated)?;
            let ddp = take(&mut rest, ddp::Header::wire_len_from_first(first))?;
            t = t.with_segment(t.segment_len.unwrap_or(0), ddp);
            if hdrct & HDRCT_M == 0 {
                t.segment_len = None;
            }
        }
        if hdrct & HDRCT_R != 0 {
            let mut r = [0u8; READ_REQUEST_LEN];
            r.copy_from_slice(take(&mut rest, READ_REQUEST_LEN)?);
            t.rdma_hdr = Some(r);
        }
        Ok(t)
    }
}

/// The first `n` octets of `rest`, which then starts after them.
fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], Error> {
    let (head, tail) = rest.split_at_checked(n).ok_or(Error::Truncated)?;
    *rest = tail;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_has_a_distinct_code() {
        for (i, a) in ALL.iter().enumerate() {
            assert_eq!(Cause::from_code(a.code()), Some(*a));
            for b in &ALL[i + 1..] {
                assert_ne!(a.code(), b.code(), "{a:?} vs {b:?}");
            }
        }
        assert_eq!(Cause::from_code((3, 0, 0)), None);
    }

    #[test]
    fn terminate_round_trips_with_and_without_headers() {
        let hdr = [0x01u8, 0x43, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 0];
        let cases = [
            Terminate::new(Cause::MpaCrc),
            Terminate::new(Cause::DdpInvalidQn).with_segment(100, &hdr),
            Terminate::new(Cause::RdmapAccessRights).with_segment(46, &hdr).with_read_request([7; 28]),
        ];
        for t in cases {
            let mut b = [0u8; MAX_LEN];
            let n = t.emit(&mut b).unwrap();
            assert_eq!(n, t.wire_len());
            assert_eq!(Terminate::parse(&b[..n]), Ok(t));
            assert_eq!(t.emit(&mut b[..n - 1]), Err(Error::Truncated));
        }
        let mut b = [0u8; MAX_LEN];
        let n = Terminate::new(Cause::DdpInvalidQn).with_segment(100, &hdr).emit(&mut b).unwrap();
        assert_eq!(&b[..6], &[0x12, 0x01, 0xc0, 0, 0, 100]);
        assert_eq!(n, 4 + 2 + 18);
    }

    #[test]
    fn truncated_terminate_is_rejected() {
        assert_eq!(Terminate::parse(&[0x12, 0x01]), Err(Error::Truncated));
        assert_eq!(Terminate::parse(&[0x12, 0x01, 0xc0, 0, 0, 100, 0x01]), Err(Error::Truncated));
        assert_eq!(Terminate::parse(&[0x12, 0x01, 0x20, 0]), Err(Error::Truncated));
    }
}
