// SPDX-License-Identifier: GPL-2.0

//! A connected kernel TCP socket adopted from a user descriptor (`shim/net_shim.c`), behind a
//! safe owner that shuts the connection down and drops its reference when it goes.

use core::ptr::NonNull;
use kernel::prelude::*;

mod ffi {
    #[repr(C)]
    pub(super) struct Socket {
        _opaque: [u8; 0],
    }
    extern "C" {
        pub(super) fn iwarp_shim_sock_adopt(fd: i32, err: *mut i32) -> *mut Socket;
        pub(super) fn iwarp_shim_sock_put(sock: *mut Socket);
        pub(super) fn iwarp_shim_sock_send_all(sock: *mut Socket, buf: *const u8, len: usize) -> i32;
        pub(super) fn iwarp_shim_sock_recv_exact(sock: *mut Socket, buf: *mut u8, len: usize, timeout_ms: u32) -> i32;
    }
}

/// A reference to a connected TCP socket.
pub(crate) struct TcpSocket {
    sock: NonNull<ffi::Socket>,
}

// SAFETY: the reference is owned by this value and dropped once; the socket layer serializes
// concurrent senders and receivers itself, and callers use `&mut self` for I/O anyway.
unsafe impl Send for TcpSocket {}
// SAFETY: no method takes `&self` to do I/O.
unsafe impl Sync for TcpSocket {}

fn check(rc: i32) -> Result {
    if rc < 0 {
        Err(Error::from_errno(rc))
    } else {
        Ok(())
    }
}

impl TcpSocket {
    /// Takes a reference on the established TCP socket behind the caller's descriptor `fd`.
    pub(crate) fn adopt(fd: i32) -> Result<TcpSocket> {
        let mut err = 0;
        // SAFETY: `err` is a live local; the shim validates `fd` through sockfd_lookup().
        let raw = unsafe { ffi::iwarp_shim_sock_adopt(fd, &mut err) };
        NonNull::new(raw).map(|sock| TcpSocket { sock }).ok_or_else(|| Error::from_errno(err))
    }

    /// Sends all of `buf`, blocking.
    pub(crate) fn send_all(&mut self, buf: &[u8]) -> Result {
        // SAFETY: the socket reference is live; `buf` is valid for reads of its length.
        check(unsafe { ffi::iwarp_shim_sock_send_all(self.sock.as_ptr(), buf.as_ptr(), buf.len()) })
    }

    /// Fills all of `buf`, waiting at most `timeout_ms` for each piece.
    pub(crate) fn recv_exact(&mut self, buf: &mut [u8], timeout_ms: u32) -> Result {
        // SAFETY: the socket reference is live; `buf` is valid for writes of its length.
        check(unsafe { ffi::iwarp_shim_sock_recv_exact(self.sock.as_ptr(), buf.as_mut_ptr(), buf.len(), timeout_ms) })
    }
}

impl Drop for TcpSocket {
    fn drop(&mut self) {
        // SAFETY: the reference came from iwarp_shim_sock_adopt() and is dropped exactly once.
        unsafe { ffi::iwarp_shim_sock_put(self.sock.as_ptr()) };
    }
}
