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
        pub(super) fn iwarp_shim_sock_sendv(sock: *mut Socket, iov: *mut super::Kvec, n: usize, len: usize) -> i32;
        pub(super) fn iwarp_shim_sock_mss(sock: *mut Socket) -> u32;
        pub(super) fn iwarp_shim_sock_recv_exact(sock: *mut Socket, buf: *mut u8, len: usize, timeout_ms: u32) -> i32;
    }
}

/// One piece of a gathered send (`struct kvec`).
#[repr(C)]
pub(crate) struct Kvec {
    base: *const u8,
    len: usize,
}

impl Kvec {
    /// A piece covering `b`; valid while `b` is.
    pub(crate) fn new(b: &[u8]) -> Kvec {
        Kvec { base: b.as_ptr(), len: b.len() }
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

    /// Sends the pieces `iov`, in order, blocking until all are queued. Every piece must cover
    /// memory that stays valid during the call (the `Kvec`s were made from live slices).
    pub(crate) fn send_pieces(&mut self, iov: &mut [Kvec]) -> Result {
        let len = iov.iter().map(|k| k.len).sum();
        // SAFETY: the socket reference is live; each kvec covers a live slice (see above) the
        // socket layer only reads.
        check(unsafe { ffi::iwarp_shim_sock_sendv(self.sock.as_ptr(), iov.as_mut_ptr(), iov.len(), len) })
    }

    /// The connection's current MSS.
    pub(crate) fn mss(&self) -> u32 {
        // SAFETY: the socket reference is live; the shim only reads one field.
        unsafe { ffi::iwarp_shim_sock_mss(self.sock.as_ptr()) }
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
