//! `ioctl-fuzz N SEED`: a local attacker's N system calls on `/dev/iwarp`, straight on the
//! device (no library in between), with seeded arguments built field by field.
//!
//! Every integer field is drawn from the values where arithmetic breaks (0, 1, each ABI limit
//! and its neighbours, powers of two and their neighbours, `MAX - k`) as well as at random;
//! handles are live objects of the right kind, dead ones or any number; option bits are subsets
//! of the defined ones, sometimes with others; pointers are NULL, kernel, non-canonical, a page
//! without access, or scratch memory of ours (also running into that page); the argument itself
//! is sometimes put at such addresses. Half of the calls start from a valid argument made of
//! live objects instead (`templates.rs`), with a field or two drawn as above, so that the checks
//! behind the first are reached too. Work-request entries with fields drawn the same way are
//! written into mapped rings before doorbells, and CQ consumer indices are overwritten; `mmap`
//! of the device gets wrong kinds, handles, sizes, protections and flags.
//!
//! The calls run in a child process; the oracle is this one:
//! - every call returns, with a result or an errno (a kernel BUG kills the caller: the call it
//!   was in is printed, argument and all, from a page the child shares);
//! - the kernel logs nothing while they run (`/dev/kmsg`);
//! - once the child is gone, `QUERY_STATS` is back where it was (nothing pinned, registered or
//!   left open).
//!
//! Nothing here sends to any address but 127.0.0.1 and ::1: every endpoint drawn or mutated is
//! given the loopback address of its family again before the call, and the fuzzer refuses to
//! run with a socket among its descriptors (ADOPT_QP takes any descriptor drawn).

mod commands;
mod draw;
mod templates;

use super::{ensure, Check};
use crate::raw::{errno_name, Raw};
use crate::rng::Rng;
use commands::{ender, Cmd, Obj, COMMANDS};
use draw::{Arena, Draw, PAGE};
use libiwarp::abi::{self, ring_kind, CreateCq, CreateQp, PostRecv, PostSend};
use std::collections::{BTreeMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Read;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Memory the module may be told to write into: it belongs to nothing else here.
const SCRATCH: usize = 1 << 20;
/// Objects of one kind kept alive at once: more are ended (a fuzzer must not exhaust memory).
const LIVE: usize = 16;

/// A shared mapping of the device the fuzzer made: a QP's work-request ring or a CQ's ring.
struct Mapped {
    base: *mut u8,
    len: usize,
    /// Whose ring: the QP's handle for work-request rings, none for a CQ ring.
    qp: Option<u32>,
    /// Send ring (PostSend entries) or receive ring (PostRecv entries).
    send: bool,
}

/// The fuzzing child's state.
struct Fuzz {
    raw: Raw,
    d: Draw,
    mapped: Vec<Mapped>,
    /// errno (0: success) -> count, per command.
    tally: BTreeMap<&'static str, BTreeMap<i32, u64>>,
    /// Hashes of the shapes drawn: a command and the class of each of its fields.
    shapes: HashSet<u64>,
    progress: &'static Progress,
}

impl Fuzz {
    fn count(&mut self, name: &'static str, errno: i32) {
        *self.tally.entry(name).or_default().entry(errno).or_default() += 1;
    }

    fn shape(&mut self, what: usize, classes: &[u8]) {
        let mut h = DefaultHasher::new();
        (what, classes).hash(&mut h);
        self.shapes.insert(h.finish());
    }

    /// One call of a command, with a drawn argument (or at a bad address).
    fn known(&mut self) {
        let i = self.d.r.below(COMMANDS.len());
        let c = &COMMANDS[i];
        if c.name == "DOORBELL" {
            self.scribble();
        }
        let mut shape = Vec::new();
        let template = if self.d.r.below(2) == 0 { self.d.template(c.name) } else { None };
        let mut buf = match template {
            Some(mut buf) => {
                shape.push(50);
                self.d.mutate(&mut buf, c.fields, &mut shape);
                buf
            }
            None => self.d.argument(abi::ioc_size(c.cmd), c.fields, &mut shape),
        };
        if self.d.r.below(10) == 0 {
            // The argument itself where the module cannot reach it, or in scratch (running into
            // the page without access after it, or not).
            let (p, class) = self.d.pointer();
            let s = &self.d.scratch;
            let at = if p == s.start() { s.guard() - (buf.len() / 2) as u64 } else { p };
            if at >= s.start() && at < s.guard() {
                let n = ((s.guard() - at) as usize).min(buf.len());
                // SAFETY: `n` octets from `at` lie inside the scratch area, which nothing here
                // relies on.
                unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), at as *mut u8, n) };
            }
            shape.push(100 + class);
            self.shape(i, &shape);
            self.progress.record(c.name, &buf);
            // SAFETY: `at` has no accessible memory, or lies in the scratch area, where the
            // readable part of the argument was just written with its pointer fields drawn by
            // Draw::pointer (NULL, inaccessible, or scratch).
            let errno = unsafe { self.raw.ioctl_at(c.cmd, at) };
            self.count(c.name, errno);
            return;
        }
        self.shape(i, &shape);
        self.progress.record(c.name, &buf);
        // SAFETY: every pointer field was drawn by Draw::pointer: NULL, inaccessible or scratch.
        let errno = unsafe { self.raw.ioctl(c.cmd, &mut buf) };
        self.count(c.name, errno);
        if errno == 0 {
            self.made(c, &buf);
        }
    }

    /// Keeps the handle a successful call made or ended, and maps the rings it made.
    fn made(&mut self, c: &Cmd, buf: &[u8]) {
        let word = |at: usize| u32::from_ne_bytes(buf[at..at + 4].try_into().expect("four octets"));
        let word64 = |at: usize| u64::from_ne_bytes(buf[at..at + 8].try_into().expect("eight octets"));
        if let Some((obj, at)) = c.ends {
            let h = word(at);
            self.d.live[obj as usize].retain(|&l| l != h);
            if self.d.dead[obj as usize].len() < LIVE {
                self.d.dead[obj as usize].push(h);
            }
            if obj == Obj::Qp {
                self.unmap(|m| m.qp == Some(h));
            }
        }
        let Some((obj, at)) = c.makes else { return };
        self.d.live[obj as usize].push(word(at));
        if obj == Obj::Listener && self.d.ports.len() < LIVE {
            let at = offset_of!(abi::Listen, at);
            let half = |i: usize| u16::from_ne_bytes([buf[at + i], buf[at + i + 1]]);
            self.d.ports.push((half(offset_of!(abi::Endpoint, family)), half(offset_of!(abi::Endpoint, port))));
        }
        match obj {
            Obj::Qp => {
                let qp = word(at);
                self.map(word64(offset_of!(CreateQp, sq_offset)), word64(offset_of!(CreateQp, sq_len)), Some(qp), true);
                self.map(word64(offset_of!(CreateQp, rq_offset)), word64(offset_of!(CreateQp, rq_len)), Some(qp), false);
            }
            Obj::Cq => self.map(word64(offset_of!(CreateCq, mmap_offset)), word64(offset_of!(CreateCq, mmap_len)), None, false),
            _ => {}
        }
        if self.d.live[obj as usize].len() > LIVE {
            self.end_oldest(obj);
        }
    }

    /// Ends the oldest live object of a kind, through its command (counted like any call).
    fn end_oldest(&mut self, obj: Obj) {
        let c = ender(obj);
        let (_, at) = c.ends.expect("an ender ends");
        let h = self.d.live[obj as usize].remove(0);
        let mut buf = vec![0u8; abi::ioc_size(c.cmd)];
        buf[at..at + 4].copy_from_slice(&h.to_ne_bytes());
        self.progress.record(c.name, &buf);
        // SAFETY: an all-zero argument but for the handle: no pointer fields are set.
        let errno = unsafe { self.raw.ioctl(c.cmd, &mut buf) };
        self.count(c.name, errno);
        self.made(c, &buf);
    }

    /// Maps a ring the module made (CQ rings: only one in four, they are large).
    fn map(&mut self, off: u64, len: u64, qp: Option<u32>, send: bool) {
        let len = len as usize;
        if self.mapped.len() >= 4 * LIVE || len == 0 {
            return;
        }
        // SAFETY: a fresh shared mapping of the device at the offset and length the module
        // returned; checked before use.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, self.raw.file.as_raw_fd(), off as libc::off_t)
        };
        if base != libc::MAP_FAILED {
            self.mapped.push(Mapped { base: base.cast(), len, qp, send });
        }
    }

    fn unmap(&mut self, which: impl Fn(&Mapped) -> bool) {
        self.mapped.retain(|m| {
            if which(m) {
                // SAFETY: a mapping made in map(), unmapped once (it leaves the list).
                unsafe { libc::munmap(m.base.cast(), m.len) };
                false
            } else {
                true
            }
        });
    }

    /// Drawn entries into a mapped work-request ring at random slots, or a drawn consumer index
    /// into a CQ ring: the module must copy and check every entry and never trust an index.
    fn scribble(&mut self) {
        if self.mapped.is_empty() {
            return;
        }
        let m = &self.mapped[self.d.r.below(self.mapped.len())];
        let (base, len, qp, send) = (m.base, m.len, m.qp, m.send);
        let mut shape = Vec::new();
        if qp.is_none() {
            let (v, class) = self.d.int(32);
            // SAFETY: the consumer word lies in the ring's header page, inside this live shared
            // mapping; the module reads it atomically and never trusts it.
            unsafe { base.add(abi::cq_ring::CONSUMER).cast::<u32>().write_volatile(v as u32) };
            shape.push(class);
        } else if send {
            for _ in 0..1 + self.d.r.below(4) {
                let slot = self.d.r.below(len / size_of::<PostSend>());
                let e = self.d.post_send(&mut shape);
                // SAFETY: slot * size + size <= len, inside this live shared mapping; the
                // module copies entries out and checks them.
                unsafe { base.add(slot * size_of::<PostSend>()).cast::<PostSend>().write_volatile(e) };
            }
        } else {
            for _ in 0..1 + self.d.r.below(4) {
                let slot = self.d.r.below(len / size_of::<PostRecv>());
                let e = self.d.post_recv(&mut shape);
                // SAFETY: as above, for receive entries.
                unsafe { base.add(slot * size_of::<PostRecv>()).cast::<PostRecv>().write_volatile(e) };
            }
        }
        self.shape(COMMANDS.len() + usize::from(send), &shape);
    }

    /// One call of a command the module does not have (type, number, direction or size wrong).
    fn unknown(&mut self) {
        let r = &mut self.d.r;
        let ty = if r.below(2) == 0 { abi::IOCTL_TYPE } else { r.below(256) as u32 };
        let size = [0, 4, 8, 64, r.below(1024)][r.below(5)];
        let cmd = (r.below(4) as u32) << 30 | (size as u32) << 16 | ty << 8 | r.below(64) as u32;
        let mut buf = vec![0u8; size];
        self.progress.record("unknown", &cmd.to_ne_bytes());
        // SAFETY: all zeros: any field the module took for a pointer is NULL.
        let errno = unsafe { self.raw.ioctl(cmd, &mut buf) };
        self.count("unknown", errno);
    }

    /// One mmap of the device with a drawn kind, handle, length, protection and flags; a
    /// mapping granted is read at its first and last octet.
    fn mmap(&mut self) {
        let kind = self.d.r.below(5) as u64;
        let obj = [Obj::Qp, Obj::Cq][self.d.r.below(2)];
        let (handle, _) = if self.d.r.below(2) == 0 { self.d.handle(obj) } else { self.d.int(32) };
        let handle = handle & ((1 << ring_kind::SHIFT) - 1);
        let len = match self.d.r.below(5) {
            0 => 0,
            1 => PAGE * (1 + self.d.r.below(4)),
            2 => PAGE * (1 + self.d.r.below(64)),
            3 => 1 + self.d.r.below(3 * PAGE),
            // Up to 64 MiB: larger private mappings fail in the kernel's own memory accounting
            // (which logs them) before the module is asked.
            _ => 1 << (12 + self.d.r.below(15)),
        };
        let prot =
            [libc::PROT_READ, libc::PROT_READ | libc::PROT_WRITE, libc::PROT_WRITE, libc::PROT_READ | libc::PROT_EXEC, libc::PROT_NONE][self.d.r.below(5)];
        let flags = if self.d.r.below(4) == 0 { libc::MAP_PRIVATE } else { libc::MAP_SHARED };
        let off = (kind << ring_kind::SHIFT | handle) * PAGE as u64 + if self.d.r.below(8) == 0 { 1 + self.d.r.below(PAGE - 1) as u64 } else { 0 };
        self.progress.record("mmap", &[off.to_ne_bytes(), (len as u64).to_ne_bytes()].concat());
        // SAFETY: a fresh mapping at an address of the kernel's choosing; checked below.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, self.raw.file.as_raw_fd(), off as libc::off_t) };
        if base == libc::MAP_FAILED {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            self.count("mmap", errno);
            return;
        }
        if prot & libc::PROT_READ != 0 {
            // SAFETY: both octets lie inside the mapping just granted; a module that granted
            // more than it backs would fault here, which the oracle reports as a crash.
            unsafe {
                base.cast::<u8>().read_volatile();
                base.cast::<u8>().add(len - 1).read_volatile();
            }
        }
        // SAFETY: the mapping just made, unmapped once.
        unsafe { libc::munmap(base, len) };
        self.count("mmap", 0);
    }
}

impl Drop for Fuzz {
    fn drop(&mut self) {
        self.unmap(|_| true);
    }
}

/// What the fuzzing child is doing, in a page it shares with its parent: the number of calls
/// begun and the last one's command and argument.
#[repr(C)]
struct Progress {
    calls: AtomicU64,
    name: [u8; 16],
    len: AtomicU64,
    arg: [u8; 128],
}

impl Progress {
    /// A page shared with the child a fork makes.
    fn shared() -> Result<&'static Progress, String> {
        // SAFETY: a fresh shared anonymous mapping, never unmapped (it lives as long as the
        // process); all zeros is a valid Progress.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0) };
        if p == libc::MAP_FAILED {
            return Err("mmap a shared page".into());
        }
        // SAFETY: page aligned, PAGE octets long, zeroed, and never unmapped.
        Ok(unsafe { &*p.cast::<Progress>() })
    }

    /// Notes the call about to be made (only the child writes; the parent reads once it is gone).
    fn record(&self, name: &str, arg: &[u8]) {
        let n = arg.len().min(self.arg.len());
        // SAFETY: only the fuzzing child writes these octets, and the parent reads them only
        // after the child stopped (or to report it stuck); both lie inside the shared page.
        unsafe {
            let name_at = self.name.as_ptr().cast_mut();
            std::ptr::write_bytes(name_at, 0, self.name.len());
            std::ptr::copy_nonoverlapping(name.as_ptr(), name_at, name.len().min(self.name.len()));
            std::ptr::copy_nonoverlapping(arg.as_ptr(), self.arg.as_ptr().cast_mut(), n);
        }
        self.len.store(n as u64, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Release);
    }

    /// "call #N: NAME with argument HEX".
    fn last(&self) -> String {
        let n = self.len.load(Ordering::Acquire) as usize;
        let name = String::from_utf8_lossy(&self.name).trim_end_matches('\0').to_string();
        let hex: String = self.arg[..n].chunks(4).map(|w| w.iter().rev().map(|b| format!("{b:02x}")).collect::<String>()).collect::<Vec<_>>().join(" ");
        format!("call #{}: {name} with argument (32-bit words) {hex}", self.calls.load(Ordering::Acquire))
    }
}

/// `/dev/kmsg` from where it ends now: what the kernel logs from then on.
struct Kmsg(std::fs::File);

impl Kmsg {
    fn from_now() -> Result<Kmsg, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open("/dev/kmsg").map_err(|e| format!("open /dev/kmsg: {e}"))?;
        // SAFETY: lseek on a descriptor we own; SEEK_END on /dev/kmsg moves past every record
        // logged so far.
        if unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_END) } < 0 {
            return Err("seek /dev/kmsg".into());
        }
        Ok(Kmsg(f))
    }

    /// The records logged since the last look.
    fn new_records(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match self.0.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.push(String::from_utf8_lossy(&buf[..n]).trim_end().to_string()),
                // EPIPE: records were overwritten before we read them; the next read goes on.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => out.push("(records lost: the log wrapped)".into()),
                Err(_) => break,
            }
        }
        out
    }
}

/// `ioctl-fuzz N SEED`: see the module doc.
pub(crate) fn ioctl_fuzz(n: u64, seed: u64) -> Check {
    let baseline = Raw::open()?.stats()?;
    let mut kmsg = Kmsg::from_now()?;
    let progress = Progress::shared()?;
    let start = Instant::now();
    // SAFETY: this process has one thread here (nothing before this subcommand started one),
    // so the child may go on running Rust code.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err("fork".into());
    }
    if child == 0 {
        let code = match fuzz(n, seed, progress) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("iwarp-check: the fuzzing process: {e}");
                1
            }
        };
        // SAFETY: ends the child at once, its output already flushed (stdout is line-buffered
        // and each report is a line), without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    // The parent watches: the child's end, the kernel's log, and the child's progress.
    let mut logged = Vec::new();
    let (mut seen, mut since) = (0, Instant::now());
    let status = loop {
        let mut status = 0;
        // SAFETY: waits for our own child, without blocking.
        let r = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        // TCP's note that a listener's queue overflowed is about the fuzzed backlogs and
        // ports (CONNECT_QP reaching a LISTEN of ours), not about the module.
        logged.extend(kmsg.new_records().into_iter().filter(|r| !r.contains("Possible SYN flooding on port")));
        if r == child {
            break status;
        }
        if !logged.is_empty() {
            // A BUG can leave the child unkillable: report at once.
            return Err(format!("the kernel logged during {}:\n{}", progress.last(), logged.join("\n")));
        }
        let calls = progress.calls.load(Ordering::Acquire);
        if calls != seen {
            (seen, since) = (calls, Instant::now());
        } else if since.elapsed() > Duration::from_secs(120) {
            return Err(format!("no call returned for 120 s: stuck in {}", progress.last()));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let ended = if libc::WIFSIGNALED(status) { format!("killed by signal {}", libc::WTERMSIG(status)) } else { format!("status {status:#x}") };
    if !logged.is_empty() {
        return Err(format!(
            "the kernel logged during the run (the fuzzing process ended: {ended}; its last call: {}):\n{}",
            progress.last(),
            logged.join("\n")
        ));
    }
    println!("ok: the kernel logged nothing while the calls ran");
    if libc::WIFSIGNALED(status) {
        return Err(format!("the fuzzing process was {ended} in {}", progress.last()));
    }
    ensure(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, format!("the fuzzing process ended with status {status:#x}"))?;
    ensure(
        progress.calls.load(Ordering::Acquire) >= n,
        format!("{} calls (seed {seed}) returned, each with a result or an errno, in {:.0?}", progress.calls.load(Ordering::Acquire), start.elapsed()),
    )?;
    // Closing the child's device ended everything it made; QP teardown may finish just after.
    let raw = Raw::open()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut now = raw.stats()?;
    while now != baseline && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        now = raw.stats()?;
    }
    ensure(now == baseline, format!("QUERY_STATS back where it was: {now:?} (before: {baseline:?})"))
}

/// The child's side: the calls, then their tally and the number of shapes drawn.
/// Refuses to fuzz with an IP socket among this process's descriptors (one inherited, standard
/// output on a connection): ADOPT_QP takes any descriptor drawn, and would run MPA toward that
/// socket's peer.
fn no_socket_open() -> Check {
    let dir = std::fs::read_dir("/proc/self/fd").map_err(|e| format!("/proc/self/fd: {e}"))?;
    for entry in dir.flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let (mut domain, mut len) = (0i32, std::mem::size_of::<i32>() as libc::socklen_t);
        // SAFETY: `domain` and `len` are live locals of the sizes given; a descriptor that is no
        // socket (or gone) only fails the call.
        let got = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_DOMAIN, (&mut domain as *mut i32).cast(), &mut len) };
        if got == 0 && (domain == libc::AF_INET || domain == libc::AF_INET6) {
            return Err(format!("descriptor {fd} is an IP socket: ADOPT_QP could reach its peer"));
        }
    }
    Ok(())
}

fn fuzz(n: u64, seed: u64, progress: &'static Progress) -> Check {
    // Descriptor 0 may be drawn for ADOPT_QP to take: make it one that is no socket.
    let null = std::fs::File::open("/dev/null").map_err(|e| format!("open /dev/null: {e}"))?;
    // SAFETY: dup2 onto descriptor 0 of this process, whose standard input is not used here.
    if unsafe { libc::dup2(null.as_raw_fd(), 0) } < 0 {
        return Err("dup2 /dev/null onto standard input".into());
    }
    no_socket_open()?;
    let raw = Raw::open()?;
    // SAFETY: eventfd makes a new descriptor, owned from here on.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if efd < 0 {
        return Err("eventfd".into());
    }
    let device_fd = raw.file.as_raw_fd();
    let d = Draw {
        r: Rng(seed),
        scratch: Arena::new(SCRATCH)?,
        live: Default::default(),
        dead: Default::default(),
        device_fd,
        ports: Vec::new(),
        // SAFETY: the descriptor eventfd just returned, owned by nothing else.
        eventfd: unsafe { OwnedFd::from_raw_fd(efd) },
    };
    let mut f = Fuzz { raw, d, mapped: Vec::new(), tally: BTreeMap::new(), shapes: HashSet::new(), progress };
    let start = Instant::now();
    for i in 0..n {
        match f.d.r.below(20) {
            0 => f.mmap(),
            1 => f.unknown(),
            _ => f.known(),
        }
        if i % 100_000 == 99_999 {
            println!("# {} calls in {:.0?}", i + 1, start.elapsed());
        }
    }
    for (name, t) in &f.tally {
        let line: Vec<String> = t.iter().map(|(e, c)| format!("{} {c}", errno_name(*e))).collect();
        println!("# {name:>15}: {}", line.join(", "));
    }
    println!("# {} distinct argument shapes (a command and the class each field was drawn from)", f.shapes.len());
    Ok(())
}
