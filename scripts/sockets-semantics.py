#!/usr/bin/env python3
"""Socket calls whose meaning on an upgraded connection must be TCP's or a clear errno
(docs/sockets.md, "Socket calls"): an epoll set that watched the socket before connect,
MSG_WAITALL, MSG_PEEK, FIONREAD, recvmsg into two buffers,
sendmmsg and recvmmsg, SO_ERROR, shutdown(SHUT_RD); MSG_OOB refused on send (EOPNOTSUPP) and
receive (EINVAL), MSG_ERRQUEUE finding nothing (EAGAIN) and taking no data, splice refused
(EINVAL) without taking data; close_range closing what the program asked and nothing of the
library's, and releasing the connection it closes; close of a descriptor the library keeps
refused (EBADF) as of one never opened; dup2 and dup3 that fail leaving their
target's connection alone; a client that asked whether the server upgrades, was told yes
and connected as plain TCP all the same (as one whose answer was lost) gets plain TCP, its
octets the server's data. Signals: a vfork child (subprocess) closing its descriptors leaves
the listener answering and upgrading, and an upgraded connection working; a signal every
millisecond while connecting (the client waits for the MPA reply) or accepting does not break
the upgrade; a blocked recv ends when a signal handler raises, as on TCP. Last, on a third
connection, shutdown(SHUT_WR) returns at once though the peer, reading nothing, has no
receive left for the end.

Usage: sockets-semantics.py serve PORT | send HOST PORT MIB (MIB unused)
Both print the SHA-256 of the stream the client sent, for the caller to compare.
"""
import ctypes
import errno
import fcntl
import hashlib
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import time

from sockets_ends import connect, listening, main

libc = ctypes.CDLL(None, use_errno=True)


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(Iovec)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", Msghdr), ("len", ctypes.c_uint)]


def messages(bufs):
    """An array of mmsghdr, one buffer each, and what keeps the buffers alive."""
    vecs = [Iovec(ctypes.cast(b, ctypes.c_void_p), len(b)) for b in bufs]
    arr = (Mmsghdr * len(bufs))()
    for m, v in zip(arr, vecs):
        m.hdr.iov = ctypes.pointer(v)
        m.hdr.iovlen = 1
    return arr, vecs


def expect_errno(what, want, call):
    try:
        call()
    except OSError as e:
        print(f"{what} -> {os.strerror(e.errno)}", flush=True)
        if e.errno != want:
            sys.exit(f"{what}: want {errno.errorcode[want]}")
        return
    sys.exit(f"{what}: succeeded, want {errno.errorcode[want]}")


def failed(rc):
    """Raises the errno of a C call that returned -1."""
    if rc == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def check(what, ok):
    print(f"{what}: {'ok' if ok else 'WRONG'}", flush=True)
    if not ok:
        sys.exit(f"{what} is not as on TCP")


class Interrupted(Exception):
    pass


def interrupt(*_):
    raise Interrupted()


def serve(port):
    s = listening(port)
    # A vfork child (subprocess's, which closes every descriptor but three) shares the
    # library's tables: it must leave the listener to its parent.
    subprocess.run(["true"], close_fds=True, check=True)
    d = s.accept()[0]
    got = d.recv(len(PLAIN), socket.MSG_WAITALL)
    check("serve: a client told yes that stayed plain TCP: its octets arrive as data", got == PLAIN)
    d.sendall(b"ok")
    d.close()
    # Signals while the connection is accepted and upgraded (a forking server's SIGCHLD).
    signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
    c = s.accept()[0]
    signal.setitimer(signal.ITIMER_REAL, 0)
    first = c.recv(1000, socket.MSG_WAITALL)
    check("serve: MSG_WAITALL waited for 1000 octets sent in two halves", len(first) == 1000)
    expect_errno("serve: recv(MSG_ERRQUEUE)", errno.EAGAIN, lambda: c.recv(16, socket.MSG_ERRQUEUE))
    expect_errno("serve: recv(MSG_OOB)", errno.EINVAL, lambda: c.recv(16, socket.MSG_OOB))
    peeked = c.recv(16, socket.MSG_PEEK)
    ready, n = time.monotonic() + 10, 0
    while time.monotonic() < ready:
        n = struct.unpack("i", fcntl.ioctl(c.fileno(), termios.FIONREAD, b"\0" * 4))[0]
        if n == 4096:
            break
        select.select([c], [], [], 0.1)
    check(f"serve: FIONREAD says {n} octets readable, the 4096 sent", n == 4096)
    a, b = bytearray(2048), bytearray(2048)
    got = c.recvmsg_into([a, b], 0, socket.MSG_WAITALL)[0]
    second = bytes(a + b)
    check("serve: recvmsg filled two buffers, and MSG_PEEK had seen their start", got == 4096 and second[:16] == peeked)
    c.sendall(b"g")
    bufs = [ctypes.create_string_buffer(100) for _ in range(3)]
    arr, keep = messages(bufs)
    n = libc.recvmmsg(c.fileno(), arr, 3, socket.MSG_WAITALL, None)
    third = b"".join(b.raw[: m.len] for b, m in zip(bufs, arr)) if n > 0 else b""
    check(f"serve: recvmmsg took {n} messages of {[m.len for m in arr]} octets", n == 3 and len(third) == 300)
    check("serve: SO_ERROR is 0", c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0)
    # The client waits for our answer: nothing arrives, and only the signal ends the recv.
    signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    t = time.monotonic()
    try:
        c.recv(1)
        check("serve: a blocked recv ended by the signal handler's exception", False)
    except Interrupted:
        check("serve: a blocked recv ended by the signal handler's exception", time.monotonic() - t < 5)
    out = [ctypes.create_string_buffer(b"o", 1), ctypes.create_string_buffer(b"k", 1)]
    arr, keep = messages(out)
    check("serve: sendmmsg sent 2 messages", libc.sendmmsg(c.fileno(), arr, 2, 0) == 2)
    c.shutdown(socket.SHUT_RD)
    t = time.monotonic()
    check("serve: after SHUT_RD a read returns 0 at once", c.recv(100) == b"" and time.monotonic() - t < 2)
    print(f"serve: read {len(first) + len(second) + len(third)} octets")
    print(hashlib.sha256(first + second + third).hexdigest())
    c.recv(1)
    c.close()
    # A client that read our 100 octets, wrote until it ran out of our receives (handing its
    # credits back with the last one), then shut its writing down: we read nothing meanwhile.
    e = s.accept()[0]
    e.sendall(b"x" * 100)
    time.sleep(6)
    n = 0
    while d := e.recv(1 << 16):
        n += len(d)
    e.sendall(str(n).encode())
    e.close()


PLAIN = b"plain TCP all the same\n"


def library_made(n):
    """Whether descriptor `n` is the device or an eventfd (the library's, not this program's)."""
    try:
        return os.readlink(f"/proc/self/fd/{n}") in ("/dev/iwarp", "anon_inode:[eventfd]")
    except OSError:
        return False


def deaf_client(host, port):
    """Asks the library's question, is told yes, and connects as plain TCP all the same, through
    the C library's connect (which the library does not see), then speaks first."""
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(0.5)
    deadline = time.monotonic() + 20
    while True:
        u.sendto(b"IWARP-SOCKETS/2?" + struct.pack(">H", s.getsockname()[1]), (host, port))
        try:
            answer = u.recv(64)
            break
        except OSError:
            # No answer yet: the server is not listening yet.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    check("send: asked, and told yes", answer[:16] == b"IWARP-SOCKETS/2!")
    to = struct.pack("<HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton(host))
    failed(c_library.connect(s.fileno(), to, len(to)))
    s.sendall(PLAIN)
    check("send: the plain TCP client got the server's answer", s.recv(2, socket.MSG_WAITALL) == b"ok")
    s.close()


# The C library's own functions (looked up in it, not first in the library preloaded).
c_library = ctypes.CDLL("libc.so.6", use_errno=True)


def send(host, port, _mib):
    deaf_client(host, port)
    data = os.urandom(1000 + 4096 + 300)
    # Watched by an epoll set before it connects (as nginx watches its upstream sockets): the
    # upgrade must leave the set watching the descriptor, not the module's TCP socket.
    ep = select.epoll()
    # Signals while it connects and waits for the server's MPA reply (a handler without
    # SA_RESTART, as Python's): the upgrade goes on.
    signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
    c = connect(host, port, prepare=lambda s: ep.register(s.fileno(), select.EPOLLOUT))
    signal.setitimer(signal.ITIMER_REAL, 0)
    # A vfork child in a process whose only upgraded descriptor is a connection (no listener
    # made the tables its own): it leaves the connection to us.
    subprocess.run(["true"], close_fds=True, check=True)
    ready = dict(ep.poll(10))
    check("send: the epoll set that watched the socket before connect reports it writable", ready.get(c.fileno(), 0) & select.EPOLLOUT != 0)
    ep.modify(c.fileno(), select.EPOLLIN)
    expect_errno("send: send(MSG_OOB)", errno.EOPNOTSUPP, lambda: c.send(b"!", socket.MSG_OOB))
    r, w = os.pipe()
    expect_errno("send: splice from the socket", errno.EINVAL, lambda: os.splice(c.fileno(), w, 16))
    # close_range above the socket: the pipe goes, the library's own descriptors stay (the
    # connection works on below).
    fd = c.fileno()
    check("send: close_range above the socket", libc.close_range(fd + 1, 1 << 16, 0) == 0)
    for p in (r, w):
        expect_errno(f"send: the pipe's descriptor {p} after close_range", errno.EBADF, lambda p=p: os.fstat(p))
    # A loop closing every descriptor but its own (as a forked child may) closes none of the
    # library's (its device and eventfds, which this program never made): over TCP those
    # numbers would not be open.
    theirs = [n for n in (int(n) for n in os.listdir("/proc/self/fd")) if library_made(n)]
    check(f"send: the library's device and eventfds found ({theirs})", len(theirs) >= 3)
    for n in theirs:
        expect_errno(f"send: close({n}), a descriptor the program never opened", errno.EBADF, lambda n=n: os.close(n))
    c.sendall(data[:500])
    time.sleep(0.3)
    c.sendall(data[500:1000])
    time.sleep(0.3)
    c.sendall(data[1000:5096])
    ready = dict(ep.poll(10))
    check("send: the epoll set reports the server's answer readable", ready.get(c.fileno(), 0) & select.EPOLLIN != 0)
    ep.close()
    check("send: the server took the 4096 octets", c.recv(1) == b"g")
    # dup2 and dup3 that fail close nothing: the connection goes on below.
    closed = os.open("/dev/null", os.O_RDONLY)
    os.close(closed)
    expect_errno("send: dup2 of a closed descriptor onto the socket", errno.EBADF, lambda: os.dup2(closed, fd))
    expect_errno("send: dup3 of the socket onto itself", errno.EINVAL, lambda: failed(libc.dup3(fd, fd, os.O_CLOEXEC)))
    bufs = [ctypes.create_string_buffer(data[5096 + 100 * i : 5196 + 100 * i], 100) for i in range(3)]
    arr, keep = messages(bufs)
    check("send: sendmmsg sent 3 messages of 100 octets", libc.sendmmsg(c.fileno(), arr, 3, 0) == 3)
    check("send: the server's two messages arrived", c.recv(2, socket.MSG_WAITALL) == b"ok")
    # close_range over the socket itself ends the connection as close would, and leaves no
    # trace: a new socket that takes its number is a plain one.
    check("send: close_range over the socket", libc.close_range(fd, fd, 0) == 0)
    c.detach()
    s = socket.socket()
    check(f"send: a new socket on descriptor {s.fileno()} (the old one's was {fd}) is unbound", s.getsockname() == ("0.0.0.0", 0))
    s.close()
    # Out of the peer's receives (it reads nothing for 6 s), shutdown(SHUT_WR) returns at once,
    # as TCP's does; the end follows the data once the peer reads.
    e = connect(host, port)
    # Read first: we owe the peer credits, and hand them back with our last receive of its once
    # we are stuck ourselves.
    check("send: the peer's 100 octets read first", e.recv(100, socket.MSG_WAITALL) == b"x" * 100)
    e.setblocking(False)
    sent = 0
    # Writes until the socket stays unwritable for 2 s: the peer's receives are used up.
    while select.select([], [e], [], 2)[1]:
        try:
            while True:
                sent += e.send(b"0123456789")
        except BlockingIOError:
            pass
    check(f"send: {sent} octets written before the peer's receives ran out", sent > 0)
    t = time.monotonic()
    e.shutdown(socket.SHUT_WR)
    check(f"send: shutdown(SHUT_WR) after {sent} octets, the peer reading nothing, returned at once", time.monotonic() - t < 1)
    e.setblocking(True)
    got = b""
    while d := e.recv(64):
        got += d
    check(f"send: the peer read all {sent} octets, then the end ({got})", got == str(sent).encode())
    e.close()
    print(f"send: {len(data)} octets")
    print(hashlib.sha256(data).hexdigest())


if __name__ == "__main__":
    main(send, serve=serve)
