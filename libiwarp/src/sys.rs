//! The raw system calls on `/dev/iwarp`, each behind a safe function.

use crate::abi::ioc_size;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// `ioctl(fd, cmd, arg)` on a `T` the kernel may read and write. EINVAL (and no system call)
/// unless `cmd` encodes `size_of::<T>()`, which is all the kernel copies.
pub fn ioctl<T>(fd: BorrowedFd<'_>, cmd: u32, arg: &mut T) -> io::Result<()> {
    // SAFETY: `arg` is a valid, exclusively borrowed `T` of that many bytes.
    unsafe { ioctl_on(fd, cmd, (arg as *mut T).cast(), std::mem::size_of::<T>()) }
}

/// `ioctl(fd, cmd, buf)` with any command on plain bytes (tests of the module's command
/// checking); EINVAL unless `cmd` encodes `buf.len()`.
#[cfg(feature = "test-hooks")]
pub fn ioctl_bytes(fd: BorrowedFd<'_>, cmd: u32, buf: &mut [u8]) -> io::Result<()> {
    // SAFETY: `buf` is valid and exclusively borrowed for its whole length.
    unsafe { ioctl_on(fd, cmd, buf.as_mut_ptr().cast(), buf.len()) }
}

/// # Safety
///
/// `arg` must be valid for reads and writes of `len` bytes during the call.
unsafe fn ioctl_on(fd: BorrowedFd<'_>, cmd: u32, arg: *mut libc::c_void, len: usize) -> io::Result<()> {
    if ioc_size(cmd) != len {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: `fd` is open for the duration of the call; the kernel copies at most the size
    // `cmd` encodes, which is `len`, and `arg` is valid for that by the caller's contract.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as libc::c_ulong, arg) };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{QueryDevice, IOCTL_QUERY_DEVICE};

    #[test]
    fn a_command_of_another_size_is_refused_before_the_kernel_sees_it() {
        // Refused before the descriptor is used: stdin stands in for /dev/iwarp.
        // SAFETY: descriptor 0 stays open for the test (and is not used).
        let fd = unsafe { BorrowedFd::borrow_raw(0) };
        let mut small = 0u32;
        let e = ioctl(fd, IOCTL_QUERY_DEVICE, &mut small).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert_eq!(ioc_size(IOCTL_QUERY_DEVICE), std::mem::size_of::<QueryDevice>());
    }
}
