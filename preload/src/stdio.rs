//! `fdopen` on an upgraded descriptor. The C library's own stream would read and write the
//! descriptor with its internal calls, which no preloaded library sees (and which fail on an
//! upgraded descriptor, an epoll instance); this one is a `fopencookie` stream whose reads,
//! writes and close go through this library. Its `fileno` is -1 (a cookie stream has no
//! descriptor): a program asking for it gets an error, never another stream.

use crate::real::real;
use libc::{c_char, c_int, c_void, size_t, ssize_t, FILE};
use std::sync::Mutex;

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
    fn ftrylockfile(stream: *mut FILE) -> c_int;
    fn funlockfile(stream: *mut FILE);
}

/// A stream's cookie: its descriptor, and the stream (set once made).
struct Cookie {
    fd: c_int,
    stream: *mut FILE,
}

/// The streams made here and not closed yet, by their cookies (as addresses): flushed at the
/// program's exit ([`flush_streams`]). A stream's close takes it off under its own lock.
static STREAMS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The descriptor a stream's cookie carries.
fn fd_of(cookie: *mut c_void) -> c_int {
    // SAFETY: every cookie is a live `Cookie` until the stream's close frees it.
    unsafe { (*cookie.cast::<Cookie>()).fd }
}

/// Flushes the streams made here, at the program's exit: the C library flushes its streams
/// only after every exit handler, and these write through this library, whose exit handler
/// closes their connections. A stream another thread holds locked (a read blocked in it, or
/// its close under way) is left alone: waiting for it could wait for ever.
pub(crate) fn flush_streams() {
    let Ok(streams) = STREAMS.try_lock() else { return };
    for &cookie in streams.iter() {
        // SAFETY: a listed cookie is live (its close takes it off first, under this lock), and
        // so is its stream; flushed only while this thread holds the stream's lock.
        unsafe {
            let f = (*(cookie as *const Cookie)).stream;
            if !f.is_null() && ftrylockfile(f) == 0 {
                libc::fflush(f);
                funlockfile(f);
            }
        }
    }
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
    let fd = fd_of(cookie);
    STREAMS.lock().unwrap_or_else(|e| e.into_inner()).retain(|&c| c != cookie as usize);
    // SAFETY: made by Box::into_raw in `fdopen`, off the list now, freed once (stdio calls
    // close once).
    drop(unsafe { Box::from_raw(cookie.cast::<Cookie>()) });
    // SAFETY: the stream's descriptor, which fclose closes, as the C library's fdopen does.
    unsafe { crate::close(fd) }
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
    let cookie = Box::into_raw(Box::new(Cookie { fd, stream: std::ptr::null_mut() }));
    // Made under the list's lock, so that nothing flushes it half made.
    let mut streams = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the cookie lives until the stream's close; `mode` is the caller's string.
    let f = unsafe { fopencookie(cookie.cast(), mode, io) };
    if f.is_null() {
        // SAFETY: made above, never handed out.
        drop(unsafe { Box::from_raw(cookie) });
        return f;
    }
    // SAFETY: the cookie is live; nothing reads `stream` without the list's lock.
    unsafe { (*cookie).stream = f };
    streams.push(cookie as usize);
    f
}
