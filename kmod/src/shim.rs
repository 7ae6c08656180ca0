// SPDX-License-Identifier: GPL-2.0

//! The kernel's crc32c (a static inline, reached through the C shim) as the protocol core's CRC,
//! the TCP probe the module runs at load when asked, the misc device's module pinning, and
//! whether the caller may sleep.

use crate::ffi;
use kernel::error::to_result;
use kernel::prelude::*;

/// The kernel's crc32c(), as the protocol core's CRC implementation.
pub(crate) struct KernelCrc;

impl crate::proto::crc::Crc32c for KernelCrc {
    fn append(crc: u32, data: &[u8]) -> u32 {
        // The core passes finished CRC values; the kernel works on the raw register.
        // SAFETY: `data` is a valid slice for its whole length during the call, and the shim
        // only reads it.
        !unsafe { ffi::iwarp_shim_crc32c(!crc, data.as_ptr().cast(), data.len()) }
    }
}

/// Whether locks that only disable bottom halves may be taken here: not in a hard interrupt,
/// interrupts on.
pub(crate) fn bh_locks_allowed() -> bool {
    // SAFETY: the shim only reads the CPU's context.
    unsafe { ffi::iwarp_shim_bh_locks_allowed() }
}

/// Has the files of the just registered misc device `misc` pin this module while open.
pub(crate) fn pin_module_while_open(misc: *mut kernel::bindings::miscdevice) {
    // SAFETY: `misc` is a registered misc device of this module, whose registration outlives
    // the module's use of it; the shim only swaps its file operations for an owned copy.
    unsafe { ffi::iwarp_shim_misc_pin_module(misc) }
}

/// What the TCP probe saw.
pub(crate) struct TcpProbe {
    /// The ephemeral port the socket was bound to.
    pub(crate) port: u16,
    /// The socket's initial send sequence number.
    pub(crate) write_seq: u32,
}

/// Creates a kernel TCP socket, binds it to 127.0.0.1:0, reads its port and `write_seq`, and
/// releases it.
pub(crate) fn tcp_probe() -> Result<TcpProbe> {
    let (mut port, mut write_seq) = (0u16, 0u32);
    // SAFETY: both pointers are to live, exclusively borrowed locals the shim writes once.
    to_result(unsafe { ffi::iwarp_shim_tcp_probe(&mut port, &mut write_seq) })?;
    Ok(TcpProbe { port, write_seq })
}
