//! One side's MPA exchange (RFC 5044 section 7, RFC 6581) as a sans-IO machine, in the manner
//! of rustls and quinn-proto: the driver sends what [`Handshake::transmit`] hands out, feeds
//! what arrives to [`Handshake::receive`] (which never takes a byte past the peer's frame: what
//! follows is FPDUs), and asks [`Handshake::step`] what comes next. The kernel module's
//! connection setup and the user-level test peers are thin drivers of it.
//!
//! Initiator: send the request, receive the reply, done. Responder: receive the request, decide
//! (the application may look at the request first), send the reply or a reject, done.

// Values from user space or the wire are computed on here: no unchecked arithmetic
// (docs/security.md, "Arithmetic").
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

use super::frame::{Frame, FrameError, Kind, RtrTypes, HEADER_LEN, MAX_PRIVATE};
use super::negotiate::{Connection, Local, Refused};
use crate::crc::Crc32c;
use crate::markers::{self, Markers};
use crate::terminate::{Cause, Terminate};
use crate::tx::{self, Fpdu, Message, Transmitter};

/// The largest frame: header, enhanced data and private data.
pub const MAX_FRAME: usize = HEADER_LEN + MAX_PRIVATE;

/// The segment size a TERM after a failed exchange is framed for: TCP's smallest default MSS
/// (RFC 9293), room enough for the one short FPDU.
const TERM_MSS: u32 = 536;

/// What the machine needs next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send [`Handshake::transmit`] (then report it with [`Handshake::sent`]).
    Send,
    /// Receive up to this many more octets of the peer's frame (exactly what it still lacks).
    Receive(usize),
    /// Responder: the request is in ([`Handshake::request`]); answer with [`Handshake::accept`]
    /// or [`Handshake::reject`].
    Decide,
    /// Finished: connected, refused, or failed (see [`Handshake::outcome`]).
    Done,
}

/// How the exchange ended, if it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Both sides agreed.
    Connected(Connection),
    /// Initiator: the responder rejected us (its private data: [`Handshake::peer_private`]).
    Rejected,
    /// The peer's frame broke the protocol, or (initiator) its reply asks for what we cannot
    /// do ([`Handshake::frame_term`] frames the TERM to send then). The connection must close.
    Failed(Cause),
    /// Responder: our application rejected the request (the reject frame was sent).
    Refused,
}

/// What a side that refuses asks for: nothing.
const DECLINE: Local =
    Local { markers: false, crc: false, rev: 1, ird: 0, ord: 0, p2p: false, rtr: RtrTypes { send: false, write: false, read: false }, extensions: false };

/// Misuse of the machine by its driver (a step it is not at, private data too long).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotNow;

/// One side's MPA exchange.
pub struct Handshake {
    /// The initiator's wishes (the responder learns its own when it decides).
    initiator: Option<Local>,
    /// The peer's frame, as far as it arrived.
    inbound: [u8; MAX_FRAME],
    have: usize,
    /// Our frame, and how much of it went out.
    outbound: [u8; MAX_FRAME],
    out_len: usize,
    out_sent: usize,
    /// Set once the exchange is over (after our last frame went out).
    outcome: Option<Outcome>,
    /// Responder: the outcome to report once our answer went out.
    after_send: Option<Outcome>,
}

impl Handshake {
    /// The initiator, asking for `local` with `private` data (at most [`MAX_PRIVATE`] octets,
    /// less the enhanced data of revision 2).
    pub fn initiator(local: Local, private: &[u8]) -> Result<Handshake, NotNow> {
        let mut h = Handshake::new(Some(local));
        h.queue(&local.request(private))?;
        Ok(h)
    }

    /// The responder: it first waits for the request.
    pub fn responder() -> Handshake {
        Handshake::new(None)
    }

    fn new(initiator: Option<Local>) -> Handshake {
        Handshake { initiator, inbound: [0; MAX_FRAME], have: 0, outbound: [0; MAX_FRAME], out_len: 0, out_sent: 0, outcome: None, after_send: None }
    }

    fn queue(&mut self, f: &Frame<'_>) -> Result<(), NotNow> {
        if f.wire_len() > MAX_FRAME {
            return Err(NotNow);
        }
        self.out_len = f.emit(&mut self.outbound).ok_or(NotNow)?;
        self.out_sent = 0;
        Ok(())
    }

    fn expected(&self) -> Kind {
        match self.initiator {
            Some(_) => Kind::Reply,
            None => Kind::Request,
        }
    }

    /// The peer's frame, once whole.
    fn peer_frame(&self) -> Option<Frame<'_>> {
        Frame::parse(&self.inbound[..self.have], self.expected()).ok().map(|(f, _)| f)
    }

    /// What is needed next.
    pub fn step(&self) -> Step {
        if self.out_sent < self.out_len {
            return Step::Send;
        }
        if self.outcome.is_some() {
            return Step::Done;
        }
        match Frame::parse(&self.inbound[..self.have], self.expected()) {
            // More than `have` is incomplete.
            Err(FrameError::Incomplete(total)) => Step::Receive(total.saturating_sub(self.have)),
            // receive() settles whole frames at once, so a whole one here awaits the answer.
            _ => Step::Decide,
        }
    }

    /// Our frame's octets not sent yet.
    pub fn transmit(&self) -> &[u8] {
        &self.outbound[self.out_sent..self.out_len]
    }

    /// `n` octets of [`Handshake::transmit`] went out.
    pub fn sent(&mut self, n: usize) {
        self.out_sent = self.out_sent.saturating_add(n).min(self.out_len);
        if self.out_sent == self.out_len && self.outcome.is_none() {
            self.outcome = self.after_send.take();
        }
    }

    /// Takes octets of the peer's frame from `bytes`, never more than it lacks; returns how many
    /// it took (the rest belongs to the stream after the frame). Once the frame is whole the
    /// initiator settles the connection; a malformed frame ends the exchange.
    pub fn receive(&mut self, bytes: &[u8]) -> usize {
        let Step::Receive(want) = self.step() else { return 0 };
        // `want` is what the frame lacks, so `have + n` stays within the buffer of the longest.
        let n = want.min(bytes.len());
        let end = self.have.saturating_add(n);
        self.inbound[self.have..end].copy_from_slice(&bytes[..n]);
        self.have = end;
        match (Frame::parse(&self.inbound[..self.have], self.expected()), self.initiator) {
            (Err(FrameError::Incomplete(_)), _) => {}
            (Err(_), _) => self.outcome = Some(Outcome::Failed(Cause::MpaInvalidFrame)),
            (Ok((reply, _)), Some(local)) => {
                self.outcome = Some(match local.complete(&reply) {
                    Ok(conn) => Outcome::Connected(conn),
                    Err(Refused::Rejected { .. }) => Outcome::Rejected,
                    Err(Refused::Protocol(cause)) => Outcome::Failed(cause),
                })
            }
            // The responder decides next.
            (Ok(_), None) => {}
        }
        n
    }

    /// Responder: the initiator's request, once it is in.
    pub fn request(&self) -> Option<Frame<'_>> {
        self.peer_frame().filter(|_| self.initiator.is_none())
    }

    /// The peer's private data (after any enhanced data), once its frame is in.
    pub fn peer_private(&self) -> &[u8] {
        self.peer_frame().map_or(&[], |f| f.private)
    }

    /// Responder: answers the request as `local` allows, with a reply carrying `private`.
    pub fn accept(&mut self, local: Local, private: &[u8]) -> Result<(), NotNow> {
        let req = self.decision()?;
        let (reply, conn) = local.respond(&req, private);
        self.queue(&reply)?;
        self.after_send = Some(Outcome::Connected(conn));
        Ok(())
    }

    /// Initiator whose exchange failed on a reply it cannot use (the responder's ORD above our
    /// IRD, RFC 6581 section 9.1; an RTR type we did not offer, section 9.2): frames into
    /// `fpdu` the TERM to send before closing, framed as the reply settled (markers if the
    /// responder asked, a CRC if either side did). Returns whether a TERM is due.
    pub fn frame_term<C: Crc32c>(&self, fpdu: &mut Fpdu) -> bool {
        let (Some(local), Some(Outcome::Failed(cause @ (Cause::MpaInsufficientIrd | Cause::MpaNoMatchingRtr))), Some(rep)) =
            (self.initiator, self.outcome, self.peer_frame())
        else {
            return false;
        };
        let (with_markers, crc) = local.sending(&rep);
        let markers = if with_markers { Markers::RFC } else { Markers::NONE };
        let mut t = Transmitter::new(tx::Config { markers, crc, mulpdu: markers::mulpdu(TERM_MSS, markers) });
        let Ok(mut out) = t.start(Message::Terminate(Terminate::new(cause)), 0) else { return false };
        t.next_fpdu::<C, _>(&mut out, &[][..] as &[u8], fpdu);
        true
    }

    /// Responder: refuses the request with a reject frame carrying `private` (in the request's
    /// revision and CRC setting, asking for nothing).
    pub fn reject(&mut self, private: &[u8]) -> Result<(), NotNow> {
        let req = self.decision()?;
        let frame = Local { crc: req.crc, rev: req.rev, ..DECLINE }.reject(&req, private);
        self.queue(&frame)?;
        self.after_send = Some(Outcome::Refused);
        Ok(())
    }

    /// The request a responder is to answer now.
    fn decision(&self) -> Result<Frame<'_>, NotNow> {
        match self.step() {
            Step::Decide => self.request().ok_or(NotNow),
            _ => Err(NotNow),
        }
    }

    /// How the exchange ended; `None` while it goes on.
    pub fn outcome(&self) -> Option<Outcome> {
        self.outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crc::HostCrc;
    use crate::mpa::frame::RtrTypes;
    use crate::rdmap::Opcode;
    use crate::rx::{self, Event, Receiver, Sink, Target};
    use crate::stream::Pieces;
    extern crate std;
    use std::{vec, vec::Vec};

    const ALL_RTR: RtrTypes = RtrTypes { send: true, write: true, read: true };
    const A: Local =
        Local { markers: true, crc: true, rev: 2, ird: 4, ord: 8, p2p: false, rtr: RtrTypes { send: false, write: false, read: false }, extensions: false };
    const B: Local =
        Local { markers: false, crc: false, rev: 2, ird: 16, ord: 2, p2p: false, rtr: RtrTypes { send: false, write: false, read: false }, extensions: false };

    /// Moves what `from` has to send into `to`, `chunk` octets at a time, as a socket would.
    fn pump(from: &mut Handshake, to: &mut Handshake, chunk: usize) {
        while from.step() == Step::Send {
            let mut buf = [0u8; MAX_FRAME];
            let k = from.transmit().len().min(chunk);
            buf[..k].copy_from_slice(&from.transmit()[..k]);
            from.sent(k);
            let out = &buf[..k];
            let mut at = 0;
            while at < out.len() {
                let n = to.receive(&out[at..]);
                assert!(n > 0, "the receiver refused octets of a frame it lacks");
                at += n;
            }
        }
    }

    #[test]
    fn initiator_and_responder_agree_however_the_stream_is_cut() {
        for chunk in [1, 7, 20, MAX_FRAME] {
            let mut a = Handshake::initiator(A, b"from A").unwrap();
            let mut b = Handshake::responder();
            assert!(matches!(b.step(), Step::Receive(_)));
            pump(&mut a, &mut b, chunk);
            assert_eq!(b.step(), Step::Decide);
            assert_eq!(b.peer_private(), b"from A");
            assert_eq!(b.request().map(|r| r.markers), Some(true));
            b.accept(B, b"from B").unwrap();
            assert_eq!(b.outcome(), None, "not connected before the reply went out");
            pump(&mut b, &mut a, chunk);
            let (Some(Outcome::Connected(ca)), Some(Outcome::Connected(cb))) = (a.outcome(), b.outcome()) else { panic!("not connected") };
            assert_eq!((ca.rx_markers, ca.tx_markers, cb.rx_markers, cb.tx_markers), (true, false, false, true));
            assert!(ca.crc && cb.crc);
            assert_eq!((ca.ord, cb.ird), (8, 8));
            assert_eq!(a.peer_private(), b"from B");
            assert_eq!((a.step(), b.step()), (Step::Done, Step::Done));
        }
    }

    #[test]
    fn bytes_after_the_frame_are_left_to_the_stream() {
        let mut a = Handshake::initiator(A, b"x").unwrap();
        let mut stream = [0u8; MAX_FRAME + 4];
        let len = a.transmit().len();
        stream[..len].copy_from_slice(a.transmit());
        a.sent(len);
        stream[len..len + 4].copy_from_slice(b"FPDU");
        let mut b = Handshake::responder();
        let mut n = 0;
        while let k @ 1.. = b.receive(&stream[n..len + 4]) {
            n += k;
        }
        assert_eq!(&stream[n..len + 4], b"FPDU");
        assert_eq!(b.receive(b"more"), 0, "a whole request takes nothing more");
    }

    #[test]
    fn a_rejected_request_says_why_on_both_sides() {
        let mut a = Handshake::initiator(A, b"please").unwrap();
        let mut b = Handshake::responder();
        pump(&mut a, &mut b, MAX_FRAME);
        b.reject(b"no thanks").unwrap();
        pump(&mut b, &mut a, 3);
        assert_eq!(b.outcome(), Some(Outcome::Refused));
        assert_eq!(a.outcome(), Some(Outcome::Rejected));
        assert_eq!(a.peer_private(), b"no thanks");
    }

    #[test]
    fn garbage_fails_the_exchange_and_misuse_is_refused() {
        let mut b = Handshake::responder();
        b.receive(b"GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxx");
        assert_eq!(b.outcome(), Some(Outcome::Failed(Cause::MpaInvalidFrame)));
        assert_eq!(b.step(), Step::Done);
        assert_eq!(b.accept(B, b""), Err(NotNow));
        let mut a = Handshake::initiator(A, b"").unwrap();
        assert_eq!(a.accept(B, b""), Err(NotNow), "an initiator does not decide");
        assert_eq!(a.receive(b"early"), 0, "nothing is received before the request went out");
        assert!(Handshake::initiator(A, &[0u8; MAX_PRIVATE + 1]).is_err());
    }

    /// Runs `a` (initiator) against `b` answering with `b_local` to the end.
    fn exchange(a_local: Local, b_local: Local) -> (Handshake, Handshake) {
        let (mut a, mut b) = (Handshake::initiator(a_local, b"").unwrap(), Handshake::responder());
        pump(&mut a, &mut b, MAX_FRAME);
        b.accept(b_local, b"").unwrap();
        pump(&mut b, &mut a, MAX_FRAME);
        (a, b)
    }

    /// What `b` (connected as `conn`) makes of `a`'s TERM.
    fn term_received(a: &Handshake, conn: Connection) -> Vec<Event> {
        let mut f = Fpdu::default();
        assert!(a.frame_term::<HostCrc>(&mut f));
        let mut wire = vec![0u8; f.wire_len as usize];
        f.write_to(&[][..] as &[u8], &mut wire);
        let markers = if conn.rx_markers { Markers::RFC } else { Markers::NONE };
        let mut rx = Receiver::new(rx::Config { markers, crc: conn.crc, expect_rtr: conn.rtr, expect_rtr_read_response: false, extensions: false });
        let mut sink = Events(Vec::new());
        assert_eq!(rx.receive::<HostCrc, _>(&Pieces::new(0, &[&wire]), &mut sink), Ok(wire.len() as u64));
        sink.0
    }

    struct Events(Vec<Event>);

    impl Sink for Events {
        fn check(&mut self, _: Opcode, _: Target, _: u32) -> Result<(), Cause> {
            Ok(())
        }
        fn place(&mut self, _: Target, _: &[u8]) -> Result<(), Cause> {
            Ok(())
        }
        fn deliver(&mut self, e: Event) {
            self.0.push(e);
        }
    }

    #[test]
    fn without_a_common_rtr_the_initiator_terminates() {
        let a_local = Local { p2p: true, rtr: RtrTypes { send: true, write: false, read: false }, ..A };
        let b_local = Local { markers: true, p2p: true, rtr: RtrTypes { write: true, ..RtrTypes::default() }, ..B };
        let (a, b) = exchange(a_local, b_local);
        // The responder offered its own RTR and waits for it; the initiator cannot send it.
        let Some(Outcome::Connected(cb)) = b.outcome() else { panic!("responder not connected: {:?}", b.outcome()) };
        assert_eq!(cb.rtr, Some(crate::mpa::negotiate::Rtr::Write));
        assert_eq!(a.outcome(), Some(Outcome::Failed(Cause::MpaNoMatchingRtr)));
        // Its TERM (2,0,7) reaches the responder as a Terminate in place of the RTR, through
        // the markers B asked for and the CRC A asked for.
        assert!(cb.rx_markers && cb.crc);
        assert_eq!(term_received(&a, cb), vec![Event::Terminate(Terminate::new(Cause::MpaNoMatchingRtr))]);
        let (a, b) = exchange(a_local, Local { rtr: ALL_RTR, ..b_local });
        assert!(matches!(a.outcome(), Some(Outcome::Connected(c)) if c.rtr.is_some()));
        assert!(matches!(b.outcome(), Some(Outcome::Connected(_))));
        assert!(!a.frame_term::<HostCrc>(&mut Fpdu::default()), "no TERM after a good exchange");
    }

    #[test]
    fn an_initiator_short_of_ird_terminates() {
        // B's ORD above A's IRD: B lowers it only to A's IRD, so ask B for more than A allows
        // by sending A's request with a larger IRD than A really has.
        let asked = Local { ird: 16, ..A };
        let (mut a, mut b) = (Handshake::initiator(asked, b"").unwrap(), Handshake::responder());
        pump(&mut a, &mut b, MAX_FRAME);
        b.accept(Local { ord: 16, ..B }, b"").unwrap();
        let mut short = Handshake::initiator(Local { ird: 2, ..A }, b"").unwrap();
        short.sent(short.transmit().len());
        pump(&mut b, &mut short, MAX_FRAME);
        assert_eq!(short.outcome(), Some(Outcome::Failed(Cause::MpaInsufficientIrd)));
        let Some(Outcome::Connected(cb)) = b.outcome() else { panic!() };
        assert_eq!(term_received(&short, cb), vec![Event::Terminate(Terminate::new(Cause::MpaInsufficientIrd))]);
        let mut rejected = Handshake::initiator(A, b"").unwrap();
        rejected.sent(rejected.transmit().len());
        let mut c = Handshake::responder();
        pump(&mut Handshake::initiator(A, b"").unwrap(), &mut c, MAX_FRAME);
        c.reject(b"no").unwrap();
        pump(&mut c, &mut rejected, MAX_FRAME);
        assert!(!rejected.frame_term::<HostCrc>(&mut Fpdu::default()), "no TERM after a reject");
    }
}
