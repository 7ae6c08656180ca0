//! MPA request and reply frames: a 16-octet key, flags, revision, private data length and up to
//! 512 octets of private data, the first 4 of which carry IRD/ORD when the enhanced (H) flag is
//! set (MPA revision 2).

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

/// Key of a request frame.
pub const REQUEST_KEY: &[u8; 16] = b"MPA ID Req Frame";
/// Key of a reply frame.
pub const REPLY_KEY: &[u8; 16] = b"MPA ID Rep Frame";
/// Fixed part of a frame: key, flags, revision, private data length.
pub const HEADER_LEN: usize = 20;
/// Most private data a frame may carry (enhanced data included).
pub const MAX_PRIVATE: usize = 512;
/// Length of the RFC 6581 enhanced connection data (IRD and ORD words).
pub const ENHANCED_LEN: usize = 4;
/// Opens the private data (after any enhanced data) of a frame whose sender offers or accepts
/// the RFC 7306 extensions. RFC 7306 leaves their negotiation to the upper layer; this is ours,
/// so a peer without them (siw) never sees it in a reply and is never sent their opcodes.
pub const EXTENSIONS_TOKEN: &[u8; 8] = b"RFC7306\x01";
/// Largest IRD or ORD value (14 bits).
pub const MAX_IRD_ORD: u16 = 0x3fff;

const FLAG_M: u8 = 0x80;
const FLAG_C: u8 = 0x40;
const FLAG_R: u8 = 0x20;
const FLAG_H: u8 = 0x10;
const IRD_P2P: u16 = 0x8000;
const IRD_ZERO_SEND_RTR: u16 = 0x4000;
const ORD_WRITE_RTR: u16 = 0x8000;
const ORD_READ_RTR: u16 = 0x4000;

/// Request (from the initiator) or reply (from the responder).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// "MPA ID Req Frame".
    Request,
    /// "MPA ID Rep Frame".
    Reply,
}

/// Which zero-length messages may serve as the ready-to-receive (RTR) message (RFC 6581).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RtrTypes {
    /// Zero-length Send.
    pub send: bool,
    /// Zero-length RDMA Write.
    pub write: bool,
    /// Zero-length RDMA Read.
    pub read: bool,
}

/// RFC 6581 enhanced connection data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Enhanced {
    /// Inbound RDMA Read queue depth.
    pub ird: u16,
    /// Outbound RDMA Read queue depth.
    pub ord: u16,
    /// Peer-to-peer mode: the initiator sends an RTR message before the responder may send.
    pub p2p: bool,
    /// RTR types offered (request) or the one chosen (reply).
    pub rtr: RtrTypes,
}

/// A parsed request or reply frame, borrowing its private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Request or reply.
    pub kind: Kind,
    /// M: the sender wants markers in the FPDUs it receives.
    pub markers: bool,
    /// C: the sender wants CRCs.
    pub crc: bool,
    /// R: reply only, the connection is rejected.
    pub reject: bool,
    /// MPA revision.
    pub rev: u8,
    /// Enhanced connection data (revision 2 with the H flag).
    pub enhanced: Option<Enhanced>,
    /// The private data opens with [`EXTENSIONS_TOKEN`] (not part of `private`).
    pub extensions: bool,
    /// Application private data (after any enhanced data).
    pub private: &'a [u8],
}

/// Why a frame was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Not enough bytes yet; the frame needs this many in all.
    Incomplete(usize),
    /// The key is neither request nor reply, or not the one expected.
    BadKey,
    /// Private data length above 512.
    PrivateTooLong,
    /// R in a request, or H without room for its data.
    BadFlags,
    /// Revision other than 1 or 2.
    BadRevision,
}

impl<'a> Frame<'a> {
    /// Parses a frame of kind `expect` from the start of `b`; returns it and its length.
    pub fn parse(b: &'a [u8], expect: Kind) -> Result<(Frame<'a>, usize), FrameError> {
        if b.len() < HEADER_LEN {
            return Err(FrameError::Incomplete(HEADER_LEN));
        }
        let key = match expect {
            Kind::Request => REQUEST_KEY,
            Kind::Reply => REPLY_KEY,
        };
        if &b[..16] != key {
            return Err(FrameError::BadKey);
        }
        let flags = b[16];
        let rev = b[17];
        let pd_len = u16::from_be_bytes([b[18], b[19]]) as usize;
        if pd_len > MAX_PRIVATE {
            return Err(FrameError::PrivateTooLong);
        }
        if !(1..=2).contains(&rev) {
            return Err(FrameError::BadRevision);
        }
        let reject = flags & FLAG_R != 0;
        let has_enhanced = flags & FLAG_H != 0;
        // Reserved flags are not looked at (RFC 5044 7.1.1, RFC 6581 6): a later revision may
        // use them.
        if (reject && expect == Kind::Request) || (has_enhanced && (rev < 2 || pd_len < ENHANCED_LEN)) {
            return Err(FrameError::BadFlags);
        }
        // At most HEADER_LEN + MAX_PRIVATE (checked above).
        let total = HEADER_LEN.saturating_add(pd_len);
        let Some(mut private) = b.get(HEADER_LEN..total) else {
            return Err(FrameError::Incomplete(total));
        };
        let enhanced = has_enhanced.then(|| {
            let ird = u16::from_be_bytes([private[0], private[1]]);
            let ord = u16::from_be_bytes([private[2], private[3]]);
            private = &private[ENHANCED_LEN..];
            let p2p = ird & IRD_P2P != 0;
            // Without peer-to-peer mode the RTR bits mean nothing (RFC 6581 9.2).
            let rtr = RtrTypes { send: ird & IRD_ZERO_SEND_RTR != 0, write: ord & ORD_WRITE_RTR != 0, read: ord & ORD_READ_RTR != 0 };
            Enhanced { ird: ird & MAX_IRD_ORD, ord: ord & MAX_IRD_ORD, p2p, rtr: if p2p { rtr } else { RtrTypes::default() } }
        });
        let extensions = private.starts_with(EXTENSIONS_TOKEN);
        if extensions {
            private = &private[EXTENSIONS_TOKEN.len()..];
        }
        Ok((Frame { kind: expect, markers: flags & FLAG_M != 0, crc: flags & FLAG_C != 0, reject, rev, enhanced, extensions, private }, total))
    }

    /// Length of the frame on the wire.
    // Constants and our own private data's length (at most MAX_PRIVATE, checked by emit).
    #[allow(clippy::arithmetic_side_effects)]
    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.enhanced.map_or(0, |_| ENHANCED_LEN) + if self.extensions { EXTENSIONS_TOKEN.len() } else { 0 } + self.private.len()
    }

    /// Writes the frame into `out` and returns its length; `None` if `out` is too small or the
    /// private data too long.
    // Offsets within `wire_len()`, checked against `out` first.
    #[allow(clippy::arithmetic_side_effects)]
    pub fn emit(&self, out: &mut [u8]) -> Option<usize> {
        let total = self.wire_len();
        if total - HEADER_LEN > MAX_PRIVATE || out.len() < total {
            return None;
        }
        out[..16].copy_from_slice(match self.kind {
            Kind::Request => REQUEST_KEY,
            Kind::Reply => REPLY_KEY,
        });
        out[16] = (if self.markers { FLAG_M } else { 0 })
            | (if self.crc { FLAG_C } else { 0 })
            | (if self.reject { FLAG_R } else { 0 })
            | (if self.enhanced.is_some() { FLAG_H } else { 0 });
        out[17] = self.rev;
        out[18..20].copy_from_slice(&((total - HEADER_LEN) as u16).to_be_bytes());
        let mut n = HEADER_LEN;
        if let Some(e) = self.enhanced {
            // The RTR bits only in peer-to-peer mode, zero otherwise (RFC 6581 9.2).
            let rtr = if e.p2p { e.rtr } else { RtrTypes::default() };
            let ird = (e.ird & MAX_IRD_ORD) | if e.p2p { IRD_P2P } else { 0 } | if rtr.send { IRD_ZERO_SEND_RTR } else { 0 };
            let ord = (e.ord & MAX_IRD_ORD) | if rtr.write { ORD_WRITE_RTR } else { 0 } | if rtr.read { ORD_READ_RTR } else { 0 };
            out[n..n + 2].copy_from_slice(&ird.to_be_bytes());
            out[n + 2..n + 4].copy_from_slice(&ord.to_be_bytes());
            n += ENHANCED_LEN;
        }
        if self.extensions {
            out[n..n + EXTENSIONS_TOKEN.len()].copy_from_slice(EXTENSIONS_TOKEN);
            n += EXTENSIONS_TOKEN.len();
        }
        out[n..total].copy_from_slice(self.private);
        Some(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(private: &[u8]) -> Frame<'_> {
        Frame { kind: Kind::Request, markers: true, crc: true, reject: false, rev: 1, enhanced: None, extensions: false, private }
    }

    #[test]
    fn rfc5044_request_layout() {
        let mut b = [0u8; 64];
        let n = req(b"hi").emit(&mut b).unwrap();
        assert_eq!(n, 22);
        assert_eq!(&b[..16], b"MPA ID Req Frame");
        assert_eq!(&b[16..22], &[0xc0, 1, 0, 2, b'h', b'i']);
        assert_eq!(Frame::parse(&b[..n], Kind::Request), Ok((req(b"hi"), 22)));
    }

    #[test]
    fn rfc6581_enhanced_reply_round_trip() {
        let e = Enhanced { ird: 16, ord: 8, p2p: true, rtr: RtrTypes { send: false, write: true, read: false } };
        let f = Frame { kind: Kind::Reply, markers: false, crc: true, reject: false, rev: 2, enhanced: Some(e), extensions: false, private: b"pd" };
        let mut b = [0u8; 64];
        let n = f.emit(&mut b).unwrap();
        assert_eq!(&b[16..20], &[0x50, 2, 0, 6]);
        assert_eq!(&b[20..24], &[0x80, 16, 0x80, 8]);
        assert_eq!(Frame::parse(&b[..n], Kind::Reply), Ok((f, n)));
        // The extensions token goes between the enhanced data and the private data.
        let x = Frame { extensions: true, ..f };
        let n = x.emit(&mut b).unwrap();
        assert_eq!(&b[18..20], &[0, 14]);
        assert_eq!(&b[24..32], EXTENSIONS_TOKEN);
        assert_eq!(Frame::parse(&b[..n], Kind::Reply), Ok((x, n)));
        assert_eq!(Frame { rev: 1, enhanced: None, private: &[0; 505], ..x }.emit(&mut [0; 600]), None, "512 octets at most, token included");
    }

    #[test]
    fn reserved_flags_are_ignored_on_receipt() {
        let mut b = [0u8; 64];
        let n = req(b"hi").emit(&mut b).unwrap();
        b[16] |= 0x0f; // Res: the 4 low flag bits
        assert_eq!(Frame::parse(&b[..n], Kind::Request), Ok((req(b"hi"), n)));
    }

    #[test]
    fn rtr_bits_only_in_peer_to_peer_mode() {
        // Client-server mode: B, C and D are sent as zero and ignored on receipt (RFC 6581 9.2).
        let all = RtrTypes { send: true, write: true, read: true };
        let e = Enhanced { ird: 4, ord: 4, p2p: false, rtr: all };
        let f = Frame { kind: Kind::Request, markers: false, crc: true, reject: false, rev: 2, enhanced: Some(e), extensions: false, private: b"" };
        let mut b = [0u8; 64];
        let n = f.emit(&mut b).unwrap();
        assert_eq!(&b[20..24], &[0, 4, 0, 4]);
        b[20] |= 0x40;
        b[22] |= 0xc0;
        let (got, _) = Frame::parse(&b[..n], Kind::Request).unwrap();
        assert_eq!(got.enhanced, Some(Enhanced { rtr: RtrTypes::default(), ..e }));
        b[20] |= 0x80;
        let (got, _) = Frame::parse(&b[..n], Kind::Request).unwrap();
        assert_eq!(got.enhanced, Some(Enhanced { p2p: true, ..e }), "with A set, B, C and D count");
    }

    #[test]
    fn every_malformed_frame_is_refused() {
        let mut b = [0u8; 600];
        let n = req(&[]).emit(&mut b).unwrap();
        assert_eq!(Frame::parse(&b[..19], Kind::Request), Err(FrameError::Incomplete(20)));
        assert_eq!(Frame::parse(&b[..n], Kind::Reply), Err(FrameError::BadKey));
        let mut bad = b;
        bad[16] |= FLAG_R;
        assert_eq!(Frame::parse(&bad[..n], Kind::Request), Err(FrameError::BadFlags));
        let mut bad = b;
        bad[17] = 0;
        assert_eq!(Frame::parse(&bad[..n], Kind::Request), Err(FrameError::BadRevision));
        let mut bad = b;
        bad[17] = 3;
        assert_eq!(Frame::parse(&bad[..n], Kind::Request), Err(FrameError::BadRevision));
        let mut bad = b;
        bad[16] |= FLAG_H; // H with revision 1
        assert_eq!(Frame::parse(&bad[..n], Kind::Request), Err(FrameError::BadFlags));
        let mut bad = b;
        bad[18..20].copy_from_slice(&513u16.to_be_bytes());
        assert_eq!(Frame::parse(&bad[..600], Kind::Request), Err(FrameError::PrivateTooLong));
        let mut bad = b;
        bad[18..20].copy_from_slice(&10u16.to_be_bytes());
        assert_eq!(Frame::parse(&bad[..25], Kind::Request), Err(FrameError::Incomplete(30)));
        assert_eq!(req(&[0; 513]).emit(&mut b), None);
        assert_eq!(req(&[0; 512]).emit(&mut b), Some(532));
    }
}
