// SPDX-License-Identifier: GPL-2.0

//! A socket's waker (`shim/waker_shim.c`): connection setup driven by the sockets' callbacks.
//! A connection made or data arriving on the socket (a connection whose MPA exchange runs, or a
//! listener: a connection arriving, and data or a state change on a connection it
//! [`Waker::watch`]es) runs [`OnWake::on_wake`] in a work item, where connecting, accepting and
//! reading never wait; everything decided here.

use super::TcpSocket;
use crate::error::made;
use crate::ffi;
use core::ffi::c_void;
use core::ptr::NonNull;
use kernel::prelude::*;
use kernel::sync::Arc;

/// Work a waker runs.
pub(crate) trait OnWake: Send + Sync {
    /// Called in process context (a workqueue) after the listening socket or a watched
    /// connection called back, or when asked ([`Waker::later`], [`Waker::kick`]); never twice
    /// at once.
    fn on_wake(&self);
}

/// While this lives, the socket's callbacks run `T::on_wake`. Dropping it restores them and
/// waits for a queued or running call.
///
/// # Invariants
///
/// `raw` is the shim's waker, installed on a socket that outlives it, whose `owner`
/// pointer is `_owner`'s; it is removed exactly once, on drop, after every connection it watched
/// was unwatched (`watch`'s contract).
pub(crate) struct Waker<T: OnWake> {
    raw: NonNull<ffi::iwarp_waker>,
    /// Kept alive for the waker's runs.
    _owner: Arc<T>,
}

// SAFETY: the waker is owned by this value and removed once; the shim's functions may be
// called from any thread.
unsafe impl<T: OnWake> Send for Waker<T> {}
// SAFETY: the shared methods only queue work or change callbacks under the socket's lock.
unsafe impl<T: OnWake> Sync for Waker<T> {}

impl<T: OnWake> Waker<T> {
    /// Wakes `owner` on `sock`'s callbacks (EBUSY if the socket has a user already), and once at
    /// once. The waker keeps `owner` alive.
    ///
    /// # Safety
    ///
    /// `sock` outlives the returned waker.
    pub(crate) unsafe fn install(sock: &TcpSocket, owner: Arc<T>) -> Result<Waker<T>> {
        // The shim's work, called with the pointer this waker gave the shim, only while it is
        // installed.
        #[allow(clippy::missing_safety_doc)]
        unsafe extern "C" fn run<T: OnWake>(owner: *mut c_void) {
            // SAFETY: `owner` is the `Arc<T>` data pointer stored below; the `Waker` holds that
            // Arc until iwarp_shim_waker_remove() has waited out every run.
            let owner = unsafe { &*owner.cast::<T>() };
            owner.on_wake();
        }
        let ptr = Arc::as_ptr(&owner).cast_mut().cast();
        // SAFETY: the socket is live and outlives the waker (the caller's promise); `ptr` stays
        // valid while the waker is installed.
        let raw = made(unsafe { ffi::iwarp_shim_waker_install(sock.sock.as_ptr(), ptr, Some(run::<T>)) })?;
        Ok(Waker { raw, _owner: owner })
    }

    /// Runs the work after `ms` milliseconds, unless it runs sooner anyway.
    pub(crate) fn later(&self, ms: u32) {
        // SAFETY: the waker is installed (type invariant).
        unsafe { ffi::iwarp_shim_waker_later(self.raw.as_ptr(), ms) }
    }

    /// Runs the work now.
    pub(crate) fn kick(&self) {
        // SAFETY: the waker is installed (type invariant).
        unsafe { ffi::iwarp_shim_waker_kick(self.raw.as_ptr()) }
    }

    /// Runs the work on `conn`'s callbacks too until the returned value goes.
    ///
    /// # Safety
    ///
    /// `conn` was accepted from this waker's listening socket, and the returned value is dropped
    /// or released before this waker is.
    pub(crate) unsafe fn watch(&self, conn: TcpSocket) -> Watched {
        // SAFETY: the waker is installed and `conn`'s socket is live.
        unsafe { ffi::iwarp_shim_waker_watch(self.raw.as_ptr(), conn.sock.as_ptr()) };
        Watched { sock: Some(conn), waker: self.raw }
    }
}

impl<T: OnWake> Drop for Waker<T> {
    fn drop(&mut self) {
        // SAFETY: installed by iwarp_shim_waker_install() and removed once, every connection
        // unwatched (type invariant); after this returns no run is in progress or queued, so
        // `owner` may go.
        unsafe { ffi::iwarp_shim_waker_remove(self.raw.as_ptr()) };
    }
}

/// A connection whose callbacks run its listener's waker; given its listener's callbacks back
/// when it goes, or is released.
///
/// # Invariants
///
/// `waker` is installed (it outlives this value, `Waker::watch`'s contract) and watches `sock`,
/// which is `Some` until drop.
pub(crate) struct Watched {
    sock: Option<TcpSocket>,
    waker: NonNull<ffi::iwarp_waker>,
}

// SAFETY: see `Waker`: the shim's functions may be called from any thread.
unsafe impl Send for Watched {}
// SAFETY: `&Watched` only reaches the socket, which is `Sync`.
unsafe impl Sync for Watched {}

impl Watched {
    /// The connection.
    pub(crate) fn socket(&self) -> &TcpSocket {
        self.sock.as_ref().expect("a watched connection has its socket until it goes")
    }

    /// Stops watching: a plain connection again, which a QP may hook.
    pub(crate) fn release(mut self) -> TcpSocket {
        self.unwatch();
        self.sock.take().expect("a watched connection has its socket until it goes")
    }

    fn unwatch(&self) {
        if let Some(sock) = &self.sock {
            // SAFETY: the waker is installed and watches the live `sock` (type invariant).
            unsafe { ffi::iwarp_shim_waker_unwatch(self.waker.as_ptr(), sock.sock.as_ptr()) };
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        // Before the socket goes: a connection closed with the waker's callbacks would call
        // them after the waker is gone.
        self.unwatch();
    }
}
