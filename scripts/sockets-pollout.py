#!/usr/bin/env python3
"""Non-blocking writers waiting for writability (the sockets preload library's poll, select and
epoll, and ppoll, pselect and epoll_pwait2, which Python has not and ctypes calls), each in a
set with an ordinary descriptor (a pipe another thread writes to now and then).

The reader reads slowly, so the writer runs out of credits again and again. A writer told
"writable" must be able to write: a write that fails with EAGAIN after a wake-up means the
descriptor was reported writable while it was not (an eventfd always polls writable), and a
writer relying on it would spin. Each wait must also see the pipe's messages.

With poll, the sender first checks SO_RCVTIMEO and SO_SNDTIMEO on the blocking socket.

Usage: sockets-pollout.py serve PORT | send HOST PORT MIB MODE, MODE one of poll, select, epoll,
epoll-et, ppoll, pselect, epoll_pwait2
Both print the SHA-256 of the stream they read or sent, for the caller to compare.
"""
import ctypes
import errno
import hashlib
import os
import select
import socket
import struct
import sys
import threading
import time

from sockets_ends import accept_one, connect, main, read_hashed


def serve(port):
    n, digest = read_hashed(accept_one(port), pause=0.002)
    print(f"serve: read {n} octets slowly")
    print(digest)


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


class EpollEvent(ctypes.Structure):
    # Packed on x86-64, as the kernel's.
    _pack_ = 1
    _fields_ = [("events", ctypes.c_uint32), ("data", ctypes.c_uint64)]


def c_waiter(mode, sock, pipe):
    """`waiter` for the calls Python has not, through the C library's names (which the preload
    library stands in for)."""
    libc = ctypes.CDLL(None, use_errno=True)
    s, ten = sock.fileno(), Timespec(10, 0)

    def check(n):
        if n < 0:
            raise OSError(ctypes.get_errno(), f"{mode} failed")

    if mode == "ppoll":
        fds = (PollFd * 2)((s, select.POLLOUT, 0), (pipe, select.POLLIN, 0))

        def wait():
            check(libc.ppoll(fds, 2, ctypes.byref(ten), None))
            return bool(fds[0].revents & select.POLLOUT), bool(fds[1].revents & select.POLLIN)

    elif mode == "pselect":
        bits = 8 * ctypes.sizeof(ctypes.c_ulong)

        def wait():
            r, w = (ctypes.c_ulong * 16)(), (ctypes.c_ulong * 16)()
            r[pipe // bits] |= 1 << (pipe % bits)
            w[s // bits] |= 1 << (s % bits)
            check(libc.pselect(max(s, pipe) + 1, r, w, None, ctypes.byref(ten), None))
            return bool(w[s // bits] >> (s % bits) & 1), bool(r[pipe // bits] >> (pipe % bits) & 1)

    else:
        ep = select.epoll()
        ep.register(s, select.EPOLLOUT)
        ep.register(pipe, select.EPOLLIN)
        events = (EpollEvent * 4)()

        def wait():
            n = libc.epoll_pwait2(ep.fileno(), events, 4, ctypes.byref(ten), None)
            check(n)
            # Python's register puts the descriptor in the data's low half.
            ev = {e.data & 0xFFFFFFFF: e.events for e in events[:n]}
            return bool(ev.get(s, 0) & select.EPOLLOUT), bool(ev.get(pipe, 0) & select.EPOLLIN)

    return wait


def waiter(mode, sock, pipe):
    """A function waiting for the socket to be writable or the pipe readable, returning
    (socket writable, pipe readable)."""
    if mode in ("ppoll", "pselect", "epoll_pwait2"):
        return c_waiter(mode, sock, pipe)
    if mode == "poll":
        p = select.poll()
        p.register(sock, select.POLLOUT)
        p.register(pipe, select.POLLIN)

        def wait():
            ev = dict(p.poll(10000))
            return bool(ev.get(sock.fileno(), 0) & select.POLLOUT), bool(ev.get(pipe, 0) & select.POLLIN)

    elif mode == "select":

        def wait():
            r, w, _ = select.select([pipe], [sock], [], 10)
            return sock in w, pipe in r

    else:
        ep = select.epoll()
        ep.register(sock.fileno(), select.EPOLLOUT | (select.EPOLLET if mode == "epoll-et" else 0))
        ep.register(pipe, select.EPOLLIN)

        def wait():
            ev = dict(ep.poll(10))
            return bool(ev.get(sock.fileno(), 0) & select.EPOLLOUT), bool(ev.get(pipe, 0) & select.EPOLLIN)

    return wait


def timeouts(c, data):
    """SO_RCVTIMEO and SO_SNDTIMEO on the blocking socket: a read with nothing to read gives
    up with EAGAIN after its timeout; a write larger than the slow reader can take in its
    timeout returns what went. Returns how much of `data` went."""
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 300000))
    t = time.monotonic()
    try:
        c.recv(1)
        sys.exit("send: a read with nothing to read returned")
    except BlockingIOError:
        waited = time.monotonic() - t
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 50000))
    t = time.monotonic()
    went = c.send(data)
    took = time.monotonic() - t
    print(f"send: SO_RCVTIMEO 0.3 s: EAGAIN after {waited:.2f} s; SO_SNDTIMEO 0.05 s: {went} of {len(data)} octets in {took:.2f} s")
    if not 0.25 <= waited < 5 or not 0 < went < len(data) or took > 5:
        sys.exit("send: the timeouts were not kept")
    # Both back to none: the final read waits for the slow reader's close, however long.
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 0))
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
    return went


# Octets per send: no divisor of a ring's size, so that a full buffer shows as a short write.
CHUNK = 200_000


def send(host, port, mib, mode):
    data = os.urandom(mib << 20)
    c = connect(host, port)
    first = timeouts(c, data) if mode == "poll" else 0
    c.setblocking(False)
    r, w = os.pipe()
    # Five ticks 50 ms apart. A writer done before the last goes on waiting on the same set
    # until it comes (8 MiB once ended before the fourth of ticks 0.2 s apart).
    ticks = 5
    stop = threading.Event()

    def ticker():
        for _ in range(ticks):
            if stop.wait(0.05):
                return
            os.write(w, b"t")

    threading.Thread(target=ticker, daemon=True).start()
    wait = waiter(mode, c, r)
    edge = mode == "epoll-et"
    at, waits, eagain, seen, blocked, idle = first, 0, 0, 0, 0, 0
    while at < len(data) or seen < ticks:
        writable, tick = wait()
        waits += 1
        idle += not writable and not tick
        if tick:
            seen += len(os.read(r, 16))
        if not writable or at == len(data):
            continue
        # Level-triggered: one write per report. Edge-triggered: until EAGAIN, as such writers
        # do; the next report must come when writing is possible again.
        while at < len(data):
            try:
                n = c.send(data[at : at + CHUNK])
                at += n
                # Writing what fits: a short write means it is full again.
                blocked += n < min(CHUNK, len(data) - at + n)
            except OSError as e:
                if e.errno != errno.EAGAIN:
                    raise
                eagain += 1
                break
            if not edge:
                break
    stop.set()
    c.setblocking(True)
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    print(f"send ({mode}): {waits} waits ({idle} ran out, 10 s each), {blocked} short writes, {eagain} writes refused, {seen} of {ticks} pipe ticks seen")
    # A level-triggered writer told "writable" must be able to write; an edge-triggered one
    # writes until refused, and must be woken again each time.
    ok = (edge or eagain == 0) and idle == 0 and blocked > 0 and seen == ticks
    print(hashlib.sha256(data).hexdigest())
    if not ok:
        print(f"send ({mode}): failed")
        sys.exit(1)


if __name__ == "__main__":
    main(send, serve=serve)
