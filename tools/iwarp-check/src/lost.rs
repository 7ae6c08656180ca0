//! Connections that die under traffic, from outside the programs: a TCP reset injected on the
//! wire (`scripts/inject-reset.py`), or the peer's whole machine gone (its guest killed). Each
//! side runs until its QP ends, then checks what a user must see: the work it had posted comes
//! back flushed, in order, and one asynchronous event says the connection was lost.
//!
//!   lost-serve PORT       accept, adopt, advertise a region, post receives, wait
//!   lost-drive HOST PORT  connect, adopt, keep RDMA Writes of 256 KiB in flight to the peer
//!
//! Both give up (and fail) if the connection has not ended after [`LIMIT`].

use super::{dial, ensure, listen, open, options, Check};
use crate::verbs::expect_event;
use libiwarp::{Access, CompletionQueue, QpEvent, QpInit, QpState, QueuePair, Remote, Role, SendOp, SendWr, WcStatus, WorkCompletion};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a side waits for its connection to end.
const LIMIT: Duration = Duration::from_secs(300);
/// Receives the serving side posts.
const RECVS: u64 = 32;
/// Writes in flight, and their size.
const DEPTH: u64 = 8;
const WRITE: usize = 256 << 10;

/// Completions until the QP ends: the successes before, and every completion from the first
/// that is not one on (the rest must follow at once: flushed). A QP may end with nothing
/// outstanding (a copied Write completes once TCP holds it), so a quiet CQ counts as the end
/// once the QP says it ended.
fn until_end(qp: &QueuePair<'_>, cq: &CompletionQueue<'_>, mut on_success: impl FnMut(&WorkCompletion) -> Check) -> Result<(u64, Vec<WorkCompletion>), String> {
    let start = Instant::now();
    let mut ok = 0;
    let mut rest = Vec::new();
    loop {
        if start.elapsed() >= LIMIT {
            return Err(format!("the connection still works after {LIMIT:?} ({ok} completions)"));
        }
        match cq.wait_one(Duration::from_secs(1)).map_err(|e| e.to_string())? {
            Some(wc) if wc.status == WcStatus::Success => {
                ok += 1;
                on_success(&wc)?;
            }
            Some(wc) => {
                rest.push(wc);
                break;
            }
            None if qp.state().map_err(|e| e.to_string())? != QpState::Connected => break,
            None => {}
        }
    }
    while let Some(wc) = cq.wait_one(Duration::from_secs(5)).map_err(|e| e.to_string())? {
        rest.push(wc);
    }
    Ok((ok, rest))
}

/// What a side that waited in vain knows: its QP's state and octets sent, and TCP's view of
/// the connection (`ss`), so a failure says which of them stopped.
fn stuck(qp: &QueuePair<'_>, why: String) -> String {
    let ss = Command::new("ss").args(["-tnio", "state", "all"]).output();
    let ss = ss.map_or_else(|e| format!("ss: {e}"), |o| String::from_utf8_lossy(&o.stdout).into_owned());
    format!("{why}; QP {:?}, sent (zero copy, copied) {:?}; TCP:\n{ss}", qp.state(), qp.sent_octets())
}

/// `lost-serve PORT`.
pub(crate) fn serve(port: &str) -> Check {
    let dev = open()?;
    let events = dev.async_events().map_err(|e| e.to_string())?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(64).map_err(|e| e.to_string())?;
    let mut qp = dev
        .create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: RECVS as u32, max_send_wr: 4, max_sge: 1, max_inline: 0 })
        .map_err(|e| e.to_string())?;
    let mut dst = vec![0u8; WRITE];
    let dst = pd.register(&mut dst, Access::LOCAL_WRITE | Access::REMOTE_WRITE).map_err(|e| e.to_string())?;
    let mut rcv = vec![0u8; 64 * RECVS as usize];
    let rcv = pd.register(&mut rcv, Access::LOCAL_WRITE).map_err(|e| e.to_string())?;
    for k in 0..RECVS {
        qp.post_recv(k, &[rcv.sge(64 * k as usize..64 * (k as usize + 1))]).map_err(|e| e.to_string())?;
    }
    let mut o = options(Role::Responder, "")?;
    o.private_data = dst.remote(0).to_bytes().to_vec();
    qp.adopt(listen(port)?, &o).map_err(|e| format!("B: adopt: {e}"))?;
    println!("ok: B: connected; {RECVS} receives posted");
    let (ok, rest) = until_end(&qp, &cq, |wc| Err(format!("B: a receive completed: {wc:?}"))).map_err(|e| stuck(&qp, e))?;
    let in_order = rest.iter().enumerate().all(|(i, wc)| wc.wr_id == i as u64);
    ensure(
        ok == 0 && rest.len() == RECVS as usize && in_order && rest.iter().all(|wc| wc.status == WcStatus::Flushed),
        format!("B: when the connection ended, all {RECVS} receives came back flushed, in order"),
    )?;
    expect_event(&events, qp.handle(), QpEvent::ConnectionLost, "B")
}

/// `lost-drive HOST PORT`.
pub(crate) fn drive(host: &str, port: &str) -> Check {
    let dev = open()?;
    let events = dev.async_events().map_err(|e| e.to_string())?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(64).map_err(|e| e.to_string())?;
    let mut qp = dev
        .create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: DEPTH as u32, max_sge: 1, max_inline: 0 })
        .map_err(|e| e.to_string())?;
    let mut src = vec![0x5au8; WRITE];
    let src = pd.register(&mut src, Access::NONE).map_err(|e| e.to_string())?;
    let n = qp.adopt(dial(host, port)?, &options(Role::Initiator, "")?).map_err(|e| format!("A: adopt: {e}"))?;
    let to = Remote::from_bytes(&n.peer_private).ok_or("A: no region advertised")?;
    let post = |wr_id: u64| qp.post_send(&SendWr { wr_id, op: SendOp::Write(to), sge: &[src.sge(0..WRITE)], signaled: true });
    for wr_id in 0..DEPTH {
        post(wr_id).map_err(|e| format!("A: post Write {wr_id}: {e}"))?;
    }
    println!("ok: A: connected; {DEPTH} Writes of {} KiB in flight, refilled as they complete", WRITE >> 10);
    // The next wr_id to post, and the next to complete.
    let (mut next, mut due) = (DEPTH, 0);
    let mut last = Instant::now();
    // Posts refused: only once the QP ended, with ENOTCONN.
    let mut refused = Vec::new();
    let (ok, rest) = until_end(&qp, &cq, |wc| {
        if wc.wr_id != due {
            return Err(format!("A: Write {} completed before Write {due}", wc.wr_id));
        }
        due += 1;
        last = Instant::now();
        match post(next) {
            Ok(()) => next += 1,
            Err(e) => refused.push(e.raw_os_error()),
        }
        Ok(())
    })
    .map_err(|e| stuck(&qp, e))?;
    println!("ok: A: {ok} Writes completed, then the connection ended {:.1?} after the last one", last.elapsed());
    ensure(
        refused.iter().all(|&e| e == Some(libc::ENOTCONN)),
        format!("A: the {} posts after the QP ended were refused with ENOTCONN ({refused:?})", refused.len()),
    )?;
    let outstanding = next - ok;
    let in_order = rest.iter().enumerate().all(|(i, wc)| wc.wr_id == ok + i as u64);
    ensure(
        in_order && rest.iter().all(|wc| wc.status == WcStatus::Flushed) && rest.len() as u64 == outstanding,
        format!("A: the {outstanding} Writes still outstanding came back flushed, in order ({} came back)", rest.len()),
    )?;
    expect_event(&events, qp.handle(), QpEvent::ConnectionLost, "A")
}
