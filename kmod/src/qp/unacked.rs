// SPDX-License-Identifier: GPL-2.0

//! Send completions that wait for TCP. A Send or Write sent from the registered pages (zero
//! copy) may complete only once the peer has acknowledged its last octet: until then TCP may
//! have to send those pages again, and the application must not reuse them. A completion
//! after such a request waits behind it, so completions stay in order, and so does an
//! unsignaled zero-copy request, because a later completion tells the application that the
//! earlier buffers are free too. TCP reports acknowledgements through the socket's write_space
//! callback (`TcpSocket::watch_acks`), which completes them right there when receiving runs in
//! the callbacks, else in the hook's transmit work; receiving checks too, since arriving data
//! carries them.

use super::receive::Queues;
use super::{Phase, QueuePair};
use crate::cq::Overrun;
use crate::socket::seq_after;
use crate::verbs::{CompletionOp, Status};
use kernel::prelude::*;

/// A queued Send or Write whose completion waits for the peer's acknowledgement.
#[derive(Clone, Copy, Default)]
pub(crate) struct Unacked {
    pub(crate) wr_id: u64,
    /// TCP sequence number just past its last octet.
    pub(crate) end_seq: u32,
    /// The completion's opcode and length.
    pub(crate) opcode: CompletionOp,
    pub(crate) len: u32,
    /// Whether a completion is written (unsignaled ones only hold later completions back).
    pub(crate) signaled: bool,
}

/// Whether sequence number `una` is at or past `seq` (modulo 2^32).
fn reached(una: u32, seq: u32) -> bool {
    !seq_after(seq, una)
}

impl QueuePair {
    /// Completes the waiting requests TCP has acknowledged, oldest first, and has the transmit
    /// work run when the oldest still waiting is acknowledged; tells the send CQ when that made
    /// room. Err: the send CQ is full.
    pub(super) fn complete_acked(&self, q: &mut Queues) -> Result<(), Overrun> {
        let Some(sock) = self.sock.as_ref() else { return Ok(()) };
        if q.unacked.len() == 0 {
            return Ok(());
        }
        let (mut una, before) = (sock.snd_una(), q.unacked.len());
        let done = 'acked: loop {
            while let Some(u) = q.unacked.get(0).copied() {
                if !reached(una, u.end_seq) {
                    break;
                }
                q.unacked.pop();
                if u.signaled {
                    if let Err(e) = self.send_cq.push(&self.completion(u.wr_id, Status::Success, u.opcode, u.len)) {
                        break 'acked Err(e);
                    }
                }
            }
            let Some(goal) = q.unacked.get(0).map(|u| u.end_seq) else { break Ok(()) };
            // Armed, then read again: an acknowledgement in between is not missed.
            sock.watch_acks(goal);
            una = sock.snd_una();
            if !reached(una, goal) {
                break Ok(());
            }
        };
        if q.unacked.len() < before {
            self.send_cq.room_freed();
        }
        done
    }

    /// A Send or Write was taken whole by TCP (`zero_copy`: from the registered pages):
    /// complete it now, or record it to complete when acknowledged (`RxSide::ready_to_send`
    /// made room). Err if the send CQ overran (the caller fails the QP).
    pub(super) fn sent(&self, wr: Unacked, zero_copy: bool) -> Result<(), Overrun> {
        let mut guard = self.rx.lock();
        let rx = &mut *guard;
        let mut done = self.complete_acked(&mut rx.queues);
        let q = &mut rx.queues.unacked;
        let wait = zero_copy || (wr.signaled && q.len() > 0);
        if wait && rx.phase == Phase::Connected {
            match q.last_mut() {
                // Consecutive unsignaled requests need only the newest end.
                Some(last) if !last.signaled && !wr.signaled => last.end_seq = wr.end_seq,
                // ready_to_send() checked for room, and only sending adds entries.
                _ => {
                    let _ = q.push(wr);
                }
            }
            done = done.and(self.complete_acked(&mut rx.queues));
        } else if wr.signaled {
            // Nothing to wait for, or the QP ended while we sent (end() flushed what waited, and
            // the peer may have answered this one already): it succeeded if TCP took a copy or
            // has the acknowledgement.
            let ok = !wait || self.sock.as_ref().is_some_and(|s| reached(s.snd_una(), wr.end_seq));
            let cqe = if ok { self.completion(wr.wr_id, Status::Success, wr.opcode, wr.len) } else { self.completion(wr.wr_id, Status::Flushed, wr.opcode, 0) };
            done = done.and(self.send_cq.push(&cqe));
        }
        done
    }

    /// Flushes the waiting requests (the QP ended), after completing what was acknowledged.
    pub(super) fn flush_unacked(&self, q: &mut Queues) {
        // A full CQ loses these entries; the QP is in error either way.
        let _ = self.complete_acked(q);
        while let Some(u) = q.unacked.pop() {
            if u.signaled {
                let _ = self.send_cq.push(&self.completion(u.wr_id, Status::Flushed, u.opcode, 0));
            }
        }
    }
}
