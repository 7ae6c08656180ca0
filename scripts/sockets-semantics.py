#!/usr/bin/env python3
"""Socket calls whose meaning on an upgraded connection must be TCP's or a clear errno
(docs/sockets.md, "Socket calls"): an epoll set that watched the socket before connect,
MSG_WAITALL, MSG_PEEK, FIONREAD, recvmsg into two buffers,
sendmmsg and recvmmsg, SO_ERROR, shutdown(SHUT_RD); MSG_OOB refused on send (EOPNOTSUPP) and
receive (EINVAL), MSG_ERRQUEUE finding nothing (EAGAIN) and taking no data, splice refused
(EINVAL) without taking data; close_range closing what the program asked and nothing of the
library's, and releasing the connection it closes.

Usage: sockets-semantics.py serve PORT | send HOST PORT MIB (MIB unused)
Both print the SHA-256 of the stream the client sent, for the caller to compare.
"""
import ctypes
import errno
import fcntl
import hashlib
import os
import select
import socket
import struct
import sys
import termios
import time

from sockets_ends import accept_one, connect, main

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


def check(what, ok):
    print(f"{what}: {'ok' if ok else 'WRONG'}", flush=True)
    if not ok:
        sys.exit(f"{what} is not as on TCP")


def serve(port):
    c = accept_one(port)
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


def send(host, port, _mib):
    data = os.urandom(1000 + 4096 + 300)
    # Watched by an epoll set before it connects (as nginx watches its upstream sockets): the
    # upgrade must leave the set watching the descriptor, not the module's TCP socket.
    ep = select.epoll()
    c = connect(host, port, prepare=lambda s: ep.register(s.fileno(), select.EPOLLOUT))
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
    c.sendall(data[:500])
    time.sleep(0.3)
    c.sendall(data[500:1000])
    time.sleep(0.3)
    c.sendall(data[1000:5096])
    ready = dict(ep.poll(10))
    check("send: the epoll set reports the server's answer readable", ready.get(c.fileno(), 0) & select.EPOLLIN != 0)
    ep.close()
    check("send: the server took the 4096 octets", c.recv(1) == b"g")
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
    print(f"send: {len(data)} octets")
    print(hashlib.sha256(data).hexdigest())


if __name__ == "__main__":
    main(send, serve=serve)
