//! Local attackers: what a process allowed to open `/dev/iwarp` can throw at the module
//! (the ioctl fuzzer is src/ioctl_fuzz/).
//!
//! - `race N`: one thread makes QPs, rings their doorbells, posts receives naming a region and
//!   maps their rings while another destroys those QPs and a third deregisters and registers
//!   that region again, N times.
//! - `guess-local N`: a second process holds a registered region; this one names its STag
//!   (the exact one, other keys of its slot, other slots, random ones) N times in posted
//!   receives and deregistrations: every one is refused (STags are per open device), and the
//!   other process's region stays registered.
//! - `charged MIB` (run in a memory cgroup of MIB MiB): completion queues and queue pairs of the
//!   largest sizes, made until the module refuses one: it must refuse with ENOMEM before the
//!   rings alone (a lower bound of what they cost the kernel) pass twice the cgroup's limit,
//!   since what a process makes the module allocate is charged to its cgroup.

use super::{ensure, open, Check};
use crate::raw::{errno_name, Raw};
use crate::rng::Rng;
use libiwarp::abi::{self, CreateCq, CreateQp, PdOp, PostRecv, RegMr};
use libiwarp::{QpInit, Sge};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

const PAGE: usize = 4096;

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

/// `charged MIB`: see the module doc.
pub(crate) fn charged(limit_mib: u64) -> Check {
    let raw = Raw::open()?;
    let mut pd = PdOp::default();
    ensure(raw.call(abi::IOCTL_ALLOC_PD, &mut pd) == 0, "ALLOC_PD")?;
    let mut small = CreateCq { depth: 1, eventfd: -1, ..CreateCq::default() };
    ensure(raw.call(abi::IOCTL_CREATE_CQ, &mut small) == 0, "CREATE_CQ")?;
    let limit = limit_mib << 20;
    // Made until refused, but never past four times the limit: a module that charges nothing
    // must not take the guest's memory with it.
    let (mut rings, mut cqs, mut qps) = (0u64, 0u32, 0u32);
    let refused = loop {
        if rings > 4 * limit {
            break None;
        }
        let e = if (cqs + qps) % 2 == 0 {
            let mut cq = CreateCq { depth: abi::MAX_CQE, eventfd: -1, ..CreateCq::default() };
            let e = raw.call(abi::IOCTL_CREATE_CQ, &mut cq);
            if e == 0 {
                (rings, cqs) = (rings + cq.mmap_len, cqs + 1);
            }
            e
        } else {
            let mut qp = CreateQp {
                send_cq: small.cq,
                recv_cq: small.cq,
                max_recv_wr: abi::MAX_QP_WR,
                max_send_wr: abi::MAX_QP_WR,
                pd: pd.pd,
                max_sge: abi::MAX_SGE as u32,
                ..CreateQp::default()
            };
            let e = raw.call(abi::IOCTL_CREATE_QP, &mut qp);
            if e == 0 {
                (rings, qps) = (rings + qp.sq_len + qp.rq_len, qps + 1);
            }
            e
        };
        if e != 0 {
            break Some(e);
        }
    };
    let made = format!("{cqs} CQs of {} entries and {qps} QPs of {} work requests each way, {} MiB of rings", abi::MAX_CQE, abi::MAX_QP_WR, rings >> 20);
    match refused {
        Some(libc::ENOMEM) if rings <= 2 * limit => ensure(true, format!("{made}, then ENOMEM in a memory cgroup of {limit_mib} MiB")),
        Some(e) => Err(format!("{made}, then {} (want ENOMEM within twice the cgroup's {limit_mib} MiB)", errno_name(e))),
        None => Err(format!("{made} and no refusal: the module's memory is not charged to the cgroup of {limit_mib} MiB")),
    }
}
