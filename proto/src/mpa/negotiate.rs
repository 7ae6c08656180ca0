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

    /// The responder's answer to `req`: the reply frame and the connection. In peer-to-peer
    /// mode it picks an RTR type both sides allow; with none in common it offers one of its
    /// own (RFC 6581 section 9.2), which the initiator answers with a TERM and a close.
    pub fn respond<'a>(&self, req: &Frame<'_>, private: &'a [u8]) -> (Frame<'a>, Connection) {
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
                let common =
                    RtrTypes { send: theirs.rtr.send && self.rtr.send, write: theirs.rtr.write && self.rtr.write, read: theirs.rtr.read && self.rtr.read };
                if let Some(rtr) = preferred(common).or(preferred(self.rtr)) {
                    mine.p2p = true;
                    mine.rtr = only(rtr);
                    conn.rtr = Some(rtr);
                }
            }
            reply.enhanced = Some(mine);
        }
        (reply, conn)
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

    /// How an initiator frames what it sends once the reply `rep` is in, whether it can use
    /// the reply or not: (markers, CRCs): markers if the responder asked (its M flag), CRCs if
    /// either side did.
    pub fn sending(&self, rep: &Frame<'_>) -> (bool, bool) {
        (rep.markers, self.crc || rep.crc)
    }

    /// The initiator's view once the reply `rep` to our request arrived.
    pub fn complete<'a>(&self, rep: &Frame<'a>) -> Result<Connection, Refused<'a>> {
        if rep.reject {
            return Err(Refused::Rejected { private: rep.private });
        }
        if rep.rev > self.rev {
            return Err(Refused::Protocol(Cause::MpaInvalidFrame));
        }
        let (tx_markers, crc) = self.sending(rep);
        let extensions = self.extensions && rep.extensions;
        let mut conn = Connection { rx_markers: self.markers, tx_markers, crc, rev: rep.rev, ird: self.ird, ord: self.ord, rtr: None, extensions };
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

/// The RTR type a responder picks among `types`: a Write first (it takes no receive and needs
/// no answer), then a Send, then a Read.
fn preferred(types: RtrTypes) -> Option<Rtr> {
    [(types.write, Rtr::Write), (types.send, Rtr::Send), (types.read, Rtr::Read)].into_iter().find_map(|(on, rtr)| on.then_some(rtr))
}

/// The RTR types field naming `rtr` alone.
fn only(rtr: Rtr) -> RtrTypes {
    RtrTypes { send: rtr == Rtr::Send, write: rtr == Rtr::Write, read: rtr == Rtr::Read }
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
        let (rep, rconn) = resp.respond(&req_in, b"ok");
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
                let (rep, r) = resp.respond(&req, &[]);
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
    fn without_a_common_rtr_the_responder_offers_its_own() {
        let ini = Local { rtr: RtrTypes { read: true, ..RtrTypes::default() }, ..local(false, true, 2) };
        let resp = Local { rtr: RtrTypes { send: true, read: false, write: true }, ..local(false, true, 2) };
        let (rep, r) = resp.respond(&ini.request(&[]), b"ok");
        assert!(!rep.reject);
        let offered = rep.enhanced.unwrap();
        assert!(offered.p2p);
        assert_eq!((offered.rtr, r.rtr), (only(Rtr::Write), Some(Rtr::Write)), "its preferred one, alone");
        assert_eq!(ini.complete(&rep), Err(Refused::Protocol(Cause::MpaNoMatchingRtr)));
        // A responder in peer-to-peer mode with no RTR type at all answers without it.
        let none = Local { rtr: RtrTypes::default(), ..resp };
        let (rep, r) = none.respond(&ini.request(&[]), b"ok");
        assert_eq!((rep.enhanced.map(|e| e.p2p), r.rtr), (Some(false), None));
        assert_eq!(ini.complete(&rep).map(|c| c.rtr), Ok(None));
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
