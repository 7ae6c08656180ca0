//! `fdopen` on an upgraded descriptor. The C library's own stream would read and write the
//! descriptor with its internal calls, which no preloaded library sees (and which fail on an
//! upgraded descriptor, an epoll instance); this one is a `fopencookie` stream whose reads,
//! writes and close go through this library. Its `fileno` is -1 (a cookie stream has no
//! descriptor): a program asking for it gets an error, never another stream.

use crate::real::real;
use libc::{c_char, c_int, c_void, size_t, ssize_t, FILE};

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
}

/// The descriptor a stream's cookie carries.
fn fd_of(cookie: *mut c_void) -> c_int {
    cookie as usize as c_int
}

unsafe extern "C" fn read(cookie: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: stdio's buffer of `n` octets; the read goes through this library.
    unsafe { crate::read(fd_of(cookie), buf.cast(), n) }
}

/// Writes all of `buf`: stdio takes a short write for an error.
unsafe extern "C" fn write(cookie: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    let mut done = 0;
    while done < n {
        // SAFETY: the rest of stdio's buffer of `n` octets; the write goes through this library.
        let w = unsafe { crate::write(fd_of(cookie), buf.add(done).cast(), n - done) };
        if w <= 0 {
            break;
        }
        done += w as size_t;
    }
    done as ssize_t
}

unsafe extern "C" fn close(cookie: *mut c_void) -> c_int {
    // SAFETY: the stream's descriptor, which fclose closes, as the C library's fdopen does.
    unsafe { crate::close(fd_of(cookie)) }
}

/// # Safety
/// As fdopen(3).
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    if crate::conn(fd).is_none() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real!(fdopen: unsafe extern "C" fn(c_int, *const c_char) -> *mut FILE)(fd, mode) };
    }
    let io = CookieIo { read: Some(read), write: Some(write), seek: None, close: Some(close) };
    // SAFETY: the cookie is the descriptor's number; `mode` is the caller's string.
    unsafe { fopencookie(fd as usize as *mut c_void, mode, io) }
}
