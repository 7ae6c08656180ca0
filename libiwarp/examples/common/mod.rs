//! What the examples share: who connects to whom, and waiting for a completion.

use libiwarp::{CompletionQueue, Role, WcOpcode, WcStatus, WorkCompletion};
use std::error::Error;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// `server PORT` accepts one connection (MPA responder); `client HOST PORT` connects, retrying
/// for a while so the two may start in any order (MPA initiator).
pub fn endpoint() -> Result<(TcpStream, Role), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["server", port] => Ok((TcpListener::bind(("0.0.0.0", port.parse()?))?.accept()?.0, Role::Responder)),
        ["client", host, port] => {
            let start = Instant::now();
            loop {
                match TcpStream::connect((host, port.parse()?)) {
                    Ok(s) => return Ok((s, Role::Initiator)),
                    Err(e) if start.elapsed() > Duration::from_secs(30) => return Err(e.into()),
                    Err(_) => std::thread::sleep(Duration::from_millis(200)),
                }
            }
        }
        _ => Err("usage: server PORT | client HOST PORT".into()),
    }
}

/// Waits for the next completion, which must be a successful `op`.
pub fn wait(cq: &CompletionQueue<'_>, op: WcOpcode) -> Result<WorkCompletion, Box<dyn Error>> {
    let wc = cq.wait_one(Duration::from_secs(30))?.ok_or("no completion within 30 s")?;
    if wc.status != WcStatus::Success || wc.opcode != op {
        return Err(format!("expected a successful {op:?}, got {wc:?}").into());
    }
    Ok(wc)
}

/// Waits for a successful completion of each of `ops`, in whatever order they come: those of
/// the send queue and of the receive queue are not ordered against each other on a CQ they
/// share (a Send may complete on the acknowledgement that came with the answer to it).
#[allow(dead_code)] // each example compiles this module; rdma_read waits for one at a time
pub fn wait_each<const N: usize>(cq: &CompletionQueue<'_>, ops: [WcOpcode; N]) -> Result<[WorkCompletion; N], Box<dyn Error>> {
    let mut got = [None; N];
    while got.iter().any(Option::is_none) {
        let wc = cq.wait_one(Duration::from_secs(30))?.ok_or("no completion within 30 s")?;
        match ops.iter().zip(&got).position(|(op, g)| *op == wc.opcode && g.is_none()) {
            Some(i) if wc.status == WcStatus::Success => got[i] = Some(wc),
            _ => return Err(format!("expected a successful one of {ops:?}, got {wc:?}").into()),
        }
    }
    Ok(got.map(|g| g.unwrap_or(WorkCompletion::EMPTY)))
}
