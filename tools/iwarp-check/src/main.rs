//! Checks of the module through libiwarp, run inside the test guests by the VM suite.
//! Each subcommand prints what it checked and exits 1 on the first failure.
//!
//!   query            QUERY_DEVICE matches this library's ABI; bad commands get errnos
//!   mr               memory registration: STags, key rotation, every rejected argument,
//!                    pinned-page accounting, release on close
//!   memlock KIB      (run without CAP_IPC_LOCK) RLIMIT_MEMLOCK = KIB: over it fails, under works
//!   hold MIB         register MIB and wait to be killed
//!   pressure MIB     register MIB, then take memory until killed (run in a memory cgroup)
//!   ioctl-fuzz N SEED   a local attacker's N ioctl and mmap calls, every field drawn from
//!                    boundary values and at random (src/ioctl_fuzz/): each must return, the
//!                    kernel must log nothing, and QUERY_STATS come back to where it was
//!   race N / guess-local N / charged MIB   local attackers (src/attack.rs): QPs destroyed
//!                    while in use; STags of another process named; CQs and QPs made until a
//!                    memory cgroup's limit refuses them with ENOMEM
//!   forged-serve PORT OPTS / forged-drive HOST PORT OPTS   a segment forged on the bridge
//!                    (scripts/inject-segment.py) replaces the start of an FPDU: with CRCs the
//!                    QP ends with our Terminate and nothing forged is placed (src/forged.rs)
//!   lost-serve PORT / lost-drive HOST PORT   run until the connection dies from outside (a
//!                    reset injected, the peer's guest killed); posted work must come back
//!                    flushed with a connection-lost event (src/lost.rs)
//!   accept PORT OPTS EXPECT         accept one connection, adopt it as MPA responder
//!   connect HOST PORT OPTS EXPECT   connect, adopt as MPA initiator
//!   accept-fail PORT OPTS ERRNO     accept, adopting must fail with ERRNO (EPROTO, ETIMEDOUT, ...)
//!   garbage HOST PORT               connect and send bytes that are no MPA request
//!   silent HOST PORT                connect and say nothing
//!   send-kernel HOST PORT SIZE      adopt as initiator, then RDMA Write SIZE bytes and Send a third
//!                                   of them through the module
//!   recv-user PORT SIZE             accept and receive those with a user-level engine built on
//!                                   the protocol core (markers and CRC asked for), and verify
//!   adopt-errors     descriptors that are not connected TCP streams, bad arguments, and a
//!                    connection whose send buffer is full (its peer reads nothing)
//!   stats-zero       nothing pinned, no regions, no QPs, no contexts but this one
//!   verbs-serve PORT MAX OPTS                 (B) answer rounds with buffers of MAX bytes
//!   verbs-drive HOST PORT SIZES DEEP OPTS     (A) per size: Write + Send to B, B Reads it back
//!                                             and Sends its own, A Reads that back; then DEEP
//!                                             Sends into as many receives posted at once
//!                                             (OPTS: MPA options, plus kernel-connect=1 and
//!                                             ooo=1|marker|aligned|doorbell: some must be
//!                                             placed out of order, found through markers or at
//!                                             segment starts, or through markers after the
//!                                             doorbell rang)
//!   many-serve PORT N / many-drive HOST PORT N   N QPs at once, each running rounds
//!   fault-serve PORT CASE / fault-drive HOST PORT CASE
//!                    CASE: bad-stag, write-bounds, read-rights, no-recv, invalidated-stag (a
//!                    Send with Invalidate of B's STag, then a Write to it), other-pd (a Write to
//!                    a region of B's outside its QP's protection domain): B must end the QP with
//!                    the right Terminate, A must learn it, both flush what was posted
//!   cm-serve PORT [ADDR] / cm-drive HOST PORT   listen (at ADDR: IPv4 or IPv6), reject,
//!                    accept, disconnect in the module
//!   cycles N         N connect/disconnect cycles over loopback (a QP on each end, MPA, a Send)
//!   cm-slow-serve PORT / cm-slow-drive HOST PORT   initiators that never finish their MPA
//!                    requests hold up no other; the module closes them at their deadline
//!   stalled-peer PORT / post-to-stalled HOST PORT   (B) a user-level peer that reads nothing;
//!                    (A) 16 Writes of 4 MiB to it must post at once and complete or flush in order
//!   verbs-errors     (loopback) errnos of the data-path ioctls, and a CQ overrun
//!   bad-frame HOST PORT CASE   a user-level peer breaks the protocol toward fault-serve (CASE:
//!                    crc-error, a Send whose CRC is wrong; foreign-invalidate, a Send with
//!                    Invalidate of a foreign STag, then a Write and a Send in the same segment,
//!                    which fault-serve checks were neither placed nor completed;
//!                    bad-read-request, the same after a Read Request of an STag that does not
//!                    exist; urgent, a valid Write whose last octet is TCP urgent data, which
//!                    MPA never sends), and must get the module's Terminate back
//!   drip-serve PORT / drip HOST PORT   a user-level peer sends valid Writes and Sends (markers,
//!                    CRC) in tiny TCP segments: one FPDU of 60,000 octets 100 at a time, FPDUs
//!                    of 1,400 octets 100 at a time and one octet at a time; the module's side
//!                    must place all of it and stay connected
//!   mutate-serve PORT N SEED / mutate HOST PORT N SEED   the hostile peer: N valid streams from
//!                    SEED, each changed once (its MPA request, its octets, or an STag it names);
//!                    the module's side checks each against the model (src/mutate.rs) and
//!                    prints the outcomes per kind of change
//!   ird-serve PORT / ird-read HOST PORT   a user-level Reader keeps as many Reads outstanding
//!                    as the module's IRD, refilling as each response completes, after reading
//!                    nothing for 3 s: every response must come whole and in order
//!   ird-overflow-serve PORT / ird-overflow HOST PORT   one Read Request more than the IRD at
//!                    once: responses before it whole and in order, then the module's Terminate
//!   short-response-serve PORT CASE / short-response HOST PORT CASE   the peer answers the
//!                    module's Read with a response that ends short (empty, half): the Read must
//!                    complete in error, the QP end with our Terminate (src/short_response.rs)
//!   interop-serve PORT SIZE OPTS END / interop-connect HOST PORT SIZE OPTS END   side A of the
//!                    interop script with siw (tools/siw-peer/siw-peer.c, src/interop.rs): Sends
//!                    from two SGEs and with Solicited Event, Writes and Reads both ways, Send
//!                    with Invalidate both ways, each checked where it lands; then END: either
//!                    side disconnects or makes the other send a Terminate, work still posted
//!   interop-refused HOST PORT / interop-refuse PORT   siw rejects us, we reject siw, each
//!                    with private data the other must get
//!   hold-serve PORT FIRST / late-first HOST PORT FIRST   the module's responder holds a posted
//!                    Send until a user-level initiator's late first FPDU: its RTR (FIRST `rtr`,
//!                    peer-to-peer mode) or its Send (FIRST `send`) (src/p2p.rs)
//!   rtr-mismatch-serve PORT / rtr-mismatch HOST PORT   no RTR type in common: the user-level
//!                    responder offers its own, the module's initiator sends TERM (2,0,7)
//!   rtr-mismatch-accept PORT / rtr-mismatch-ask HOST PORT   the same, the module responding:
//!                    the user-level initiator's TERM ends the QP, the held Send is flushed
//!   p2p-read-burst-serve PORT / p2p-read-burst HOST PORT   a Read RTR, then a full ORD of Reads
//!   sockets-liar HOST PORT CASE   a peer of the sockets library that lies in its Immediate
//!                    Data (src/sockets_liar.rs); scripts/sockets-liar.py serves it
//!   rping-serve PORT SIZE COUNT OPTS / rping-connect HOST PORT SIZE COUNT OPTS   rping's
//!                    protocol (src/rping.rs), with Linux's rping on siw as the peer
//!   stag-serve PORT OPTS / stag-drive HOST PORT OPTS   Read with Invalidate, Local Invalidate
//!                    and Fast Register as work requests (src/stags.rs): STags that stop and
//!                    start reaching their regions while the connection runs
//!   read-race-serve PORT / read-race HOST PORT   (B) rewrites a 1 MiB region nonstop while (A)
//!                    Reads it 64 times with CRCs on: every Read completes, both QPs stay connected
//!
//! PORT: a port (listening on every IPv4 address) or ADDRESS:PORT, e.g. [::]:7300 (IPv6 and
//! IPv4). HOST: an IPv4 address, or an IPv6 one in brackets.
//!
//! OPTS: markers=0|1,crc=0|1,rev=1|2,pd=TEXT,timeout=MS,copy=0|1 (no zero copy),in-order=0|1
//! (no out-of-order placement),aligned=0|1 (each FPDU starts a segment),interval=N (octets
//! between markers, both ends alike),rtr=LETTERS (peer-to-peer mode: the RTRs offered or
//! accepted, of s (Send), w (Write), r (Read); empty for none). EXPECT: rev=N,crc=0|1,
//! rx_markers=0|1,tx_markers=0|1,peer=TEXT, then rtr=s|w|r in peer-to-peer mode (what the
//! exchange must settle).

mod attack;
mod cm;
mod extensions;
mod forged;
mod interop;
mod ioctl_fuzz;
mod ird;
mod lost;
mod mutate;
mod p2p;
mod raw;
mod rng;
mod rping;
mod short_response;
mod sockets_liar;
mod stags;
mod verbs;
mod wire;

use libiwarp::abi::{self, access, conn, role, AdoptQp, CreateQp};
use libiwarp::{Access, CompletionQueue, ConnectOptions, Device, ProtectionDomain, QpInit, Role, RtrTypes, SendOp, SendWr};
use std::io::{self, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::Duration;

type Check = Result<(), String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| args.get(i).and_then(|s| s.parse::<usize>().ok());
    // Two numbers at i and i + 1 (a count and a seed).
    let nums = |i: usize| match (args.get(i).and_then(|s| s.parse::<u64>().ok()), args.get(i + 1).and_then(|s| s.parse::<u64>().ok())) {
        (Some(n), Some(seed)) => Ok((n, seed)),
        _ => Err("N SEED"),
    };
    let result = match args.first().map(String::as_str) {
        Some("query") => query(),
        Some("mr") => mr(),
        Some("memlock") => num(1).ok_or("memlock KIB".to_string()).and_then(memlock),
        Some("hold") => num(1).ok_or("hold MIB".to_string()).and_then(hold),
        Some("pressure") => num(1).ok_or("pressure MIB".to_string()).and_then(pressure),
        Some("ioctl-fuzz") => nums(1).map_err(String::from).and_then(|(n, seed)| ioctl_fuzz::ioctl_fuzz(n, seed)),
        Some("charged") => num(1).ok_or("charged MIB".to_string()).and_then(|n| attack::charged(n as u64)),
        Some("race") => num(1).ok_or("race N".to_string()).and_then(|n| attack::race(n as u64)),
        Some("guess-local") => num(1).ok_or("guess-local N".to_string()).and_then(|n| attack::guess_local(n as u64)),
        Some("forged-serve") if args.len() == 3 => forged::serve(&args[1], &args[2]),
        Some("forged-drive") if args.len() == 4 => forged::drive(&args[1], &args[2], &args[3]),
        Some("lost-serve") if args.len() == 2 => lost::serve(&args[1]),
        Some("lost-drive") if args.len() == 3 => lost::drive(&args[1], &args[2]),
        Some("stats-zero") => stats_zero(),
        Some("accept") if args.len() == 4 => accept(&args[1], &args[2]).and_then(|s| expect(&s, &args[3])),
        Some("connect") if args.len() == 5 => connect(&args[1], &args[2], &args[3]).and_then(|s| expect(&s, &args[4])),
        Some("accept-fail") if args.len() == 4 => accept_fail(&args[1], &args[2], &args[3]),
        Some("garbage") if args.len() == 3 => garbage(&args[1], &args[2]),
        Some("silent") if args.len() == 3 => silent(&args[1], &args[2]),
        Some("adopt-errors") => adopt_errors(),
        Some("send-kernel") if args.len() == 4 => num(3).ok_or("SIZE".to_string()).and_then(|n| send_kernel(&args[1], &args[2], n)),
        Some("recv-user") if args.len() == 3 => num(2).ok_or("SIZE".to_string()).and_then(|n| recv_user(&args[1], n)),
        Some("verbs-serve") if args.len() == 4 => num(2).ok_or("MAX".to_string()).and_then(|n| verbs::serve(&args[1], n, &args[3])),
        Some("verbs-drive") if args.len() == 6 => num(4).ok_or("DEEP".to_string()).and_then(|d| verbs::drive(&args[1], &args[2], &args[3], d, &args[5])),
        Some("many-serve") if args.len() == 3 => num(2).ok_or("N".to_string()).and_then(|n| verbs::many_serve(&args[1], n)),
        Some("many-drive") if args.len() == 4 => num(3).ok_or("N".to_string()).and_then(|n| verbs::many_drive(&args[1], &args[2], n)),
        Some("fault-serve") if args.len() == 3 => verbs::fault_serve(&args[1], &args[2]),
        Some("fault-drive") if args.len() == 4 => verbs::fault_drive(&args[1], &args[2], &args[3]),
        Some("verbs-errors") => verbs::local_errors(),
        Some("cm-serve") if (2..=3).contains(&args.len()) => cm::serve(&args[1], args.get(2).map(String::as_str)),
        Some("cm-drive") if args.len() == 3 => cm::drive(&args[1], &args[2]),
        Some("cm-slow-serve") if args.len() == 2 => cm::slow_serve(&args[1]),
        Some("cycles") => num(1).ok_or("cycles N".to_string()).and_then(|n| cm::cycles(n as u64)),
        Some("cm-slow-drive") if args.len() == 3 => cm::slow_drive(&args[1], &args[2]),
        Some("stalled-peer") if args.len() == 2 => wire::stalled_peer(&args[1]),
        Some("post-to-stalled") if args.len() == 3 => wire::post_to_stalled(&args[1], &args[2]),
        Some("bad-frame") if args.len() == 4 => wire::bad_frame(&args[1], &args[2], &args[3]),
        Some("drip-serve") if args.len() == 2 => verbs::drip_serve(&args[1]),
        Some("drip") if args.len() == 3 => wire::drip(&args[1], &args[2]),
        Some("read-race-serve") if args.len() == 2 => verbs::read_race_serve(&args[1]),
        Some("read-race") if args.len() == 3 => verbs::read_race(&args[1], &args[2]),
        Some("ird-serve") if args.len() == 2 => verbs::ird_serve(&args[1]),
        Some("ird-overflow-serve") if args.len() == 2 => verbs::ird_overflow_serve(&args[1]),
        Some("ird-overflow") if args.len() == 3 => ird::overflow(&args[1], &args[2]),
        Some("short-response-serve") if args.len() == 3 => verbs::short_response_serve(&args[1], &args[2]),
        Some("short-response") if args.len() == 4 => short_response::answer(&args[1], &args[2], &args[3]),
        Some("mutate-serve") if args.len() == 4 => nums(2).map_err(String::from).and_then(|(n, seed)| mutate::serve(&args[1], n, seed)),
        Some("mutate") if args.len() == 5 => nums(3).map_err(String::from).and_then(|(n, seed)| mutate::peer(&args[1], &args[2], n, seed)),
        Some("ext-serve") if args.len() == 2 => extensions::serve(&args[1]),
        Some("stag-serve") if args.len() == 3 => stags::serve(&args[1], &args[2]),
        Some("stag-drive") if args.len() == 4 => stags::drive(&args[1], &args[2], &args[3]),
        Some("sockets-liar") if args.len() == 4 => sockets_liar::lie(&args[1], &args[2], &args[3]),
        Some("ext-drive") if args.len() == 3 => extensions::drive(&args[1], &args[2]),
        Some("ird-read") if args.len() == 3 => ird::read_at_ird(&args[1], &args[2]),
        Some("interop-serve") if args.len() == 5 => num(2).ok_or("SIZE".to_string()).and_then(|n| interop::serve(&args[1], n, &args[3], &args[4])),
        Some("interop-connect") if args.len() == 6 => {
            num(3).ok_or("SIZE".to_string()).and_then(|n| interop::connect(&args[1], &args[2], n, &args[4], &args[5]))
        }
        Some("rping-serve") if args.len() == 5 => match (num(2), num(3)) {
            (Some(size), Some(count)) => rping::serve(&args[1], size, count as u64, &args[4]),
            _ => Err("SIZE COUNT".into()),
        },
        Some("rping-connect") if args.len() == 6 => match (num(3), num(4)) {
            (Some(size), Some(count)) => rping::connect(&args[1], &args[2], size, count as u64, &args[5]),
            _ => Err("SIZE COUNT".into()),
        },
        Some("hold-serve") if args.len() == 3 => p2p::First::parse(&args[2]).and_then(|f| p2p::hold_serve(&args[1], f)),
        Some("late-first") if args.len() == 4 => p2p::First::parse(&args[3]).and_then(|f| p2p::late_first(&args[1], &args[2], f)),
        Some("rtr-mismatch-serve") if args.len() == 2 => p2p::rtr_mismatch_serve(&args[1]),
        Some("rtr-mismatch") if args.len() == 3 => p2p::rtr_mismatch(&args[1], &args[2]),
        Some("rtr-mismatch-accept") if args.len() == 2 => p2p::rtr_mismatch_accept(&args[1]),
        Some("rtr-mismatch-ask") if args.len() == 3 => p2p::rtr_mismatch_ask(&args[1], &args[2]),
        Some("p2p-read-burst-serve") if args.len() == 2 => p2p::read_burst_serve(&args[1]),
        Some("p2p-read-burst") if args.len() == 3 => p2p::read_burst(&args[1], &args[2]),
        Some("interop-refused") if args.len() == 3 => interop::refused(&args[1], &args[2]),
        Some("interop-refuse") if args.len() == 2 => interop::refuse(&args[1]),
        _ => Err("usage: see the top of tools/iwarp-check/src/main.rs".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("iwarp-check FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn open() -> Result<Device, String> {
    Device::open().map_err(|e| format!("open {}: {e}", libiwarp::DEVICE_PATH))
}

/// `r` must fail with `errno`.
fn expect_errno<T: std::fmt::Debug>(what: &str, r: io::Result<T>, errno: i32) -> Check {
    match r {
        Err(e) if e.raw_os_error() == Some(errno) => {
            println!("ok: {what} -> {e}");
            Ok(())
        }
        other => Err(format!("{what}: expected errno {errno}, got {other:?}")),
    }
}

fn ensure(cond: bool, what: impl Into<String>) -> Check {
    let what = what.into();
    if cond {
        println!("ok: {what}");
        Ok(())
    } else {
        Err(what)
    }
}

fn query() -> Check {
    let dev = open()?;
    let q = dev.query().map_err(|e| format!("QUERY_DEVICE: {e}"))?;
    ensure(q == abi::device_attributes(), format!("QUERY_DEVICE answer is the ABI's device_attributes() (abi {}, caps {:#x})", q.abi_version, q.caps))?;
    expect_errno("unknown ioctl", dev.raw_ioctl(abi::IOCTL_QUERY_DEVICE + 0x7f), libc::ENOTTY)?;
    expect_errno("QUERY_DEVICE with the wrong size", dev.raw_ioctl(abi::IOCTL_QUERY_DEVICE - (8 << 16)), libc::ENOTTY)
}

fn page() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

fn mr() -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| format!("ALLOC_PD: {e}"))?;
    let before = dev.stats().map_err(|e| e.to_string())?;
    let mut a = vec![7u8; 3 * page() + 100];
    let mut b = vec![0u8; 64];
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let span = |b: &[u8]| ((b.as_ptr() as usize + b.len() - 1) / page() - b.as_ptr() as usize / page() + 1) as u64;
    let expected = span(&a) + span(&b);
    {
        let mut mr_a = pd.register(&mut a, rw).map_err(|e| format!("register: {e}"))?;
        let mr_b = pd.register(&mut b, Access::REMOTE_READ).map_err(|e| format!("register: {e}"))?;
        expect_errno("freeing a PD that holds regions", dev.dealloc_pd_raw(pd.handle()), libc::EBUSY)?;
        ensure(mr_a.stag() != mr_b.stag() && mr_a.stag() != 0, format!("distinct non-zero STags {:#x} {:#x}", mr_a.stag(), mr_b.stag()))?;
        let s = dev.stats().map_err(|e| e.to_string())?;
        let pages = s.pinned_pages - before.pinned_pages;
        ensure(pages == expected, format!("pinned pages counted ({pages}, spanned {expected})"))?;
        ensure(s.memory_regions == before.memory_regions + 2, "regions counted")?;
        mr_a.as_mut_slice()[0] = 1;
        let old = mr_b.stag();
        mr_b.deregister().map_err(|e| format!("deregister: {e}"))?;
        expect_errno("deregistering twice", dev.deregister_raw(old), libc::EINVAL)?;
        let mr_c = pd.register(&mut b, Access::NONE).map_err(|e| format!("re-register: {e}"))?;
        ensure(mr_c.stag() >> 8 == old >> 8 && mr_c.stag() != old, format!("slot reused with a new key ({old:#x} -> {:#x})", mr_c.stag()))?;
        expect_errno("stale STag of the reused slot", dev.deregister_raw(old), libc::EINVAL)?;
    }
    let after = dev.stats().map_err(|e| e.to_string())?;
    ensure(after.pinned_pages == before.pinned_pages && after.memory_regions == before.memory_regions, "dropping regions unpins everything")?;

    let buf = vec![0u8; page()];
    let addr = buf.as_ptr() as u64;
    expect_errno("zero length", pd.register_raw(addr, 0, 0), libc::EINVAL)?;
    expect_errno("unknown access bits", pd.register_raw(addr, 16, 1 << 9), libc::EINVAL)?;
    expect_errno("REMOTE_WRITE without LOCAL_WRITE", pd.register_raw(addr, 16, access::REMOTE_WRITE), libc::EINVAL)?;
    expect_errno("address range wrapping", pd.register_raw(u64::MAX - 10, 100, 0), libc::EINVAL)?;
    expect_errno("longer than max_mr_size", pd.register_raw(addr, abi::MAX_MR_SIZE + 1, 0), libc::EINVAL)?;
    expect_errno("unmapped address", pd.register_raw(0x1000, 4096, 0), libc::EFAULT)?;
    // A full region table refuses before pinning (the debug kernel's dmesg shows the pages
    // being let go under the table's lock, where unpinning must not sleep, if it did not).
    let mut stags = Vec::new();
    let full = loop {
        match pd.register_raw(addr, 16, access::LOCAL_WRITE) {
            Ok(stag) if stags.len() < abi::MAX_MR as usize => stags.push(stag),
            other => break other,
        }
    };
    expect_errno(&format!("region {} in a table of {}", stags.len() + 1, abi::MAX_MR), full, libc::ENOSPC)?;
    for stag in stags {
        dev.deregister_raw(stag).map_err(|e| e.to_string())?;
    }
    // A read-only mapping cannot be registered for writing.
    // SAFETY: a fresh anonymous read-only mapping, unmapped below; nothing else uses it.
    let ro = unsafe { libc::mmap(std::ptr::null_mut(), page(), libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    ensure(ro != libc::MAP_FAILED, "read-only mapping made")?;
    expect_errno("read-only memory with LOCAL_WRITE", pd.register_raw(ro as u64, 64, access::LOCAL_WRITE), libc::EFAULT)?;
    let stag = pd.register_raw(ro as u64, 64, access::REMOTE_READ).map_err(|e| format!("read-only memory for REMOTE_READ: {e}"))?;
    dev.deregister_raw(stag).map_err(|e| e.to_string())?;
    // SAFETY: `ro` is the mapping made above, of one page, and no region references it now.
    unsafe { libc::munmap(ro, page()) };
    expect_errno("unknown STag", dev.deregister_raw(0xdead_0001), libc::EINVAL)?;
    expect_errno("freeing an unknown PD", dev.dealloc_pd_raw(pd.handle() ^ 0x80), libc::EINVAL)?;
    let gone = dev.alloc_pd().map_err(|e| format!("ALLOC_PD: {e}"))?;
    dev.dealloc_pd_raw(gone.handle()).map_err(|e| format!("DEALLOC_PD: {e}"))?;
    expect_errno("registering in a freed PD", gone.register_raw(addr, 16, 0), libc::EINVAL)?;
    expect_errno("freeing a PD twice", dev.dealloc_pd_raw(gone.handle()), libc::EINVAL)?;

    // Closing the device releases what the program never deregistered.
    let dev2 = open()?;
    let pd2 = dev2.alloc_pd().map_err(|e| e.to_string())?;
    let mut leak = vec![0u8; 8 * page()];
    std::mem::forget(pd2.register(&mut leak, Access::LOCAL_WRITE).map_err(|e| e.to_string())?);
    ensure(dev.stats().map_err(|e| e.to_string())?.pinned_pages >= before.pinned_pages + 8, "second context pinned its region")?;
    std::mem::forget(pd2);
    drop(dev2);
    let end = dev.stats().map_err(|e| e.to_string())?;
    ensure(end.pinned_pages == before.pinned_pages && end.memory_regions == before.memory_regions, "closing the device unpins what was left registered")
}

fn memlock(kib: usize) -> Check {
    let lim = libc::rlimit { rlim_cur: (kib * 1024) as u64, rlim_max: (kib * 1024) as u64 };
    // SAFETY: `lim` is a valid rlimit for the duration of the call.
    ensure(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } == 0, format!("RLIMIT_MEMLOCK set to {kib} KiB"))?;
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let mut over = vec![0u8; 2 * kib * 1024];
    expect_errno("registering twice the limit", pd.register(&mut over, Access::LOCAL_WRITE).map(|m| m.stag()), libc::ENOMEM)?;
    let mut under = vec![0u8; kib * 1024 / 2];
    let mr = pd.register(&mut under, Access::LOCAL_WRITE).map_err(|e| format!("registering half the limit: {e}"))?;
    println!("ok: registering half the limit -> STag {:#x}", mr.stag());
    let mut rest = vec![0u8; kib * 1024];
    expect_errno("registering past the limit with another region", pd.register(&mut rest, Access::LOCAL_WRITE).map(|m| m.stag()), libc::ENOMEM)
}

fn hold(mib: usize) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    let mut buf = vec![1u8; mib << 20];
    let mr = pd.register(&mut buf, Access::LOCAL_WRITE | Access::REMOTE_WRITE).map_err(|e| e.to_string())?;
    println!("holding {mib} MiB registered as STag {:#x} at {:#x}", mr.stag(), mr.addr());
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

/// Registers MIB, then takes memory a MiB at a time (touching every page) until the kernel
/// kills it: run in a memory cgroup, the limit's OOM killer ends it with its region registered.
fn pressure(mib: usize) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| e.to_string())?;
    // Untouched (zero pages on demand): pinning faults every page in, under the limit.
    let mut buf = vec![0u8; mib << 20];
    let mr = pd.register(&mut buf, Access::LOCAL_WRITE | Access::REMOTE_WRITE).map_err(|e| format!("register {mib} MiB: {e}"))?;
    println!("registered {mib} MiB as STag {:#x}; now taking memory until killed", mr.stag());
    let _ = io::stdout().flush();
    let mut hog: Vec<Vec<u8>> = Vec::new();
    loop {
        hog.push(vec![0x77u8; 1 << 20]);
        if hog.len().is_multiple_of(64) {
            println!("{} MiB more taken", hog.len());
        }
    }
}

fn stats_zero() -> Check {
    let s = open()?.stats().map_err(|e| e.to_string())?;
    ensure(s.pinned_pages == 0 && s.memory_regions == 0 && s.queue_pairs == 0 && s.contexts == 1, format!("nothing left: {s:?}"))
}

fn options(role: Role, spec: &str) -> Result<ConnectOptions, String> {
    let mut o = ConnectOptions::new(role);
    for kv in spec.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').ok_or(format!("bad option {kv}"))?;
        let bit = || v == "1";
        match k {
            "markers" => o.markers = bit(),
            "crc" => o.crc = bit(),
            "rev" => o.mpa_rev = v.parse().map_err(|_| format!("bad rev {v}"))?,
            "pd" => o.private_data = v.as_bytes().to_vec(),
            "timeout" => o.timeout = Duration::from_millis(v.parse().map_err(|_| format!("bad timeout {v}"))?),
            "copy" => o.copy_send = bit(),
            "in-order" => o.in_order_only = bit(),
            "aligned" => o.aligned = bit(),
            "interval" => o.marker_interval = v.parse().map_err(|_| format!("bad interval {v}"))?,
            "rtr" if v.chars().all(|c| "swr".contains(c)) => o.rtr = RtrTypes { send: v.contains('s'), write: v.contains('w'), read: v.contains('r') },
            _ => return Err(format!("unknown option {k}")),
        }
    }
    Ok(o)
}

/// The settled parameters in EXPECT's form.
fn settled(n: &libiwarp::Negotiated) -> String {
    let rtr = match n.rtr {
        RtrTypes { send: true, .. } => ",rtr=s",
        RtrTypes { write: true, .. } => ",rtr=w",
        RtrTypes { read: true, .. } => ",rtr=r",
        _ => "",
    };
    format!(
        "rev={},crc={},rx_markers={},tx_markers={},peer={}{rtr}",
        n.mpa_rev,
        n.crc as u8,
        n.rx_markers as u8,
        n.tx_markers as u8,
        String::from_utf8_lossy(&n.peer_private)
    )
}

fn expect(got: &str, want: &str) -> Check {
    ensure(got == want, format!("negotiated {got} (expected {want})"))
}

fn listen(port: &str) -> Result<TcpStream, String> {
    let at = if port.contains(':') { port.to_string() } else { format!("0.0.0.0:{port}") };
    let l = TcpListener::bind(&at).map_err(|e| format!("listen {at}: {e}"))?;
    println!("listening on {port}");
    let _ = io::stdout().flush();
    l.accept().map(|(s, _)| s).map_err(|e| format!("accept: {e}"))
}

fn dial(host: &str, port: &str) -> Result<TcpStream, String> {
    iwarp_testkit::dial(host, port).map_err(|e| e.to_string())
}

/// Queue sizes for QPs that only run the MPA exchange or send.
fn small<'a>(pd: &'a ProtectionDomain<'a>, cq: &'a CompletionQueue<'a>) -> QpInit<'a> {
    QpInit { pd, send_cq: cq, recv_cq: cq, max_recv_wr: 4, max_send_wr: 4, max_sge: 4, max_inline: 0 }
}

fn accept(port: &str, opts: &str) -> Result<String, String> {
    let o = options(Role::Responder, opts)?;
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| format!("ALLOC_PD: {e}"))?;
    let cq = dev.create_cq(8).map_err(|e| format!("create CQ: {e}"))?;
    let qp = dev.adopt(listen(port)?, &o, &small(&pd, &cq)).map_err(|e| format!("adopt as responder: {e}"))?;
    Ok(settled(qp.negotiated().ok_or("no negotiation")?))
}

fn connect(host: &str, port: &str, opts: &str) -> Result<String, String> {
    let o = options(Role::Initiator, opts)?;
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| format!("ALLOC_PD: {e}"))?;
    let cq = dev.create_cq(8).map_err(|e| format!("create CQ: {e}"))?;
    let qp = dev.adopt(dial(host, port)?, &o, &small(&pd, &cq)).map_err(|e| format!("adopt as initiator: {e}"))?;
    Ok(settled(qp.negotiated().ok_or("no negotiation")?))
}

fn accept_fail(port: &str, opts: &str, errno: &str) -> Check {
    let o = options(Role::Responder, opts)?;
    let errno = match errno {
        "EPROTO" => libc::EPROTO,
        "ETIMEDOUT" => libc::ETIMEDOUT,
        "ECONNRESET" => libc::ECONNRESET,
        _ => return Err(format!("unknown errno name {errno}")),
    };
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| format!("ALLOC_PD: {e}"))?;
    let cq = dev.create_cq(8).map_err(|e| format!("create CQ: {e}"))?;
    expect_errno("adopting a connection whose peer breaks MPA", dev.adopt(listen(port)?, &o, &small(&pd, &cq)).map(|q| q.handle()), errno)?;
    ensure(dev.stats().map_err(|e| e.to_string())?.queue_pairs == 0, "no QP left behind")
}

fn garbage(host: &str, port: &str) -> Check {
    let mut s = dial(host, port)?;
    s.write_all(b"GET / HTTP/1.0\r\nthis is not an MPA request frame\r\n\r\n").map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    // The responder answers nothing; the connection ends when its owner closes it.
    let n = io::Read::read(&mut s, &mut buf).unwrap_or(0);
    ensure(n == 0, "the responder sent nothing back and closed")
}

fn silent(host: &str, port: &str) -> Check {
    let mut s = dial(host, port)?;
    s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    let n = io::Read::read(&mut s, &mut buf).unwrap_or(0);
    ensure(n == 0, "the responder gave up on us and closed")
}

fn adopt_errors() -> Check {
    let dev = open()?;
    let cq = dev.create_cq(8).map_err(|e| format!("create CQ: {e}"))?;
    let h = cq.handle();
    let pd = dev.alloc_pd().map_err(|e| format!("ALLOC_PD: {e}"))?;
    let gone = dev.alloc_pd().map_err(|e| format!("ALLOC_PD: {e}"))?;
    dev.dealloc_pd_raw(gone.handle()).map_err(|e| format!("DEALLOC_PD: {e}"))?;
    let good = CreateQp { send_cq: h, recv_cq: h, max_recv_wr: 1, max_send_wr: 1, pd: pd.handle(), max_sge: 4, ..CreateQp::default() };
    for (what, req) in [
        ("unknown send CQ", CreateQp { send_cq: h ^ 0x80, ..good }),
        ("unknown receive CQ", CreateQp { recv_cq: 0, ..good }),
        ("receive queue of 0", CreateQp { max_recv_wr: 0, ..good }),
        ("send queue over max_qp_wr", CreateQp { max_send_wr: abi::MAX_QP_WR + 1, ..good }),
        ("handle not zero", CreateQp { qp: 1, ..good }),
        ("no PD", CreateQp { pd: 0, ..good }),
        ("no SGE", CreateQp { max_sge: 0, ..good }),
        ("more SGEs than max_sge", CreateQp { max_sge: abi::MAX_SGE as u32 + 1, ..good }),
        ("more inline data than max_inline", CreateQp { max_inline: abi::MAX_INLINE + 1, ..good }),
        ("a freed PD", CreateQp { pd: gone.handle(), ..good }),
    ] {
        expect_errno(what, dev.create_qp_raw(&mut req.clone()), libc::EINVAL)?;
    }
    let mut made = good;
    dev.create_qp_raw(&mut made).map_err(|e| format!("CREATE_QP: {e}"))?;
    let base = AdoptQp { qp: made.qp, role: role::RESPONDER, flags: conn::CRC, mpa_rev: 2, timeout_ms: 100, ..AdoptQp::default() };
    let file = std::fs::File::open("/proc/self/status").map_err(|e| e.to_string())?;
    expect_errno("a regular file", dev.adopt_qp_raw(&mut AdoptQp { fd: file.as_raw_fd(), ..base }), libc::ENOTSOCK)?;
    expect_errno("a closed descriptor", dev.adopt_qp_raw(&mut AdoptQp { fd: 9999, ..base }), libc::EBADF)?;
    let udp = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    expect_errno("a UDP socket", dev.adopt_qp_raw(&mut AdoptQp { fd: udp.as_raw_fd(), ..base }), libc::EPROTONOSUPPORT)?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    expect_errno("a listening TCP socket", dev.adopt_qp_raw(&mut AdoptQp { fd: listener.as_raw_fd(), ..base }), libc::ENOTCONN)?;
    let fd = listener.as_raw_fd();
    for (what, req) in [
        ("role 2", AdoptQp { fd, role: 2, ..base }),
        ("unknown flag", AdoptQp { fd, flags: (conn::ASKABLE + 1).next_power_of_two(), ..base }),
        ("MPA revision 3", AdoptQp { fd, mpa_rev: 3, ..base }),
        ("private data over 508", AdoptQp { fd, private_len: 509, ..base }),
        // 500 with the RFC 7306 offer's 8 octets is over 508; near u32::MAX the sum overflowed
        // (a kernel BUG on 1668bce).
        ("private data over 500 with the extensions offer", AdoptQp { fd, flags: conn::CRC | conn::EXTENSIONS, private_len: 501, ..base }),
        ("private data of 2^32 - 8 with the extensions offer", AdoptQp { fd, flags: conn::CRC | conn::EXTENSIONS, private_len: u32::MAX - 7, ..base }),
        ("timeout 0", AdoptQp { fd, timeout_ms: 0, ..base }),
        ("IRD over 14 bits", AdoptQp { fd, ird: 0x4000, ..base }),
        ("marker interval not a multiple of 4", AdoptQp { fd, marker_interval: 510, ..base }),
        ("marker interval over 65532", AdoptQp { fd, marker_interval: 65536, ..base }),
        ("unknown QP", AdoptQp { fd, qp: made.qp ^ 0x80, ..base }),
    ] {
        expect_errno(what, dev.adopt_qp_raw(&mut req.clone()), libc::EINVAL)?;
    }
    ensure(dev.stats().map_err(|e| e.to_string())?.queue_pairs == 1, "failed adoptions leave the QP as it was")?;
    expect_errno("freeing the PD of a QP", dev.dealloc_pd_raw(pd.handle()), libc::EBUSY)?;
    dev.destroy_qp_raw(made.qp).map_err(|e| format!("DESTROY_QP: {e}"))?;
    ensure(dev.stats().map_err(|e| e.to_string())?.queue_pairs == 0, "no QP left")?;
    adopt_full_send_buffer()?;
    cq_destroyed_after_its_qp()
}

/// DESTROY_CQ right after DESTROY_QP succeeds while another thread's ADOPT_QP of that QP still
/// waits for its peer, holding the QP until it returns: a CQ is in use while a QP in the table
/// names it, not while a destroyed one lingers. (It was EBUSY, and the CQ stayed until the file
/// closed.)
fn cq_destroyed_after_its_qp() -> Check {
    let dev = open()?;
    let cq = dev.create_cq(8).map_err(|e| format!("create CQ: {e}"))?;
    let pd = dev.alloc_pd().map_err(|e| format!("ALLOC_PD: {e}"))?;
    let mut qp = CreateQp { send_cq: cq.handle(), recv_cq: cq.handle(), max_recv_wr: 1, max_send_wr: 1, pd: pd.handle(), max_sge: 1, ..CreateQp::default() };
    dev.create_qp_raw(&mut qp).map_err(|e| format!("CREATE_QP: {e}"))?;
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let client = TcpStream::connect(l.local_addr().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    // The peer never answers: the adoption waits its full 3 s unless the QP's end cuts it short.
    let (_silent, _) = l.accept().map_err(|e| e.to_string())?;
    std::thread::scope(|s| {
        let adopter = s.spawn(|| {
            let mut req =
                AdoptQp { fd: client.as_raw_fd(), qp: qp.qp, role: role::INITIATOR, flags: conn::CRC, mpa_rev: 2, timeout_ms: 3000, ..AdoptQp::default() };
            dev.adopt_qp_raw(&mut req)
        });
        std::thread::sleep(Duration::from_millis(500));
        let destroyed = dev.destroy_qp_raw(qp.qp).and_then(|()| dev.destroy_cq_raw(cq.handle()));
        let adopted = adopter.join().map_err(|_| "the adopting thread panicked")?;
        ensure(destroyed.is_ok(), format!("DESTROY_QP, then DESTROY_CQ of its CQ, while its ADOPT_QP waits: {destroyed:?}"))?;
        ensure(adopted.is_err(), format!("the ADOPT_QP of a destroyed QP failed ({adopted:?})"))
    })
}

/// ADOPT_QP as initiator on a connection whose send buffer the application filled, to a peer
/// that reads nothing, fails with ETIMEDOUT in its time: the MPA request waits for room without
/// holding the module's work (which the call waits for when it gives up). Once the peer reads
/// what was queued, the request follows (TCP's write_space wakes the work). Adopted on a
/// thread: if the call is stuck, resetting the connection frees it, and the check fails.
fn adopt_full_send_buffer() -> Check {
    let (client, peer, queued) = filled_connection()?;
    let (_, adopted, adopter) = adopt_on_a_thread(client, 1000);
    let Ok(outcome) = adopted.recv_timeout(Duration::from_secs(10)) else {
        drop(peer);
        let _ = adopter.join();
        return Err(format!("ADOPT_QP (timeout 1 s) on a full send buffer ({queued} bytes queued) still blocked after 10 s"));
    };
    let _ = adopter.join();
    let (r, took) = outcome?;
    expect_errno("adopting a connection whose send buffer is full", r, libc::ETIMEDOUT)?;
    ensure(took < Duration::from_secs(5), format!("ADOPT_QP gave up after {took:?} (timeout 1 s)"))?;
    println!("ok: a full send buffer ({queued} bytes queued): ETIMEDOUT after {took:?}");
    drop(peer);

    let (client, mut peer, queued) = filled_connection()?;
    let fd = client.as_raw_fd();
    let (calling, adopted, adopter) = adopt_on_a_thread(client, 10_000);
    // The call has begun (the thread is about to make it) and had time to try sending: the
    // request must still wait, nothing queued beyond the application's octets. (The adopter
    // holds the socket open until the peer closes, below.)
    let _ = calling.recv_timeout(Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let sent = sent_so_far(fd, peer.as_raw_fd());
    let waiting = sent.as_ref().is_ok_and(|&n| n == queued);
    let mut buf = vec![0u8; 1 << 16];
    let mut drained = 0;
    while drained < queued {
        let n = io::Read::read(&mut peer, &mut buf[..(queued - drained).min(1 << 16)]).map_err(|e| format!("draining: {e}"))?;
        ensure(n > 0, "the connection stayed open while drained")?;
        drained += n;
    }
    peer.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let mut key = [0u8; 16];
    let got = io::Read::read_exact(&mut peer, &mut key);
    // Ends the exchange (the peer closes instead of answering).
    drop(peer);
    let outcome = adopted.recv_timeout(Duration::from_secs(15));
    let _ = adopter.join();
    ensure(waiting, format!("the MPA request waited for room (sent during the call: {sent:?}; the application's: {queued})"))?;
    ensure(
        got.is_ok() && &key == b"MPA ID Req Frame",
        format!("the MPA request followed once the peer read the {queued} bytes queued ({got:?}, {key:?}; ADOPT_QP: {outcome:?})"),
    )?;
    println!("ok: the MPA request went out once the peer read what was queued");
    Ok(())
}

/// A loopback connection whose send buffer is full (its peer reads nothing): the client, the
/// peer, and how much was queued.
fn filled_connection() -> Result<(TcpStream, TcpStream, usize), String> {
    let err = |e: io::Error| e.to_string();
    let listener = TcpListener::bind("127.0.0.1:0").map_err(err)?;
    // Buffers of fixed sizes (the peer's inherited from the listener): autotuning would make
    // room again after the fill.
    set_buffer(listener.as_raw_fd(), libc::SO_RCVBUF)?;
    let mut client = TcpStream::connect(listener.local_addr().map_err(err)?).map_err(err)?;
    set_buffer(client.as_raw_fd(), libc::SO_SNDBUF)?;
    let (peer, _) = listener.accept().map_err(err)?;
    client.set_nonblocking(true).map_err(err)?;
    let chunk = vec![0u8; 1 << 16];
    let mut queued = 0usize;
    // Full when a write still blocks three times in a row, 200 ms apart: TCP had time to move
    // what it could, and the peer to compact what it holds and open its window again (a slow
    // debug kernel did that after two blocks 100 ms apart, not counted in a row).
    let mut blocked = 0;
    while blocked < 3 {
        match client.write(&chunk) {
            Ok(n) => {
                queued += n;
                blocked = 0;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                blocked += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(format!("filling the send buffer: {e}")),
        }
    }
    client.set_nonblocking(false).map_err(err)?;
    Ok((client, peer, queued))
}

/// Fixes socket `fd`'s buffer `which` (SO_SNDBUF or SO_RCVBUF) at 256 KiB: the kernel no
/// longer grows it.
fn set_buffer(fd: std::os::fd::RawFd, which: libc::c_int) -> Check {
    let size: libc::c_int = 256 << 10;
    // SAFETY: a socket option of a live socket, from a live int of the size given.
    let rc =
        unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, which, (&size as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t) };
    ensure(rc == 0, format!("setsockopt {which}: {}", io::Error::last_os_error()))
}

/// Octets sent on the loopback connection so far, from its two ends' queues: what the client
/// holds unacknowledged (SIOCOUTQ) and what the peer holds unread (SIOCINQ; it reads nothing,
/// so all that was acknowledged is there).
fn sent_so_far(client: std::os::fd::RawFd, peer: std::os::fd::RawFd) -> Result<usize, String> {
    let queue = |fd, request| {
        let mut n: libc::c_int = 0;
        // SAFETY: a queue-length ioctl of a live socket into a live int.
        let rc = unsafe { libc::ioctl(fd, request, &mut n) };
        if rc == 0 {
            Ok(n as usize)
        } else {
            Err(format!("queue length ioctl {request:#x}: {}", io::Error::last_os_error()))
        }
    };
    Ok(queue(client, libc::TIOCOUTQ)? + queue(peer, libc::FIONREAD)?)
}

/// What ADOPT_QP returned, and how long it took.
type Adopted = Result<(io::Result<()>, Duration), String>;

/// Adopts `client` as MPA initiator (CRC, revision 2, `timeout_ms`) on a QP of a new device
/// context, on a thread that says when it is about to call, and sends the outcome.
fn adopt_on_a_thread(client: TcpStream, timeout_ms: u32) -> (std::sync::mpsc::Receiver<()>, std::sync::mpsc::Receiver<Adopted>, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (calling_tx, calling) = std::sync::mpsc::channel();
    let adopter = std::thread::spawn(move || {
        let r = (|| -> Adopted {
            let dev = open()?;
            let cq = dev.create_cq(8).map_err(|e| format!("create CQ: {e}"))?;
            let pd = dev.alloc_pd().map_err(|e| format!("ALLOC_PD: {e}"))?;
            let mut qp =
                CreateQp { send_cq: cq.handle(), recv_cq: cq.handle(), max_recv_wr: 1, max_send_wr: 1, pd: pd.handle(), max_sge: 1, ..CreateQp::default() };
            dev.create_qp_raw(&mut qp).map_err(|e| format!("CREATE_QP: {e}"))?;
            let mut req = AdoptQp { fd: client.as_raw_fd(), qp: qp.qp, role: role::INITIATOR, flags: conn::CRC, mpa_rev: 2, timeout_ms, ..AdoptQp::default() };
            let _ = calling_tx.send(());
            let started = std::time::Instant::now();
            let r = dev.adopt_qp_raw(&mut req);
            Ok((r, started.elapsed()))
        })();
        let _ = tx.send(r);
    });
    (calling, rx, adopter)
}

/// The data both sides agree on: a pattern that differs at every offset.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8).collect()
}

const WRITE_STAG: u32 = 0x1234;
const WRITE_TO: u64 = 0x10000;

fn send_kernel(host: &str, port: &str, size: usize) -> Check {
    let dev = open()?;
    let pd = dev.alloc_pd().map_err(|e| format!("ALLOC_PD: {e}"))?;
    let cq = dev.create_cq(8).map_err(|e| format!("create CQ: {e}"))?;
    let qp = dev.adopt(dial(host, port)?, &options(Role::Initiator, "markers=0,crc=1,rev=2")?, &small(&pd, &cq)).map_err(|e| format!("adopt: {e}"))?;
    let mut buf = pattern(size);
    let mr = pd.register(&mut buf, Access::NONE).map_err(|e| format!("register: {e}"))?;
    let write = SendOp::Write(libiwarp::Remote { addr: WRITE_TO, rkey: WRITE_STAG });
    qp.post_send(&SendWr { wr_id: 1, op: write, sge: &[mr.sge(0..size)], signaled: false }).map_err(|e| format!("post RDMA Write: {e}"))?;
    let third = (size / 3 + 1).min(size);
    // In two entries, so the module gathers them into one message.
    let sge = [mr.sge(0..third / 2), mr.sge(third / 2..third)];
    qp.post_send(&SendWr { wr_id: 2, op: SendOp::Send { solicited: true }, sge: &sge, signaled: true }).map_err(|e| format!("post Send: {e}"))?;
    let n = qp.negotiated().ok_or("no negotiation")?;
    println!("ok: posted an RDMA Write of {size} bytes and a Send of {third} (peer markers {}, crc {})", n.tx_markers, n.crc);
    // Sending goes on after posting returns: the QP stays until the Send (and so the Write
    // before it) completed.
    verbs::done(&cq, libiwarp::WcOpcode::Send).map(drop)
}

/// A user-level MPA responder and receiver on a plain socket, from the protocol core.
fn recv_user(port: &str, size: usize) -> Check {
    use io::Read;
    use iwarp_proto::crc::HostCrc;
    use iwarp_proto::markers::Markers;
    use iwarp_proto::rx::{self, Event, Receiver, Sink, Target};
    use iwarp_proto::stream::Pieces;

    struct Buffers {
        write: Vec<u8>,
        recv: Vec<u8>,
        events: Vec<Event>,
    }
    impl Sink for Buffers {
        fn check(&mut self, _: iwarp_proto::rdmap::Opcode, t: Target, len: u32) -> Result<(), iwarp_proto::terminate::Cause> {
            use iwarp_proto::terminate::Cause;
            match t {
                Target::Tagged { stag: WRITE_STAG, to } if to >= WRITE_TO && to - WRITE_TO + len as u64 <= self.write.len() as u64 => Ok(()),
                Target::Tagged { .. } => Err(Cause::DdpBaseBounds),
                Target::Untagged { msn: 1, mo } if mo as usize + len as usize <= self.recv.len() => Ok(()),
                Target::Untagged { .. } => Err(Cause::DdpNoBuffer),
            }
        }
        fn place(&mut self, t: Target, b: &[u8]) -> Result<(), iwarp_proto::terminate::Cause> {
            let (buf, at) = match t {
                Target::Tagged { to, .. } => (&mut self.write, (to - WRITE_TO) as usize),
                Target::Untagged { mo, .. } => (&mut self.recv, mo as usize),
            };
            buf[at..at + b.len()].copy_from_slice(b);
            Ok(())
        }
        fn deliver(&mut self, e: Event) {
            self.events.push(e);
        }
    }

    let mut s = listen(port)?;
    s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
    let conn = wire::respond(&mut s, wire::LOCAL, b"user-level")?;
    ensure(conn.rx_markers && conn.crc, "the kernel will send markers and CRCs")?;

    let mut rx = Receiver::new(rx::Config { markers: Markers::RFC, crc: true, expect_rtr: None, expect_rtr_read_response: false, extensions: false });
    let mut sink = Buffers { write: vec![0; size], recv: vec![0; size], events: Vec::new() };
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    let mut wire = 0u64;
    while sink.events.len() < 2 {
        let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err(format!("connection closed after {wire} bytes with events {:?}", sink.events));
        }
        wire += n as u64;
        pending.extend_from_slice(&chunk[..n]);
        let used = rx.receive::<HostCrc, _>(&Pieces::new(rx.next(), &[&pending]), &mut sink).map_err(|e| format!("receive: {e:?}"))?;
        pending.drain(..used as usize);
    }
    let want = pattern(size);
    let third = (size / 3 + 1).min(size);
    ensure(
        sink.events == [Event::Write { stag: WRITE_STAG }, Event::Send { msn: 1, len: third as u32, solicited: true, invalidate: None }],
        format!("events in order: {:?}", sink.events),
    )?;
    ensure(sink.write == want, format!("RDMA Write of {size} bytes placed intact ({wire} bytes on the wire, markers and CRC checked)"))?;
    ensure(sink.recv[..third] == want[..third], format!("Send of {third} bytes placed intact"))
}
