// SPDX-License-Identifier: GPL-2.0

//! The send queue of a QP: messages (Sends, Writes, Read Requests and Responses) wait here in
//! order, are framed FPDU by FPDU by the protocol core into batches of page fragments, and go to
//! TCP without waiting: what the socket buffer cannot take now stays queued, and the hook's
//! transmit work goes on once TCP frees buffer (`sk_write_space`). Posting never blocks on the
//! network.
//!
//! Without markers or CRCs, payload goes by reference (zero copy). With either, each FPDU is copied
//! whole into the send side's pages and its CRC computed over the copy in one run: a marker every
//! 512 octets would otherwise cut the payload into pieces that TCP takes as separate fragments
//! (three times the skbs) and the CRC into calls too short for the kernel's fast crc32c; the CRC
//! reads every octet anyway, so copying alongside costs little, and what TCP sends (and
//! retransmits) is exactly what the CRC covers.

use super::payload::{self, OutPayload};
use super::unacked::Unacked;
use super::QueuePair;
use crate::error::{enotconn, QpError};
use crate::fifo::Fifo;
use crate::frags::{Arena, PageFrag};
use crate::proto::mpa::negotiate::Rtr;
use crate::proto::rdmap::ReadRequest;
use crate::proto::terminate::Terminate;
use crate::proto::tx::{self, Fpdu, Message, Outgoing, Piece, Transmitter};
use crate::shim::KernelCrc;
use crate::socket::TcpSocket;
use crate::verbs::Status;
use core::sync::atomic::Ordering;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;

/// A message waiting for TCP, or a local work request waiting for its turn to complete.
pub(super) struct Outbound {
    /// None for a local work request (a Local Invalidate, a Fast Register): it did its work
    /// when posted, and only its completion keeps its place among the others.
    pub(super) msg: Option<Message>,
    pub(super) payload: OutPayload,
    /// The work request it carries, to complete once the message is queued whole.
    pub(super) wr: Option<Unacked>,
}

impl Outbound {
    /// A message without payload.
    pub(super) fn bare(msg: Message, wr: Option<Unacked>) -> Outbound {
        Outbound { msg: Some(msg), payload: OutPayload::empty(), wr }
    }

    /// Whether a work request of ours posted it (everything but Read and Atomic Responses).
    fn is_wr(&self) -> bool {
        !matches!(self.msg, Some(Message::ReadResponse { .. } | Message::AtomicResponse(_)))
    }
}

/// What the send side keeps.
pub(crate) struct TxSide {
    tx: Transmitter,
    fpdu: KBox<Fpdu>,
    batch: Batch,
    queue: Fifo<Option<Outbound>>,
    /// Work requests in `queue` (the rest are Read Responses), at most `max_wrs`.
    wrs: usize,
    max_wrs: usize,
    /// Framing state of the oldest queued message, once begun.
    current: Option<Outgoing>,
    /// TCP sequence number just past what TCP took last.
    end_seq: u32,
    /// Payload octets sent (zero copy, copied).
    sent: (u64, u64),
    /// Whether each FPDU is copied whole and sealed over the copy (markers or CRCs on).
    copy_framed: bool,
}

impl TxSide {
    /// A send side for up to `max_wrs` queued work requests and `ird` Read Responses; with
    /// `aligned`, each FPDU starts a TCP segment.
    pub(super) fn new(tx: Transmitter, max_wrs: usize, ird: usize, aligned: bool) -> Result<TxSide> {
        let batch = Batch {
            ctl: Arena::new(),
            copied: 0,
            frags: KVec::with_capacity(BATCH_FRAGS, GFP_KERNEL_ACCOUNT)?,
            taken: 0,
            records: KVec::with_capacity(BATCH_FRAGS, GFP_KERNEL_ACCOUNT)?,
            record: 0,
            aligned,
        };
        let cfg = tx.config();
        let copy_framed = (cfg.crc || cfg.markers.enabled()) && cfg.max_wire_len() as usize <= PAGE_SIZE;
        Ok(TxSide {
            tx,
            fpdu: KBox::new(Fpdu::default(), GFP_KERNEL_ACCOUNT)?,
            batch,
            queue: Fifo::new(max_wrs + ird)?,
            wrs: 0,
            max_wrs,
            current: None,
            end_seq: 0,
            sent: (0, 0),
            copy_framed,
        })
    }

    /// How FPDUs are framed.
    pub(super) fn config(&self) -> tx::Config {
        self.tx.config()
    }

    /// Whether FPDUs are copied whole and their CRCs computed over the copies: TCP never sends
    /// from the application's pages.
    pub(super) fn copies_framed(&self) -> bool {
        self.copy_framed
    }

    /// Payload octets sent: (zero copy, copied).
    pub(super) fn sent(&self) -> (u64, u64) {
        self.sent
    }

    /// Octets of copied Read Responses queued, not yet taken whole by TCP.
    pub(super) fn copied_responses(&self) -> u64 {
        let queued = (0..self.queue.len()).filter_map(|i| self.queue.get(i)?.as_ref());
        queued.filter(|ob| !ob.is_wr() && !ob.payload.zero_copy()).map(|ob| ob.payload.len()).sum()
    }

    /// Work requests queued, not yet taken whole by TCP.
    pub(super) fn queued_wrs(&self) -> usize {
        self.wrs
    }

    /// Whether `obs` may be queued: ENOMEM when the queue would hold more work requests than
    /// the send queue, ENOSPC when it would hold more responses than the IRD (each has room of
    /// its own: a peer that asks for more than it may, and reads nothing, cannot take the
    /// room of our work requests).
    fn room_for(&self, obs: &[Outbound]) -> Result {
        let wrs = obs.iter().filter(|ob| ob.is_wr()).count();
        if self.wrs + wrs > self.max_wrs {
            return Err(ENOMEM);
        }
        let responses = self.queue.len() - self.wrs + (obs.len() - wrs);
        if responses > self.queue.capacity() - self.max_wrs {
            return Err(ENOSPC);
        }
        Ok(())
    }

    /// Queues the peer-to-peer initiator's RTR, a zero-length message that completes nothing,
    /// before anything posted.
    pub(super) fn queue_rtr(&mut self, rtr: Rtr) -> Result {
        let msg = match rtr {
            Rtr::Send => Message::Send { solicited: false, invalidate: None },
            Rtr::Write => Message::Write { stag: 0, to: 0 },
            Rtr::Read => Message::ReadRequest(ReadRequest { sink_stag: 0, sink_to: 0, size: 0, src_stag: 0, src_to: 0 }),
        };
        let ob = Outbound::bare(msg, None);
        self.room_for(core::slice::from_ref(&ob))?;
        self.wrs += usize::from(ob.is_wr());
        self.queue.push(Some(ob))
    }

    /// Sends a Terminate right after what TCP has (part of) already, if the socket takes it
    /// now; the queued messages stay for [`TxSide::drain`].
    pub(super) fn terminate(&mut self, sock: &TcpSocket, t: Terminate) -> Result {
        if !self.batch.push(sock, &mut self.end_seq, false)? {
            return Err(EAGAIN);
        }
        self.current = None;
        let empty = OutPayload::empty();
        let mut out = self.tx.start(Message::Terminate(t), 0).map_err(|_| EINVAL)?;
        self.tx.next_fpdu::<KernelCrc, _>(&mut out, &empty, &mut self.fpdu);
        self.batch.add(&self.fpdu, &empty)?;
        if self.batch.push(sock, &mut self.end_seq, false)? {
            Ok(())
        } else {
            Err(EAGAIN)
        }
    }

    /// Takes every queued message (the QP ended): calls `f` with the work requests.
    pub(super) fn drain(&mut self, mut f: impl FnMut(Unacked)) {
        while let Some(ob) = self.queue.pop() {
            if let Some(wr) = ob.and_then(|o| o.wr) {
                f(wr);
            }
        }
        self.wrs = 0;
        self.current = None;
        self.batch.clear();
    }
}

/// Fragments handed to one sendmsg, about (the kernel takes up to UIO_MAXIOV = 1024).
const BATCH_FRAGS: usize = 256;
/// Octets of copied FPDUs in one batch, about (they merge into a few fragments per page).
const BATCH_COPIED: usize = 256 << 10;

/// The fragments of several FPDUs of one message: per-FPDU control octets (headers, markers, pad,
/// CRC) are copied into the batch's pages, because the core reuses its FPDU buffer; payload is
/// referenced as the message's fragments, whose pages the queued message keeps.
///
/// Aligned, each FPDU is a record that ends its skb, so FPDUs start TCP segments (they are sized
/// to fit the MSS) and a receiver can place an out-of-order segment without markers. Linux TCP
/// keeps a record's end when it retransmits or collapses; a shrinking MSS can still split an FPDU.
struct Batch {
    /// Control octets, and FPDUs copied whole.
    ctl: Arena,
    /// Octets of FPDUs copied whole.
    copied: usize,
    frags: KVec<PageFrag>,
    /// Fragments TCP took whole (the next may be partly taken: it is trimmed in place).
    taken: usize,
    /// Octets of each record: one per FPDU when aligned, else one for the whole batch (TCP
    /// then takes it in one call).
    records: KVec<u32>,
    /// Records TCP took whole (the next may be partly taken: it is shortened in place).
    record: usize,
    /// Whether each FPDU ends its skb.
    aligned: bool,
}

impl Batch {
    /// Whether another FPDU may join the batch.
    fn has_room(&self) -> bool {
        self.frags.len() < BATCH_FRAGS && self.copied < BATCH_COPIED
    }

    /// Counts a framed FPDU into the records.
    fn record(&mut self, fpdu: &Fpdu) -> Result {
        match self.records.last_mut() {
            Some(r) if !self.aligned => *r += fpdu.wire_len,
            _ => self.records.push(fpdu.wire_len, GFP_KERNEL_ACCOUNT)?,
        }
        Ok(())
    }

    /// Adds a framed and sealed FPDU's pieces, whole or not at all ([`Batch::whole`]).
    fn add(&mut self, fpdu: &Fpdu, payload: &OutPayload) -> Result {
        self.whole(|b| {
            b.record(fpdu)?;
            for p in fpdu.pieces() {
                match *p {
                    Piece::Ctl { off, len } => {
                        let frag = b.ctl.push(fpdu.ctl(off, len))?;
                        payload::push(&mut b.frags, frag)?;
                    }
                    Piece::Payload { off, len } => payload.append_to(off, len, &mut b.frags, &mut b.ctl)?,
                }
            }
            Ok(())
        })
    }

    /// Adds a framed FPDU (at most a page) copied whole, sealed over the copy; whole or not at
    /// all ([`Batch::whole`]).
    fn add_copy(&mut self, fpdu: &Fpdu, payload: &OutPayload) -> Result {
        self.whole(|b| {
            b.record(fpdu)?;
            let (frag, dst) = b.ctl.take(fpdu.wire_len as usize)?;
            fpdu.write_sealed::<KernelCrc, _>(payload, dst);
            b.copied += dst.len();
            payload::push(&mut b.frags, frag)
        })
    }

    /// Runs `add`, which adds one FPDU; if it fails (no memory), what it added is taken out
    /// again, including octets merged into the last fragment or record before it. The batch
    /// thus holds whole FPDUs only, and a Terminate may follow them on the wire. (Octets it
    /// took from `ctl` stay unused until the batch is cleared.)
    fn whole(&mut self, add: impl FnOnce(&mut Batch) -> Result) -> Result {
        let frags = (self.frags.len(), self.frags.last().copied());
        let records = (self.records.len(), self.records.last().copied());
        let copied = self.copied;
        let added = add(self);
        if added.is_err() {
            restore(&mut self.frags, frags);
            restore(&mut self.records, records);
            self.copied = copied;
        }
        added
    }

    /// Hands what TCP has not taken yet to it, without waiting; true when all is taken (the
    /// batch is then empty). `end_seq` becomes the sequence number just past what TCP has.
    /// With `more`, a message follows at once (see [`TcpSocket::send_frags`]).
    fn push(&mut self, sock: &TcpSocket, end_seq: &mut u32, more: bool) -> Result<bool> {
        if self.taken < self.frags.len() {
            let mut left = sock.send_frags(&mut self.frags[self.taken..], &self.records[self.record..], self.aligned, more, end_seq)?;
            let mut records = left;
            while records > 0 {
                let r = &mut self.records[self.record];
                if records >= *r as usize {
                    records -= *r as usize;
                    self.record += 1;
                } else {
                    *r -= records as u32;
                    records = 0;
                }
            }
            while left > 0 {
                let f = &mut self.frags[self.taken];
                if left >= f.len() as usize {
                    left -= f.len() as usize;
                    self.taken += 1;
                } else {
                    *f = f.slice(left as u32, f.len() - left as u32);
                    left = 0;
                }
            }
        }
        let all = self.taken == self.frags.len();
        if all {
            self.clear();
        }
        Ok(all)
    }

    fn clear(&mut self) {
        self.frags.clear();
        self.ctl.clear();
        self.copied = 0;
        self.taken = 0;
        self.records.clear();
        self.record = 0;
    }
}

/// Puts `list` back as it was when it had `len` items, the last one `last`.
fn restore<T: Copy>(list: &mut KVec<T>, (len, last): (usize, Option<T>)) {
    list.truncate(len);
    if let (Some(now), Some(was)) = (list.last_mut(), last) {
        *now = was;
    }
}

impl QueuePair {
    /// Hands TCP what is queued, as far as the socket buffer takes it now, completing the work
    /// requests whose messages it took whole. Err: the stream broke, this host could not frame
    /// the next FPDU, or a CQ overran (after everything was sent that could be); the caller
    /// fails the QP once it released the send side.
    pub(super) fn pump(&self, side: &mut TxSide) -> Result<(), QpError> {
        if self.awaiting_peer.load(Ordering::Acquire) {
            // A responder before the initiator's first FPDU (its RTR in peer-to-peer mode):
            // everything waits for it.
            return Ok(());
        }
        let sock = self.socket()?;
        let mut completed = Ok(());
        loop {
            // The batch ends a message with another queued behind it (a Write and its Immediate
            // Data, or a burst of posts): TCP holds the last partial segment for the next, which
            // this loop frames and pushes at once, so that both share a segment.
            let more = side.current.as_ref().is_some_and(|out| out.done()) && matches!(side.queue.get(1), Some(Some(Outbound { msg: Some(_), .. })));
            if !side.batch.push(sock, &mut side.end_seq, more)? {
                // The hook's transmit work goes on when TCP frees buffer.
                return completed.map_err(QpError::from);
            }
            let Some(Some(front)) = side.queue.front_mut() else { return completed.map_err(QpError::from) };
            let Some(msg) = front.msg else {
                // A local work request: it completes behind everything posted before it.
                if let Some(Some(Outbound { wr: Some(mut wr), .. })) = side.queue.pop() {
                    wr.end_seq = side.end_seq;
                    completed = completed.and(self.sent(wr, false));
                    side.wrs -= 1;
                }
                continue;
            };
            let out = match &mut side.current {
                Some(out) => out,
                None => side.current.insert(side.tx.start(msg, front.payload.len()).map_err(|_| QpError::Local)?),
            };
            if out.done() {
                // Framed, and taken whole by TCP.
                side.current = None;
                // Copied whole, the application's pages were read before TCP took the message.
                let zero_copy = front.payload.zero_copy() && !side.copy_framed;
                let counter = if zero_copy { &mut side.sent.0 } else { &mut side.sent.1 };
                *counter += front.payload.len();
                if let Some(Some(ob)) = side.queue.pop() {
                    if let Some(mut wr) = ob.wr {
                        wr.end_seq = side.end_seq;
                        completed = completed.and(self.sent(wr, zero_copy));
                    }
                    side.wrs -= usize::from(ob.is_wr());
                }
                continue;
            }
            while !out.done() && side.batch.has_room() {
                // An FPDU that cannot join the batch (no memory) is unframed again: the
                // Terminate that fails the QP then starts where the last whole FPDU ended,
                // with its markers where the stream's position puts them.
                let (tx_was, out_was) = (side.tx.clone(), *out);
                let added = if side.copy_framed {
                    side.tx.frame(out, &mut side.fpdu);
                    side.batch.add_copy(&side.fpdu, &front.payload)
                } else {
                    side.tx.next_fpdu::<KernelCrc, _>(out, &front.payload, &mut side.fpdu);
                    side.batch.add(&side.fpdu, &front.payload)
                };
                if added.is_err() {
                    (side.tx, *out) = (tx_was, out_was);
                    return Err(QpError::Local);
                }
            }
        }
    }

    /// Queues `obs` (one message, or a Write and its Immediate Data) back to back and pumps.
    /// `check` runs once the queue has room, under the send side's lock, and may refuse; when
    /// it accepts, all of `obs` is queued.
    pub(super) fn enqueue<const N: usize>(&self, obs: [Outbound; N], check: impl FnOnce(&TxSide) -> Result) -> Result {
        let mut guard = self.tx.lock();
        let Some(side) = &mut *guard else { return Err(enotconn()) };
        side.room_for(&obs)?;
        check(side)?;
        for ob in obs {
            side.wrs += usize::from(ob.is_wr());
            // Cannot fail: room_for() found room (the queue holds `max_wrs` plus the IRD).
            side.queue.push(Some(ob))?;
        }
        let before = side.wrs;
        let pumped = self.pump(side);
        let freed = side.wrs < before;
        drop(guard);
        self.pumped(pumped, freed);
        Ok(())
    }

    /// The hook's transmit work: goes on sending what is queued.
    pub(super) fn resume(&self) {
        let mut guard = self.tx.lock();
        let Some(side) = &mut *guard else { return };
        let before = side.wrs;
        let pumped = self.pump(side);
        let freed = side.wrs < before;
        drop(guard);
        self.pumped(pumped, freed);
    }

    /// Fails the QP if pumping broke the stream or overran a CQ. A stream that broke because
    /// the connection is gone (a reset, TCP gave up) is a lost connection: no Terminate can
    /// reach the peer, and none is reported as sent. The receive work ends the QP then, once it
    /// has read what the peer sent before the end. When requests left the queue (`freed`), the
    /// send CQ hears of the room made.
    fn pumped(&self, r: Result<(), QpError>, freed: bool) {
        if freed {
            self.send_cq.room_freed();
        }
        match r {
            Ok(()) => {}
            Err(e) => match self.sock.as_ref() {
                Some(sock) if matches!(e, QpError::StreamLost) && !sock.established() => sock.kick_receive(),
                _ => self.fail(e.terminate()),
            },
        }
    }

    /// Flushes what is still queued (the QP ended): every request, signaled or not, as verbs
    /// and siw do (a request TCP took counts as done, signaled or not).
    pub(super) fn flush_queued(&self) {
        let mut guard = self.tx.lock();
        let Some(side) = &mut *guard else { return };
        side.drain(|wr| {
            // A full CQ loses it; the QP is in error either way.
            let _ = self.send_cq.push(&self.completion(wr.wr_id, Status::Flushed, wr.opcode, 0));
        });
    }
}
