//! The raw system calls on `/dev/iwarp`, each behind a safe function.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

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
