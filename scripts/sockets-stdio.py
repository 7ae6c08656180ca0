#!/usr/bin/env python3
"""A client that talks through the C library's stdio on an upgraded socket (fdopen, fputs,
fflush, fgets: the C library's stream calls its own read and write, which no preloaded library
sees), and calls that pass the library by: a raw read(2) system call and dprintf(3) on the
descriptor must fail with EINVAL, never see or move the eventfd behind it.

Usage: sockets-stdio.py serve PORT | send HOST PORT MIB
The server reads the lines up to END, prints their hash and sends them all back; the client
sends MIB of lines through one stream, reads the echo line by line through another (of a dup),
checks it, confirms, sees the end of the stream, and prints the hash of what it sent.
"""
import ctypes
import errno
import hashlib
import os
import sys

from sockets_ends import accept_one, connect, main, read_hashed

LINE = 100
END = b"END\n"
SYS_READ = 0  # x86-64

libc = ctypes.CDLL(None, use_errno=True)
libc.fdopen.restype = ctypes.c_void_p
libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
libc.fputs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
libc.fflush.argtypes = [ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
libc.fgets.restype = ctypes.c_void_p
libc.fgets.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p]
libc.syscall.restype = ctypes.c_long


def serve(port):
    c = accept_one(port)
    data = b""
    while not data.endswith(END):
        d = c.recv(1 << 16)
        if not d:
            sys.exit("serve: the stream ended before its last line")
        data += d
    data = data[: -len(END)]
    print(f"serve: read {len(data)} octets, sending them back")
    print(hashlib.sha256(data).hexdigest())
    c.sendall(data)
    c.recv(1)
    c.close()


def fails_with_einval(what, rc):
    e = ctypes.get_errno()
    print(f"send: {what} -> {rc} ({os.strerror(e) if rc < 0 else 'no error'})", flush=True)
    if rc >= 0 or e != errno.EINVAL:
        sys.exit(f"send: {what} must fail with EINVAL on an upgraded descriptor")


def send(host, port, mib):
    lines = [os.urandom(LINE // 2).hex().encode() + b"\n" for _ in range(int(mib * (1 << 20)) // (LINE + 1))]
    data = b"".join(lines)
    c = connect(host, port)
    fd = c.fileno()
    buf = ctypes.create_string_buffer(8)
    fails_with_einval("raw read(2)", libc.syscall(SYS_READ, fd, buf, 8))
    fails_with_einval("dprintf", libc.dprintf(fd, b"not the stream\n"))
    out = libc.fdopen(os.dup(fd), b"w")
    into = libc.fdopen(fd, b"r")
    if not out or not into:
        sys.exit(f"send: fdopen failed: {os.strerror(ctypes.get_errno())}")
    for line in lines + [END]:
        if libc.fputs(line, out) < 0:
            sys.exit(f"send: fputs failed: {os.strerror(ctypes.get_errno())}")
    if libc.fflush(out) != 0 or libc.fclose(out) != 0:
        sys.exit(f"send: flushing the stream failed: {os.strerror(ctypes.get_errno())}")
    line = ctypes.create_string_buffer(LINE * 2)
    echoed = []
    for _ in lines:
        if not libc.fgets(line, len(line), into):
            break
        echoed.append(line.value)
    c.sendall(b"k")
    at_end = not libc.fgets(line, len(line), into)
    libc.fclose(into)
    c.detach()
    got = b"".join(echoed)
    if not at_end:
        sys.exit("send: fgets read past the end of the echo")
    print(f"send: {len(data)} octets in {len(lines)} lines through stdio, {len(got)} echoed")
    if got != data:
        sys.exit("send: the echo differs from what was sent")
    print(hashlib.sha256(data).hexdigest())


if __name__ == "__main__":
    main(send, serve=serve)
