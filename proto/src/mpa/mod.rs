//! MPA connection setup (RFC 5044 section 7.1, RFC 6581): the request and reply frames and the
//! negotiation of markers, CRC, revision, IRD/ORD and the ready-to-receive message.
//! [`handshake`] runs one side of the exchange as a sans-IO machine.
//! FPDU framing itself lives in [`crate::markers`], [`crate::tx`] and [`crate::rx`].

pub mod frame;
pub mod handshake;
pub mod negotiate;
