//! RFC 7306 between the guests: Fetch-and-Adds from two QPs on one counter, a Compare-and-Swap
//! lock around a shared record, Write with Immediate and Immediate Data; and a QP whose peer did
//! not agree to the extensions, which must refuse them locally (they never reach the wire).
//!
//! Guest B (`ext-serve PORT`) owns the counter, the lock and the record, and accepts three
//! connections: two offering the extensions, one not. Guest A (`ext-drive HOST PORT`) works on
//! the first two from two threads at once (each with its own device and CQ), then tells B it is
//! done over the third.

use super::{dial, ensure, listen, open, Check};
use crate::verbs::done;
use libiwarp::{Access, CompletionQueue, ConnectOptions, Device, MemoryRegion, ProtectionDomain, QpInit, QueuePair, Remote, Role, SendOp, SendWr, WcOpcode};
use std::sync::mpsc;

/// Fetch-and-Adds of 1 each QP makes.
const ADDS: u64 = 500;
/// Lock-protected increments each QP makes.
const LOCKED: u64 = 50;
/// Atomics each QP keeps in flight.
const IN_FLIGHT: usize = 8;
/// B's region: the counter, the lock word, the record (two words that must stay equal), and
/// where Writes with Immediate land.
const COUNTER: usize = 0;
const LOCK: usize = 8;
const RECORD: usize = 16;
const IMM_TARGET: usize = 4096;
const REGION: usize = 8192;
/// The Immediate Data A sends.
const IMM_WRITE: u64 = 0x0123_4567_89ab_cdef;
const IMM_ALONE: u64 = 0xfedc_ba98_7654_3210;

/// A region of `len` zeroed octets (leaked: it lives as long as the process); 8-aligned.
fn region<'d>(pd: &'d ProtectionDomain<'d>, access: Access, len: usize) -> Result<MemoryRegion<'d>, String> {
    let words: &'static mut [u64] = Vec::leak(vec![0u64; len / 8]);
    // SAFETY: the words are ours for the rest of the process; viewing them as octets is sound.
    let buf = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) };
    pd.register(buf, access).map_err(|e| format!("register {len} octets: {e}"))
}

fn qp<'d>(pd: &'d ProtectionDomain<'d>, cq: &'d CompletionQueue<'d>) -> Result<QueuePair<'d>, String> {
    let init = QpInit { pd, send_cq: cq, recv_cq: cq, max_recv_wr: 8, max_send_wr: 16, max_sge: 1, max_inline: 16 };
    pd.device().create_qp(&init).map_err(|e| format!("create QP: {e}"))
}

fn word(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

/// Guest B.
pub(crate) fn serve(port: &str) -> Check {
    let dev = open()?;
    let cq = dev.create_cq(64).map_err(|e| e.to_string())?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let mut shared = region(&pd, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC, REGION)?;
    let rcv = region(&pd, Access::LOCAL_WRITE, 64)?;
    let mut qps = Vec::new();
    for (i, offer) in [true, true, false].into_iter().enumerate() {
        let mut q = qp(&pd, &cq)?;
        // Two receives for the Immediate Data on the first QP, one for "done" on the third.
        for n in 0..[2, 0, 1][i] {
            q.post_recv(n, &[rcv.sge(0..64)]).map_err(|e| format!("post receive: {e}"))?;
        }
        let mut o = ConnectOptions::new(Role::Responder);
        o.extensions = offer;
        o.private_data = shared.remote(0).to_bytes().to_vec();
        let n = q.adopt(listen(port)?, &o).map_err(|e| format!("B: adopt {i}: {e}"))?;
        println!("ok: B: QP {i} connected, extensions {}", n.extensions);
        qps.push(q);
    }
    // A Write with Immediate: the receive completes with the Immediate Data once the Write is
    // placed, and nothing lands in the receive buffer.
    let wc = done(&cq, WcOpcode::Recv)?;
    ensure(wc.imm == Some(IMM_WRITE) && wc.byte_len == 0 && !wc.solicited, format!("B: Write with Immediate completes a receive: {wc:?}"))?;
    let written = &shared.as_slice()[IMM_TARGET..IMM_TARGET + 64];
    ensure(written.iter().enumerate().all(|(i, &b)| b == i as u8), "B: the Write before the Immediate Data is placed")?;
    let wc = done(&cq, WcOpcode::Recv)?;
    ensure(wc.imm == Some(IMM_ALONE) && wc.solicited, format!("B: Immediate Data with Solicited Event: {wc:?}"))?;
    ensure(rcv.as_slice().iter().all(|&b| b == 0), "B: Immediate Data places nothing in the receive buffer")?;
    // A says it is done: every atomic and Write of both QPs took effect before it.
    let wc = done(&cq, WcOpcode::Recv)?;
    ensure(wc.byte_len == 8, "B: A is done")?;
    let b = shared.as_mut_slice();
    let (counter, lock, rec) = (word(b, COUNTER), word(b, LOCK), (word(b, RECORD), word(b, RECORD + 8)));
    ensure(counter == 2 * ADDS, format!("B: counter after {} Fetch-and-Adds from two QPs: {counter}", 2 * ADDS))?;
    ensure(lock == 0 && rec == (2 * LOCKED, 2 * LOCKED), format!("B: record behind the Compare-and-Swap lock {rec:?} (lock {lock})"))?;
    println!("ok: B: counter {counter}, record {rec:?}, lock free");
    Ok(())
}

/// One of A's QPs with its sinks: 8 octets per atomic in flight, then the record.
struct Side<'d> {
    qp: QueuePair<'d>,
    cq: &'d CompletionQueue<'d>,
    mem: MemoryRegion<'d>,
    peer: Remote,
}

impl Side<'_> {
    fn at(&self, off: usize) -> Remote {
        Remote { addr: self.peer.addr + off as u64, rkey: self.peer.rkey }
    }

    fn post(&self, wr_id: u64, op: SendOp, range: std::ops::Range<usize>) -> Check {
        let sge = [self.mem.sge(range)];
        self.qp
            .post_send(&SendWr { wr_id, op, sge: if matches!(op, SendOp::Immediate { .. }) { &[] } else { &sge }, signaled: true })
            .map_err(|e| format!("post {op:?}: {e}"))
    }

    /// One atomic, waited for: the value before.
    fn atomic(&self, op: SendOp, what: WcOpcode) -> Result<u64, String> {
        self.post(0, op, 0..8)?;
        done(self.cq, what)?;
        Ok(word(self.mem.as_slice(), 0))
    }

    /// `ADDS` Fetch-and-Adds of 1, `IN_FLIGHT` at a time; returns the values fetched.
    fn adds(&self) -> Result<Vec<u64>, String> {
        let mut fetched = Vec::new();
        let mut posted = 0;
        while (fetched.len() as u64) < ADDS {
            while posted < ADDS && posted - (fetched.len() as u64) < IN_FLIGHT as u64 {
                let slot = (posted as usize % IN_FLIGHT) * 8;
                self.post(slot as u64, SendOp::FetchAdd { remote: self.at(COUNTER), add: 1 }, slot..slot + 8)?;
                posted += 1;
            }
            let wc = done(self.cq, WcOpcode::FetchAdd)?;
            if wc.byte_len != 8 {
                return Err(format!("Fetch-and-Add completion {wc:?}"));
            }
            fetched.push(word(self.mem.as_slice(), wc.wr_id as usize));
        }
        Ok(fetched)
    }

    /// `LOCKED` increments of both record words, each under the lock (owner `me`): Read the
    /// record, Write it back plus one, release. Lost updates would leave fewer.
    fn locked(&self, me: u64) -> Check {
        for _ in 0..LOCKED {
            while self.atomic(SendOp::CompareSwap { remote: self.at(LOCK), compare: 0, swap: me }, WcOpcode::CompareSwap)? != 0 {}
            self.post(1, SendOp::Read(self.at(RECORD)), 64..80)?;
            done(self.cq, WcOpcode::RdmaRead)?;
            let m = self.mem.as_slice();
            let (a, b) = (word(m, 64), word(m, 72));
            if a != b {
                return Err(format!("record words differ under the lock: {a} {b}"));
            }
            // The Write goes from words of our own region (the SGE reads them at posting).
            let mut next = [0u8; 16];
            next[..8].copy_from_slice(&(a + 1).to_ne_bytes());
            next[8..].copy_from_slice(&(b + 1).to_ne_bytes());
            self.qp.post_send_inline(2, SendOp::Write(self.at(RECORD)), &next, true).map_err(|e| format!("post Write: {e}"))?;
            done(self.cq, WcOpcode::RdmaWrite)?;
            // Executed after the Write is placed (same stream, RFC 7306 section 5.4).
            let owner = self.atomic(SendOp::CompareSwap { remote: self.at(LOCK), compare: me, swap: 0 }, WcOpcode::CompareSwap)?;
            if owner != me {
                return Err(format!("lock held by {owner} when {me} released it"));
            }
        }
        Ok(())
    }
}

/// Connects QP `i` of A (on its own device) with the extensions offered.
fn connect<'d>(pd: &'d ProtectionDomain<'d>, cq: &'d CompletionQueue<'d>, host: &str, port: &str, i: usize) -> Result<Side<'d>, String> {
    let mut q = qp(pd, cq)?;
    let mut o = ConnectOptions::new(Role::Initiator);
    o.extensions = true;
    let n = q.adopt(dial(host, port)?, &o).map_err(|e| format!("A: adopt {i}: {e}"))?.clone();
    ensure(n.extensions == (i < 2), format!("A: QP {i}: extensions agreed {} (B accepts them on QPs 0 and 1 only)", n.extensions))?;
    let peer = Remote::from_bytes(&n.peer_private).ok_or("A: B's region in its private data")?;
    Ok(Side { qp: q, cq, mem: region(pd, Access::LOCAL_WRITE, 4096)?, peer })
}

/// One of A's two working QPs: connects (then says so on `connected`), sends Immediate Data
/// (the first), then its Fetch-and-Adds and locked increments; returns the values fetched.
fn worker(host: &str, port: &str, i: usize, connected: mpsc::Sender<()>) -> Result<Vec<u64>, String> {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(64).map_err(|e| e.to_string())?;
    let s = connect(&pd, &cq, host, port, i)?;
    let _ = connected.send(());
    if i == 0 {
        // Local checks: an atomic's target must be 8-aligned, its sink 8 octets.
        ensure(s.post(0, SendOp::FetchAdd { remote: s.at(COUNTER + 4), add: 1 }, 0..8).is_err(), "A: a misaligned Fetch-and-Add is refused")?;
        ensure(s.post(0, SendOp::FetchAdd { remote: s.at(COUNTER), add: 1 }, 0..4).is_err(), "A: a 4-octet atomic sink is refused")?;
        // Immediate Data, after a Write and alone.
        let mut src = region(&pd, Access::NONE, 64)?;
        src.as_mut_slice().iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        let op = SendOp::WriteImm { remote: s.at(IMM_TARGET), imm: IMM_WRITE, solicited: false };
        s.qp.post_send(&SendWr { wr_id: 3, op, sge: &[src.sge(0..64)], signaled: true }).map_err(|e| format!("post Write with Immediate: {e}"))?;
        done(s.cq, WcOpcode::RdmaWrite)?;
        s.post(4, SendOp::Immediate { imm: IMM_ALONE, solicited: true }, 0..0)?;
        done(s.cq, WcOpcode::Send)?;
    }
    let fetched = s.adds()?;
    s.locked(i as u64 + 1)?;
    Ok(fetched)
}

/// Guest A.
pub(crate) fn drive(host: &str, port: &str) -> Check {
    std::thread::scope(|sc| {
        // Connected one after the other: B accepts them in order.
        let (tx, rx) = mpsc::channel();
        let mut workers = Vec::new();
        for i in 0..2 {
            let tx = tx.clone();
            workers.push(sc.spawn(move || worker(host, port, i, tx)));
            if rx.recv().is_err() {
                break;
            }
        }
        (|| {
            let dev: Device = open()?;
            let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
            let cq = dev.create_cq(16).map_err(|e| e.to_string())?;
            let no = connect(&pd, &cq, host, port, 2)?;
            // Without the peer's agreement, nothing of RFC 7306 may be posted.
            let refused = std::io::Error::from_raw_os_error(libc::EOPNOTSUPP).to_string();
            for op in [SendOp::FetchAdd { remote: no.at(COUNTER), add: 1 }, SendOp::Immediate { imm: 1, solicited: false }] {
                let r = no.post(0, op, 0..8);
                ensure(r.as_ref().is_err_and(|e| e.contains(&refused)), format!("A: {op:?} without the extensions: {r:?}"))?;
            }
            println!("ok: A: a QP whose peer declined the extensions refuses them with EOPNOTSUPP");
            let mut fetched = Vec::new();
            for w in workers {
                fetched.extend(w.join().unwrap_or_else(|_| Err("thread panicked".into()))?);
            }
            fetched.sort_unstable();
            ensure(fetched == (0..2 * ADDS).collect::<Vec<_>>(), format!("A: the {} values fetched are each of 0..{} once", 2 * ADDS, 2 * ADDS))?;
            println!("ok: A: {} Fetch-and-Adds from two QPs fetched every value once; {} increments under a Compare-and-Swap lock", 2 * ADDS, 2 * LOCKED);
            // Done, over the third QP: everything the workers did took effect at B before.
            no.post(5, SendOp::Send { solicited: false }, 0..8)?;
            done(no.cq, WcOpcode::Send).map(drop)
        })()
    })
}
