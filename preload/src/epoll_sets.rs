//! Epoll sets that watch a socket before `connect` upgrades it. A program may add its socket to
//! an epoll set before connecting (nginx does, for its upstream connections). The upgrade puts
//! another file under the descriptor's number, and the set would go on watching the TCP
//! socket the module now owns: never readable for the program, since the module reads it. So
//! the upgrade takes the socket out of every set that watches it and adds the descriptor it
//! becomes, with the same events and data, through the library's `epoll_ctl`.
//!
//! The sets are found where the kernel lists them, `/proc/self/fdinfo` of each epoll
//! descriptor, so sets filled by raw system calls or before the library loaded are found too;
//! once per upgraded `connect`, whose question and MPA exchange cost far more.

use crate::real::real;
use libc::{c_int, epoll_event};
use std::fs;

/// The socket's place in each set that watched it (taken out by [`Watchers::take`]).
pub(crate) struct Watchers(Vec<(c_int, epoll_event)>);

impl Watchers {
    /// Takes the socket `fd` out of every epoll set of this process that watches it.
    pub(crate) fn take(fd: c_int) -> Watchers {
        let mut found = Vec::new();
        let Some(ino) = inode(fd) else { return Watchers(found) };
        let Ok(dir) = fs::read_dir("/proc/self/fd") else { return Watchers(found) };
        for ep in dir.flatten().filter_map(|e| e.file_name().to_str()?.parse::<c_int>().ok()) {
            if ep == fd || fs::read_link(format!("/proc/self/fd/{ep}")).ok().is_none_or(|l| l.as_os_str() != "anon_inode:[eventpoll]") {
                continue;
            }
            let Ok(info) = fs::read_to_string(format!("/proc/self/fdinfo/{ep}")) else { continue };
            for ev in info.lines().filter_map(|l| watch_of(l, fd, ino)) {
                let mut none = epoll_event { events: 0, u64: 0 };
                // SAFETY: an epoll descriptor of this process and the socket it watches; the
                // event argument is ignored for a deletion.
                if unsafe { real!(epoll_ctl: unsafe extern "C" fn(c_int, c_int, c_int, *mut epoll_event) -> c_int)(ep, libc::EPOLL_CTL_DEL, fd, &mut none) }
                    == 0
                {
                    found.push((ep, ev));
                }
            }
        }
        Watchers(found)
    }

    /// Adds `fd` again to the sets it was taken out of, as it is now: the upgraded
    /// descriptor, or the socket if the upgrade failed (through the library's `epoll_ctl`,
    /// which tells them apart). Leaves errno as it was: a failed upgrade's stays the call's.
    pub(crate) fn restore(self, fd: c_int) {
        if self.0.is_empty() {
            return;
        }
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        for (ep, mut ev) in self.0 {
            // SAFETY: the set and the event it held, for the descriptor it watched.
            let rc = unsafe { crate::readiness::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
            if rc != 0 {
                crate::say!("descriptor {fd} could not be watched again by epoll set {ep}: {}", std::io::Error::last_os_error());
            }
        }
        crate::set_errno(errno);
    }
}

/// The inode of `fd`'s file.
fn inode(fd: c_int) -> Option<u64> {
    // SAFETY: zeroed storage is a valid stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor and storage of the right type.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
}

/// The event of a line of an epoll descriptor's fdinfo (`tfd: 5 events: 19 data: 5 pos:0
/// ino:1a2b sdev:8`, the numbers after `tfd` in hex) if it watches descriptor `fd` of inode
/// `ino`. A `name:` may have its value in the same word or the next.
fn watch_of(line: &str, fd: c_int, ino: u64) -> Option<epoll_event> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let get = |name: &str| -> Option<&str> {
        let i = words.iter().position(|w| w.starts_with(name))?;
        match &words[i][name.len()..] {
            "" => words.get(i + 1).copied(),
            v => Some(v),
        }
    };
    let tfd: c_int = get("tfd:")?.parse().ok()?;
    let events = u32::from_str_radix(get("events:")?, 16).ok()?;
    let data = u64::from_str_radix(get("data:")?, 16).ok()?;
    let watched_ino = u64::from_str_radix(get("ino:")?, 16).ok()?;
    (tfd == fd && watched_ino == ino).then_some(epoll_event { events, u64: data })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_of_fdinfo_names_the_watched_socket() {
        let line = "tfd:        7 events:       1d data:       00000000deadbeef  pos:0 ino:3f2a sdev:8";
        let ev = watch_of(line, 7, 0x3f2a).expect("the socket's line");
        let (events, data) = (ev.events, ev.u64);
        assert_eq!((events, data), (0x1d, 0xdead_beef));
        assert!(watch_of(line, 8, 0x3f2a).is_none(), "another descriptor");
        assert!(watch_of(line, 7, 0x3f2b).is_none(), "another file under the same number");
        assert!(watch_of("pos:\t0", 7, 0x3f2a).is_none(), "not a watch line");
    }

    #[test]
    fn a_socket_moves_between_sets_with_its_events() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        use std::os::fd::AsRawFd;
        let fd = a.as_raw_fd();
        // SAFETY: plain system calls on descriptors of this test.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(ep >= 0);
        let mut ev = epoll_event { events: (libc::EPOLLIN | libc::EPOLLET) as u32, u64: 42 };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) }, 0);
        let w = Watchers::take(fd);
        assert_eq!(w.0.len(), 1);
        let (events, data) = (w.0[0].1.events, w.0[0].1.u64);
        assert_eq!((w.0[0].0, events & (libc::EPOLLIN | libc::EPOLLET) as u32, data), (ep, (libc::EPOLLIN | libc::EPOLLET) as u32, 42));
        // SAFETY: as above: taken out, so modifying it fails.
        assert_eq!(unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, &mut ev) }, -1);
        w.restore(fd);
        use std::io::Write;
        (&b).write_all(b"x").unwrap();
        let mut got = [epoll_event { events: 0, u64: 0 }; 2];
        // SAFETY: as above.
        let n = unsafe { libc::epoll_wait(ep, got.as_mut_ptr(), 2, 1000) };
        let data = got[0].u64;
        assert_eq!((n, data), (1, 42), "watched again, with its data");
        // SAFETY: the test's own descriptor.
        unsafe { libc::close(ep) };
    }
}
