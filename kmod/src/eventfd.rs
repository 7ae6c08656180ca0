// SPDX-License-Identifier: GPL-2.0

//! An eventfd the application gave us (`shim/notify_shim.c`): signalled when an armed
//! completion queue gets an entry, so the application can block in poll(2)/epoll.

use crate::error::made;
use core::ptr::NonNull;
use kernel::prelude::*;

mod ffi {
    #[repr(C)]
    pub(super) struct EventfdCtx {
        _opaque: [u8; 0],
    }
    extern "C" {
        pub(super) fn iwarp_shim_eventfd_get(fd: i32, err: *mut i32) -> *mut EventfdCtx;
        pub(super) fn iwarp_shim_eventfd_signal(ctx: *mut EventfdCtx);
        pub(super) fn iwarp_shim_eventfd_put(ctx: *mut EventfdCtx);
    }
}

/// A reference to an eventfd.
///
/// # Invariants
///
/// `ctx` is an eventfd context on which this value holds one reference, dropped on drop.
pub(crate) struct EventFd {
    ctx: NonNull<ffi::EventfdCtx>,
}

// SAFETY: the reference is owned and dropped once; eventfd_signal() may be called from any
// thread.
unsafe impl Send for EventFd {}
// SAFETY: see above.
unsafe impl Sync for EventFd {}

impl EventFd {
    /// The eventfd behind the caller's descriptor `fd` (EBADF, EINVAL if not an eventfd).
    pub(crate) fn get(fd: i32) -> Result<EventFd> {
        let mut err = 0;
        // SAFETY: `err` is a live local; the shim validates `fd`.
        let raw = unsafe { ffi::iwarp_shim_eventfd_get(fd, &mut err) };
        made(raw, err).map(|ctx| EventFd { ctx })
    }

    /// Adds one to the counter, waking pollers.
    pub(crate) fn signal(&self) {
        // SAFETY: the reference is live.
        unsafe { ffi::iwarp_shim_eventfd_signal(self.ctx.as_ptr()) };
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: taken by iwarp_shim_eventfd_get(), dropped once.
        unsafe { ffi::iwarp_shim_eventfd_put(self.ctx.as_ptr()) };
    }
}
