//! The hostile peer: seeded random mutations of valid streams. For stream `i` of a run, both
//! sides derive the same valid messages from `seed + i` (RDMA Writes into the module's side's
//! region and Sends), the peer frames them with markers and CRC, changes the stream once
//! (a bit flipped, octets dropped, inserted or repeated, or the stream cut short), sends it with
//! a last, intact Send that says DONE, and reads whatever comes back until the module's side
//! closes. The module's side (`mutate-serve`) decides each stream's outcome and checks it
//! against the model:
//!
//! - always: the guard octets around its regions are untouched; every octet of the Write
//!   region is 0 or what one of the original Writes put there; every receive that completed
//!   holds the next original Send, whole (or the DONE);
//! - a flipped bit is never accepted: the stream ends with our Terminate, or waits for an FPDU
//!   that never completes (a length field made longer); it never reaches the DONE.
//!
//! Outcomes are tallied per kind of mutation.

use super::{dial, open, options, Check};
use crate::wire::{frame, mpa_asking, receiver, LOCAL};
use iwarp_proto::crc::HostCrc;
use iwarp_proto::markers::{self, Markers};
use iwarp_proto::rdmap::Opcode;
use iwarp_proto::rx::{Event, Sink, Target};
use iwarp_proto::stream::Pieces;
use iwarp_proto::terminate::Cause;
use iwarp_proto::tx::{self, Message, Transmitter};
use libiwarp::{Access, QpInit, QpState, Remote, Role, WcStatus};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

/// The Write region.
const DST: usize = 16 << 10;
/// Guard octets before, between and after the regions.
const GUARD: usize = 4096;
/// What the guards hold.
const SENTINEL: u8 = 0xee;
/// Receive buffers posted, and their size.
const RECVS: usize = 16;
const RECV: usize = 512;
/// The last Send of every stream.
const DONE: &[u8] = b"the mutated stream is done";
/// How long the module's side waits for anything before it calls a stream stalled.
const IDLE: Duration = Duration::from_secs(2);

/// splitmix64: the same numbers on both sides from the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A valid message of a stream.
enum Msg {
    Write { off: usize, data: Vec<u8> },
    Send(Vec<u8>),
}

/// The valid messages of stream `seed` (fewer Sends than receives posted).
fn messages(seed: u64) -> Vec<Msg> {
    let mut r = Rng(seed);
    let n = 1 + r.below(8);
    (0..n)
        .map(|_| {
            if r.below(2) == 0 {
                let len = 1 + r.below(3000);
                let off = r.below(DST - len);
                Msg::Write { off, data: r.bytes(len) }
            } else {
                let len = 1 + r.below(RECV);
                Msg::Send(r.bytes(len))
            }
        })
        .collect()
}

/// The kinds of change, as tallied.
const KINDS: [&str; 5] = ["flip", "drop", "insert", "repeat", "cut"];

/// The change stream `seed` gets: its kind is the first draw (what the module's side needs).
fn change(seed: u64) -> (Rng, &'static str) {
    let mut r = Rng(!seed);
    let kind = KINDS[r.below(KINDS.len())];
    (r, kind)
}

/// Changes `wire` once within its first `end` octets (the DONE after them stays intact, except
/// that a cut removes it too).
fn mutate(wire: &mut Vec<u8>, end: usize, seed: u64) {
    let (mut r, kind) = change(seed);
    let at = r.below(end);
    let len = 1 + r.below(64.min(end - at));
    match kind {
        "flip" => wire[at] ^= 1 << r.below(8),
        "drop" => drop(wire.drain(at..at + len)),
        "insert" => {
            let junk = r.bytes(len);
            wire.splice(at..at, junk);
        }
        "repeat" => {
            let again = wire[at..at + len].to_vec();
            wire.splice(at..at, again);
        }
        _ => wire.truncate(at),
    }
}

/// Guest A: `n` mutated streams from `seed`, one connection each.
pub(crate) fn peer(host: &str, port: &str, n: u64, seed: u64) -> Check {
    let mut seen_terminate = 0;
    for i in 0..n {
        let mut s = dial(host, port)?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        let (conn, peer_private) = mpa_asking(&mut s, LOCAL)?;
        let dst = Remote::from_bytes(&peer_private).ok_or("no region advertised by the module's side")?;
        let tx_marks = if conn.tx_markers { Markers::RFC } else { Markers::NONE };
        let mut t = Transmitter::new(tx::Config { markers: tx_marks, crc: conn.crc, mulpdu: markers::mulpdu(1448, tx_marks) });
        let mut wire = Vec::new();
        for m in messages(seed + i) {
            match m {
                Msg::Write { off, data } => frame(&mut t, &mut wire, Message::Write { stag: dst.rkey, to: dst.addr + off as u64 }, &data)?,
                Msg::Send(data) => frame(&mut t, &mut wire, Message::Send { solicited: false, invalidate: None }, &data)?,
            }
        }
        let end = wire.len();
        frame(&mut t, &mut wire, Message::Send { solicited: false, invalidate: None }, DONE)?;
        mutate(&mut wire, end, seed + i);
        // The module's side may end the connection while this is on its way.
        let _ = s.write_all(&wire);
        // Whatever comes back, until the module's side closes.
        let (mut rx, mut sink, mut pending, mut chunk) = (receiver(&conn), Collect::default(), Vec::new(), [0u8; 4096]);
        while let Ok(got) = s.read(&mut chunk) {
            if got == 0 {
                break;
            }
            pending.extend_from_slice(&chunk[..got]);
            match rx.receive::<HostCrc, _>(&Pieces::new(rx.next(), &[&pending]), &mut sink) {
                Ok(used) => drop(pending.drain(..used as usize)),
                Err(_) => break,
            }
        }
        seen_terminate += sink.terminated as u64;
    }
    println!("ok: A: sent {n} mutated streams (seed {seed}); a Terminate reached us on {seen_terminate} of them");
    Ok(())
}

/// What the peer keeps of the module's frames: whether a Terminate came.
#[derive(Default)]
struct Collect {
    terminated: bool,
}

impl Sink for Collect {
    fn check(&mut self, _: Opcode, _: Target, _: u32) -> Result<(), Cause> {
        Ok(())
    }
    fn place(&mut self, _: Target, _: &[u8]) {}
    fn deliver(&mut self, e: Event) {
        self.terminated |= matches!(e, Event::Terminate(_));
    }
}

/// A check of one stream: silent when it holds (a run checks thousands), the failure otherwise.
fn must(holds: bool, failure: impl FnOnce() -> String) -> Check {
    if holds {
        Ok(())
    } else {
        Err(failure())
    }
}

/// How one stream ended, as the module's side saw it.
fn outcome(state: QpState, done: bool) -> String {
    match state {
        QpState::Connected if done => "completed".into(),
        QpState::Connected => "stalled".into(),
        QpState::Error { terminate: Some(t), sent: true } => format!("terminate {}", Cause::from_code(t).map_or(format!("{t:?}"), |c| format!("{c:?}"))),
        QpState::Error { terminate: Some(_), sent: false } => "terminate from the peer".into(),
        QpState::Error { terminate: None, .. } => "lost".into(),
        QpState::Init => "not connected".into(),
    }
}

/// Guest B: the module's side of `n` mutated streams from `seed`; checks each against the model
/// and prints the tally.
pub(crate) fn serve(port: &str, n: u64, seed: u64) -> Check {
    let dev = open()?;
    let listener = TcpListener::bind(format!("0.0.0.0:{port}")).map_err(|e| format!("listen {port}: {e}"))?;
    println!("listening on {port}");
    let mut tally: BTreeMap<(String, String), u32> = BTreeMap::new();
    for i in 0..n {
        let originals = messages(seed + i);
        let (_, kind) = change(seed + i);
        let stream = listener.accept().map_err(|e| format!("accept: {e}"))?.0;
        let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
        let cq = dev.create_cq(64).map_err(|e| e.to_string())?;
        let mut buf = vec![SENTINEL; GUARD + DST + GUARD + RECVS * RECV + GUARD];
        let (g1, rest) = buf.split_at_mut(GUARD);
        let (dst, rest) = rest.split_at_mut(DST);
        let (g2, rest) = rest.split_at_mut(GUARD);
        let (rcv, g3) = rest.split_at_mut(RECVS * RECV);
        dst.fill(0);
        rcv.fill(0);
        let dst = pd.register(dst, Access::LOCAL_WRITE | Access::REMOTE_WRITE).map_err(|e| e.to_string())?;
        let rcv = pd.register(rcv, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
        let init = QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: RECVS as u32, max_send_wr: 4, max_sge: 1, max_inline: 0 };
        let mut qp = dev.create_qp(&init).map_err(|e| e.to_string())?;
        for k in 0..RECVS {
            qp.post_recv(k as u64, &[rcv.sge(k * RECV..(k + 1) * RECV)]).map_err(|e| e.to_string())?;
        }
        let mut o = options(Role::Responder, "timeout=10000")?;
        o.private_data = dst.remote(0).to_bytes().to_vec();
        qp.adopt(stream, &o).map_err(|e| format!("stream {i}: adopt: {e}"))?;
        // Completions until the DONE, the end of the QP, or nothing for IDLE.
        let sends: Vec<&[u8]> = originals.iter().filter_map(|m| if let Msg::Send(d) = m { Some(&d[..]) } else { None }).collect();
        let (mut received, mut done) = (0, false);
        while let Some(wc) = cq.wait_one(IDLE).map_err(|e| e.to_string())? {
            if wc.status != WcStatus::Success {
                // The QP ended: the rest are flushed.
                let mut rest = [libiwarp::WorkCompletion::EMPTY; RECVS];
                while cq.poll(&mut rest) > 0 {}
                break;
            }
            let k = wc.wr_id as usize;
            let got = &rcv.as_slice()[k * RECV..k * RECV + wc.byte_len as usize];
            if k == received && got == DONE && received == sends.len() {
                done = true;
                break;
            }
            must(k == received && sends.get(k) == Some(&got), || {
                format!("B: stream {i} ({kind}): receive {k} does not hold the peer's Send {received} ({} octets)", got.len())
            })?;
            received += 1;
        }
        let state = qp.state().map_err(|e| e.to_string())?;
        let what = outcome(state, done);
        // The model.
        let mut allowed = vec![vec![0u8]; DST];
        for m in &originals {
            if let Msg::Write { off, data } = m {
                for (j, &b) in data.iter().enumerate() {
                    allowed[off + j].push(b);
                }
            }
        }
        let stray = dst.as_slice().iter().enumerate().filter(|(j, b)| !allowed[*j].contains(b)).count();
        drop(qp);
        drop((dst, rcv));
        let guards = g1.iter().chain(g2.iter()).chain(g3.iter()).all(|&b| b == SENTINEL);
        must(guards, || format!("B: stream {i} ({kind}, {what}): guard octets around the regions changed"))?;
        must(stray == 0, || format!("B: stream {i} ({kind}, {what}): {stray} octets of the Write region hold what no original Write put there"))?;
        must(!(kind == "flip" && done), || format!("B: stream {i}: a flipped bit was accepted (the DONE after it completed)"))?;
        *tally.entry((kind.to_string(), what)).or_default() += 1;
    }
    let ours: u32 = tally.iter().filter(|((_, what), _)| what.starts_with("terminate ") && what != "terminate from the peer").map(|(_, c)| c).sum();
    println!("ok: B: {n} mutated streams (seed {seed}): guards intact, no octet placed or delivered that the peer did not send, no flipped bit accepted");
    println!("ok: B: our Terminate ended {ours} of them");
    for ((kind, what), count) in &tally {
        println!("# {kind:>6}: {count:>4} {what}");
    }
    Ok(())
}
