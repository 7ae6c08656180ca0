// SPDX-License-Identifier: GPL-2.0

//! An eventfd the application gave us: signalled when an armed completion queue gets an entry,
//! so the application can block in poll(2)/epoll. The kernel's eventfd API is in the kernel
//! crate's bindings; no shim needed.

use core::ptr::NonNull;
use kernel::bindings;
use kernel::error::from_err_ptr;
use kernel::prelude::*;

/// A reference to an eventfd.
///
/// # Invariants
///
/// `ctx` is an eventfd context on which this value holds one reference, dropped on drop.
pub(crate) struct EventFd {
    ctx: NonNull<bindings::eventfd_ctx>,
}

// SAFETY: the reference is owned and dropped once; eventfd_signal() may be called from any
// thread.
unsafe impl Send for EventFd {}
// SAFETY: see above.
unsafe impl Sync for EventFd {}

impl EventFd {
    /// The eventfd behind the caller's descriptor `fd` (EBADF, EINVAL if not an eventfd).
    pub(crate) fn get(fd: i32) -> Result<EventFd> {
        // SAFETY: eventfd_ctx_fdget() validates `fd` and returns a referenced context or an
        // error pointer.
        let ctx = from_err_ptr(unsafe { bindings::eventfd_ctx_fdget(fd) })?;
        Ok(EventFd { ctx: NonNull::new(ctx).ok_or(EINVAL)? })
    }

    /// Adds one to the counter, waking pollers (eventfd_signal(), a static inline).
    pub(crate) fn signal(&self) {
        // SAFETY: the reference is live.
        unsafe { bindings::eventfd_signal_mask(self.ctx.as_ptr(), 0) };
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: taken by eventfd_ctx_fdget(), dropped once.
        unsafe { bindings::eventfd_ctx_put(self.ctx.as_ptr()) };
    }
}
