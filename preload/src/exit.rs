//! The program's exit. The C library's `exit` (and returning from `main`) leaves the program's
//! descriptors to the kernel, which closes them through no call this library sees: upgraded
//! connections would end abruptly, the peer reading an error where TCP gives it EOF, and octets
//! still waiting in a send ring would be lost. A handler registered as the library is loaded
//! (so that it runs after every exit handler the program registers) ends them as `close` does.
//! `_exit`, and a process killed, still end them abruptly (docs/sockets.md).

/// Runs as the library is loaded, before `main`.
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

extern "C" fn at_load() {
    // SAFETY: registers a function that lives as long as the process (a preloaded library is
    // never unloaded).
    unsafe { libc::atexit(at_exit) };
}

extern "C" fn at_exit() {
    if crate::holds_connections() {
        crate::stdio::flush_streams();
        crate::release_all();
    }
}
