//! Local attackers: what a process allowed to open `/dev/iwarp` can throw at the module.
//!
//! - `ioctl-fuzz N SEED`: N system calls with seeded random arguments, straight on the device
//!   (no library in between): every command and unknown ones, every field of its argument a
//!   live handle, a small or extreme number, every pointer field an address the module must
//!   refuse or may only scribble on (NULL, kernel, non-canonical, a page without access, our
//!   own scratch memory, a buffer running into a page without access), the argument itself at
//!   such addresses; random bytes in the mapped work-request rings before doorbells; and
//!   `mmap` of the device with wrong kinds, handles, sizes, protections and flags (every
//!   mapping that is granted is read at its first and last octet). Every call must return, with a result or an
//!   errno; the tally of errnos is printed.
//! - `race N`: one thread makes QPs, rings their doorbells, posts receives naming a region and
//!   maps their rings while another destroys those QPs and a third deregisters and registers
//!   that region again, N times.
//! - `guess-local N`: a second process holds a registered region; this one names its STag
//!   (the exact one, other keys of its slot, other slots, random ones) N times in posted
//!   receives and deregistrations: every one is refused (STags are per open device), and the
//!   other process's region stays registered.
//!
//! Nothing here sends to any address but 127.0.0.1: connect and listen arguments are forced
//! to the loopback address.

use super::{ensure, open, Check};
use libiwarp::abi::{self, ring_kind, AdoptQp, ConnectQp, CreateCq, CreateQp, GetRequest, ListQps, Listen, PdOp, PostRecv, RegMr, Reject};
use libiwarp::{QpInit, Sge};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::mem::offset_of;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

const PAGE: usize = 4096;
/// Memory the module may be told to write into: it belongs to nothing else here.
const SCRATCH: usize = 1 << 20;
/// An address in the kernel's direct map.
const KERNEL: u64 = 0xffff_8880_0000_0000;

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `/dev/iwarp`, opened without the library, for raw system calls.
struct Raw {
    file: File,
}

impl Raw {
    fn open() -> Result<Raw, String> {
        let file = OpenOptions::new().read(true).write(true).open(libiwarp::DEVICE_PATH).map_err(|e| format!("open: {e}"))?;
        Ok(Raw { file })
    }

    /// ioctl on a buffer of exactly the size `cmd` encodes: 0 or the errno.
    ///
    /// # Safety
    ///
    /// Every pointer field in `buf` (the module may write, read or pin through them) is NULL,
    /// points at no accessible memory, or into memory this process does not otherwise rely on
    /// (the scratch area, or a buffer of its own made for this call).
    unsafe fn ioctl(&self, cmd: u32, buf: &mut [u8]) -> i32 {
        if abi::ioc_size(cmd) != buf.len() {
            return libc::EINVAL;
        }
        // SAFETY: `buf` is exclusively borrowed and as long as the size `cmd` encodes, which is
        // all the kernel reads or writes through the argument; its pointer fields are the
        // caller's contract.
        unsafe { self.ioctl_at(cmd, buf.as_mut_ptr() as u64) }
    }

    /// ioctl with `arg` as the argument's address: 0 or the errno.
    ///
    /// # Safety
    ///
    /// The kernel may write up to the size `cmd` encodes at `arg`: it must be memory this
    /// process does not otherwise rely on (a buffer of that size, the scratch area, or no
    /// accessible memory at all); and if the argument there is readable, its pointer fields
    /// are as [`Raw::ioctl`] requires.
    unsafe fn ioctl_at(&self, cmd: u32, arg: u64) -> i32 {
        // SAFETY: the caller's contract covers what the kernel may write.
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), cmd as libc::c_ulong, arg) };
        if rc < 0 {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        } else {
            0
        }
    }

    /// A typed call: the argument goes in and comes back.
    ///
    /// # Safety
    ///
    /// As for [`Raw::ioctl`]: `arg`'s pointer fields name nothing this process relies on.
    unsafe fn call_with_pointers<T: Copy>(&self, cmd: u32, arg: &mut T) -> i32 {
        // SAFETY: T is one of the ABI's plain-data structs; viewing it as bytes is sound, and
        // any bytes the kernel writes back are a valid T.
        let bytes = unsafe { std::slice::from_raw_parts_mut((arg as *mut T).cast::<u8>(), std::mem::size_of::<T>()) };
        // SAFETY: the caller's contract.
        unsafe { self.ioctl(cmd, bytes) }
    }

    /// A typed call with an argument that holds no addresses.
    fn call<T: NoPointers>(&self, cmd: u32, arg: &mut T) -> i32 {
        // SAFETY: `T` has no pointer fields (the trait's contract).
        unsafe { self.call_with_pointers(cmd, arg) }
    }
}

/// ABI argument structs with no field the module reads, writes or pins through as an address.
///
/// # Safety
///
/// Implementors hold handles, numbers, offsets and lengths only.
unsafe trait NoPointers: Copy {}
// SAFETY: each of these holds handles, counts, offsets, lengths and flags only (abi.rs).
unsafe impl NoPointers for PdOp {}
// SAFETY: as above.
unsafe impl NoPointers for CreateCq {}
// SAFETY: as above.
unsafe impl NoPointers for CreateQp {}
// SAFETY: as above.
unsafe impl NoPointers for abi::Doorbell {}
// SAFETY: as above.
unsafe impl NoPointers for abi::QueryQp {}
// SAFETY: as above.
unsafe impl NoPointers for abi::DestroyQp {}
// SAFETY: as above.
unsafe impl NoPointers for abi::DeregMr {}
// SAFETY: as above.
unsafe impl NoPointers for abi::QueryStats {}

/// Anonymous memory: `len` octets readable and writable, followed by one page without access.
struct Arena {
    base: *mut u8,
    len: usize,
}

impl Arena {
    fn new(len: usize) -> Result<Arena, String> {
        // SAFETY: a fresh private anonymous mapping; checked below.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len + PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        if base == libc::MAP_FAILED {
            return Err("mmap scratch".into());
        }
        // SAFETY: the last page of the mapping just made.
        if unsafe { libc::mprotect(base.cast::<u8>().add(len).cast(), PAGE, libc::PROT_NONE) } != 0 {
            return Err("mprotect guard".into());
        }
        Ok(Arena { base: base.cast(), len })
    }

    fn start(&self) -> u64 {
        self.base as u64
    }

    /// The page without access right after the arena.
    fn guard(&self) -> u64 {
        self.start() + self.len as u64
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new(), unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len + PAGE) };
    }
}

/// A command and where its argument holds pointers (addresses the module reads or writes),
/// timeouts (kept short: a fuzzer must not sleep) and IPv4 addresses (kept on loopback).
struct Cmd {
    name: &'static str,
    cmd: u32,
    pointers: &'static [usize],
    timeouts: &'static [usize],
    ipv4: Option<usize>,
}

const ADOPT_POINTERS: [usize; 2] = [offset_of!(AdoptQp, private_data), offset_of!(AdoptQp, peer_private)];
const fn adopt_in(at: usize) -> [usize; 2] {
    [at + ADOPT_POINTERS[0], at + ADOPT_POINTERS[1]]
}

const COMMANDS: &[Cmd] = &[
    Cmd { name: "QUERY_DEVICE", cmd: abi::IOCTL_QUERY_DEVICE, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "QUERY_STATS", cmd: abi::IOCTL_QUERY_STATS, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "ALLOC_PD", cmd: abi::IOCTL_ALLOC_PD, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "DEALLOC_PD", cmd: abi::IOCTL_DEALLOC_PD, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "REG_MR", cmd: abi::IOCTL_REG_MR, pointers: &[offset_of!(RegMr, addr)], timeouts: &[], ipv4: None },
    Cmd { name: "DEREG_MR", cmd: abi::IOCTL_DEREG_MR, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "CREATE_CQ", cmd: abi::IOCTL_CREATE_CQ, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "DESTROY_CQ", cmd: abi::IOCTL_DESTROY_CQ, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "ARM_CQ", cmd: abi::IOCTL_ARM_CQ, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "CREATE_QP", cmd: abi::IOCTL_CREATE_QP, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "DESTROY_QP", cmd: abi::IOCTL_DESTROY_QP, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "QUERY_QP", cmd: abi::IOCTL_QUERY_QP, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "DOORBELL", cmd: abi::IOCTL_DOORBELL, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "ADOPT_QP", cmd: abi::IOCTL_ADOPT_QP, pointers: &ADOPT_POINTERS, timeouts: &[offset_of!(AdoptQp, timeout_ms)], ipv4: None },
    Cmd {
        name: "CONNECT_QP",
        cmd: abi::IOCTL_CONNECT_QP,
        pointers: &adopt_in(offset_of!(ConnectQp, adopt)),
        timeouts: &[offset_of!(ConnectQp, adopt) + offset_of!(AdoptQp, timeout_ms)],
        ipv4: Some(offset_of!(ConnectQp, addr)),
    },
    Cmd { name: "LISTEN", cmd: abi::IOCTL_LISTEN, pointers: &[], timeouts: &[], ipv4: Some(offset_of!(Listen, addr)) },
    Cmd { name: "CLOSE_LISTENER", cmd: abi::IOCTL_CLOSE_LISTENER, pointers: &[], timeouts: &[], ipv4: None },
    Cmd {
        name: "GET_REQUEST",
        cmd: abi::IOCTL_GET_REQUEST,
        pointers: &[offset_of!(GetRequest, peer_private)],
        timeouts: &[offset_of!(GetRequest, timeout_ms)],
        ipv4: None,
    },
    Cmd {
        name: "ACCEPT",
        cmd: abi::IOCTL_ACCEPT,
        pointers: &adopt_in(offset_of!(abi::Accept, adopt)),
        timeouts: &[offset_of!(abi::Accept, adopt) + offset_of!(AdoptQp, timeout_ms)],
        ipv4: None,
    },
    Cmd { name: "REJECT", cmd: abi::IOCTL_REJECT, pointers: &[offset_of!(Reject, private_data)], timeouts: &[], ipv4: None },
    Cmd { name: "DISCONNECT", cmd: abi::IOCTL_DISCONNECT, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "SET_EVENT_FD", cmd: abi::IOCTL_SET_EVENT_FD, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "GET_ASYNC_EVENT", cmd: abi::IOCTL_GET_ASYNC_EVENT, pointers: &[], timeouts: &[], ipv4: None },
    Cmd { name: "LIST_QPS", cmd: abi::IOCTL_LIST_QPS, pointers: &[offset_of!(ListQps, entries)], timeouts: &[], ipv4: None },
];

/// Handles the fuzzer made, to name in arguments (dead ones too: they must be refused).
#[derive(Default)]
struct Live {
    handles: Vec<u32>,
}

/// A mapped work-request ring of a QP the fuzzer made.
struct Ring {
    base: *mut u8,
    len: usize,
}

/// The fuzzer's state.
struct Fuzz {
    raw: Raw,
    r: Rng,
    scratch: Arena,
    live: Live,
    rings: Vec<Ring>,
    /// errno (0: success) -> count, per command.
    tally: BTreeMap<&'static str, BTreeMap<i32, u64>>,
}

impl Fuzz {
    /// A 32-bit field: zero, a handle, a small, extreme or random number.
    fn word(&mut self) -> u32 {
        match self.r.below(9) {
            0 | 1 => 0,
            2 | 3 if !self.live.handles.is_empty() => self.live.handles[self.r.below(self.live.handles.len())],
            4 => self.r.below(64) as u32,
            5 => self.r.next() as u32,
            6 => u32::MAX - self.r.below(2) as u32,
            7 => self.raw.file.as_raw_fd() as u32,
            _ => 1 << self.r.below(32),
        }
    }

    /// A pointer field: nothing the module may use except the scratch area.
    fn pointer(&mut self) -> u64 {
        let s = &self.scratch;
        match self.r.below(7) {
            0 => 0,
            1 => s.start() + self.r.below(s.len) as u64,
            2 => s.guard(),
            3 => s.guard() - 1 - self.r.below(64) as u64,
            4 => KERNEL + self.r.below(1 << 30) as u64,
            5 => 0x8000_0000_0000_0000 | self.r.next(),
            _ => s.start(),
        }
    }

    /// Records the handle a successful call made (the field each kind of object comes back in).
    fn remember(&mut self, name: &str, buf: &[u8]) {
        let at = match name {
            "ALLOC_PD" => offset_of!(PdOp, pd),
            "REG_MR" => offset_of!(RegMr, stag),
            "CREATE_CQ" => offset_of!(CreateCq, cq),
            "CREATE_QP" => offset_of!(CreateQp, qp),
            "LISTEN" => offset_of!(Listen, listener),
            "GET_REQUEST" => offset_of!(GetRequest, request),
            _ => return,
        };
        let h = u32::from_ne_bytes(buf[at..at + 4].try_into().expect("four octets"));
        if self.live.handles.len() < 256 {
            self.live.handles.push(h);
        }
        if name == "CREATE_QP" && self.rings.len() < 8 {
            self.map_rings(buf);
        }
    }

    /// Maps the rings of a QP a fuzzed CREATE_QP made, to scribble on before doorbells.
    fn map_rings(&mut self, buf: &[u8]) {
        let word64 = |at: usize| u64::from_ne_bytes(buf[at..at + 8].try_into().expect("eight octets"));
        for (off, len) in [(offset_of!(CreateQp, sq_offset), offset_of!(CreateQp, sq_len)), (offset_of!(CreateQp, rq_offset), offset_of!(CreateQp, rq_len))] {
            let (off, len) = (word64(off), word64(len) as usize);
            // SAFETY: a fresh shared mapping of the device at the offset and length the module
            // returned; checked before use.
            let base = unsafe {
                libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, self.raw.file.as_raw_fd(), off as libc::off_t)
            };
            if base != libc::MAP_FAILED {
                self.rings.push(Ring { base: base.cast(), len });
            }
        }
    }

    /// Random words over a random mapped ring (the module must copy and check every entry).
    fn scribble(&mut self) {
        if self.rings.is_empty() {
            return;
        }
        let i = self.r.below(self.rings.len());
        let (base, len) = (self.rings[i].base, self.rings[i].len);
        for _ in 0..16 {
            let at = self.r.below(len / 4) * 4;
            let v = self.word();
            // SAFETY: `at + 4 <= len` inside a live shared mapping of ours; the module reads
            // these words with atomics and never trusts them.
            unsafe { base.add(at).cast::<u32>().write_volatile(v) };
        }
    }

    fn count(&mut self, name: &'static str, errno: i32) {
        *self.tally.entry(name).or_default().entry(errno).or_default() += 1;
    }

    /// A fuzzed argument for `c`: random words, then its pointers, timeouts and IPv4 address
    /// made safe (pointers into scratch or nowhere, timeouts short, addresses on loopback).
    fn argument(&mut self, c: &Cmd) -> Vec<u8> {
        let mut buf = vec![0u8; abi::ioc_size(c.cmd)];
        for w in buf.chunks_exact_mut(4) {
            w.copy_from_slice(&self.word().to_ne_bytes());
        }
        for &p in c.pointers {
            let v = self.pointer();
            buf[p..p + 8].copy_from_slice(&v.to_ne_bytes());
        }
        for &t in c.timeouts {
            let v = self.r.below(20) as u32;
            buf[t..t + 4].copy_from_slice(&v.to_ne_bytes());
        }
        if let Some(a) = c.ipv4 {
            buf[a..a + 4].copy_from_slice(&0x7f00_0001u32.to_ne_bytes());
        }
        buf
    }

    /// One call of a known command with a fuzzed argument (or at a bad address).
    fn known(&mut self) {
        let c = &COMMANDS[self.r.below(COMMANDS.len())];
        if c.name == "DOORBELL" {
            self.scribble();
        }
        let mut buf = self.argument(c);
        if self.r.below(10) == 0 {
            // The argument itself where the module cannot reach it, or in scratch (running into
            // the page without access after it, or not), where a sane argument is put first.
            let at = match self.pointer() {
                p if p == self.scratch.start() => self.scratch.guard() - (buf.len() / 2) as u64,
                p => p,
            };
            if at >= self.scratch.start() && at < self.scratch.guard() {
                let room = (self.scratch.guard() - at) as usize;
                let n = room.min(buf.len());
                // SAFETY: `n` octets from `at` lie inside the scratch area, which nothing here
                // relies on.
                unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), at as *mut u8, n) };
            }
            // SAFETY: `at` has no accessible memory, or lies in the scratch area, where the
            // readable part of the argument was just written with safe pointer fields.
            let errno = unsafe { self.raw.ioctl_at(c.cmd, at) };
            self.count(c.name, errno);
            return;
        }
        // SAFETY: argument() made every pointer field NULL, inaccessible or inside scratch.
        let errno = unsafe { self.raw.ioctl(c.cmd, &mut buf) };
        if errno == 0 {
            self.remember(c.name, &buf);
        }
        self.count(c.name, errno);
    }

    /// One call of a command the module does not have (type, number, direction or size wrong).
    fn unknown(&mut self) {
        let ty = if self.r.below(2) == 0 { abi::IOCTL_TYPE } else { self.r.below(256) as u32 };
        let size = [0, 4, 8, 64, self.r.below(1024)][self.r.below(5)];
        let cmd = (self.r.below(4) as u32) << 30 | (size as u32) << 16 | ty << 8 | self.r.below(64) as u32;
        let mut buf = vec![0u8; size];
        // SAFETY: all zeros: any field the module took for a pointer is NULL.
        let errno = unsafe { self.raw.ioctl(cmd, &mut buf) };
        self.count("unknown", errno);
    }

    /// One mmap of the device with a random kind, handle, length, protection and flags; a
    /// mapping granted is read at its first and last octet.
    fn mmap(&mut self) {
        let kind = self.r.below(5) as u64;
        let handle = if self.r.below(2) == 0 { self.word() } else { self.r.below(8) as u32 } as u64 & ((1 << ring_kind::SHIFT) - 1);
        let len = match self.r.below(5) {
            0 => 0,
            1 => PAGE * (1 + self.r.below(4)),
            2 => PAGE * (1 + self.r.below(64)),
            3 => 1 + self.r.below(3 * PAGE),
            _ => 1 << (12 + self.r.below(20)),
        };
        let prot = [libc::PROT_READ, libc::PROT_READ | libc::PROT_WRITE, libc::PROT_WRITE, libc::PROT_READ | libc::PROT_EXEC, libc::PROT_NONE][self.r.below(5)];
        let flags = if self.r.below(4) == 0 { libc::MAP_PRIVATE } else { libc::MAP_SHARED };
        let off = (kind << ring_kind::SHIFT | handle) * PAGE as u64 + if self.r.below(8) == 0 { 1 + self.r.below(PAGE - 1) as u64 } else { 0 };
        // SAFETY: a fresh mapping at an address of the kernel's choosing; checked below.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, self.raw.file.as_raw_fd(), off as libc::off_t) };
        if base == libc::MAP_FAILED {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            self.count("mmap", errno);
            return;
        }
        if prot & libc::PROT_READ != 0 {
            // SAFETY: both octets lie inside the mapping just granted; a module that granted
            // more than it backs would fault here, which the test reports as a crash.
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
        for ring in &self.rings {
            // SAFETY: mappings made in map_rings(), unmapped once.
            unsafe { libc::munmap(ring.base.cast(), ring.len) };
        }
    }
}

/// The errno's name.
fn errno_name(e: i32) -> String {
    match e {
        0 => "ok".into(),
        // SAFETY: strerror returns a pointer to a static string for any value.
        _ => format!("{} ({e})", unsafe { std::ffi::CStr::from_ptr(libc::strerror(e)) }.to_string_lossy()),
    }
}

/// `ioctl-fuzz N SEED`.
pub(crate) fn ioctl_fuzz(n: u64, seed: u64) -> Check {
    let mut f = Fuzz { raw: Raw::open()?, r: Rng(seed), scratch: Arena::new(SCRATCH)?, live: Live::default(), rings: Vec::new(), tally: BTreeMap::new() };
    let start = Instant::now();
    for i in 0..n {
        match f.r.below(20) {
            0 => f.mmap(),
            1 => f.unknown(),
            _ => f.known(),
        }
        if i % 100_000 == 99_999 {
            println!("# {} calls in {:.0?}", i + 1, start.elapsed());
        }
    }
    let calls: u64 = f.tally.values().flat_map(|t| t.values()).sum();
    ensure(calls == n, format!("{n} calls (seed {seed}) returned, each with a result or an errno, in {:.0?}", start.elapsed()))?;
    for (name, t) in &f.tally {
        let line: Vec<String> = t.iter().map(|(e, c)| format!("{} {c}", errno_name(*e))).collect();
        println!("# {name:>15}: {}", line.join(", "));
    }
    Ok(())
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// `race N`: see the module doc.
pub(crate) fn race(n: u64) -> Check {
    let raw = Raw::open()?;
    let mut pd = PdOp::default();
    ensure(raw.call(abi::IOCTL_ALLOC_PD, &mut pd) == 0, "ALLOC_PD")?;
    let mut cq = CreateCq { depth: 64, eventfd: -1, ..CreateCq::default() };
    ensure(raw.call(abi::IOCTL_CREATE_CQ, &mut cq) == 0, "CREATE_CQ")?;
    let mut buf = vec![0u8; 64 * PAGE];
    let mut mr = RegMr { addr: buf.as_mut_ptr() as u64, length: buf.len() as u64, access: abi::access::LOCAL_WRITE, pd: pd.pd, ..RegMr::default() };
    // SAFETY: the region's address is `buf`, which the module only pins (no peer can write it:
    // these QPs never connect); it outlives the registration (deregistered below, or by
    // closing the device when this returns early).
    ensure(unsafe { raw.call_with_pointers(abi::IOCTL_REG_MR, &mut mr) } == 0, "REG_MR")?;
    // The live registration: its STag (high half) and the address it starts at (low half,
    // as an offset into the buffer).
    let (qp_now, stag_now, stop) = (AtomicU32::new(0), AtomicU64::new((mr.stag as u64) << 32), AtomicBool::new(false));
    let tallies = std::thread::scope(|s| {
        let maker = s.spawn(|| {
            // The others stop when this ends, also by a panic.
            let _stop = StopOnDrop(&stop);
            let mut t: BTreeMap<&str, BTreeMap<i32, u64>> = BTreeMap::new();
            let mut count = |op: &'static str, e: i32| *t.entry(op).or_default().entry(e).or_default() += 1;
            for _ in 0..n {
                let mut req = CreateQp { send_cq: cq.cq, recv_cq: cq.cq, max_recv_wr: 4, max_send_wr: 4, pd: pd.pd, max_sge: 1, ..CreateQp::default() };
                let e = raw.call(abi::IOCTL_CREATE_QP, &mut req);
                count("create", e);
                if e != 0 {
                    continue;
                }
                qp_now.store(req.qp, Ordering::Release);
                // Map the receive ring, post one receive naming the region, ring the doorbell.
                // SAFETY: a fresh shared mapping at the offset and length the module returned;
                // checked before use.
                let ring = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        req.rq_len as usize,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED,
                        raw.file.as_raw_fd(),
                        req.rq_offset as libc::off_t,
                    )
                };
                let mapped = ring != libc::MAP_FAILED;
                count("mmap", if mapped { 0 } else { std::io::Error::last_os_error().raw_os_error().unwrap_or(0) });
                if mapped {
                    let mut entry = PostRecv { qp: req.qp, num_sge: 1, wr_id: 1, ..PostRecv::default() };
                    let live = stag_now.load(Ordering::Acquire);
                    entry.sge[0] = Sge { addr: mr.addr + (live & 0xffff_ffff), length: 4096, lkey: (live >> 32) as u32 };
                    // SAFETY: entry 0 of the receive ring just mapped (at least one entry long).
                    unsafe { ring.cast::<PostRecv>().write_volatile(entry) };
                }
                let mut db = abi::Doorbell { qp: req.qp, rq_tail: 1, ..abi::Doorbell::default() };
                count("doorbell", raw.call(abi::IOCTL_DOORBELL, &mut db));
                if db.rq_error != 0 {
                    count("doorbell: receive refused", db.rq_error as i32);
                }
                let mut q = abi::QueryQp { qp: req.qp, ..abi::QueryQp::default() };
                count("query", raw.call(abi::IOCTL_QUERY_QP, &mut q));
                if mapped {
                    // SAFETY: the mapping made above, unmapped once.
                    unsafe { libc::munmap(ring, req.rq_len as usize) };
                }
                // Unless the other thread was first.
                count("destroy (maker)", raw.call(abi::IOCTL_DESTROY_QP, &mut abi::DestroyQp { qp: req.qp, reserved: 0 }));
            }
            t
        });
        let destroyer = s.spawn(|| {
            let mut t: BTreeMap<&str, BTreeMap<i32, u64>> = BTreeMap::new();
            while !stop.load(Ordering::Acquire) {
                let mut req = abi::DestroyQp { qp: qp_now.load(Ordering::Acquire), reserved: 0 };
                *t.entry("destroy").or_default().entry(raw.call(abi::IOCTL_DESTROY_QP, &mut req)).or_default() += 1;
            }
            t
        });
        let reregister = s.spawn(|| {
            // The region is registered again (the other half of the buffer, then this one
            // again), published, and only then is the registration it replaces dropped: a
            // receive names a live region or one deregistered a moment ago.
            let mut t: BTreeMap<&str, BTreeMap<i32, u64>> = BTreeMap::new();
            let mut half = 0;
            while !stop.load(Ordering::Acquire) {
                half ^= 1;
                let mut again = RegMr { stag: 0, lkey: 0, addr: mr.addr + half * mr.length / 2, length: mr.length / 2, ..mr };
                // SAFETY: half of `buf`, as for the first registration.
                let e = unsafe { raw.call_with_pointers(abi::IOCTL_REG_MR, &mut again) };
                *t.entry("reg").or_default().entry(e).or_default() += 1;
                if e == 0 {
                    let old = stag_now.swap((again.stag as u64) << 32 | (again.addr - mr.addr), Ordering::AcqRel);
                    let mut d = abi::DeregMr { stag: (old >> 32) as u32, reserved: 0 };
                    *t.entry("dereg").or_default().entry(raw.call(abi::IOCTL_DEREG_MR, &mut d)).or_default() += 1;
                }
            }
            t
        });
        [maker.join(), destroyer.join(), reregister.join()]
    });
    let mut destroyed = 0;
    for t in tallies {
        let t = t.map_err(|_| "a racing thread panicked")?;
        for (op, errnos) in t {
            let line: Vec<String> = errnos.iter().map(|(e, c)| format!("{} {c}", errno_name(*e))).collect();
            println!("# {op:>26}: {}", line.join(", "));
            if op == "destroy" {
                destroyed = errnos.get(&0).copied().unwrap_or(0);
            }
        }
    }
    // What the racing left: the last QP and the region, then nothing.
    let _ = raw.call(abi::IOCTL_DESTROY_QP, &mut abi::DestroyQp { qp: qp_now.load(Ordering::Acquire), reserved: 0 });
    let _ = raw.call(abi::IOCTL_DEREG_MR, &mut abi::DeregMr { stag: (stag_now.load(Ordering::Acquire) >> 32) as u32, reserved: 0 });
    let mut stats = abi::QueryStats::default();
    ensure(raw.call(abi::IOCTL_QUERY_STATS, &mut stats) == 0, "QUERY_STATS")?;
    drop(buf);
    ensure(
        destroyed > 0 && stats.queue_pairs == 0 && stats.memory_regions == 0 && stats.pinned_pages == 0,
        format!("{n} QPs made, doorbelled, queried and mapped while another thread destroyed {destroyed} of them and a third re-registered the region their receives named; then nothing left ({stats:?})"),
    )
}

/// `guess-local N`: see the module doc.
pub(crate) fn guess_local(n: u64) -> Check {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut victim = Command::new(exe).args(["hold", "4"]).stdout(Stdio::piped()).spawn().map_err(|e| format!("start the other process: {e}"))?;
    let mut line = String::new();
    BufReader::new(victim.stdout.take().ok_or("no stdout")?).read_line(&mut line).map_err(|e| e.to_string())?;
    // "holding 4 MiB registered as STag 0x... at 0x..."
    let hex = |w: Option<&str>| w.and_then(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16).ok());
    let words: Vec<&str> = line.split_whitespace().collect();
    let (stag, addr) = match (hex(words.get(6).copied()), hex(words.get(8).copied())) {
        (Some(s), Some(a)) => (s as u32, a),
        _ => {
            let _ = victim.kill();
            return Err(format!("the other process said {line:?}"));
        }
    };
    let result = guesses(n, stag, addr);
    let dev = open()?;
    let regions = dev.stats().map_err(|e| e.to_string())?.memory_regions;
    let alive = victim.try_wait().map_err(|e| e.to_string())?.is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    result?;
    ensure(alive && regions >= 1, format!("the other process still holds its region ({regions} registered)"))
}

fn guesses(n: u64, stag: u32, addr: u64) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let cq = dev.create_cq(8).map_err(|e| e.to_string())?;
    let qp =
        dev.create_qp(&QpInit { pd: &pd, send_cq: &cq, recv_cq: &cq, max_recv_wr: 4, max_send_wr: 4, max_sge: 1, max_inline: 0 }).map_err(|e| e.to_string())?;
    // No region of our own: the other process's STag numbers are the ones ours would get (STags
    // are per open device), so with one of ours a guess could name it.
    let mut r = Rng(stag as u64);
    let (mut refused, mut deregs) = (0u64, 0u64);
    let start = Instant::now();
    for i in 0..n {
        let guess = match i % 4 {
            0 => stag,
            1 => stag ^ (1 + r.below(255)) as u32,
            2 => stag.wrapping_add(((1 + r.below(64)) << 8) as u32),
            _ => r.next() as u32,
        };
        let sge = Sge { addr: addr + r.below(4 << 20) as u64 / 2, length: 64, lkey: guess };
        match qp.post_recv(i, &[sge]) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => refused += 1,
            other => return Err(format!("a receive naming STag {guess:#x} of the other process's memory: {other:?}")),
        }
        if i % 64 == 0 {
            match dev.deregister_raw(guess) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => deregs += 1,
                other => return Err(format!("deregistering STag {guess:#x}: {other:?}")),
            }
        }
    }
    ensure(
        refused > 0,
        format!("{refused} receives naming the other process's STag {stag:#x}, its neighbours or random ones refused (EINVAL), and {deregs} deregistrations, in {:.0?}", start.elapsed()),
    )
}
