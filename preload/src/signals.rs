//! Signals around the library's waits, as around a socket's: which interrupted calls go on,
//! and what no signal may interrupt (the MPA exchange, the library's own threads).

/// Signals the kernel raises for a fault of the thread itself (a bad access, an illegal
/// instruction): they never arrive while a call waits, so their handlers say nothing about one.
const SYNCHRONOUS: [libc::c_int; 6] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP, libc::SIGSYS];

/// Whether a blocking call that a signal handler interrupted goes on, as the kernel restarts a
/// socket call whose handler was installed with `SA_RESTART` (and none else). Which signal it
/// was is not known here: the call goes on only if every handler that could have run asks for
/// that.
pub(crate) fn restart_calls() -> bool {
    (1..=libc::SIGRTMAX()).filter(|sig| !SYNCHRONOUS.contains(sig)).all(|sig| {
        // SAFETY: sigaction is plain data; this only reads `sig`'s action into it.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above; nothing is changed.
        let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut act) };
        rc != 0 || act.sa_sigaction == libc::SIG_DFL || act.sa_sigaction == libc::SIG_IGN || act.sa_flags & libc::SA_RESTART != 0
    })
}

/// Runs `f` with every signal that can be held back held back in this thread; those that came
/// meanwhile are delivered after. Around the MPA exchange, whose wait in the module a signal
/// would end where a TCP connection already made would not be lost to it; and around starting
/// the library's threads, which keep this mask: a signal for the process then never runs the
/// program's handler on one of them.
pub(crate) fn held<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: sigset_t is plain data, filled by sigfillset before use.
    let (mut all, mut old): (libc::sigset_t, libc::sigset_t) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: live sets; the thread's mask is put back as it was below.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
    }
    let r = f();
    // SAFETY: as above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_started_with_signals_held_keeps_them_held() {
        let blocked = held(|| {
            std::thread::spawn(|| {
                // SAFETY: sigset_t is plain data; the query changes nothing.
                let mut now: libc::sigset_t = unsafe { std::mem::zeroed() };
                // SAFETY: as above.
                unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now) };
                // SAFETY: a live set.
                unsafe { libc::sigismember(&now, libc::SIGCHLD) == 1 && libc::sigismember(&now, libc::SIGINT) == 1 }
            })
            .join()
            .unwrap()
        });
        assert!(blocked);
    }
}
