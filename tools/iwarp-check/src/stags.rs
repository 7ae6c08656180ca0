//! STags that come and go while a connection runs: Read with Invalidate, Local Invalidate and
//! Fast Register as work requests, between the guests.
//!
//! Guest B (`stag-serve PORT OPTS`) owns a region A may read and write. Guest A (`stag-drive
//! HOST PORT OPTS`):
//! 1. Reads all of B's region with Invalidate of its own sink: the data is intact, and the sink's
//!    STag reaches nothing any more (posting with it fails; invalidating it again succeeds, as
//!    verbs allow, and changes nothing).
//!    A Fast Register gives the sink a new key; a Read into it under the new STag is intact
//!    again, and the old STag stays refused.
//! 2. B invalidates its region with a Local Invalidate posted behind a Send of 8 KiB: the two
//!    complete in order. B then Fast Registers one page of it under a new key, writable but no
//!    longer readable by the peer, and tells A both STags.
//! 3. A Writes that page through the new STag; B finds exactly it changed.
//! 4. A Writes through the old STag: B's module refuses it with a Terminate (invalid STag),
//!    places nothing, and both QPs end with that cause.

use super::{dial, ensure, expect_errno, listen, open, options, Check};
use crate::verbs::{done, expect_event, flushed, random, region, wait_ended};
use iwarp_proto::terminate::Cause;
use libiwarp::abi::{access, opcode, PostSend};
use libiwarp::{Access, CompletionQueue, MemoryRegion, ProtectionDomain, QpEvent, QpInit, QpState, QueuePair, Remote, Role, SendOp, SendWr, Sge, WcOpcode};

/// B's region, which A reads whole.
const REGION: usize = 16 << 10;
/// The page of it B registers again.
const PAGE: std::ops::Range<usize> = 4096..8192;
/// The Send B posts ahead of its Local Invalidate (a page or more: sent zero copy where the
/// options allow, completing on acknowledgement).
const AHEAD: usize = 8 << 10;

/// A connected QP with separate send and receive CQs, receives of `AHEAD` octets, and a
/// control region.
struct Side<'d> {
    qp: QueuePair<'d>,
    scq: &'d CompletionQueue<'d>,
    rcq: &'d CompletionQueue<'d>,
    rcv: MemoryRegion<'d>,
    ctl: MemoryRegion<'d>,
}

impl<'d> Side<'d> {
    fn new(pd: &'d ProtectionDomain<'d>, scq: &'d CompletionQueue<'d>, rcq: &'d CompletionQueue<'d>) -> Result<Side<'d>, String> {
        let init = QpInit { pd, send_cq: scq, recv_cq: rcq, max_recv_wr: 8, max_send_wr: 16, max_sge: 1, max_inline: 0 };
        let qp = pd.device().create_qp(&init).map_err(|e| format!("create QP: {e}"))?;
        let rcv = region(pd, Access::LOCAL_WRITE, 4 * AHEAD)?;
        for i in 0..4 {
            qp.post_recv(i, &[rcv.sge(i as usize * AHEAD..(i as usize + 1) * AHEAD)]).map_err(|e| format!("post receive: {e}"))?;
        }
        Ok(Side { qp, scq, rcq, rcv, ctl: region(pd, Access::NONE, 16)? })
    }

    /// Sends two numbers, signaled, and waits for the completion.
    fn tell(&mut self, a: u64, b: u64) -> Check {
        self.ctl.as_mut_slice().copy_from_slice(&[a.to_le_bytes(), b.to_le_bytes()].concat());
        let wr = SendWr { wr_id: 1, op: SendOp::Send { solicited: false }, sge: &[self.ctl.sge(0..16)], signaled: true };
        self.qp.post_send(&wr).map_err(|e| format!("post Send: {e}"))?;
        done(self.scq, WcOpcode::Send).map(drop)
    }

    /// The two numbers of the next Send received (the receive is not posted again: four cover
    /// the test).
    fn hear(&self) -> Result<(u64, u64), String> {
        let wc = done(self.rcq, WcOpcode::Recv)?;
        let at = wc.wr_id as usize * AHEAD;
        let r = &self.rcv.as_slice()[at..at + 16];
        Ok((u64::from_le_bytes(r[..8].try_into().unwrap_or_default()), u64::from_le_bytes(r[8..].try_into().unwrap_or_default())))
    }

    /// Posts `op` signaled and waits for its successful `what` completion with `wr_id`.
    fn run(&self, wr_id: u64, op: SendOp, sge: &[Sge], what: WcOpcode) -> Check {
        self.qp.post_send(&SendWr { wr_id, op, sge, signaled: true }).map_err(|e| format!("post {op:?}: {e}"))?;
        let wc = done(self.scq, what)?;
        ensure(wc.wr_id == wr_id, format!("{op:?} completed as {what:?}"))
    }

    /// Posts a Fast Register of `mr` and waits for its completion: the new STag.
    fn fast_register(&self, mr: &MemoryRegion<'_>, key: u8, range: std::ops::Range<usize>, access: Access) -> Result<u32, String> {
        let stag = self.qp.post_fast_register(4, mr, key, range, access, true).map_err(|e| format!("post Fast Register: {e}"))?;
        let wc = done(self.scq, WcOpcode::FastRegister)?;
        ensure(wc.wr_id == 4, format!("Fast Register completed: STag {stag:#x}"))?;
        Ok(stag)
    }
}

/// A raw Fast Register entry (for the module's checks of what the library never builds).
fn raw_fast_register(stag: u32, addr: u64, len: u64, access: u32) -> PostSend {
    PostSend { opcode: opcode::FAST_REGISTER, rkey: stag, remote_addr: addr, compare_add: len, swap: access as u64, ..PostSend::default() }
}

/// Guest B.
pub(crate) fn serve(port: &str, opts: &str) -> Check {
    let dev = open()?;
    let (scq, rcq) = (dev.create_cq(16).map_err(|e| e.to_string())?, dev.create_cq(16).map_err(|e| e.to_string())?);
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let mut shared = region(&pd, Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ, REGION)?;
    shared.as_mut_slice().copy_from_slice(&random(REGION, 1));
    let ahead = region(&pd, Access::NONE, AHEAD)?;
    let mut s = Side::new(&pd, &scq, &rcq)?;
    let mut o = options(Role::Responder, opts)?;
    o.private_data = shared.remote(0).to_bytes().to_vec();
    s.qp.adopt(listen(port)?, &o).map_err(|e| format!("B: adopt: {e}"))?;
    s.hear()?; // A read the region (step 1)

    // Step 2: a Send A receives, then the Local Invalidate, completing in that order.
    let old = shared.stag();
    s.qp.post_send(&SendWr { wr_id: 2, op: SendOp::Send { solicited: false }, sge: &[ahead.sge(0..AHEAD)], signaled: true })
        .map_err(|e| format!("B: post Send: {e}"))?;
    s.qp.post_send(&SendWr { wr_id: 3, op: SendOp::LocalInvalidate { stag: old }, sge: &[], signaled: true })
        .map_err(|e| format!("B: post Local Invalidate: {e}"))?;
    let first = done(&scq, WcOpcode::Send)?;
    let second = done(&scq, WcOpcode::LocalInvalidate)?;
    ensure((first.wr_id, second.wr_id) == (2, 3), "B: a Local Invalidate completes behind the Send of 8 KiB posted before it")?;
    // The Send's region was registered read-only: its pages were pinned so.
    s.run(5, SendOp::LocalInvalidate { stag: ahead.stag() }, &[], WcOpcode::LocalInvalidate)?;
    let from_shared = SendWr { wr_id: 5, op: SendOp::Send { solicited: false }, sge: &[shared.sge(0..64)], signaled: true };
    expect_errno("B: a Send from the invalidated region", s.qp.post_send(&from_shared), libc::EINVAL)?;
    // Verbs let a Local Invalidate find its STag invalid already (a peer's Send with Invalidate
    // may have been first): it completes, and the region stays invalid.
    s.run(5, SendOp::LocalInvalidate { stag: old }, &[], WcOpcode::LocalInvalidate)?;
    expect_errno("B: a Send from the region invalidated twice", s.qp.post_send(&from_shared), libc::EINVAL)?;
    let (base, len) = (shared.addr(), REGION as u64);
    let rw = access::LOCAL_WRITE;
    for (what, e) in [
        ("STag 0", raw_fast_register(0, base, len, rw)),
        ("a range past the pinned buffer", raw_fast_register(old, base + 4096, len, rw)),
        ("a range before it", raw_fast_register(old, base - 1, 2, rw)),
        ("no octets", raw_fast_register(old, base, 0, rw)),
        ("remote writes without local ones", raw_fast_register(old, base, len, access::REMOTE_WRITE)),
        ("an unknown access bit", raw_fast_register(old, base, len, 1 << 9)),
        ("an empty slot", raw_fast_register(0xfff << 8 | 1, base, len, rw)),
        ("write rights on pages pinned read-only", raw_fast_register(ahead.stag(), ahead.addr(), AHEAD as u64, rw)),
    ] {
        expect_errno(&format!("B: a Fast Register with {what}"), s.qp.post_send_raw(e), libc::EINVAL)?;
    }
    let key = (old as u8 ^ 0x5a).max(1);
    let new = s.fast_register(&shared, key, PAGE, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    println!("ok: B: STag {old:#x} registered again as {new:#x}");
    let again = raw_fast_register(new, base, len, rw);
    expect_errno("B: a Fast Register of a valid region", s.qp.post_send_raw(again), libc::EINVAL)?;
    s.tell(old as u64, new as u64)?;

    // Step 3: A wrote the page through the new STag, and nothing else.
    s.hear()?;
    let mut want = random(REGION, 1);
    want[PAGE].copy_from_slice(&random(PAGE.len(), 2));
    ensure(shared.as_slice() == want, "B: A's Write through the new STag placed that page, and only it")?;
    s.tell(0, 0)?;

    // Step 4: A Writes through the old STag.
    let state = wait_ended(&s.qp)?;
    let cause = Cause::DdpInvalidStag;
    ensure(
        state == QpState::Error { terminate: Some(cause.code()), sent: true },
        format!("B: a Write through the invalidated STag is Terminated ({state:?})"),
    )?;
    ensure(shared.as_slice() == want, "B: nothing of it was placed")?;
    flushed(&rcq, 2, "B")
}

/// A Fast Register's key, chosen by the caller, does not change the keys a slot's reuse gives:
/// a region registered, invalidated, given key k - 1 and deregistered, the next registration in
/// its slot gets key k + 1, never k (which its first STag named).
fn stale_keys_stay_stale<'d>(pd: &'d ProtectionDomain<'d>, s: &Side<'_>) -> Check {
    let first = region(pd, Access::LOCAL_WRITE, 64)?;
    let stale = first.stag();
    s.run(11, SendOp::LocalInvalidate { stag: stale }, &[], WcOpcode::LocalInvalidate)?;
    let key = match stale as u8 {
        1 => 0xff,
        k => k - 1,
    };
    s.fast_register(&first, key, 0..64, Access::LOCAL_WRITE)?;
    first.deregister().map_err(|e| format!("A: deregister: {e}"))?;
    let next = region(pd, Access::LOCAL_WRITE, 64)?;
    ensure(
        next.stag() >> 8 == stale >> 8 && next.stag() != stale,
        format!("A: a region registered in the slot of STag {stale:#x} (given key {key:#x} meanwhile) gets a new key: {:#x}", next.stag()),
    )?;
    let post = s.qp.post_send(&SendWr { wr_id: 12, op: SendOp::Send { solicited: false }, sge: &[Sge { lkey: stale, ..next.sge(0..8) }], signaled: true });
    expect_errno("A: a Send naming the stale STag", post, libc::EINVAL)
}

/// Guest A.
pub(crate) fn drive(host: &str, port: &str, opts: &str) -> Check {
    let dev = open()?;
    let events = dev.async_events().map_err(|e| e.to_string())?;
    let (scq, rcq) = (dev.create_cq(16).map_err(|e| e.to_string())?, dev.create_cq(16).map_err(|e| e.to_string())?);
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let mut sink = region(&pd, Access::LOCAL_WRITE, REGION)?;
    let mut src = region(&pd, Access::NONE, PAGE.len())?;
    src.as_mut_slice().copy_from_slice(&random(PAGE.len(), 2));
    let mut s = Side::new(&pd, &scq, &rcq)?;
    let n = s.qp.adopt(dial(host, port)?, &options(Role::Initiator, opts)?).map_err(|e| format!("A: adopt: {e}"))?;
    let shared = Remote::from_bytes(&n.peer_private).ok_or("A: B's region in its private data")?;
    let want = random(REGION, 1);

    // Step 1: Read with Invalidate of our sink.
    let old = sink.stag();
    s.run(6, SendOp::ReadInvalidate { remote: shared, stag: old }, &[sink.sge(0..REGION)], WcOpcode::RdmaRead)?;
    ensure(sink.as_slice() == want, "A: a Read with Invalidate placed B's region intact")?;
    let read = |sge: &[Sge]| s.qp.post_send(&SendWr { wr_id: 7, op: SendOp::Read(shared), sge, signaled: true });
    expect_errno("A: a Read into the sink it invalidated", read(&[sink.sge(0..64)]), libc::EINVAL)?;
    s.run(7, SendOp::LocalInvalidate { stag: old }, &[], WcOpcode::LocalInvalidate)?;
    expect_errno("A: a Read into the sink invalidated twice", read(&[sink.sge(0..64)]), libc::EINVAL)?;
    let key = (old as u8).wrapping_add(1).max(1);
    let new = s.fast_register(&sink, key, 0..REGION, Access::LOCAL_WRITE)?;
    sink.as_mut_slice().fill(0);
    s.run(8, SendOp::Read(shared), &[sink.sge(0..REGION)], WcOpcode::RdmaRead)?;
    ensure(sink.as_slice() == want, format!("A: after a Fast Register (STag {old:#x} -> {new:#x}), a Read into the sink is intact"))?;
    let stale = Sge { lkey: old, ..sink.sge(0..64) };
    expect_errno("A: a Read into the sink's old STag", read(&[stale]), libc::EINVAL)?;
    let theirs = SendWr { wr_id: 7, op: SendOp::ReadInvalidate { remote: shared, stag: 0xfff << 8 | 1 }, sge: &[sink.sge(0..64)], signaled: true };
    expect_errno("A: a Read with Invalidate of an STag not ours", s.qp.post_send(&theirs), libc::EINVAL)?;
    stale_keys_stay_stale(&pd, &s)?;
    s.tell(1, 0)?;

    // Step 2 is B's: its 8 KiB Send, then the STags.
    s.hear()?;
    let (b_old, b_new) = s.hear()?;
    // Step 3.
    let page = |rkey: u64| Remote { addr: shared.addr + PAGE.start as u64, rkey: rkey as u32 };
    s.run(9, SendOp::Write(page(b_new)), &[src.sge(0..PAGE.len())], WcOpcode::RdmaWrite)?;
    s.tell(2, 0)?;
    s.hear()?;
    // Step 4.
    src.as_mut_slice().fill(0xee);
    s.qp.post_send(&SendWr { wr_id: 10, op: SendOp::Write(page(b_old)), sge: &[src.sge(0..PAGE.len())], signaled: false })
        .map_err(|e| format!("A: post Write: {e}"))?;
    let state = wait_ended(&s.qp)?;
    let cause = Cause::DdpInvalidStag;
    ensure(state == QpState::Error { terminate: Some(cause.code()), sent: false }, format!("A: the Write through B's old STag ended the QP ({state:?})"))?;
    expect_event(&events, s.qp.handle(), QpEvent::Terminated { terminate: cause.code(), sent: false }, "A")?;
    flushed(&rcq, 1, "A")
}
