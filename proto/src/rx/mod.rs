//! Receive engine: stream bytes in, placement actions and in-order deliveries out.
//!
//! Bytes arrive with their stream offset (counted from the first FPDU octet), in any order and
//! any split. Bytes at the in-order point are parsed FPDU by FPDU: each FPDU's CRC and markers
//! are checked before any of its bytes is placed, its header is validated, the [`Sink`] checks
//! the target and the payload is placed, then deliveries are made strictly in order, exactly
//! once. Bytes beyond the in-order point are placed early when markers reveal FPDU starts in
//! them, or, without markers, when the CRC confirms that they start with an FPDU (a sender that
//! aligns FPDUs to TCP segments), and whole FPDUs are present (Balaji et al., "Analyzing the Impact of Supporting
//! Out-of-Order Communication on In-order Performance with iWARP" and "Supporting iWARP
//! Compatibility and Features for Regular Network Adapters"); such FPDUs are recorded so the
//! in-order pass, which sees their octets again, checks them and delivers them without placing
//! them twice (unless TCP holds other octets there by then: a retransmission that overlapped
//! them differently). Anything that cannot be placed early is dropped, never buffered. A protocol error yields the Terminate to
//! send and ends the stream.

mod fpdu;
pub mod placed;

use crate::atomic;
use crate::crc::Crc32c;
use crate::ddp::{self, Buffer, Header};
use crate::markers::Markers;
use crate::mpa::negotiate::Rtr;
use crate::rdmap::{self, queue, Opcode, ReadRequest, IMMEDIATE_LEN, MAX_INLINE, READ_REQUEST_LEN};
use crate::stream::Pieces;
use crate::terminate::{self, Cause, Terminate};
use fpdu::Located;
use placed::Placed;

/// Where payload octets go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The data sink's buffer `stag` at tagged offset `to`.
    Tagged {
        /// Steering tag.
        stag: u32,
        /// Tagged offset.
        to: u64,
    },
    /// The receive buffer of Send message `msn`, at message offset `mo`.
    Untagged {
        /// Message sequence number of the Send.
        msn: u32,
        /// Message offset.
        mo: u32,
    },
}

/// Something the upper layer learns, in stream order, exactly once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A Send message is complete in the receive buffer for `msn`.
    Send {
        /// Its MSN (the n-th Send fills the n-th posted receive).
        msn: u32,
        /// Its length.
        len: u32,
        /// Sent with Solicited Event.
        solicited: bool,
        /// The local STag the peer asks us to invalidate.
        invalidate: Option<u32>,
    },
    /// The last segment of an RDMA Write to `stag` arrived (no completion at the data sink in
    /// RDMAP, but the order is observable).
    Write {
        /// The STag written.
        stag: u32,
    },
    /// The last segment of a Read Response arrived: the oldest outstanding Read is complete.
    ReadResponse {
        /// The sink STag of the Read.
        stag: u32,
    },
    /// The peer asks us to serve an RDMA Read.
    ReadRequest(ReadRequest),
    /// Immediate Data (RFC 7306) for the receive buffer of `msn`, which it completes without
    /// placing anything in it.
    Immediate {
        /// Its MSN (it takes its place among the Sends).
        msn: u32,
        /// The 8 octets, big-endian.
        data: u64,
        /// With Solicited Event.
        solicited: bool,
    },
    /// The peer asks us to carry out an atomic operation (its target is 64-bit aligned).
    AtomicRequest(atomic::Request),
    /// The answer to our oldest outstanding Atomic Request.
    AtomicResponse(atomic::Response),
    /// The peer terminated the stream.
    Terminate(Terminate),
    /// The peer-to-peer ready-to-receive message arrived (responder side). A Read RTR is
    /// followed by its [`Event::ReadRequest`] (zero length), to answer like any Read.
    ReadyToReceive(Rtr),
}

/// The upper layer: checks targets, places bytes, takes deliveries.
pub trait Sink {
    /// Whether `len` octets of a segment of `op` may be placed at `target` (STag valid and
    /// associated with this stream, range within bounds, access rights; for Sends, a receive
    /// buffer posted for this MSN and large enough). Called before any octet of the segment is
    /// placed, also for zero-length segments.
    fn check(&mut self, op: Opcode, target: Target, len: u32) -> Result<(), Cause>;
    /// Places octets that `check` allowed. It may still refuse them (the target changed since
    /// the check): in order, the stream then ends with a Terminate of that cause and the
    /// segment is not delivered; ahead of the in-order point, the segment is left for the
    /// in-order pass to place again.
    fn place(&mut self, target: Target, bytes: &[u8]) -> Result<(), Cause>;
    /// Takes a delivery.
    fn deliver(&mut self, event: Event);
    /// Whether the upper layer ended the stream itself (a delivery it could not carry out, such
    /// as an invalidation it refused): nothing after that point is placed or delivered (RFC
    /// 5040 section 7.2), and [`Receiver::receive`] returns [`RxError::Closed`].
    fn failed(&self) -> bool {
        false
    }
}

/// How this stream's FPDUs are framed and what comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Markers in what we receive (our M flag).
    pub markers: Markers,
    /// CRCs negotiated.
    pub crc: bool,
    /// Peer-to-peer: the RTR message we wait for (responder), if any.
    pub expect_rtr: Option<Rtr>,
    /// Peer-to-peer initiator that sent a Read RTR: the first Read Response is its answer.
    pub expect_rtr_read_response: bool,
    /// Both sides agreed to the RFC 7306 extensions: without, their opcodes are unexpected.
    pub extensions: bool,
}

/// Why receiving stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxError {
    /// Protocol error: send this Terminate, flush, and close.
    Terminate(Terminate),
    /// The stream already ended (after an error or a received Terminate).
    Closed,
}

/// What early placement did: counters for the caller to report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EarlyStats {
    /// FPDUs placed early whose start a marker revealed.
    pub by_marker: u64,
    /// FPDUs placed early found at the start of the octets offered (a segment start, where an
    /// aligning sender puts an FPDU), confirmed by their CRC.
    pub by_alignment: u64,
    /// FPDUs placed early that start right after one placed early.
    pub after_placed: u64,
    /// Whole FPDUs found early but not placed (their target is not there yet, their header is
    /// wrong, or the record is full): the in-order pass handles them.
    pub held_back: u64,
    /// Whole FPDUs found early whose markers or CRC did not check (the in-order pass, which
    /// sees TCP's final bytes, decides).
    pub bad: u64,
}

/// How the first FPDU of a run of early placement was found.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Found {
    /// A marker points to it.
    Marker,
    /// It is guessed at the start of the octets offered; only its CRC confirms the guess.
    Alignment,
    /// It follows an FPDU placed early.
    AfterPlaced,
}

/// Why a run of early placement stopped.
enum RunEnd {
    /// The FPDU at this offset could not be placed; later ones may be.
    Failed(u64),
    /// Out of data or of room to record placements.
    Done,
}

/// A validated segment header.
#[derive(Clone, Copy, Debug)]
struct Segment {
    op: Opcode,
    last: bool,
    buf: Buffer,
    hdr_len: u32,
    payload_len: u32,
}

/// The receiving half of a stream.
pub struct Receiver {
    cfg: Config,
    next: u64,
    next_msn: [u32; queue::COUNT],
    send_mo: u32,
    placed: Placed,
    early: EarlyStats,
    /// Octets of out-of-order FPDUs that may still be checked (and placed) before the caller
    /// allows more ([`Receiver::limit_ahead`]).
    ahead_budget: u64,
    closed: bool,
}

impl Receiver {
    /// A receiver whose first FPDU starts at stream offset 0.
    pub fn new(cfg: Config) -> Receiver {
        Receiver {
            cfg,
            next: 0,
            next_msn: [1; queue::COUNT],
            send_mo: 0,
            placed: Placed::new(),
            early: EarlyStats::default(),
            ahead_budget: u64::MAX,
            closed: false,
        }
    }

    /// From now on, checks (markers, CRC) and places at most `octets` of out-of-order FPDUs not
    /// placed before, until called again: the caller's bound on one walk of what TCP holds out of
    /// order. A peer that queues FPDUs failing their CRC behind a hole then cannot make each new
    /// segment cost a check of all of them; FPDUs past the bound wait for a later walk or their
    /// turn in order.
    pub fn limit_ahead(&mut self, octets: u64) {
        self.ahead_budget = octets;
    }

    /// How this stream's FPDUs are framed.
    pub fn config(&self) -> Config {
        self.cfg
    }

    /// Stream offset of the next FPDU to process in order: the caller keeps every byte from here.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Number of FPDUs placed early and not yet reached in order.
    pub fn placed_ahead(&self) -> usize {
        self.placed.len()
    }

    /// What early placement did so far.
    pub fn early_stats(&self) -> EarlyStats {
        self.early
    }

    /// Takes stream bytes `data`. Returns how far the in-order point advanced: the caller may
    /// drop bytes below [`Receiver::next`] and must offer the rest again with more.
    pub fn receive<C: Crc32c, S: Sink>(&mut self, data: &Pieces<'_>, sink: &mut S) -> Result<u64, RxError> {
        if self.closed {
            return Err(RxError::Closed);
        }
        if data.end() <= self.next {
            return Ok(0);
        }
        if data.start() > self.next {
            self.place_ahead::<C, S>(data, sink);
            return Ok(0);
        }
        let before = self.next;
        let res = self.in_order::<C, S>(data, sink);
        self.placed.prune_below(self.next);
        match res {
            Ok(()) => Ok(self.next - before),
            Err(e) => {
                self.closed = true;
                Err(e)
            }
        }
    }

    /// Processes every whole FPDU from the in-order point on.
    fn in_order<C: Crc32c, S: Sink>(&mut self, data: &Pieces<'_>, sink: &mut S) -> Result<(), RxError> {
        let markers = self.cfg.markers;
        while let Some(f) = fpdu::locate(data, markers, self.next) {
            if f.end() > data.end() {
                break;
            }
            if sink.failed() {
                return Err(RxError::Closed);
            }
            // An FPDU placed early is checked again too: TCP may hold other octets there now
            // (a retransmission that overlapped it differently replaces what it queued).
            let recorded = self.placed.take(f.start);
            fpdu::check_markers(data, markers, &f).map_err(|c| self.term(c, data, &f))?;
            if self.cfg.crc {
                fpdu::check_crc::<C>(data, &f).map_err(|c| self.term(c, data, &f))?;
            }
            // Placed early only if these are the octets that were: else placed now.
            let early = recorded == Some((f.wire_len, fpdu::crc_field(data, &f)));
            let seg = self.segment(data, &f)?;
            self.check_order(&seg).map_err(|c| self.term(c, data, &f))?;
            if early {
                // Placed ahead of its turn: what came before it may have changed its target
                // since (a Send with Invalidate of its STag), so its turn checks it again.
                self.check_target(&seg, sink).map_err(|c| self.term(c, data, &f))?;
            } else {
                self.place::<S>(data, &f, &seg, sink).map_err(|c| self.term(c, data, &f))?;
            }
            self.next = f.end();
            if self.deliver(data, &f, &seg, sink)? {
                self.closed = true;
                break;
            }
        }
        Ok(())
    }

    /// Places whole FPDUs found in bytes beyond the in-order point: right after one placed
    /// early, where markers point, or (without markers, with CRCs) at the start of the bytes,
    /// guessed. With markers the guess is not tried: a marker shows where an FPDU starts, a guess
    /// only hopes so (and a wrong one costs a CRC).
    fn place_ahead<C: Crc32c, S: Sink>(&mut self, data: &Pieces<'_>, sink: &mut S) {
        if sink.failed() {
            return;
        }
        if self.cfg.expect_rtr.is_some() || self.cfg.expect_rtr_read_response {
            // Until the in-order pass has seen the ready-to-receive exchange, nothing is placed:
            // the RTR itself must not be placed, and what follows it must wait its turn.
            return;
        }
        // Octets below `tried` were placed or tried already.
        let mut tried = data.start();
        let first = if self.placed.ends_at(data.start()) {
            // Right after an FPDU placed early: an FPDU starts here, marker or not.
            Some(Found::AfterPlaced)
        } else {
            // The CRC makes a guess safe: a wrong one fails it (and is not counted as bad).
            (self.cfg.crc && !self.cfg.markers.enabled()).then_some(Found::Alignment)
        };
        if let Some(found) = first {
            match self.place_run_from::<C, S>(data, data.start(), found, sink) {
                RunEnd::Failed(at) => tried = at + 1,
                RunEnd::Done if found == Found::AfterPlaced => return,
                // A wrong guess may read a length that runs past the data: markers may still
                // find FPDUs.
                RunEnd::Done => {}
            }
        }
        let markers = self.cfg.markers;
        let Some(mut m) = markers.next_at_or_after(tried) else { return };
        while m + 4 <= data.end() {
            match markers.decode(m, data.read(m)) {
                Some(start) if start >= tried => match self.place_run_from::<C, S>(data, start, Found::Marker, sink) {
                    RunEnd::Failed(at) => tried = at + 1,
                    RunEnd::Done => return,
                },
                _ => {}
            }
            m += u64::from(markers.interval());
        }
    }

    /// Places consecutive whole FPDUs from `start` (the first one `found` so) until one is
    /// incomplete, fails a check, or cannot be recorded.
    fn place_run_from<C: Crc32c, S: Sink>(&mut self, data: &Pieces<'_>, mut start: u64, mut found: Found, sink: &mut S) -> RunEnd {
        let markers = self.cfg.markers;
        while let Some(f) = fpdu::locate(data, markers, start) {
            if f.end() > data.end() {
                return RunEnd::Done;
            }
            if !self.placed.has_room() {
                self.early.held_back += 1;
                return RunEnd::Done;
            }
            if !self.placed.overlaps(f.start, f.wire_len) {
                let Some(left) = self.ahead_budget.checked_sub(u64::from(f.wire_len)) else { return RunEnd::Done };
                self.ahead_budget = left;
                let ok = fpdu::check_markers(data, markers, &f).is_ok() && (!self.cfg.crc || fpdu::check_crc::<C>(data, &f).is_ok());
                if !ok {
                    // A guess that fails is only a sender that does not align.
                    self.early.bad += u64::from(found != Found::Alignment);
                    return RunEnd::Failed(f.start);
                }
                let Ok(seg) = self.segment(data, &f) else {
                    self.early.held_back += 1;
                    return RunEnd::Failed(f.start);
                };
                if !seg.op.tagged() && !seg.op.is_send() {
                    // Read Requests and Terminates have nothing to place; the in-order pass acts.
                } else if self.place::<S>(data, &f, &seg, sink).is_ok() {
                    self.placed.insert(f.start, f.wire_len, fpdu::crc_field(data, &f));
                    let e = &mut self.early;
                    *(match found {
                        Found::Marker => &mut e.by_marker,
                        Found::Alignment => &mut e.by_alignment,
                        Found::AfterPlaced => &mut e.after_placed,
                    }) += 1;
                } else {
                    self.early.held_back += 1;
                    return RunEnd::Failed(f.start);
                }
            }
            start = f.end();
            found = Found::AfterPlaced;
        }
        RunEnd::Done
    }

    /// Parses and validates the DDP/RDMAP header of an FPDU (everything that needs no order).
    fn segment(&self, data: &Pieces<'_>, f: &Located) -> Result<Segment, RxError> {
        let mut copy = [0u8; ddp::UNTAGGED_LEN];
        let avail = (f.ulpdu_len as usize).min(copy.len());
        let hdr = match fpdu::header_in_place(data, self.cfg.markers, f, avail) {
            Some(hdr) => hdr,
            None => {
                fpdu::read_body(data, self.cfg.markers, f.start, f.body_len, 2, &mut copy[..avail]).ok_or(RxError::Closed)?;
                &copy[..avail]
            }
        };
        let fail = |c: Cause| RxError::Terminate(Terminate::new(c).with_segment(f.ulpdu_len, hdr));
        let h = Header::parse(hdr).map_err(|_| fail(Cause::DdpCatastrophic))?;
        let tagged = matches!(h.buf, Buffer::Tagged { .. });
        let hdr_len = h.wire_len() as u32;
        let payload_len = u32::from(f.ulpdu_len) - hdr_len;
        if h.version != ddp::VERSION {
            return Err(fail(if tagged { Cause::DdpTaggedVersion } else { Cause::DdpUntaggedVersion }));
        }
        let (rv, bits) = rdmap::split_ctrl(h.ulp_ctrl);
        if rv != rdmap::VERSION {
            return Err(fail(Cause::RdmapVersion));
        }
        let op = Opcode::parse(bits)
            .ok()
            .filter(|op| op.tagged() == tagged && (self.cfg.extensions || !op.is_extension()))
            .ok_or_else(|| fail(Cause::RdmapOpcode))?;
        match h.buf {
            Buffer::Tagged { to, .. } => {
                to.checked_add(u64::from(payload_len)).ok_or_else(|| fail(Cause::DdpToWrap))?;
            }
            Buffer::Untagged { qn, mo, .. } => {
                if Some(qn) != op.queue() {
                    return Err(fail(Cause::DdpInvalidQn));
                }
                mo.checked_add(payload_len).ok_or_else(|| fail(Cause::DdpInvalidMo))?;
                let whole = match (op, op.fixed_len()) {
                    (Opcode::Terminate, _) => None,
                    (_, Some(n)) => Some(n),
                    _ => return Ok(Segment { op, last: h.last, buf: h.buf, hdr_len, payload_len }),
                };
                let bad_len = whole.is_some_and(|n| n as u32 != payload_len) || payload_len > terminate::MAX_LEN as u32;
                if !h.last || mo != 0 || bad_len {
                    return Err(fail(Cause::RdmapStreamCatastrophic));
                }
            }
        }
        Ok(Segment { op, last: h.last, buf: h.buf, hdr_len, payload_len })
    }

    /// The RTR this segment must be: the first one, unless it is a Terminate (an initiator that
    /// cannot use the RTR type we picked ends the stream with one, RFC 6581 section 9.2).
    fn rtr_due(&self, seg: &Segment) -> Option<Rtr> {
        self.cfg.expect_rtr.filter(|_| seg.op != Opcode::Terminate)
    }

    /// In-order rules: MSNs and message offsets follow on, and the RTR comes first.
    fn check_order(&self, seg: &Segment) -> Result<(), Cause> {
        if let Some(rtr) = self.rtr_due(seg) {
            let want = match rtr {
                Rtr::Send => Opcode::Send,
                Rtr::Write => Opcode::Write,
                Rtr::Read => Opcode::ReadRequest,
            };
            let zero = match seg.op {
                Opcode::ReadRequest => true,
                _ => seg.payload_len == 0,
            };
            if seg.op != want || !zero || !seg.last {
                return Err(Cause::MpaNoMatchingRtr);
            }
        }
        if let Buffer::Untagged { qn, msn, mo, .. } = seg.buf {
            if msn != self.next_msn[qn as usize] {
                return Err(Cause::DdpMsnRange);
            }
            if qn == queue::SEND && mo != self.send_mo {
                return Err(Cause::DdpInvalidMo);
            }
        }
        Ok(())
    }

    /// Checks the segment's target with the sink (if it has one); returns whether it has a
    /// payload to place.
    fn check_target<S: Sink>(&self, seg: &Segment, sink: &mut S) -> Result<bool, Cause> {
        if seg.op.is_immediate() {
            // Nothing to place, but it takes a receive buffer.
            return sink.check(seg.op, target(seg, 0), 0).map(|()| false);
        }
        if !(seg.op.tagged() || seg.op.is_send()) || self.is_rtr(seg) {
            return Ok(false);
        }
        sink.check(seg.op, target(seg, 0), seg.payload_len).map(|()| true)
    }

    /// Checks the target with the sink and places the payload.
    fn place<S: Sink>(&self, data: &Pieces<'_>, f: &Located, seg: &Segment, sink: &mut S) -> Result<(), Cause> {
        if !self.check_target(seg, sink)? {
            return Ok(());
        }
        let target = |off: u32| target(seg, off);
        let mut placed = Ok(());
        fpdu::for_each_payload(data, self.cfg.markers, f, 2 + seg.hdr_len, |off, bytes| {
            if placed.is_ok() {
                placed = sink.place(target(off), bytes);
            }
        });
        placed
    }

    fn is_rtr(&self, seg: &Segment) -> bool {
        self.rtr_due(seg).is_some() || (self.cfg.expect_rtr_read_response && seg.op == Opcode::ReadResponse)
    }

    /// Advances in-order state and delivers what the segment completes. Returns whether the
    /// stream ended (a Terminate arrived).
    fn deliver<S: Sink>(&mut self, data: &Pieces<'_>, f: &Located, seg: &Segment, sink: &mut S) -> Result<bool, RxError> {
        if let Some(rtr) = self.rtr_due(seg) {
            self.cfg.expect_rtr = None;
            sink.deliver(Event::ReadyToReceive(rtr));
            if rtr != Rtr::Read {
                if let Buffer::Untagged { qn, .. } = seg.buf {
                    self.next_msn[qn as usize] += 1;
                }
                return Ok(false);
            }
            // A Read RTR is also a zero-length Read Request, delivered below to be answered
            // like any other.
        }
        if self.cfg.expect_rtr_read_response && seg.op == Opcode::ReadResponse {
            self.cfg.expect_rtr_read_response = false;
            return Ok(false);
        }
        match seg.buf {
            Buffer::Tagged { stag, .. } => {
                if seg.last {
                    sink.deliver(if seg.op == Opcode::Write { Event::Write { stag } } else { Event::ReadResponse { stag } });
                }
                Ok(false)
            }
            Buffer::Untagged { qn, msn, ulp, .. } => {
                if qn == queue::SEND && !seg.op.is_immediate() {
                    self.send_mo += seg.payload_len;
                    if !seg.last {
                        return Ok(false);
                    }
                    let len = core::mem::replace(&mut self.send_mo, 0);
                    self.next_msn[0] = msn.wrapping_add(1);
                    let invalidate = seg.op.invalidates().then_some(ulp);
                    sink.deliver(Event::Send { msn, len, solicited: seg.op.solicited(), invalidate });
                    return Ok(false);
                }
                self.next_msn[qn as usize] = msn.wrapping_add(1);
                let mut inline = [0u8; MAX_INLINE];
                let payload = &mut inline[..seg.payload_len as usize];
                fpdu::read_body(data, self.cfg.markers, f.start, f.body_len, 2 + seg.hdr_len, payload).ok_or(RxError::Closed)?;
                // segment() checked that these payloads are exactly their headers.
                let event = match seg.op {
                    Opcode::ReadRequest => Event::ReadRequest(ReadRequest::parse(payload).map_err(|_| RxError::Closed)?),
                    Opcode::ImmediateData | Opcode::ImmediateDataSolicited => {
                        let mut b = [0u8; IMMEDIATE_LEN];
                        b.copy_from_slice(payload);
                        Event::Immediate { msn, data: u64::from_be_bytes(b), solicited: seg.op.solicited() }
                    }
                    Opcode::AtomicRequest => {
                        // RFC 7306 section 5.2.1: an operation we do not know is unexpected;
                        // section 8.2: a target that is not 64-bit aligned ends the stream.
                        let r = atomic::Request::parse(payload).map_err(|_| self.term(Cause::RdmapOpcode, data, f))?;
                        if !r.aligned() {
                            return Err(self.term(Cause::RdmapStreamCatastrophic, data, f));
                        }
                        Event::AtomicRequest(r)
                    }
                    Opcode::AtomicResponse => Event::AtomicResponse(atomic::Response::parse(payload).map_err(|_| RxError::Closed)?),
                    _ => {
                        let t = Terminate::parse(payload).map_err(|_| RxError::Terminate(Terminate::new(Cause::RdmapStreamCatastrophic)))?;
                        sink.deliver(Event::Terminate(t));
                        return Ok(true);
                    }
                };
                sink.deliver(event);
                Ok(false)
            }
        }
    }

    /// The Terminate for `cause` found in FPDU `f`, echoing its headers when they are readable.
    fn term(&self, cause: Cause, data: &Pieces<'_>, f: &Located) -> RxError {
        let mut hdr = [0u8; ddp::UNTAGGED_LEN + READ_REQUEST_LEN];
        let n = (f.ulpdu_len as usize).min(hdr.len());
        let mut t = Terminate::new(cause);
        if fpdu::read_body(data, self.cfg.markers, f.start, f.body_len, 2, &mut hdr[..n]).is_some() && n > 0 {
            let dlen = Header::wire_len_from_first(hdr[0]).min(n);
            t = t.with_segment(f.ulpdu_len, &hdr[..dlen]);
            if n == hdr.len() && rdmap::split_ctrl(hdr[1]).1 == Opcode::ReadRequest as u8 {
                let mut rr = [0u8; READ_REQUEST_LEN];
                rr.copy_from_slice(&hdr[ddp::UNTAGGED_LEN..]);
                t = t.with_read_request(rr);
            }
        }
        RxError::Terminate(t)
    }
}

/// Where payload offset `off` of `seg` goes.
fn target(seg: &Segment, off: u32) -> Target {
    match seg.buf {
        Buffer::Tagged { stag, to } => Target::Tagged { stag, to: to + u64::from(off) },
        Buffer::Untagged { msn, mo, .. } => Target::Untagged { msn, mo: mo + off },
    }
}
