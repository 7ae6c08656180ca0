//! The hostile peer: seeded random changes to valid streams. For stream `i` of a run, both
//! sides derive the same valid messages from `seed + i` (RDMA Writes into the module's side's
//! region, Sends, RDMA Read Requests of its source region) and the same change. The peer makes
//! the change at one layer:
//!
//! - the MPA exchange (`mpa`): its request frame gets a bit flipped, octets dropped, inserted
//!   or repeated, or is cut short;
//! - the framed stream (MPA, DDP and RDMAP headers, markers, CRCs and payload alike: `flip`,
//!   `drop`, `insert`, `repeat`, `cut`): the same changes anywhere in its octets;
//! - RDMAP (`stag`): the first Write or Read Request of a valid stream names another STag than
//!   the one advertised (another key of its slot, a neighbouring slot, a region without remote
//!   rights, a region of another protection domain, a deregistered region, a random number).
//!
//! It sends the stream with a last Send that says DONE (a cut removes it with the rest), then a
//! tail of intact Writes of zeros longer than the longest FPDU (so an FPDU whose length field
//! was made longer is completed, and checked, rather than left waiting), and reads whatever
//! comes back until the module's side closes, checking every Read Response against the source
//! region (and, where MPA was left alone, that every frame of the module's parses). The
//! module's side (`mutate-serve`) decides each stream's outcome and checks it against the model:
//!
//! - always: the guard octets around its regions and the regions no Write may reach (source,
//!   other domain, deregistered) are untouched; every octet of the Write region is 0 or what one
//!   of the original Writes put there; every receive that completed holds the next original
//!   Send, whole (or the DONE); once the QP ended, every other receive came back flushed;
//! - a changed stream never goes unanswered: it ends with our Terminate, or (for a change that
//!   leaves it valid) completes to the DONE; a flipped bit or a wrong STag is never accepted;
//! - a changed MPA request is refused with an errno, or the connection goes on as above.
//!
//! Outcomes are tallied per kind of change.

use super::{dial, open, options, Check};
use crate::rng::Rng;
use crate::wire::{drive, frame, receiver, LOCAL};
use iwarp_proto::crc::HostCrc;
use iwarp_proto::markers::{self, Markers};
use iwarp_proto::mpa::handshake::{Handshake, Outcome, Step};
use iwarp_proto::rdmap::{Opcode, ReadRequest};
use iwarp_proto::rx::{Event, Sink, Target};
use iwarp_proto::stream::Pieces;
use iwarp_proto::terminate::Cause;
use iwarp_proto::tx::{self, Message, Transmitter};
use libiwarp::{Access, QpInit, QpState, Remote, Role, WcOpcode, WcStatus};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// The Write region.
const DST: usize = 16 << 10;
/// The source region Read Requests read.
const SRC: usize = 8 << 10;
/// Regions no Write of the peer may reach (one in another protection domain, one deregistered
/// before the stream).
const OFF_LIMITS: usize = 4096;
/// Guard octets before, between and after the regions.
const GUARD: usize = 4096;
/// What the guards and the off-limits regions hold.
const SENTINEL: u8 = 0xee;
/// Receive buffers posted, and their size.
const RECVS: usize = 16;
const RECV: usize = 512;
/// Most Read Requests in a stream (below the IRD the peer asks for).
const READS: usize = 3;
/// The last Send of every stream.
const DONE: &[u8] = b"the mutated stream is done";
/// The intact Writes of zeros after the DONE: more octets than the longest FPDU.
const TAIL: usize = 70_000;
const TAIL_WRITE: usize = 1400;
/// Our sink STag for Read Responses (its tagged offsets are source offsets).
const SINK: u32 = 0x5151_5100;
/// How long the module's side waits for anything before it calls a stream stalled.
const IDLE: Duration = Duration::from_secs(2);
/// How long the module's side waits for a changed MPA request (a cut one never completes).
const MPA_TIMEOUT_MS: u32 = 1000;

/// Octet `i` of the source region.
fn source(i: usize) -> u8 {
    (i as u32).wrapping_mul(2_654_435_761).rotate_right(11) as u8
}

/// A valid message of a stream.
enum Msg {
    Write { off: usize, data: Vec<u8> },
    Send(Vec<u8>),
    Read { off: usize, len: usize },
}

/// The kinds of change, as tallied.
const KINDS: [&str; 7] = ["flip", "drop", "insert", "repeat", "cut", "stag", "mpa"];

/// Stream `seed`: its valid messages (fewer Sends than receives posted, at most [`READS`]
/// Reads; a `stag` stream starts with a Write or a Read), the kind of its change, and the
/// generator the change draws from.
fn stream(seed: u64) -> (Vec<Msg>, &'static str, Rng) {
    let mut c = Rng(!seed);
    let kind = KINDS[c.below(KINDS.len())];
    let mut r = Rng(seed);
    let n = 1 + r.below(8);
    let mut reads = 0;
    let msgs = (0..n)
        .map(|j| match r.below(3) {
            0 => {
                let len = 1 + r.below(3000);
                Msg::Write { off: r.below(DST - len), data: r.bytes(len) }
            }
            2 if reads < READS => {
                reads += 1;
                let len = 1 + r.below(3000);
                Msg::Read { off: r.below(SRC - len), len }
            }
            _ if j == 0 && kind == "stag" => {
                let len = 1 + r.below(64);
                Msg::Write { off: 0, data: r.bytes(len) }
            }
            _ => {
                let len = 1 + r.below(RECV);
                Msg::Send(r.bytes(len))
            }
        })
        .collect();
    (msgs, kind, c)
}

/// What the module's side advertises in its private data, in this order.
#[derive(Clone, Copy)]
struct Advertised {
    /// The Write region (REMOTE_WRITE).
    dst: Remote,
    /// The source region (REMOTE_READ only).
    src: Remote,
    /// The receive buffers (LOCAL_WRITE only).
    rcv: Remote,
    /// A region of another protection domain (REMOTE_WRITE there).
    other: Remote,
    /// A region deregistered before the stream.
    stale: Remote,
}

impl Advertised {
    fn to_bytes(self) -> Vec<u8> {
        [self.dst, self.src, self.rcv, self.other, self.stale].iter().flat_map(|r| r.to_bytes()).collect()
    }

    fn from_bytes(b: &[u8]) -> Option<Advertised> {
        let r = |i: usize| Remote::from_bytes(b.get(i * Remote::LEN..(i + 1) * Remote::LEN)?);
        Some(Advertised { dst: r(0)?, src: r(1)?, rcv: r(2)?, other: r(3)?, stale: r(4)? })
    }

    /// A wrong STag, with a tagged offset inside the region it names (or the Write region's),
    /// so the STag alone is wrong. Never the STag the peer may use.
    fn guess(&self, r: &mut Rng, valid: u32) -> (u32, u64) {
        loop {
            let (stag, to) = match r.below(7) {
                // Another key of the same slot (STag = slot << 8 | key).
                0 => (valid ^ (1 + r.below(255)) as u32, self.dst.addr),
                // A neighbouring slot, same key.
                1 => (valid.wrapping_add(((1 + r.below(8)) << 8) as u32), self.dst.addr),
                2 => (self.src.rkey, self.src.addr),
                3 => (self.rcv.rkey, self.rcv.addr),
                4 => (self.other.rkey, self.other.addr),
                5 => (self.stale.rkey, self.stale.addr),
                _ => (r.next() as u32, self.dst.addr),
            };
            if stag != valid {
                return (stag, to);
            }
        }
    }
}

/// Changes `octets` once within its first `end`, as `how` says (the order of [`KINDS`]): 0 flips
/// a bit, 1 drops octets, 2 inserts junk, 3 repeats octets, 4 cuts everything from a point on.
fn change(octets: &mut Vec<u8>, end: usize, how: usize, r: &mut Rng) {
    let at = r.below(end);
    let len = 1 + r.below(64.min(end - at));
    match how {
        0 => octets[at] ^= 1 << r.below(8),
        1 => drop(octets.drain(at..at + len)),
        2 => {
            let junk = r.bytes(len);
            octets.splice(at..at, junk);
        }
        3 => {
            let again = octets[at..at + len].to_vec();
            octets.splice(at..at, again);
        }
        // Never a multiple of the marker separation: what follows (the tail) would then sit
        // where its markers say, and the stream cut at an FPDU's end would be valid again.
        _ => octets.truncate(if (octets.len() - at).is_multiple_of(512) { at + 1 } else { at }),
    }
}

/// MPA as initiator, the request changed by `r` when `kind` is `mpa`: the connection as this
/// side settled it and the peer's private data, or None if the exchange failed (as it may).
fn mpa_changed(s: &mut TcpStream, kind: &str, r: &mut Rng) -> Result<Option<(iwarp_proto::mpa::negotiate::Connection, Vec<u8>)>, String> {
    let mut h = Handshake::initiator(LOCAL, &[0u8; 24]).map_err(|e| format!("MPA request: {e:?}"))?;
    if kind == "mpa" {
        let mut request = h.transmit().to_vec();
        let (n, how) = (request.len(), r.below(5));
        change(&mut request, n, how, r);
        if s.write_all(&request).is_err() {
            return Ok(None);
        }
        h.sent(n);
    }
    if drive(s, &mut h).is_err() || h.step() != Step::Done {
        return Ok(None);
    }
    Ok(match h.outcome() {
        Some(Outcome::Connected(c)) => Some((c, h.peer_private().to_vec())),
        _ => None,
    })
}

/// Guest A: `n` changed streams from `seed`, one connection each.
pub(crate) fn peer(host: &str, port: &str, n: u64, seed: u64) -> Check {
    let (mut seen_terminate, mut responses) = (0, 0);
    for i in 0..n {
        let (msgs, kind, mut r) = stream(seed + i);
        let mut s = dial(host, port)?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        let Some((conn, peer_private)) = mpa_changed(&mut s, kind, &mut r)? else { continue };
        let ad = Advertised::from_bytes(&peer_private).ok_or("no regions advertised by the module's side")?;
        let tx_marks = if conn.tx_markers { Markers::RFC } else { Markers::NONE };
        let mut t = Transmitter::new(tx::Config { markers: tx_marks, crc: conn.crc, mulpdu: markers::mulpdu(1448, tx_marks) });
        let mut wire = Vec::new();
        for (j, m) in msgs.iter().enumerate() {
            // A `stag` stream's first message names a wrong STag.
            let (dst, src) = if j == 0 && kind == "stag" {
                let (wrong, to) = ad.guess(&mut r, if matches!(m, Msg::Read { .. }) { ad.src.rkey } else { ad.dst.rkey });
                (Remote { rkey: wrong, addr: to }, Remote { rkey: wrong, addr: to })
            } else {
                (ad.dst, ad.src)
            };
            match m {
                Msg::Write { off, data } => frame(&mut t, &mut wire, Message::Write { stag: dst.rkey, to: dst.addr + *off as u64 }, data)?,
                Msg::Send(data) => frame(&mut t, &mut wire, Message::Send { solicited: false, invalidate: None }, data)?,
                Msg::Read { off, len } => {
                    let rr = ReadRequest { sink_stag: SINK, sink_to: *off as u64, size: *len as u32, src_stag: src.rkey, src_to: src.addr + *off as u64 };
                    frame(&mut t, &mut wire, Message::ReadRequest(rr), &[])?;
                }
            }
        }
        let end = wire.len();
        frame(&mut t, &mut wire, Message::Send { solicited: false, invalidate: None }, DONE)?;
        if let Some(how) = KINDS[..5].iter().position(|k| *k == kind) {
            change(&mut wire, end, how, &mut r);
        }
        for _ in 0..TAIL.div_ceil(TAIL_WRITE) {
            frame(&mut t, &mut wire, Message::Write { stag: ad.dst.rkey, to: ad.dst.addr }, &[0; TAIL_WRITE])?;
        }
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
                // A changed MPA request may leave the two sides framing differently. Otherwise
                // every frame of the module's parses, whatever the change: Read Responses to Read
                // Requests we sent, then at most its Terminate, the last thing it sends.
                Err(_) if kind == "mpa" => break,
                Err(e) => return Err(format!("A: stream {i} (seed {}, {kind}): the module's frames: {e:?}", seed + i)),
            }
        }
        if sink.foreign > 0 {
            return Err(format!("A: stream {i} ({kind}): {} octets of Read Responses are not the source region's", sink.foreign));
        }
        // A changed MPA request may leave the two sides framing differently: the module's
        // Terminate is counted only where MPA was left alone.
        if kind != "mpa" {
            seen_terminate += sink.terminated as u64;
        }
        responses += sink.responses;
    }
    println!("ok: A: sent {n} changed streams (seed {seed}); {responses} Read Responses, every octet from the source region");
    println!("ok: A: of the streams changed after MPA, a Terminate reached us on {seen_terminate} of them");
    Ok(())
}

/// What the peer keeps of the module's frames: whether a Terminate came, and Read Responses
/// checked against the source region.
#[derive(Default)]
struct Collect {
    terminated: bool,
    responses: u64,
    /// Response octets that are not the source region's at their offset.
    foreign: usize,
}

impl Sink for Collect {
    fn check(&mut self, _: Opcode, t: Target, len: u32) -> Result<(), Cause> {
        match t {
            Target::Tagged { stag: SINK, to } if to + len as u64 <= SRC as u64 => Ok(()),
            Target::Tagged { .. } => Err(Cause::DdpBaseBounds),
            Target::Untagged { .. } => Ok(()),
        }
    }
    fn place(&mut self, t: Target, b: &[u8]) -> Result<(), Cause> {
        if let Target::Tagged { to, .. } = t {
            self.foreign += b.iter().enumerate().filter(|&(j, &x)| x != source(to as usize + j)).count();
        }
        Ok(())
    }
    fn deliver(&mut self, e: Event) {
        self.terminated |= matches!(e, Event::Terminate(_));
        self.responses += matches!(e, Event::ReadResponse { .. }) as u64;
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

/// The module's side's memory for one stream: every region with guards around it.
struct Memory {
    buf: Vec<u8>,
}

/// Offsets of the regions in [`Memory`] (each follows a guard).
const AT_DST: usize = GUARD;
const AT_SRC: usize = AT_DST + DST + GUARD;
const AT_RCV: usize = AT_SRC + SRC + GUARD;
const AT_OTHER: usize = AT_RCV + RECVS * RECV + GUARD;
const AT_STALE: usize = AT_OTHER + OFF_LIMITS + GUARD;
const MEMORY: usize = AT_STALE + OFF_LIMITS + GUARD;

impl Memory {
    fn new() -> Memory {
        let mut buf = vec![SENTINEL; MEMORY];
        buf[AT_DST..AT_DST + DST].fill(0);
        buf[AT_RCV..AT_RCV + RECVS * RECV].fill(0);
        for (j, b) in buf[AT_SRC..AT_SRC + SRC].iter_mut().enumerate() {
            *b = source(j);
        }
        Memory { buf }
    }

    /// Octets outside the Write and receive regions that are no longer what they were.
    fn changed_elsewhere(&self) -> usize {
        let want = Memory::new();
        let hit = |a: usize, b: usize| (a..b).filter(|&j| self.buf[j] != want.buf[j]).count();
        hit(0, AT_DST) + hit(AT_DST + DST, AT_RCV) + hit(AT_RCV + RECVS * RECV, MEMORY)
    }
}

/// Guest B: the module's side of `n` changed streams from `seed`; checks each against the model
/// and prints the tally.
pub(crate) fn serve(port: &str, n: u64, seed: u64) -> Check {
    let dev = open()?;
    let listener = TcpListener::bind(format!("0.0.0.0:{port}")).map_err(|e| format!("listen {port}: {e}"))?;
    println!("listening on {port}");
    let mut tally: BTreeMap<(&str, String), u32> = BTreeMap::new();
    for i in 0..n {
        let (originals, kind, _) = stream(seed + i);
        let stream = listener.accept().map_err(|e| format!("accept: {e}"))?.0;
        let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
        let other_pd = dev.alloc_pd().map_err(|e| e.to_string())?;
        let cq = dev.create_cq(64).map_err(|e| e.to_string())?;
        let mut mem = Memory::new();
        let (_, rest) = mem.buf.split_at_mut(AT_DST);
        let (dst, rest) = rest.split_at_mut(DST);
        let (_, rest) = rest.split_at_mut(GUARD);
        let (src, rest) = rest.split_at_mut(SRC);
        let (_, rest) = rest.split_at_mut(GUARD);
        let (rcv, rest) = rest.split_at_mut(RECVS * RECV);
        let (_, rest) = rest.split_at_mut(GUARD);
        let (other, rest) = rest.split_at_mut(OFF_LIMITS);
        let (_, rest) = rest.split_at_mut(GUARD);
        let (stale, _) = rest.split_at_mut(OFF_LIMITS);
        let dst = pd.register(dst, Access::LOCAL_WRITE | Access::REMOTE_WRITE).map_err(|e| e.to_string())?;
        let src = pd.register(src, Access::REMOTE_READ).map_err(|e| e.to_string())?;
        let rcv = pd.register(rcv, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
        let other = other_pd.register(other, Access::LOCAL_WRITE | Access::REMOTE_WRITE).map_err(|e| e.to_string())?;
        let stale_mr = pd.register(stale, Access::LOCAL_WRITE | Access::REMOTE_WRITE).map_err(|e| e.to_string())?;
        let stale = stale_mr.remote(0);
        stale_mr.deregister().map_err(|e| e.to_string())?;
        let ad = Advertised { dst: dst.remote(0), src: src.remote(0), rcv: rcv.remote(0), other: other.remote(0), stale };
        let init = QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: RECVS as u32, max_send_wr: 4, max_sge: 1, max_inline: 0 };
        let mut qp = dev.create_qp(&init).map_err(|e| e.to_string())?;
        for k in 0..RECVS {
            qp.post_recv(k as u64, &[rcv.sge(k * RECV..(k + 1) * RECV)]).map_err(|e| e.to_string())?;
        }
        let timeout = if kind == "mpa" { MPA_TIMEOUT_MS } else { 10_000 };
        let mut o = options(Role::Responder, &format!("timeout={timeout}"))?;
        o.private_data = ad.to_bytes();
        // Whether both ends frame the stream alike: a changed MPA request may have settled other
        // parameters here than the peer settled (it frames as it asked).
        let mut agreed = true;
        let (what, done) = match qp.adopt(stream, &o) {
            Err(e) if kind == "mpa" => (format!("refused {}", errno_name(&e)), false),
            Err(e) => return Err(format!("stream {i}: adopt: {e}")),
            Ok(n) => {
                agreed = n.mpa_rev == 2 && n.crc && n.rx_markers && n.tx_markers;
                // Completions until the DONE, the end of the QP, or nothing for IDLE.
                let sends: Vec<&[u8]> = originals.iter().filter_map(|m| if let Msg::Send(d) = m { Some(&d[..]) } else { None }).collect();
                let (mut received, mut done, mut failed) = (0, false, None);
                while let Some(wc) = cq.wait_one(IDLE).map_err(|e| e.to_string())? {
                    if wc.status != WcStatus::Success {
                        // The QP ended: this receive and the rest come back flushed (below).
                        failed = Some(wc);
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
                // Every receive is accounted for: those that completed did so first, in order,
                // each holding its Send (above); once the QP ended, every other one came back
                // flushed, in the order posted (the module flushes them before it reports the QP
                // ended, so the CQ holds them all by now). A QP still connected holds them yet,
                // and none came back in error.
                let ended = matches!(state, QpState::Error { .. });
                let due = if ended { received + done as usize..RECVS } else { RECVS..RECVS };
                // One more than can be due, so that an extra completion shows.
                let mut rest = [libiwarp::WorkCompletion::EMPTY; RECVS + 1];
                let polled = if ended { cq.poll(&mut rest) } else { 0 };
                let back: Vec<_> = failed.iter().chain(&rest[..polled]).map(|w| (w.wr_id, w.status, w.opcode)).collect();
                must(back.iter().map(|w| w.0 as usize).eq(due.clone()) && back.iter().all(|w| (w.1, w.2) == (WcStatus::Flushed, WcOpcode::Recv)), || {
                    format!("B: stream {i} ({kind}, {what}): receives {due:?} were to come back flushed, in order, and no other; back came {back:?}")
                })?;
                (what, done)
            }
        };
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
        drop((dst, src, rcv, other));
        let elsewhere = mem.changed_elsewhere();
        must(elsewhere == 0, || {
            format!(
                "B: stream {i} ({kind}, {what}): {elsewhere} octets changed outside the Write and receive regions (guards, source, other domain, deregistered)"
            )
        })?;
        must(stray == 0 || !agreed, || format!("B: stream {i} ({kind}, {what}): {stray} octets of the Write region hold what no original Write put there"))?;
        let answered = what.starts_with("terminate ") && what != "terminate from the peer";
        must(kind == "mpa" || answered || done, || format!("B: stream {i} ({kind}): went unanswered ({what}): neither our Terminate nor the DONE"))?;
        must(!(matches!(kind, "flip" | "stag") && done), || format!("B: stream {i} ({kind}): the change was accepted (the DONE after it completed)"))?;
        *tally.entry((kind, what)).or_default() += 1;
    }
    let ours: u32 =
        tally.iter().filter(|((kind, what), _)| *kind != "mpa" && what.starts_with("terminate ") && what != "terminate from the peer").map(|(_, c)| c).sum();
    println!("ok: B: {n} changed streams (seed {seed}): guards and off-limits regions intact, no octet placed or delivered that the peer did not send, no flipped bit or wrong STag accepted, none unanswered, every receive completed or flushed");
    println!("ok: B: of the streams changed after MPA, our Terminate ended {ours} of them");
    for ((kind, what), count) in &tally {
        println!("# {kind:>6}: {count:>4} {what}");
    }
    Ok(())
}

/// The errno's name, for the tally.
fn errno_name(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EPROTO) => "EPROTO".into(),
        Some(libc::ETIMEDOUT) => "ETIMEDOUT".into(),
        Some(libc::ECONNRESET) => "ECONNRESET".into(),
        Some(libc::ECONNREFUSED) => "ECONNREFUSED".into(),
        Some(libc::EINVAL) => "EINVAL".into(),
        _ => e.to_string(),
    }
}
