//! The raw system calls on `/dev/iwarp`, each behind a safe function.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// `ioctl(fd, cmd, arg)` on a `T` the kernel may read and write; `cmd` must encode
/// `size_of::<T>()` (the ABI's ioctl numbers are built from the struct sizes).
pub fn ioctl<T>(fd: BorrowedFd<'_>, cmd: u32, arg: &mut T) -> io::Result<()> {
    // SAFETY: `fd` is open for the duration of the call and `arg` is a valid, exclusively
    // borrowed `T`; the kernel copies at most the size encoded in `cmd`, which is `T`'s.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as libc::c_ulong, arg as *mut T) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A fresh non-blocking eventfd (what the module signals for CQs and asynchronous events).
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the descriptor it returns is owned below.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `efd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(efd) })
}

/// Sleeps in poll(2) until the eventfd `fd` is signalled or `timeout` passes, then resets its
/// counter.
pub fn sleep_on(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<()> {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis().min(i32::MAX as u128) as i32) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let mut count = 0u64;
    // SAFETY: reads 8 bytes into a live u64 (the eventfd counter; EAGAIN when zero).
    unsafe { libc::read(fd.as_raw_fd(), (&raw mut count).cast(), 8) };
    Ok(())
}
