//! Memory a process shares with the processes it forks, and what lives in it for a connection
//! they all hold: a lock any of them may take ([`SharedMutex`]), and the set of processes
//! holding it ([`Holders`]), so that the last one's close is the one that ends the stream.

use std::cell::UnsafeCell;
use std::io;
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Memory mapped `MAP_SHARED` from a memfd of its own: a process forked from this one maps the
/// same pages (the ones the module places into, where pinned private pages would be copied for
/// it at `fork` and go stale), and the memfd's device and inode tell whether a process still
/// maps them.
pub(crate) struct Shared {
    base: *mut u8,
    len: usize,
    /// The memfd's device, as `/proc/PID/maps` writes it, and its inode.
    file: (String, u64),
}

impl Shared {
    pub(crate) fn new(len: usize) -> io::Result<Shared> {
        // SAFETY: a name that is a C string; makes a descriptor nothing else owns.
        let fd = unsafe { libc::memfd_create(c"iwarp-sockets".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh, owned here (closed when this returns: the mapping keeps the memory).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let file = std::fs::File::from(fd);
        file.set_len(len as u64)?;
        let meta = file.metadata()?;
        let (dev, ino) = (std::os::unix::fs::MetadataExt::dev(&meta), std::os::unix::fs::MetadataExt::ino(&meta));
        let dev = format!("{:02x}:{:02x}", libc::major(dev), libc::minor(dev));
        // SAFETY: maps the memfd, `len` long, wherever the kernel likes.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Shared { base: base.cast(), len, file: (dev, ino) })
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    /// The whole mapping, for as long as it lives (the `Conn` that owns it drops it last).
    ///
    /// # Safety
    /// No other reference to the memory may be used while this one is.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes(&self) -> &'static mut [u8] {
        // SAFETY: mapped and `len` long until dropped; the caller keeps to the rest.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }

    /// Whether process `pid` maps this memory: it neither exited nor `exec`ed another program
    /// since it got it. A process whose maps cannot be read (no permission, no /proc, no
    /// descriptor left) counts: only a process that is not there is known gone.
    pub(crate) fn mapped_by(&self, pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            // Fields: address, permissions, offset, device, inode, path.
            Ok(maps) => maps.lines().any(|l| {
                let mut f = l.split_ascii_whitespace().skip(3);
                f.next() == Some(self.file.0.as_str()) && f.next().and_then(|i| i.parse().ok()) == Some(self.file.1)
            }),
            Err(e) => !(e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: mapped by `new` with this base and length, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// A value in [`Shared`] memory behind a lock that every thread of every process mapping it
/// takes: a process-shared, robust pthread mutex. If a process dies holding it, the next
/// locker is told (the value may be half changed).
#[repr(C)]
pub(crate) struct SharedMutex<T> {
    raw: UnsafeCell<libc::pthread_mutex_t>,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through the lock.
unsafe impl<T: Send> Sync for SharedMutex<T> {}

impl<T> SharedMutex<T> {
    /// Makes one at `at`.
    ///
    /// # Safety
    /// `at` is aligned, valid for writes, and lives (mapped) as long as any reference to it.
    pub(crate) unsafe fn init(at: *mut SharedMutex<T>, value: T) -> io::Result<()> {
        let mut attr = MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        // SAFETY: initializes `attr`, then sets two of its fields, then destroys it after the
        // mutex at `at` (valid for writes, the caller says) is made from it (or not: the first
        // error stops the rest).
        let rc = unsafe {
            let a = attr.as_mut_ptr();
            let mut rc = libc::pthread_mutexattr_init(a);
            if rc == 0 {
                rc = libc::pthread_mutexattr_setpshared(a, libc::PTHREAD_PROCESS_SHARED);
                if rc == 0 {
                    rc = libc::pthread_mutexattr_setrobust(a, libc::PTHREAD_MUTEX_ROBUST);
                }
                if rc == 0 {
                    rc = libc::pthread_mutex_init(UnsafeCell::raw_get(&raw const (*at).raw), a);
                }
                libc::pthread_mutexattr_destroy(a);
            }
            rc
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: as above; nothing refers to the value yet.
        unsafe { UnsafeCell::raw_get(&raw const (*at).value).write(value) };
        Ok(())
    }

    /// Takes the lock; beside the guard, whether a process died holding it.
    pub(crate) fn lock(&self) -> (SharedGuard<'_, T>, bool) {
        // SAFETY: a mutex `init` made, in memory mapped while `self` is.
        let rc = unsafe { libc::pthread_mutex_lock(self.raw.get()) };
        let died = rc == libc::EOWNERDEAD;
        if died {
            // SAFETY: this thread holds the mutex (EOWNERDEAD hands it over).
            unsafe { libc::pthread_mutex_consistent(self.raw.get()) };
        } else {
            // Every other error is for a mutex made otherwise, or one left inconsistent, which
            // the line above never does.
            assert_eq!(rc, 0, "a shared connection's lock failed");
        }
        (SharedGuard { mutex: self, _not_send: std::marker::PhantomData }, died)
    }
}

/// The lock of a [`SharedMutex`], held until this drops, in the thread that took it (a robust
/// mutex is its owner thread's to unlock).
pub(crate) struct SharedGuard<'a, T> {
    mutex: &'a SharedMutex<T>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl<T> Deref for SharedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the lock is held.
        unsafe { &*self.mutex.value.get() }
    }
}

impl<T> DerefMut for SharedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the lock is held, and this guard is borrowed mutably.
        unsafe { &mut *self.mutex.value.get() }
    }
}

impl<T> Drop for SharedGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: this thread holds the lock.
        unsafe { libc::pthread_mutex_unlock(self.mutex.raw.get()) };
    }
}

/// Processes holding a copy of a connection, by pid: the one that made it, and each process
/// forked from a holder (added by both sides of the fork, whichever comes first). One leaves
/// when it closes its copy; one that exited or `exec`ed without closing is found out when
/// another asks ([`Shared::mapped_by`]).
#[repr(C)]
pub(crate) struct Holders {
    pids: [AtomicU32; 64],
    /// More processes held it at once than there are slots: none can know it is the last.
    overflowed: AtomicBool,
}

impl Holders {
    /// Counts `pid` a holder of `page` (once).
    pub(crate) fn add(&self, pid: u32, page: &Shared) {
        if self.pids.iter().any(|p| p.load(Ordering::Acquire) == pid) {
            return;
        }
        for round in 0..2 {
            if self.pids.iter().any(|p| p.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire).is_ok()) {
                return;
            }
            if round == 0 {
                self.forget_gone(pid, page);
            }
        }
        self.overflowed.store(true, Ordering::Release);
    }

    /// `pid` closes its copy: whether no other process holds one. Leaves are serialized by the
    /// caller (under the connection's lock), so that of two closing at once one is last.
    pub(crate) fn leave(&self, pid: u32, page: &Shared) -> bool {
        for p in &self.pids {
            let _ = p.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Acquire);
        }
        !self.forget_gone(pid, page) && !self.overflowed.load(Ordering::Acquire)
    }

    /// Frees the slots of processes that no longer map `page`; whether another than `me` does.
    fn forget_gone(&self, me: u32, page: &Shared) -> bool {
        let mut others = false;
        for p in &self.pids {
            let pid = p.load(Ordering::Acquire);
            if pid == 0 || pid == me {
                continue;
            }
            if page.mapped_by(pid) {
                others = true;
            } else {
                let _ = p.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Acquire);
            }
        }
        others
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page with a lock over a counter and a set of holders in it.
    #[repr(C)]
    struct Page {
        count: SharedMutex<u64>,
        holders: Holders,
    }

    fn page() -> (Shared, &'static Page) {
        let shared = Shared::new(4096).unwrap();
        let at = shared.base() as *mut Page;
        // SAFETY: a fresh zeroed page, aligned, mapped until `shared` drops (after the test's
        // last use: each test keeps it to its end).
        unsafe { SharedMutex::init(&raw mut (*at).count, 0).unwrap() };
        // SAFETY: as above, initialized now.
        (shared, unsafe { &*at })
    }

    /// Forks; the child runs `f` and exits with its status without unwinding into the test
    /// harness. Returns the child's exit status.
    fn in_child(f: impl FnOnce() -> i32) -> i32 {
        // SAFETY: the child only runs `f` and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = f();
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: our child, a live int.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        libc::WEXITSTATUS(status)
    }

    #[test]
    fn a_forked_process_sees_and_changes_the_same_value() {
        let (_shared, page) = page();
        *page.count.lock().0 = 5;
        assert_eq!(
            in_child(|| {
                let (mut v, died) = page.count.lock();
                *v += 1;
                i32::from(*v == 6 && !died)
            }),
            1
        );
        let (v, died) = page.count.lock();
        assert_eq!((*v, died), (6, false));
    }

    #[test]
    fn a_process_that_dies_holding_the_lock_hands_it_on_and_says_so() {
        let (_shared, page) = page();
        in_child(|| {
            std::mem::forget(page.count.lock());
            0
        });
        let (_, died) = page.count.lock();
        assert!(died, "the next locker must be told");
        let (_, died) = page.count.lock();
        assert!(!died, "once");
    }

    #[test]
    fn the_last_holder_is_the_last_process_still_mapping_the_page() {
        let (shared, page) = page();
        let me = std::process::id();
        page.holders.add(me, &shared);
        // A child that leaves while we hold it is not last.
        let (r, w) = nix_pipe();
        // SAFETY: the child only writes to a pipe and `_exit`s.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let last = page.holders.leave(std::process::id(), &shared);
            // SAFETY: a live byte to a pipe end of ours.
            unsafe { libc::write(w, [u8::from(last)].as_ptr().cast(), 1) };
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(0) };
        }
        page.holders.add(child as u32, &shared);
        let mut b = [9u8];
        // SAFETY: reads one byte into a live buffer.
        assert_eq!(unsafe { libc::read(r, b.as_mut_ptr().cast(), 1) }, 1);
        assert_eq!(b[0], 0, "the parent still holds it: the child is not last");
        let mut status = 0;
        // SAFETY: our child, a live int.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        // That child has exited; another runs another program (forked and `exec`ed, as one
        // that never closed its copy before `exec`).
        page.holders.add(child as u32, &shared);
        let mut other = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        page.holders.add(other.id(), &shared);
        let last = page.holders.leave(me, &shared);
        other.kill().unwrap();
        other.wait().unwrap();
        assert!(last, "the others exited or run another program");
    }

    fn nix_pipe() -> (i32, i32) {
        let mut fds = [0; 2];
        // SAFETY: two live ints.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        (fds[0], fds[1])
    }
}
