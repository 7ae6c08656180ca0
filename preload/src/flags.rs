//! The `flags` of send and receive calls on an upgraded socket: those the stream honours, and
//! for the others the errno TCP gives, or EOPNOTSUPP, never a silent difference
//! (docs/sockets.md, "Socket calls").

use libc::c_int;
use std::io;

/// What a receive asks for.
pub(crate) struct Recv {
    pub(crate) peek: bool,
    pub(crate) wait_all: bool,
    pub(crate) dont_wait: bool,
}

fn errno(e: c_int) -> io::Error {
    io::Error::from_raw_os_error(e)
}

/// A receive's flags: MSG_OOB is EINVAL (no urgent data is ever pending, as TCP says when none
/// is), MSG_ERRQUEUE EAGAIN (an empty error queue), flags the stream does not do EOPNOTSUPP.
pub(crate) fn recv(flags: c_int) -> io::Result<Recv> {
    if flags & libc::MSG_OOB != 0 {
        return Err(errno(libc::EINVAL));
    }
    if flags & libc::MSG_ERRQUEUE != 0 {
        return Err(errno(libc::EAGAIN));
    }
    let known = libc::MSG_PEEK | libc::MSG_WAITALL | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | libc::MSG_CMSG_CLOEXEC;
    if flags & !known != 0 {
        return Err(errno(libc::EOPNOTSUPP));
    }
    Ok(Recv { peek: flags & libc::MSG_PEEK != 0, wait_all: flags & libc::MSG_WAITALL != 0, dont_wait: flags & libc::MSG_DONTWAIT != 0 })
}

/// A send's flags, as whether not to wait: MSG_OOB is EOPNOTSUPP (urgent data is not carried),
/// as are flags the stream does not do; MSG_MORE, MSG_EOR and MSG_ZEROCOPY change nothing a
/// stream shows (the library coalesces and sends large writes zero copy by itself).
pub(crate) fn send(flags: c_int) -> io::Result<bool> {
    let known = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | libc::MSG_MORE | libc::MSG_EOR | libc::MSG_ZEROCOPY;
    if flags & libc::MSG_OOB != 0 || flags & !known != 0 {
        return Err(errno(libc::EOPNOTSUPP));
    }
    Ok(flags & libc::MSG_DONTWAIT != 0)
}
