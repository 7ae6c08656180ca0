#!/usr/bin/env python3
"""Servers whose accepting process is not the one that listened first.

prefork: the master listens and forks two workers that accept on its socket (the default of the
common web servers); the master never accepts. Each connection must be upgraded on both sides:
the master's library answered the client's question, the worker that accepts must find it.

reuseport: two processes each listen on the port with SO_REUSEPORT and accept. Which one a
connection reaches is TCP's choice, so the library must leave these connections plain TCP, and
each must still carry its stream intact.

Usage: sockets-prefork.py prefork|reuseport PORT | send HOST PORT MIB
The client sends MIB over four connections, one after another, each starting with its index;
the workers pass what they read to the master, which puts it in order. Both print the SHA-256
of the whole, for the caller to compare.
"""
import ctypes
import hashlib
import os
import select
import signal
import socket
import struct

from sockets_ends import connect, main

CONNECTIONS = 4


def listener(port, reuseport):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("0.0.0.0", port))
    s.listen(8)
    return s


def worker(s, port, out):
    """Accepts for ever (on `s`, or on a listener of its own with SO_REUSEPORT), passing each
    connection's stream to the master on `out` as index, length, octets."""
    s = s or listener(port, True)
    while True:
        c = s.accept()[0]
        chunks = []
        while d := c.recv(1 << 16):
            chunks.append(d)
        c.sendall(b"k")
        c.close()
        data = b"".join(chunks)
        if not data:
            continue
        os.write(out, struct.pack("!BI", data[0], len(data) - 1))
        view = memoryview(data)[1:]
        while view:
            view = view[os.write(out, view):]


def serve(port, reuseport):
    s = None if reuseport else listener(port, False)
    pids, pipes, master = [], [], os.getpid()
    for _ in range(2):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            # Ends with the master, however the master ends (PR_SET_PDEATHSIG), also if it
            # ended before this was set.
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
            if os.getppid() != master:
                os._exit(1)
            try:
                worker(s, port, w)
            finally:
                os._exit(1)
        os.close(w)
        pids.append(pid)
        pipes.append(r)
    parts, pending = {}, {r: b"" for r in pipes}
    while len(parts) < CONNECTIONS:
        for r in select.select(pipes, [], [], 60)[0] or exit("serve: no stream from the workers in 60 s"):
            d = os.read(r, 1 << 16)
            if not d:
                exit("serve: a worker ended")
            buf = pending[r] + d
            while len(buf) >= 5:
                index, n = struct.unpack("!BI", buf[:5])
                if len(buf) < 5 + n:
                    break
                parts[index] = buf[5 : 5 + n]
                buf = buf[5 + n :]
            pending[r] = buf
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    how = "their own SO_REUSEPORT listeners" if reuseport else "the master's listener"
    print(f"serve: two workers on {how} read {sum(map(len, parts.values()))} octets over {CONNECTIONS} connections")
    print(hashlib.sha256(b"".join(parts[i] for i in range(CONNECTIONS))).hexdigest())


def send(host, port, mib):
    data = os.urandom(int(mib * (1 << 20)))
    step = len(data) // CONNECTIONS
    parts = [data[i * step : (i + 1) * step] for i in range(CONNECTIONS - 1)] + [data[(CONNECTIONS - 1) * step :]]
    for i, part in enumerate(parts):
        c = connect(host, port)
        c.sendall(bytes([i]) + part)
        c.shutdown(socket.SHUT_WR)
        if c.recv(1) != b"k":
            exit(f"send: connection {i} got no answer")
        # The worker's close ends the stream (a worker that could not let its connection go
        # would leave it open, and this would wait).
        c.settimeout(30)
        if c.recv(1) != b"":
            exit(f"send: connection {i} did not end after the answer")
        c.close()
    print(f"send: {len(data)} octets over {CONNECTIONS} connections")
    print(hashlib.sha256(data).hexdigest())


if __name__ == "__main__":
    main(send, prefork=lambda port: serve(port, False), reuseport=lambda port: serve(port, True))
