//! The raw system calls on `/dev/iwarp`, each behind a safe function.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `ioctl(fd, cmd, arg)` where the kernel writes a `T` through `arg`.
pub fn ioctl_read<T: Default>(fd: BorrowedFd<'_>, cmd: u32) -> io::Result<T> {
    let mut out = T::default();
    // SAFETY: `fd` is an open descriptor for the lifetime of the call, and `out` is a valid,
    // exclusively borrowed `T` whose size is encoded in `cmd` (the ABI's ioctl numbers are built
    // from the struct sizes), so the kernel writes only within it.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as libc::c_ulong, &mut out as *mut T) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(out)
    }
}
