//! Interop with another iWARP stack: the kernel's siw in the other guest, driven by
//! `tools/siw-peer/siw-peer.c` over libibverbs and librdmacm. Both follow the script at the top
//! of that file; this is side A (iwarp.ko), and each step is checked where it lands.
//!
//!   interop-serve PORT SIZE OPTS END         accept siw's rdma_connect, adopt as MPA responder
//!   interop-connect HOST PORT SIZE OPTS END  connect to siw's rdma_listen, adopt as initiator
//!   interop-refused HOST PORT                siw's listener rejects us, with private data
//!   interop-refuse PORT                      we reject siw's rdma_connect, with private data
//!
//! OPTS are the MPA options (`rev`, `crc`, `markers`); the IRD and ORD are 4, as siw-peer's.
//! END is how the connection ends (siw-peer.c's list).

use super::{dial, ensure, expect_errno, listen, open, options, Check};
use crate::verbs::{expect_event, flushed, wait_ended};
use iwarp_proto::terminate::Cause;
use libiwarp::{
    Access, AsyncEvents, CompletionQueue, MemoryRegion, QpEvent, QpInit, QpState, QueuePair, Remote, Role, SendOp, SendWr, Sge, WcOpcode, WcStatus,
    WorkCompletion,
};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

/// How long any one completion may take (TCG guests are slow).
const WAIT: Duration = Duration::from_secs(60);
/// Octets of the notice area (the notice sent, then a slot per later receive); receives posted
/// up front (more than the script needs).
const CTL_LEN: usize = 256;
/// Octets of each later receive's slot.
const SLOT: usize = 16;
const RECVS: u64 = 8;
/// Receives the script leaves posted on our side.
const LEFT_A: usize = 2;
/// Private data of the reject cells (siw-peer.c's).
const ASK_B: &[u8] = b"A asks B to connect";
const B_REFUSES: &[u8] = b"B refuses A";
const ASK_A: &[u8] = b"B asks A to connect";
const A_REFUSES: &[u8] = b"A refuses B";

/// The octet at `i` of step `step`'s payload (the same function as siw-peer.c).
fn pattern(step: u32, i: usize) -> u8 {
    let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(step.wrapping_mul(40_503)).wrapping_add(1);
    (x >> 24) as u8
}

fn fill(at: &mut [u8], step: u32) {
    for (i, b) in at.iter_mut().enumerate() {
        *b = pattern(step, i);
    }
}

fn verify(at: &[u8], step: u32, what: &str) -> Check {
    match at.iter().enumerate().find(|&(i, &b)| b != pattern(step, i)) {
        Some((i, &b)) => Err(format!("{what}: octet {i} of {} is {b:#x}, not {:#x}", at.len(), pattern(step, i))),
        None => Ok(()),
    }
}

/// The next completion of `cq`, which must be a success of `op`.
fn next(cq: &CompletionQueue<'_>, op: WcOpcode, what: &str) -> Result<WorkCompletion, String> {
    let wc = cq.wait_one(WAIT).map_err(|e| e.to_string())?.ok_or(format!("{what}: no completion within {WAIT:?}"))?;
    if wc.status != WcStatus::Success || wc.opcode != op {
        return Err(format!("{what}: {wc:?}"));
    }
    Ok(wc)
}

/// Side A's areas in its region (as siw-peer.c lays out its own).
struct Areas {
    n: usize,
}

impl Areas {
    fn exposed(&self) -> std::ops::Range<usize> {
        0..self.n
    }
    fn recv(&self) -> std::ops::Range<usize> {
        self.n..2 * self.n
    }
    fn src(&self) -> std::ops::Range<usize> {
        2 * self.n..3 * self.n
    }
    fn sink(&self) -> std::ops::Range<usize> {
        3 * self.n..4 * self.n
    }
    fn ctl(&self) -> std::ops::Range<usize> {
        4 * self.n..4 * self.n + 4
    }
    /// The region's length (the same on both sides).
    fn len(&self) -> usize {
        4 * self.n + CTL_LEN
    }
    /// Where receive `k` lands: the second (the peer's Send of `n` octets) in `recv`, the
    /// others in slots after the notice, so notices arriving back to back do not overwrite each
    /// other.
    fn slot(&self, k: u64) -> std::ops::Range<usize> {
        if k == 1 {
            return self.recv();
        }
        let at = 4 * self.n + SLOT * (k as usize + 1);
        at..at + SLOT
    }
}

/// How the connection ends, after the script's steps.
#[derive(Clone, Copy, PartialEq)]
enum End {
    ADisconnects,
    BDisconnects,
    ATerminates,
    BTerminates,
}

impl End {
    fn parse(s: &str) -> Result<End, String> {
        Ok(match s {
            "a-disconnects" => End::ADisconnects,
            "b-disconnects" => End::BDisconnects,
            "a-terminates" => End::ATerminates,
            "b-terminates" => End::BTerminates,
            _ => return Err(format!("unknown end {s}")),
        })
    }
}

/// `interop-serve PORT SIZE OPTS END`.
pub(crate) fn serve(port: &str, size: usize, opts: &str, end: &str) -> Check {
    run(Role::Responder, size, opts, End::parse(end)?, || listen(port))
}

/// `interop-connect HOST PORT SIZE OPTS END`.
pub(crate) fn connect(host: &str, port: &str, size: usize, opts: &str, end: &str) -> Check {
    run(Role::Initiator, size, opts, End::parse(end)?, || dial(host, port))
}

/// `interop-refused HOST PORT`: siw's listener rejects our request; our adoption fails with
/// ECONNREFUSED and we get the reject's private data.
pub(crate) fn refused(host: &str, port: &str) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(4).map_err(|e| e.to_string())?;
    let mut qp =
        dev.create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 1, max_send_wr: 1, max_sge: 1, max_inline: 0 }).map_err(|e| e.to_string())?;
    let mut o = options(Role::Initiator, "markers=0,crc=1,rev=2")?;
    o.private_data = ASK_B.to_vec();
    expect_errno("A: adopt", qp.adopt(dial(host, port)?, &o).map(drop), libc::ECONNREFUSED)?;
    let theirs = qp.reject_private_data();
    ensure(theirs == Some(B_REFUSES), format!("A: rejected with siw's private data ({:?})", theirs.map(String::from_utf8_lossy)))
}

/// `interop-refuse PORT`: the module listens; siw's request arrives with its private data and
/// is rejected with ours.
pub(crate) fn refuse(port: &str) -> Check {
    let port: u16 = port.parse().map_err(|_| format!("bad port {port}"))?;
    let dev = open()?;
    let listener = dev.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port), 1).map_err(|e| format!("LISTEN: {e}"))?;
    println!("listening on {port}");
    let req = listener.get_request(WAIT).map_err(|e| format!("GET_REQUEST: {e}"))?;
    ensure(
        req.private_data == ASK_A,
        format!("A: siw's request (revision {}) carries its private data ({:?})", req.mpa_rev, String::from_utf8_lossy(&req.private_data)),
    )?;
    req.reject(A_REFUSES).map_err(|e| format!("REJECT: {e}"))?;
    println!("ok: A: rejected siw's request with our private data");
    Ok(())
}

fn run(role: Role, n: usize, opts: &str, end: End, stream: impl FnOnce() -> Result<std::net::TcpStream, String>) -> Check {
    if n < 4 {
        return Err("SIZE must be at least 4".into());
    }
    let dev = open()?;
    let events = dev.async_events().map_err(|e| e.to_string())?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let scq = dev.create_cq(16).map_err(|e| e.to_string())?;
    let rcq = dev.create_cq(16).map_err(|e| e.to_string())?;
    let mut qp = dev
        .create_qp(&QpInit { pd: &pd, send_cq: &scq, recv_cq: &rcq, max_recv_wr: 16, max_send_wr: 16, max_sge: 2, max_inline: 0 })
        .map_err(|e| e.to_string())?;
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mut buf = vec![0u8; 4 * n + CTL_LEN];
    let mut mr = pd.register(&mut buf, access).map_err(|e| e.to_string())?;
    let mut inv = vec![0u8; CTL_LEN];
    let inv = pd.register(&mut inv, access).map_err(|e| e.to_string())?;
    let mut spare = vec![0u8; n];
    let mut spare = pd.register(&mut spare, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
    let a = Areas { n };
    for k in 0..RECVS {
        qp.post_recv(k, &[mr.sge(a.slot(k))]).map_err(|e| e.to_string())?;
    }
    let mut o = options(role, opts)?;
    (o.ird, o.ord) = (4, 4);
    o.private_data = [mr.remote(0).to_bytes(), inv.remote(0).to_bytes()].concat();
    let got = qp.adopt(stream()?, &o).map_err(|e| format!("A: adopt: {e}"))?;
    println!("ok: A: connected: MPA revision {}, CRC {}, IRD/ORD {}/{}", got.mpa_rev, got.crc as u8, got.ird, got.ord);
    let far = Remote::from_bytes(&got.peer_private).ok_or("A: the peer advertised no region")?;
    let far_inv = Remote::from_bytes(got.peer_private.get(Remote::LEN..).unwrap_or(&[])).ok_or("A: the peer advertised no INV region")?;
    let s = Script { qp: &qp, scq: &scq, rcq: &rcq, a };
    // Step 0: the MPA responder sends nothing before the initiator's first FPDU (RFC 5044
    // 7.1.2; a siw initiator refuses a reply with data right behind it).
    if role == Role::Initiator {
        // siw (7.2, siw_accept in siw_cm.c) sends its MPA reply before it hooks its QP to the
        // socket: an FPDU that arrives in between stays unread until more data comes, and
        // both sides wait for good. Any siw peer's user meets that race; this test waits it
        // out so that it measures interoperation, not siw's race.
        std::thread::sleep(std::time::Duration::from_millis(200));
        s.notice(&mut mr, 0)?;
        s.await_notice(&mr, 0)?;
    } else {
        s.await_notice(&mr, 0)?;
        s.notice(&mut mr, 0)?;
    }
    println!("ok: A: 0: the initiator's notice first, then the responder's");
    s.steps(&mut mr, &mut spare, far, far_inv, inv.remote(0).rkey)?;
    s.finish(&mr, far, end, &events)
}

/// What the steps need.
struct Script<'q, 'd> {
    qp: &'q QueuePair<'d>,
    scq: &'q CompletionQueue<'d>,
    rcq: &'q CompletionQueue<'d>,
    a: Areas,
}

impl Script<'_, '_> {
    /// Posts one signaled request of `range`'s octets (two SGEs if `two`) and waits for it.
    fn post(&self, mr: &MemoryRegion<'_>, op: SendOp, range: std::ops::Range<usize>, two: bool, done: WcOpcode, what: &str) -> Check {
        let mid = range.start + range.len() / 2;
        let sges = if two { vec![mr.sge(range.start..mid), mr.sge(mid..range.end)] } else { vec![mr.sge(range)] };
        self.qp.post_send(&SendWr { wr_id: 0, op, sge: &sges, signaled: true }).map_err(|e| format!("{what}: post: {e}"))?;
        next(self.scq, done, what).map(|_| ())
    }

    /// Sends the notice of `step`.
    fn notice(&self, mr: &mut MemoryRegion<'_>, step: u32) -> Check {
        mr.as_mut_slice()[self.a.ctl()].copy_from_slice(&step.to_le_bytes());
        self.post(mr, SendOp::Send { solicited: false }, self.a.ctl(), false, WcOpcode::Send, "notice")
    }

    /// The next receive, which must be the notice of `step`.
    fn await_notice(&self, mr: &MemoryRegion<'_>, step: u32) -> Result<WorkCompletion, String> {
        let wc = next(self.rcq, WcOpcode::Recv, "receive of a notice")?;
        let r = self.a.slot(wc.wr_id);
        let got = u32::from_le_bytes(mr.as_slice()[r.start..r.start + 4].try_into().unwrap_or_default());
        if wc.byte_len != 4 || got != step {
            return Err(format!("expected the notice of step {step}, got {} octets saying {got}", wc.byte_len));
        }
        Ok(wc)
    }

    fn steps(&self, mr: &mut MemoryRegion<'_>, spare: &mut MemoryRegion<'_>, far: Remote, far_inv: Remote, my_inv: u32) -> Check {
        let (a, n) = (&self.a, self.a.n);
        fill(&mut mr.as_mut_slice()[a.src()], 1);
        self.post(mr, SendOp::Send { solicited: false }, a.src(), true, WcOpcode::Send, "step 1 Send")?;
        println!("ok: A: 1: sent {n} octets from two SGEs");

        let wc = next(self.rcq, WcOpcode::Recv, "step 2 receive")?;
        verify(&mr.as_slice()[a.recv()], 2, "step 2 (the peer's Send)")?;
        ensure(wc.byte_len as usize == n && wc.solicited, format!("A: 2: a Send with Solicited Event of {n} octets arrived intact"))?;

        fill(&mut mr.as_mut_slice()[a.src()], 3);
        self.post(mr, SendOp::Write(far), a.src(), true, WcOpcode::RdmaWrite, "step 3 Write")?;
        self.notice(mr, 3)?;
        println!("ok: A: 3: wrote {n} octets into the peer's region");

        self.await_notice(mr, 4)?;
        verify(&mr.as_slice()[a.exposed()], 4, "step 4 (the peer's Write)")?;
        println!("ok: A: 4: the peer's Write of {n} octets landed intact");

        self.await_notice(mr, 5)?;
        self.post(mr, SendOp::Read(far), a.sink(), false, WcOpcode::RdmaRead, "step 5 Read")?;
        verify(&mr.as_slice()[a.sink()], 5, "step 5 (our Read of the peer's region)")?;
        println!("ok: A: 5: read {n} octets from the peer's region, intact");
        self.read_invalidate_and_fast_register(spare, far)?;
        fill(&mut mr.as_mut_slice()[a.exposed()], 6);
        self.notice(mr, 6)?;
        self.await_notice(mr, 6)?;
        println!("ok: A: 6: the peer is done Reading our region (it checks what it got)");

        mr.as_mut_slice()[a.ctl()].copy_from_slice(&7u32.to_le_bytes());
        self.post(mr, SendOp::SendInvalidate { solicited: false, stag: far_inv.rkey }, a.ctl(), false, WcOpcode::Send, "step 7")?;
        println!("ok: A: 7: sent a Send with Invalidate of the peer's STag {:#x}", far_inv.rkey);

        let wc = self.await_notice(mr, 8)?;
        ensure(wc.invalidated == Some(my_inv), format!("A: 8: a Send with Invalidate invalidated our STag {my_inv:#x} ({:?})", wc.invalidated))
    }

    /// Step 5 again, as a Read with Invalidate into `spare` (siw serves a plain Read; the
    /// invalidation is ours), then a Fast Register of `spare` under a new key and a Read into it
    /// through that.
    fn read_invalidate_and_fast_register(&self, spare: &mut MemoryRegion<'_>, far: Remote) -> Check {
        let n = self.a.n;
        let old = spare.stag();
        self.post(spare, SendOp::ReadInvalidate { remote: far, stag: old }, 0..n, false, WcOpcode::RdmaRead, "step 5 Read with Invalidate")?;
        verify(spare.as_slice(), 5, "step 5 (our Read with Invalidate of the peer's region)")?;
        let again = SendWr { wr_id: 0, op: SendOp::Read(far), sge: &[spare.sge(0..n)], signaled: true };
        expect_errno("A: 5: a Read into the sink the Read with Invalidate invalidated", self.qp.post_send(&again), libc::EINVAL)?;
        let key = (old as u8).wrapping_add(1).max(1);
        let new = self.qp.post_fast_register(0, spare, key, 0..n, Access::LOCAL_WRITE, true).map_err(|e| format!("A: 5: Fast Register: {e}"))?;
        next(self.scq, WcOpcode::FastRegister, "step 5 Fast Register")?;
        let stale = SendWr { wr_id: 0, op: SendOp::Read(far), sge: &[Sge { lkey: old, ..spare.sge(0..n) }], signaled: true };
        expect_errno("A: 5: a Read into the sink's old STag", self.qp.post_send(&stale), libc::EINVAL)?;
        spare.as_mut_slice().fill(0);
        self.post(spare, SendOp::Read(far), 0..n, false, WcOpcode::RdmaRead, "step 5 Read after the Fast Register")?;
        verify(spare.as_slice(), 5, "step 5 (our Read through the new STag)")?;
        println!("ok: A: 5: a Read with Invalidate of our sink (STag {old:#x}), intact; the sink refused; registered again as {new:#x}, read again, intact");
        Ok(())
    }

    /// The end of the script (siw-peer.c's list): our QP ends as `end` says, with the receives
    /// still posted flushed.
    fn finish(&self, mr: &MemoryRegion<'_>, far: Remote, end: End, events: &AsyncEvents<'_>) -> Check {
        let bounds = Cause::DdpBaseBounds.code();
        let (state, event) = match end {
            End::ADisconnects => {
                self.qp.disconnect().map_err(|e| format!("A: disconnect: {e}"))?;
                println!("ok: A: disconnected");
                (QpState::Error { terminate: None, sent: false }, None)
            }
            End::BDisconnects => (QpState::Error { terminate: None, sent: false }, Some(QpEvent::ConnectionLost)),
            End::ATerminates => {
                // Past the end of siw's region: siw must refuse it with a Terminate.
                let past = Remote { addr: far.addr + self.a.len() as u64 - 32, rkey: far.rkey };
                let wr = SendWr { wr_id: 9, op: SendOp::Write(past), sge: &[mr.sge(self.a.src().start..self.a.src().start + 64)], signaled: true };
                self.qp.post_send(&wr).map_err(|e| format!("A: post the Write past siw's region: {e}"))?;
                println!("ok: A: wrote 64 octets past the end of siw's region");
                (QpState::Error { terminate: Some(bounds), sent: false }, Some(QpEvent::Terminated { terminate: bounds, sent: false }))
            }
            End::BTerminates => (QpState::Error { terminate: Some(bounds), sent: true }, Some(QpEvent::Terminated { terminate: bounds, sent: true })),
        };
        let got = wait_ended(self.qp)?;
        ensure(got == state, format!("A: our QP ended as expected ({got:?})"))?;
        match event {
            Some(what) => expect_event(events, self.qp.handle(), what, "A")?,
            None => {
                let ev = events.next().map_err(|e| e.to_string())?;
                ensure(ev.is_none(), format!("A: no asynchronous event for a QP we disconnected ({ev:?})"))?;
            }
        }
        if end == End::ATerminates {
            // Our Write completed once queued, or was flushed when siw's Terminate came first.
            let mut wc = [WorkCompletion::EMPTY; 2];
            let k = self.scq.poll(&mut wc);
            ensure(
                k <= 1 && wc[..k].iter().all(|c| c.wr_id == 9 && matches!(c.status, WcStatus::Success | WcStatus::Flushed)),
                format!("A: our refused Write completed or was flushed ({:?})", &wc[..k]),
            )?;
        }
        if end == End::BTerminates {
            let tail = &mr.as_slice()[self.a.len() - 32..];
            ensure(tail.iter().all(|&b| b == 0), "A: nothing placed from siw's Write past our region")?;
        }
        flushed(self.rcq, LEFT_A, "A")
    }
}
