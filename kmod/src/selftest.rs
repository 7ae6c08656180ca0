// SPDX-License-Identifier: GPL-2.0

//! A load-time proof that the protocol core runs in the kernel with the kernel's crc32c: a Send
//! with markers and CRC is framed, received and checked. Refusing to load beats running with a
//! broken core or CRC plug.

use crate::proto::markers::Markers;
use crate::proto::rdmap::Opcode;
use crate::proto::rx::{self, Event, Receiver, Sink, Target};
use crate::proto::stream::Pieces;
use crate::proto::terminate::Cause;
use crate::proto::tx::{self, Fpdu, Message, Transmitter};
use crate::shim::KernelCrc;
use kernel::prelude::*;

const MESSAGE: &[u8] = b"iwarp self-test: a Send framed with markers and CRC, checked by the kernel's crc32c";

/// Records the one Send the self-test expects.
struct OneSend {
    buf: [u8; 128],
    done: Option<u32>,
}

impl Sink for OneSend {
    fn check(&mut self, _op: Opcode, target: Target, len: u32) -> Result<(), Cause> {
        match target {
            Target::Untagged { msn: 1, mo } if mo as usize + len as usize <= self.buf.len() => Ok(()),
            _ => Err(Cause::DdpNoBuffer),
        }
    }

    fn place(&mut self, target: Target, bytes: &[u8]) -> Result<(), Cause> {
        if let Target::Untagged { mo, .. } = target {
            self.buf[mo as usize..mo as usize + bytes.len()].copy_from_slice(bytes);
        }
        Ok(())
    }

    fn deliver(&mut self, event: Event) {
        if let Event::Send { len, .. } = event {
            self.done = Some(len);
        }
    }
}

/// Frames [`MESSAGE`] and receives it back; fails with EIO if anything differs.
pub(crate) fn protocol_core_loopback() -> Result {
    let markers = Markers::every(16).ok_or(EINVAL)?;
    let mut t = Transmitter::new(tx::Config { markers, crc: true, mulpdu: 64 });
    let mut fpdu = KBox::new(Fpdu::default(), GFP_KERNEL_ACCOUNT)?;
    let mut wire = KVec::with_capacity(256, GFP_KERNEL_ACCOUNT)?;
    let mut out = t.start(Message::Send { solicited: false, invalidate: None }, MESSAGE.len() as u64).map_err(|_| EINVAL)?;
    while !out.done() {
        t.next_fpdu::<KernelCrc, _>(&mut out, MESSAGE, &mut fpdu);
        let at = wire.len();
        wire.resize(at + fpdu.wire_len as usize, 0, GFP_KERNEL_ACCOUNT)?;
        fpdu.write_to(MESSAGE, &mut wire[at..]);
    }
    let mut rx = Receiver::new(rx::Config { markers, crc: true, expect_rtr: None, expect_rtr_read_response: false, extensions: false });
    let mut sink = OneSend { buf: [0; 128], done: None };
    let consumed = rx.receive::<KernelCrc, _>(&Pieces::new(0, &[&wire]), &mut sink).map_err(|_| EIO)?;
    let ok = consumed == wire.len() as u64 && sink.done == Some(MESSAGE.len() as u32) && &sink.buf[..MESSAGE.len()] == MESSAGE;
    if !ok {
        pr_err!("protocol core self-test failed\n");
        return Err(EIO);
    }
    Ok(())
}
