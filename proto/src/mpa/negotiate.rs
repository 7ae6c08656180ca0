//! Connection negotiation: what each side asks for in its frame, and what both then use.
//!
//! Markers are per direction: a side's M flag asks for markers in what it *receives*. CRC is
//! used in both directions if either side asks (RFC 5044 section 7.1). Revision 2 adds IRD/ORD
//! and, in peer-to-peer mode, a ready-to-receive (RTR) message from the initiator that the
//! responder waits for before sending (RFC 6581).

use super::frame::{Enhanced, Frame, Kind, RtrTypes, MAX_IRD_ORD};
use crate::terminate::Cause;

/// What this side wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Local {
    /// Receive markers (our M flag).
    pub markers: bool,
    /// Use CRCs (our C flag).
    pub crc: bool,
    /// Highest MPA revision we speak (1 or 2).
    pub rev: u8,
    /// Inbound RDMA Reads we can serve at once.
    pub ird: u16,
    /// Outbound RDMA Reads we want outstanding at once.
    pub ord: u16,
    /// Peer-to-peer mode (revision 2 only).
    pub p2p: bool,
    /// RTR message types we accept (responder) or offer (initiator).
    pub rtr: RtrTypes,
    /// Offer (initiator) or accept (responder) the RFC 7306 extensions.
    pub extensions: bool,
}

/// The zero-length message that serves as ready-to-receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rtr {
    /// Zero-length Send.
    Send,
    /// Zero-length RDMA Write.
    Write,
    /// Zero-length RDMA Read (answered by a zero-length Read Response).
    Read,
}

/// The negotiated connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connection {
    /// Markers in FPDUs we receive.
    pub rx_markers: bool,
    /// Markers in FPDUs we send.
    pub tx_markers: bool,
    /// CRCs generated and checked.
    pub crc: bool,
    /// Revision in use.
    pub rev: u8,
    /// Our inbound Read depth.
    pub ird: u16,
    /// Our outbound Read depth (never above the peer's IRD).
    pub ord: u16,
    /// The RTR exchange, in peer-to-peer mode.
    pub rtr: Option<Rtr>,
    /// Both sides agreed to the RFC 7306 extensions (Immediate Data, Atomics).
    pub extensions: bool,
}

/// Why negotiation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused<'a> {
    /// The responder rejected us; its private data says why.
    Rejected {
        /// The reject frame's private data.
        private: &'a [u8],
    },
    /// The peer's frame breaks the protocol.
    Protocol(Cause),
}

impl Local {
    fn enhanced(&self, rev: u8) -> Option<Enhanced> {
        (rev >= 2).then_some(Enhanced { ird: self.ird.min(MAX_IRD_ORD), ord: self.ord.min(MAX_IRD_ORD), p2p: self.p2p, rtr: self.rtr })
    }

    /// The initiator's request frame.
    pub fn request<'a>(&self, private: &'a [u8]) -> Frame<'a> {
        Frame {
            kind: Kind::Request,
            markers: self.markers,
            crc: self.crc,
            reject: false,
            rev: self.rev,
            enhanced: self.enhanced(self.rev),
            extensions: self.extensions,
            private,
        }
    }

    /// The responder's answer to `req`: the reply frame and the connection, or a reject frame
    /// and the cause when the request cannot be served.
    pub fn respond<'a>(&self, req: &Frame<'_>, private: &'a [u8]) -> Result<(Frame<'a>, Connection), (Frame<'a>, Cause)> {
        let rev = req.rev.min(self.rev);
        let crc = req.crc || self.crc;
        let extensions = req.extensions && self.extensions;
        let mut reply = Frame { kind: Kind::Reply, markers: self.markers, crc, reject: false, rev, enhanced: None, extensions, private };
        let mut conn = Connection { rx_markers: self.markers, tx_markers: req.markers, crc, rev, ird: self.ird, ord: self.ord, rtr: None, extensions };
        if let (2, Some(theirs)) = (rev, req.enhanced) {
            conn.ord = self.ord.min(theirs.ird);
            conn.ird = self.ird.min(theirs.ord);
            let mut mine = Enhanced { ird: conn.ird, ord: conn.ord, p2p: false, rtr: RtrTypes::default() };
            if theirs.p2p && self.p2p {
                let offered = theirs.rtr;
                let pick = if offered.write && self.rtr.write {
                    Some((Rtr::Write, RtrTypes { write: true, ..RtrTypes::default() }))
                } else if offered.send && self.rtr.send {
                    Some((Rtr::Send, RtrTypes { send: true, ..RtrTypes::default() }))
                } else if offered.read && self.rtr.read {
                    Some((Rtr::Read, RtrTypes { read: true, ..RtrTypes::default() }))
                } else {
                    None
                };
                let Some((rtr, types)) = pick else {
                    reply.reject = true;
                    reply.enhanced = Some(mine);
                    return Err((reply, Cause::MpaNoMatchingRtr));
                };
                mine.p2p = true;
                mine.rtr = types;
                conn.rtr = Some(rtr);
            }
            reply.enhanced = Some(mine);
        }
        Ok((reply, conn))
    }

    /// A reject frame answering `req` (the application refused the connection).
    pub fn reject<'a>(&self, req: &Frame<'_>, private: &'a [u8]) -> Frame<'a> {
        let rev = req.rev.min(self.rev);
        Frame {
            kind: Kind::Reply,
            markers: self.markers,
            crc: self.crc,
            reject: true,
            rev,
            enhanced: self.enhanced(rev).filter(|_| req.enhanced.is_some()),
            extensions: false,
            private,
        }
    }

    /// The initiator's view once the reply `rep` to our request arrived.
    pub fn complete<'a>(&self, rep: &Frame<'a>) -> Result<Connection, Refused<'a>> {
        if rep.reject {
            return Err(Refused::Rejected { private: rep.private });
        }
        if rep.rev > self.rev {
            return Err(Refused::Protocol(Cause::MpaInvalidFrame));
        }
        let crc = self.crc || rep.crc;
        let extensions = self.extensions && rep.extensions;
        let mut conn = Connection { rx_markers: self.markers, tx_markers: rep.markers, crc, rev: rep.rev, ird: self.ird, ord: self.ord, rtr: None, extensions };
        if let (2, Some(theirs)) = (rep.rev, rep.enhanced) {
            if theirs.ord > self.ird {
                return Err(Refused::Protocol(Cause::MpaInsufficientIrd));
            }
            conn.ord = self.ord.min(theirs.ird);
            if self.p2p && theirs.p2p {
                let t = theirs.rtr;
                let chosen = match (t.send, t.write, t.read) {
                    (true, false, false) if self.rtr.send => Rtr::Send,
                    (false, true, false) if self.rtr.write => Rtr::Write,
                    (false, false, true) if self.rtr.read => Rtr::Read,
                    _ => return Err(Refused::Protocol(Cause::MpaNoMatchingRtr)),
                };
                conn.rtr = Some(chosen);
            }
        }
        Ok(conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_RTR: RtrTypes = RtrTypes { send: true, write: true, read: true };

    fn local(markers: bool, crc: bool, rev: u8) -> Local {
        Local { markers, crc, rev, ird: 8, ord: 4, p2p: rev == 2, rtr: ALL_RTR, extensions: false }
    }

    fn handshake(ini: Local, resp: Local) -> (Connection, Connection) {
        let req = ini.request(b"ask");
        let mut wire = [0u8; 600];
        let n = req.emit(&mut wire).unwrap();
        let (req_in, _) = Frame::parse(&wire[..n], Kind::Request).unwrap();
        assert_eq!(req_in.private, b"ask");
        let (rep, rconn) = resp.respond(&req_in, b"ok").unwrap();
        let mut wire2 = [0u8; 600];
        let n2 = rep.emit(&mut wire2).unwrap();
        let (rep_in, _) = Frame::parse(&wire2[..n2], Kind::Reply).unwrap();
        (ini.complete(&rep_in).unwrap(), rconn)
    }

    #[test]
    fn markers_are_per_direction_and_crc_is_either() {
        for (im, rm, ic, rc) in [(true, false, false, false), (false, true, true, false), (true, true, false, true)] {
            let (i, r) = handshake(local(im, ic, 1), local(rm, rc, 1));
            assert_eq!((i.rx_markers, i.tx_markers), (im, rm));
            assert_eq!((r.rx_markers, r.tx_markers), (rm, im));
            assert_eq!(i.crc, ic || rc);
            assert_eq!(r.crc, i.crc);
        }
    }

    #[test]
    fn revision_falls_back_to_the_lower_side() {
        let (i, r) = handshake(local(true, true, 2), local(true, true, 1));
        assert_eq!((i.rev, r.rev), (1, 1));
        assert_eq!(i.rtr, None);
    }

    #[test]
    fn ird_ord_and_rtr_are_negotiated() {
        let ini = Local { ord: 16, ird: 2, ..local(false, true, 2) };
        let resp = Local { ord: 8, ird: 4, ..local(false, true, 2) };
        let (i, r) = handshake(ini, resp);
        assert_eq!(r.ord, 2, "responder's ORD capped by initiator's IRD");
        assert_eq!(r.ird, 4);
        assert_eq!(i.ord, 4, "initiator's ORD capped by responder's IRD");
        assert_eq!((i.rtr, r.rtr), (Some(Rtr::Write), Some(Rtr::Write)));
    }

    #[test]
    fn extensions_only_when_both_sides_want_them() {
        for (ie, re) in [(false, false), (false, true), (true, false), (true, true)] {
            for rev in [1, 2] {
                let ini = Local { extensions: ie, ..local(true, true, rev) };
                let resp = Local { extensions: re, ..local(true, true, rev) };
                let req = ini.request(b"app");
                let mut wire = [0u8; 600];
                let n = req.emit(&mut wire).unwrap();
                let (req, _) = Frame::parse(&wire[..n], Kind::Request).unwrap();
                assert_eq!((req.extensions, req.private), (ie, &b"app"[..]), "the token never reaches the application");
                let (rep, r) = resp.respond(&req, &[]).unwrap();
                assert_eq!(rep.extensions, ie && re, "a reply carries the token only to accept it");
                let i = ini.complete(&rep).unwrap();
                assert_eq!((i.extensions, r.extensions), (ie && re, ie && re));
            }
        }
        // A reply offering what we did not ask for leaves them off.
        let rep = Frame { kind: Kind::Reply, markers: false, crc: true, reject: false, rev: 1, enhanced: None, extensions: true, private: &[] };
        assert!(!local(false, true, 1).complete(&rep).unwrap().extensions);
    }

    #[test]
    fn no_common_rtr_is_rejected() {
        let ini = Local { rtr: RtrTypes { read: true, ..RtrTypes::default() }, ..local(false, true, 2) };
        let resp = Local { rtr: RtrTypes { send: true, ..RtrTypes::default() }, ..local(false, true, 2) };
        let req = ini.request(&[]);
        let (rej, cause) = resp.respond(&req, b"no").unwrap_err();
        assert!(rej.reject);
        assert_eq!(cause, Cause::MpaNoMatchingRtr);
        assert_eq!(ini.complete(&rej), Err(Refused::Rejected { private: b"no" }));
    }

    #[test]
    fn bad_replies_are_refused() {
        let ini = local(false, true, 1);
        let mut rep = Frame { kind: Kind::Reply, markers: false, crc: true, reject: false, rev: 2, enhanced: None, extensions: false, private: &[] };
        assert_eq!(ini.complete(&rep), Err(Refused::Protocol(Cause::MpaInvalidFrame)));
        let ini = local(false, true, 2);
        rep.enhanced = Some(Enhanced { ird: 1, ord: 100, p2p: false, rtr: RtrTypes::default() });
        assert_eq!(ini.complete(&rep), Err(Refused::Protocol(Cause::MpaInsufficientIrd)));
        rep.enhanced = Some(Enhanced { ird: 1, ord: 1, p2p: true, rtr: ALL_RTR });
        assert_eq!(ini.complete(&rep), Err(Refused::Protocol(Cause::MpaNoMatchingRtr)));
        let r = local(false, false, 2).reject(&ini.request(&[]), b"busy");
        assert_eq!(ini.complete(&r), Err(Refused::Rejected { private: b"busy" }));
    }
}
