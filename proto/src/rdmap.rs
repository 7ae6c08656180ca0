//! RDMAP (RFC 5040): opcodes carried in DDP's upper-layer control byte (with the RFC 7306
//! extensions), and the RDMA Read Request header. The Terminate message is in
//! [`crate::terminate`], the Atomic headers in [`crate::atomic`]; all parse under the same
//! contract as [`crate::ddp`] and fail with this layer's [`Error`].

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

use crate::ddp::{be32, be64};

/// The only RDMAP version (RV) defined.
pub const VERSION: u8 = 1;
/// Length of the RDMA Read Request header that forms a Read Request's whole payload.
pub const READ_REQUEST_LEN: usize = 28;
/// Length of an Immediate Data message's payload (RFC 7306 section 6).
pub const IMMEDIATE_LEN: usize = 8;
/// Most octets an RDMAP message carries as its own payload (the longest of the headers that
/// form a whole payload: Atomic Request, Terminate).
pub const MAX_INLINE: usize = {
    let (a, t) = (crate::atomic::REQUEST_LEN, crate::terminate::MAX_LEN);
    if a > t {
        a
    } else {
        t
    }
};

/// Why octets are not an RDMAP message (or header), or a buffer cannot take one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Fewer octets than the message needs.
    Truncated,
    /// A reserved opcode.
    Opcode(u8),
    /// An Atomic Request's operation code that RFC 7306 does not define.
    AtomicOpcode(u8),
}

/// Queue numbers of untagged messages.
pub mod queue {
    /// Send, Send with Invalidate, Send with SE (and both).
    pub const SEND: u32 = 0;
    /// RDMA Read Request.
    pub const READ_REQUEST: u32 = 1;
    /// Terminate.
    pub const TERMINATE: u32 = 2;
    /// Atomic Response (RFC 7306; Atomic Requests share queue 1 with Read Requests).
    pub const ATOMIC_RESPONSE: u32 = 3;
    /// Number of queues.
    pub const COUNT: usize = 4;
}

/// RDMAP operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// RDMA Write (tagged).
    Write = 0,
    /// RDMA Read Request (untagged, queue 1).
    ReadRequest = 1,
    /// RDMA Read Response (tagged).
    ReadResponse = 2,
    /// Send (untagged, queue 0).
    Send = 3,
    /// Send with Invalidate.
    SendInvalidate = 4,
    /// Send with Solicited Event.
    SendSolicited = 5,
    /// Send with Solicited Event and Invalidate.
    SendSolicitedInvalidate = 6,
    /// Terminate (untagged, queue 2).
    Terminate = 7,
    /// Immediate Data (RFC 7306; untagged, queue 0, 8 octets).
    ImmediateData = 8,
    /// Immediate Data with Solicited Event (RFC 7306).
    ImmediateDataSolicited = 9,
    /// Atomic Request (RFC 7306; untagged, queue 1 like Read Requests).
    AtomicRequest = 10,
    /// Atomic Response (RFC 7306; untagged, queue 3).
    AtomicResponse = 11,
}

impl Opcode {
    /// Decodes the 4-bit opcode.
    pub fn parse(v: u8) -> Result<Opcode, Error> {
        Ok(match v {
            0 => Opcode::Write,
            1 => Opcode::ReadRequest,
            2 => Opcode::ReadResponse,
            3 => Opcode::Send,
            4 => Opcode::SendInvalidate,
            5 => Opcode::SendSolicited,
            6 => Opcode::SendSolicitedInvalidate,
            7 => Opcode::Terminate,
            8 => Opcode::ImmediateData,
            9 => Opcode::ImmediateDataSolicited,
            10 => Opcode::AtomicRequest,
            11 => Opcode::AtomicResponse,
            _ => return Err(Error::Opcode(v)),
        })
    }

    /// Whether the message uses the tagged buffer model.
    pub fn tagged(self) -> bool {
        matches!(self, Opcode::Write | Opcode::ReadResponse)
    }

    /// The untagged queue the message belongs to (`None` for tagged messages).
    pub fn queue(self) -> Option<u32> {
        match self {
            Opcode::Write | Opcode::ReadResponse => None,
            Opcode::ReadRequest | Opcode::AtomicRequest => Some(queue::READ_REQUEST),
            Opcode::Terminate => Some(queue::TERMINATE),
            Opcode::AtomicResponse => Some(queue::ATOMIC_RESPONSE),
            _ => Some(queue::SEND),
        }
    }

    /// Whether this is one of the four Send variants (whose payload fills a receive buffer).
    pub fn is_send(self) -> bool {
        matches!(self, Opcode::Send | Opcode::SendInvalidate | Opcode::SendSolicited | Opcode::SendSolicitedInvalidate)
    }

    /// Whether this is an Immediate Data message (with or without Solicited Event).
    pub fn is_immediate(self) -> bool {
        matches!(self, Opcode::ImmediateData | Opcode::ImmediateDataSolicited)
    }

    /// Whether RFC 7306 defines this opcode: a peer may only send it once both sides agreed to
    /// the extensions.
    pub fn is_extension(self) -> bool {
        self as u8 >= Opcode::ImmediateData as u8
    }

    /// The length of the payload, for messages whose payload is exactly one header of theirs
    /// (Read Request, Immediate Data, Atomic Request and Response); `None` for the others.
    pub fn fixed_len(self) -> Option<usize> {
        match self {
            Opcode::ReadRequest => Some(READ_REQUEST_LEN),
            Opcode::ImmediateData | Opcode::ImmediateDataSolicited => Some(IMMEDIATE_LEN),
            Opcode::AtomicRequest => Some(crate::atomic::REQUEST_LEN),
            Opcode::AtomicResponse => Some(crate::atomic::RESPONSE_LEN),
            _ => None,
        }
    }

    /// With Solicited Event (a Send or an Immediate Data message).
    pub fn solicited(self) -> bool {
        matches!(self, Opcode::SendSolicited | Opcode::SendSolicitedInvalidate | Opcode::ImmediateDataSolicited)
    }

    /// Send with Invalidate (with or without Solicited Event).
    pub fn invalidates(self) -> bool {
        matches!(self, Opcode::SendInvalidate | Opcode::SendSolicitedInvalidate)
    }

    /// The DDP upper-layer control byte for this opcode: RV in the top two bits.
    pub fn ctrl_byte(self) -> u8 {
        VERSION << 6 | self as u8
    }
}

/// Splits the DDP upper-layer control byte into (RDMAP version, opcode bits).
pub fn split_ctrl(b: u8) -> (u8, u8) {
    (b >> 6, b & 0x0f)
}

/// The RDMA Read Request header (RFC 5040 section 4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReadRequest {
    /// Where the requester wants the data: its STag ...
    pub sink_stag: u32,
    /// ... and tagged offset.
    pub sink_to: u64,
    /// Octets to read.
    pub size: u32,
    /// Where the data comes from at the responder: STag ...
    pub src_stag: u32,
    /// ... and tagged offset.
    pub src_to: u64,
}

impl ReadRequest {
    /// Parses the 28-octet header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<ReadRequest, Error> {
        if b.len() < READ_REQUEST_LEN {
            return Err(Error::Truncated);
        }
        Ok(ReadRequest { sink_stag: be32(b, 0), sink_to: be64(b, 4), size: be32(b, 12), src_stag: be32(b, 16), src_to: be64(b, 20) })
    }

    /// The 28-octet header.
    pub fn emit(&self) -> [u8; READ_REQUEST_LEN] {
        let mut b = [0u8; READ_REQUEST_LEN];
        b[0..4].copy_from_slice(&self.sink_stag.to_be_bytes());
        b[4..12].copy_from_slice(&self.sink_to.to_be_bytes());
        b[12..16].copy_from_slice(&self.size.to_be_bytes());
        b[16..20].copy_from_slice(&self.src_stag.to_be_bytes());
        b[20..28].copy_from_slice(&self.src_to.to_be_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_round_trip_and_classify() {
        for v in 0..16u8 {
            match Opcode::parse(v) {
                Ok(op) => {
                    assert_eq!(op as u8, v);
                    assert_eq!(split_ctrl(op.ctrl_byte()), (1, v));
                    assert_eq!(op.tagged(), op.queue().is_none());
                }
                Err(e) => assert!(v >= 12 && e == Error::Opcode(v)),
            }
        }
        // RFC 7306 section 4.1: queue numbers, and what counts as a Send.
        assert_eq!(Opcode::AtomicRequest.queue(), Some(queue::READ_REQUEST));
        assert_eq!(Opcode::AtomicResponse.queue(), Some(3));
        assert_eq!(Opcode::ImmediateDataSolicited.queue(), Some(queue::SEND));
        assert!(!Opcode::ImmediateData.is_send() && Opcode::ImmediateDataSolicited.solicited() && Opcode::ImmediateData.is_immediate());
        assert_eq!(Opcode::AtomicResponse.ctrl_byte(), 0x4b);
        assert!(Opcode::ImmediateData.is_extension() && !Opcode::Terminate.is_extension());
        assert!(Opcode::SendSolicitedInvalidate.solicited() && Opcode::SendSolicitedInvalidate.invalidates());
        assert_eq!(Opcode::ReadRequest.queue(), Some(1));
        assert_eq!(Opcode::Terminate.queue(), Some(2));
    }

    #[test]
    fn read_request_layout() {
        let rr = ReadRequest { sink_stag: 1, sink_to: 2, size: 3, src_stag: 4, src_to: 5 };
        let b = rr.emit();
        assert_eq!(&b[..4], &[0, 0, 0, 1]);
        assert_eq!(&b[4..12], &[0, 0, 0, 0, 0, 0, 0, 2]);
        assert_eq!(&b[12..16], &[0, 0, 0, 3]);
        assert_eq!(ReadRequest::parse(&b), Ok(rr));
        assert_eq!(ReadRequest::parse(&b[..27]), Err(Error::Truncated));
    }
}
