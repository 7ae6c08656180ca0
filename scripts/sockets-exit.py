#!/usr/bin/env python3
"""A server that answers and exits without closing its connection (the C library's exit: the
program's descriptors are closed by the kernel, never by a call the library sees), as a CGI
or inetd-style program does. Over TCP the client reads the whole answer and then EOF; so
must it through the library.

Usage: sockets-exit.py serve PORT | send HOST PORT MIB
The server writes 2,000 lines and then MIB of random octets; both ends print the SHA-256 of
what the server wrote, and the client says how the stream ended.
"""
import ctypes
import hashlib
import os
import sys

from sockets_ends import accept_one, connect, main

LINES = 2000


def serve(port):
    c = accept_one(port)
    size = int(c.recv(64).split(b"\n")[0])
    h = hashlib.sha256()
    for n in range(LINES):
        line = b"%099d\n" % n
        h.update(line)
        c.sendall(line)
    data = os.urandom(size)
    h.update(data)
    c.sendall(data)
    print(h.hexdigest(), flush=True)
    sys.stderr.flush()
    # No close, no shutdown: exit as a C program returning from main does.
    ctypes.CDLL(None).exit(0)


def send(host, port, mib):
    c = connect(host, port)
    c.sendall(b"%d\n" % int(mib * (1 << 20)))
    h, n = hashlib.sha256(), 0
    try:
        while d := c.recv(1 << 16):
            h.update(d)
            n += len(d)
        end = "EOF"
    except OSError as e:
        end = f"error {e}"
    print(f"send: read {n} octets, then {end}")
    print(h.hexdigest())
    if end != "EOF":
        raise SystemExit(f"send: the stream ended with {end}, not EOF as over TCP")


if __name__ == "__main__":
    main(send, serve=serve)
