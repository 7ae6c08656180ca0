//! What the project's test and benchmark programs (`iwarp-check`, `iwarp-bench`) share.

use libiwarp::{CompletionQueue, WaitMode, WcOpcode, WcStatus, WorkCompletion};
use std::io;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How long a peer may take to start listening.
pub const DIAL_PATIENCE: Duration = Duration::from_secs(60);

/// Connects to `host:port`, retrying for [`DIAL_PATIENCE`] while the peer does not listen yet
/// (it runs in another guest, started at about the same time).
pub fn dial(host: &str, port: &str) -> io::Result<TcpStream> {
    let start = Instant::now();
    loop {
        match TcpStream::connect(format!("{host}:{port}")) {
            Ok(s) => return Ok(s),
            Err(e) if start.elapsed() > DIAL_PATIENCE => return Err(io::Error::new(e.kind(), format!("connect {host}:{port}: {e}"))),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Waits up to `timeout` for the next completion on `cq`, which must be a successful `op`.
pub fn completion(cq: &CompletionQueue<'_>, op: WcOpcode, timeout: Duration) -> Result<WorkCompletion, String> {
    completion_in(cq, op, timeout, WaitMode::SpinThenBlock(Duration::from_micros(15)))
}

/// [`completion`], waiting as `mode` says.
pub fn completion_in(cq: &CompletionQueue<'_>, op: WcOpcode, timeout: Duration, mode: WaitMode) -> Result<WorkCompletion, String> {
    let mut wc = [WorkCompletion::EMPTY];
    let n = cq.wait(&mut wc, mode, timeout).map_err(|e| format!("wait for {op:?}: {e}"))?;
    let wc = (n == 1).then_some(wc[0]).ok_or_else(|| format!("no {op:?} completion within {timeout:?}"))?;
    if wc.status != WcStatus::Success || wc.opcode != op {
        return Err(format!("expected a successful {op:?}, got {wc:?}"));
    }
    Ok(wc)
}
